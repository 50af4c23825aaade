"""Containers that draw nothing of their own, cheaply.

Textual's compositor renders, for a partial update, every visible widget that overlaps the
bounding box of the dirty regions -- containers included, line by line through their styles
cache (border, padding, tint and filter checks per line), even where their children cover
them completely and the lines are thrown away. `snumap top`'s views nest three or four
containers whose children fill them (1fr heights), so a frame paid that four times over for
every line between the header and the history line. These containers answer with one blank
strip in their background per line instead: what would show if a child left a gap.
"""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.containers import Vertical
from textual.geometry import Region
from textual.screen import Screen
from textual.strip import Strip
from textual.visual import VisualType
from textual.widgets import ContentSwitcher, Static


def _blank(widget: Vertical | ContentSwitcher | Screen, crop: Region) -> list[Strip]:
    strip = Strip.blank(crop.width, widget.rich_style)
    return [strip] * crop.height


class Backdrop(Vertical):
    """A Vertical whose children fill it (see the module docstring)."""

    def render_lines(self, crop: Region) -> list[Strip]:
        return _blank(self, crop)


class BackdropSwitcher(ContentSwitcher):
    """A ContentSwitcher whose shown child fills it."""

    def render_lines(self, crop: Region) -> list[Strip]:
        return _blank(self, crop)


class BackdropScreen(Screen[None]):
    """The default screen, whose widgets cover it."""

    def render_lines(self, crop: Region) -> list[Strip]:
        return _blank(self, crop)


class TextLines(Static):
    """A few lines of Rich Text drawn as Strips made once per ``update`` (the history line
    under the tree, every frame). A Static turns its Text into Content and then into Strips
    through its styles cache on every repaint, which was a third of a frame's compositing;
    here a repaint is a list look-up, with the line filters applied once per update."""

    DEFAULT_CSS = "TextLines { height: auto; }"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.text = Text()
        self._strips: list[Strip] | None = None
        self._stamp: tuple[object, ...] = ()

    def update(self, content: VisualType = "", *, layout: bool = False) -> None:
        """Show ``content`` (Rich Text; a str is taken as plain text). Its height is fixed
        by CSS, so no layout pass (``layout`` is accepted for Static's signature)."""
        self.text = content if isinstance(content, Text) else Text(str(content))
        self._strips = None
        self.refresh(layout=layout)

    @property
    def content(self) -> VisualType:
        return self.text

    @content.setter
    def content(self, value: VisualType) -> None:
        self.update(value)

    def render(self) -> Text:
        return self.text

    def render_lines(self, crop: Region) -> list[Strip]:
        width = self.size.width
        filters = self.get_line_filters()
        background = self.background_colors[1] if filters else None
        stamp = (width, tuple(map(id, filters)), background)
        if self._strips is None or stamp != self._stamp:
            self._stamp = stamp
            base = self.rich_style
            console = self.app.console
            strips = []
            # The Text's own style under its spans (Text.render leaves it to the caller).
            under = base + console.get_style(self.text.style) if self.text.style else base
            for line in self.text.split("\n", allow_blank=True):
                segs = [Segment(s.text, s.style or _PLAIN, s.control)
                        for s in line.render(console)]
                strip = Strip(segs).apply_style(under).extend_cell_length(width, base)
                strip = strip.crop(0, width)
                for f in filters:
                    strip = strip.apply_filter(f, background)   # type: ignore[arg-type]
                strips.append(strip)
            self._strips = strips
        blank = Strip.blank(width, self.rich_style)
        out = [self._strips[y] if y < len(self._strips) else blank for y in crop.line_range]
        x1, x2 = crop.column_span
        if (x1, x2) != (0, width):
            out = [s.crop(x1, x2) for s in out]
        return out


_PLAIN = Style()
