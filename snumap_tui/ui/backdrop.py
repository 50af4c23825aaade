"""Containers that draw nothing of their own, cheaply.

Textual's compositor renders, for a partial update, every visible widget that overlaps the
bounding box of the dirty regions -- containers included, line by line through their styles
cache (border, padding, tint and filter checks per line), even where their children cover
them completely and the lines are thrown away. `snumap top`'s views nest three or four
containers whose children fill them (1fr heights), so a frame paid that four times over for
every line between the header and the history line. These containers answer with one blank
strip in their background per line instead: what would show if a child left a gap.

Textual renders every visible widget whose clip overlaps the dirty regions' bounding box, and
a top-level widget's clip is the screen: the header, the footer and these containers are asked
for their lines at every frame, however little changed. Each keeps what it drew (its blank
strip, its lines) until its text, its width or its styles change -- ``notify_style_update``,
which Textual calls on every widget whose own rules it recomputed (a theme, a class, a pseudo
class), or a repaint of the whole widget, which is how an ancestor's colour change reaches it
-- a widget's style being a walk through its ancestors' styles.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.segment import Segment
from rich.text import Text
from textual.containers import Vertical
from textual.geometry import Region
from textual.screen import Screen
from textual.strip import Strip
from textual.visual import VisualType
from textual.widgets import ContentSwitcher, Footer, Static

from snumap_tui.ui.cached_lines import filtered


class BlankLines:
    """Mixin: blank strips in the widget's own style (through the app's line filters, as
    Textual draws a widget's background), made once per width, filters and style."""

    _blank_strip: Strip | None = None
    _blank_stamp: tuple[object, ...] = ()

    def _blank(self, crop: Region) -> list[Strip]:
        w: Any = self
        filters = w.get_line_filters()
        stamp = (crop.width, tuple(map(id, filters)))
        strip = self._blank_strip
        if strip is None or stamp != self._blank_stamp:
            strip = Strip.blank(crop.width, w.rich_style)
            if filters:
                strip = Strip(filtered(strip, filters, w.background_colors[1]), crop.width)
            self._blank_strip, self._blank_stamp = strip, stamp
        return [strip] * crop.height

    def notify_style_update(self) -> None:
        self._blank_strip = None
        super().notify_style_update()  # type: ignore[misc]

    def refresh(self, *regions: Region, **kw: Any) -> Any:
        """A repaint of the whole widget (an ancestor's colours changed, which Textual does
        not always announce with notify_style_update) makes the blank again."""
        if not regions:
            self._blank_strip = None
        return super().refresh(*regions, **kw)  # type: ignore[misc]


class Backdrop(BlankLines, Vertical):
    """A Vertical whose children fill it (see the module docstring)."""

    def render_lines(self, crop: Region) -> list[Strip]:
        return self._blank(crop)


class BackdropSwitcher(BlankLines, ContentSwitcher):
    """A ContentSwitcher whose shown child fills it."""

    def render_lines(self, crop: Region) -> list[Strip]:
        return self._blank(crop)


class BackdropScreen(BlankLines, Screen[None]):
    """The default screen, whose widgets cover it."""

    def render_lines(self, crop: Region) -> list[Strip]:
        return self._blank(crop)


class QuietFooter(BlankLines, Footer):
    """Textual's Footer, whose own lines (the background under its keys, which draw
    themselves) are made once per width and style instead of at every frame."""

    def render_lines(self, crop: Region) -> list[Strip]:
        if any(self.styles.gutter):           # a border or padding after all: Textual's way
            return super().render_lines(crop)
        return self._blank(crop)


class TextLines(BlankLines, Static):
    """A few lines of Rich Text drawn as Strips made once per ``update`` (the header, the
    column heads, the history line under the tree). A Static turns its Text into Content
    and then into Strips through its styles cache on every repaint, which was a third of a
    frame's compositing; here a repaint is a list look-up, with the line filters applied
    once per update. ``update_lines`` takes lines that are already Segments (the history
    line's bars), which skip Rich's rendering. Lines past the text are BlankLines' blank."""

    DEFAULT_CSS = "TextLines { height: auto; }"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._lines: list[Text | list[Segment]] = []
        self._text: Text | None = Text()
        self._strips: list[Strip] | None = None
        self._stamp: tuple[object, ...] = ()

    def update(self, content: VisualType = "", *, layout: bool = False) -> None:
        """Show ``content`` (Rich Text; a str is taken as plain text). Its height is fixed
        by CSS, so no layout pass (``layout`` is accepted for Static's signature)."""
        text = content if isinstance(content, Text) else Text(str(content))
        self._set(list(text.split("\n", allow_blank=True)), text, layout)

    def update_lines(self, lines: list[Text | list[Segment]]) -> None:
        """Show these lines: each a Text or Segments (styled over the widget's own style).
        No layout pass: for a widget whose height CSS fixes (the history line's two)."""
        self._set(list(lines), None, False)

    def _set(self, lines: list[Text | list[Segment]], text: Text | None, layout: bool) -> None:
        self._lines, self._text = lines, text
        self._strips = None
        self.refresh(layout=layout)

    @property
    def text(self) -> Text:
        """What it shows, as one Text (made on demand for lines given as Segments)."""
        if self._text is None:
            self._text = Text("\n").join(
                line if isinstance(line, Text)
                else Text.assemble(*((seg.text, seg.style or "") for seg in line))
                for line in self._lines)
        return self._text

    @property
    def content(self) -> VisualType:
        return self.text

    @content.setter
    def content(self, value: VisualType) -> None:
        self.update(value)

    def render(self) -> Text:
        return self.text

    def notify_style_update(self) -> None:
        self._strips = None                  # drawn in the styles of before
        super().notify_style_update()

    def refresh(self, *regions: Region, **kw: Any) -> Any:
        """A repaint of the whole widget draws its lines again, as BlankLines its blank."""
        if not regions:
            self._strips = None
        return super().refresh(*regions, **kw)

    def render_lines(self, crop: Region) -> list[Strip]:
        width = self.size.width
        filters = self.get_line_filters()
        stamp = (width, tuple(map(id, filters)))
        if self._strips is None or stamp != self._stamp:
            self._stamp = stamp
            self._strips = self._make_strips(width, filters)
        strips, blank = self._strips, self._blank(Region(0, 0, width, 1))[0]
        n = len(strips)
        out = [strips[y] if y < n else blank for y in crop.line_range]
        x1, x2 = crop.column_span
        if (x1, x2) != (0, width):
            out = [s.crop(x1, x2) for s in out]
        return out

    def _make_strips(self, width: int, filters: Sequence[Any]) -> list[Strip]:
        """Each line as one Strip of exactly WIDTH cells in the widget's style, filtered."""
        background = self.background_colors[1] if filters else None
        base = self.rich_style
        console = self.app.console
        strips = []
        for line in self._lines:
            if isinstance(line, Text):
                # The Text's own style under its spans (Text.render leaves it to the caller).
                under = base + console.get_style(line.style) if line.style else base
                strip = Strip(line.render(console)).apply_style(under)
            else:
                strip = Strip([Segment(s.text, base + s.style if s.style else base)
                               for s in line])
            strip = strip.extend_cell_length(width, base).crop(0, width)
            strips.append(Strip(filtered(strip, filters, background), width) if filters
                          else strip)
        return strips

