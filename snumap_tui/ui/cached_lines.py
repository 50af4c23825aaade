"""Line widgets that repaint from a cache of finished (filtered) lines.

Textual's general path (a widget's styles cache) costs per line and per repaint: border,
padding, outline and tint checks, a theme look-up, and the app's line filters (there is always
one: ANSI colours to the theme's truecolor) applied again. The compositor repaints every line
of every widget inside the bounding box of the screen's dirty regions -- the whole tree and
process list each frame, since the header and the history line change. A widget with none of
those styles (``plain_box``) can hand back the same Strip for a line until that line is
refreshed: that is what ``CachedLines.render_lines`` does, on top of the widget's own
``render_line`` (the process table and the topology tree).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from rich.segment import Segment
from rich.style import Style
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

_NO_STYLE = Style()


def filtered(segments: Iterable[Segment], filters: Sequence[Any],
             background: Any) -> list[Segment]:
    """Segments through the app's line filters (NO_COLOR's monochrome, 16 colours), on the
    segment list: ``Strip.apply_filter`` per filter makes a Strip each, with seven caches of
    its own. The filters read .color of every segment's style: a plain segment gets an
    empty one."""
    segs = [seg if seg.style is not None else Segment(seg.text, _NO_STYLE, seg.control)
            for seg in segments]
    for f in filters:
        segs = f.apply(segs, background)
    return segs


def plain_box(widget: Widget) -> bool:
    """No border, padding, outline, tint or opacity: nothing the styles cache would add to a
    line (and no links to style: these rows carry none)."""
    st = widget.styles
    return (not any(st.gutter) and not any(kind for kind, _ in st.outline)
            and not st.tint.a and st.opacity == 1.0 and st.text_opacity == 1.0)


class CachedLines:
    """Mixin for a Widget with ``render_line``: see the module docstring. ``_line_for(y,
    width, top, focus)`` may be overridden to take the repaint's facts once instead of per
    line (each is a walk through Textual's reactives)."""

    _ycache: dict[int, Strip]
    _ystamp: tuple[object, ...]
    _box: tuple[bool, object] | None = None

    def notify_style_update(self) -> None:
        """Textual recomputed this widget's styles: its lines and style facts are stale."""
        self._ystamp = ()
        self._box = None
        super().notify_style_update()  # type: ignore[misc]

    def _line_for(self, y: int, width: int, top: int, focus: bool) -> Strip:
        return self.render_line(y)  # type: ignore[attr-defined]

    def _styled_render_lines(self, crop: Region) -> list[Strip]:
        """Textual's own path, for a widget that has a border or padding after all."""
        return Widget.render_lines(self, crop)  # type: ignore[arg-type]

    def render_lines(self, crop: Region) -> list[Strip]:
        w: Any = self
        # Whether the box is plain and its background: style facts (a walk through the
        # ancestors' styles), kept until the styles change or the widget is repainted whole.
        box = self._box
        if box is None:
            box = self._box = (plain_box(w), w.background_colors[1])
        if not box[0]:
            return self._styled_render_lines(crop)
        filters = w.get_line_filters()
        background = box[1] if filters else None
        top, width, focus = w.scroll_offset.y, w.size.width, w.has_focus
        stamp = (top, width, focus, tuple(map(id, filters)), background)
        if stamp != getattr(self, "_ystamp", None):
            self._ystamp, self._ycache = stamp, {}
        cache = self._ycache
        strips = []
        for y in crop.line_range:
            strip = cache.get(y)
            if strip is None:
                strip = self._line_for(y, width, top, focus)
                if filters:
                    strip = Strip(filtered(strip, filters, background), strip.cell_length)
                cache[y] = strip
            strips.append(strip)
        x1, x2 = crop.column_span
        if (x1, x2) != (0, width):
            strips = [strip.crop(x1, x2) for strip in strips]
        return strips

    def refresh_rows(self, ys: Sequence[int]) -> None:
        """Repaint these screen rows (ascending) in one call, runs of adjacent rows as one
        region: ``refresh_line`` per row costs a call into Textual's dirty-region bookkeeping
        each (and a look-up of the widget's region)."""
        if not ys:
            return
        w: Any = self
        width = max(w.virtual_size.width, w.size.width)
        regions = []
        start = prev = ys[0]
        for y in ys[1:]:
            if y != prev + 1:
                regions.append(Region(0, start, width, prev - start + 1))
                start = y
            prev = y
        regions.append(Region(0, start, width, prev - start + 1))
        w.refresh(*regions)

    def forget_lines(self, *regions: Region) -> None:
        """Drop the cached lines these regions cover (all of them without regions); a
        ``refresh`` override calls it before Textual's."""
        if not regions:
            self._ycache = {}
            self._box = None
            return
        cache = getattr(self, "_ycache", None)
        if cache is None:
            return
        for r in regions:
            for y in range(r.y, r.bottom):
                cache.pop(y, None)
