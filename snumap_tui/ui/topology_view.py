"""The topology view: the machine's tree with each object's metrics on its row.

A ScrollView using Textual's line API: only the visible rows are drawn, so a 384-PU machine
with every core expanded (~1000 rows) costs the same per frame as a laptop. The widget takes a
Topology and Frames, never a sampler, so replay reuses it.

| key          | action                              |
|--------------|-------------------------------------|
| up/down      | move the cursor                      |
| enter        | fold / unfold the row                |
| right / left | unfold / fold (left on a leaf: go to the parent) |
| home / end   | first / last row                     |
| o            | unfold / fold the I/O rows of every NUMA node |
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.binding import Binding, BindingType
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from snumap_tui.model.frame import Frame
from snumap_tui.topology.model import Topology
from snumap_tui.ui.cached_lines import CachedLines
from snumap_tui.ui.io_rows import DEVICE_BASE, SUMMARY_BASE, io_row_problem, io_row_text
from snumap_tui.ui.metricspec import view_for
from snumap_tui.ui.palette import NA_STYLE, bar, scale_style
from snumap_tui.ui.tree_rows import (
    COLUMNS,
    TreeRow,
    chain_ids,
    default_collapsed,
    memory_text,
    refold_level,
    row_cells,
    visible_rows,
)

MARK_STYLE = Style(color="yellow", bold=True)
BOLD = Style(bold=True)
CURSOR = Style(reverse=True)            # the cursor's row, the tree focused
CURSOR_BLUR = Style(bgcolor="grey30")    # the cursor's row, another widget focused
PROBLEM_STYLE = Style(color="red", bold=True)
NULL_STYLE = Style()


def column_widths(width: int) -> tuple[int, int]:
    """(name width, bar width) for a terminal width: the numbers keep fixed widths."""
    fixed = 1 + 5 + 6 * len(COLUMNS[1:]) + 15
    bar_w = max(4, min(24, (width - fixed) // 3))
    name_w = max(12, min(48, width - fixed - bar_w - 1))
    return name_w, bar_w


def header_text(width: int, span: tuple[int, int, int] | None = None) -> Text:
    """The column heads; with ``span`` (first shown row, row after the last, all rows) of a
    tree longer than the view, which rows it shows, at the right end (the tree has no
    scrollbar: see TopologyTable)."""
    name_w, bar_w = column_widths(width)

    def heads(memory: str) -> Text:
        t = Text(" " + "object".ljust(name_w) + " " + "CPU".ljust(bar_w + 5), style="bold")
        t.append("".join(h.rjust(6) for h in ("IPC", "GHz", "Watt")), style="bold")
        t.append("  " + memory, style="bold")
        return t

    t = heads("memory used/total")
    if span is None or (span[0] == 0 and span[1] >= span[2]):
        return t
    first, end, total = span
    arrows = f"{'▲' if first > 0 else ' '}{'▼' if end < total else ' '}"
    # The longest that fits, the memory column's head shortened first; at 80 columns the
    # arrows alone take the heads' last cells.
    long, short = (f"{arrows} rows {first + 1}–{end} of {total} ",
                   f"{arrows.strip()} {first + 1}–{end}/{total}")
    full = t
    for t, note in ((full, long), (full, short), (heads("memory"), short)):
        room = width - len(t)
        if room >= len(note) + 1:
            t.append(note.rjust(room), style=NA_STYLE)
            return t
    cut = max(0, width - 3)
    if cut < len(t) and t.plain[cut] != " ":      # not in the middle of a word
        cut = t.plain.rfind(" ", 0, cut) + 1
    t.truncate(cut)
    t.append(" " * max(0, width - 2 - len(t)) + arrows, style=NA_STYLE)
    return t


def row_look(cells: dict[str, float | None], width: int) -> tuple[object, ...]:
    """What a row shows of its numbers, as a key: the bar's eighths and the printed values.
    A row whose key did not change draws the same (its Text is not built again)."""
    _, bar_w = column_widths(width)
    util = cells["util"]
    eighths = None if util is None else round(min(1.0, max(0.0, util / 100)) * bar_w * 8)
    return (eighths, view_for("util").fmt(util, 5),
            *(view_for(c).fmt(cells[c], 6) for c in COLUMNS[1:]),
            cells["mem_used"], cells["mem_total"])


def row_text(frame: Frame | None, row: TreeRow, width: int, marked: bool = False,
             cells: dict[str, float | None] | None = None) -> Text:
    """One row, styled: marker, indented label, CPU bar, IPC, GHz, W, NUMA memory."""
    name_w, _ = column_widths(width)
    if row.io:
        return io_text(frame, row, width, name_w)
    return Text.assemble(*((seg.text, seg.style or NULL_STYLE) for seg in row_segments(
        row, width, marked, row_cells(frame, row) if cells is None else cells)))


def label_segments(row: TreeRow, name_w: int) -> list[Segment]:
    """The row's indented label (and its note where it fits) in ``name_w`` cells."""
    twisty = ("▾ " if row.expanded else "▸ ") if row.expandable else "  "
    name = "  " * row.indent + twisty + row.label
    style = BOLD if row.indent <= 1 else NULL_STYLE
    used = cell_len(name)
    if row.note and used + 3 + cell_len(row.note) <= name_w:
        note = "  " + row.note
        pad = name_w - used - cell_len(note)     # in the label's style, as a cursor shows it
        return [Segment(name, style), Segment(note, NA_STYLE), Segment(" " * pad, style)]
    return [Segment(set_cell_size(name, name_w), style)]


def row_segments(row: TreeRow, width: int, marked: bool, cells: dict[str, float | None],
                 label: list[Segment] | None = None) -> list[Segment]:
    """A CPU row as Segments, straight (a Rich Text and its render cost more than the row):
    marker, ``label`` (label_segments, which the caller may keep), bar, the numbers."""
    name_w, bar_w = column_widths(width)
    segs = [Segment("●", MARK_STYLE) if marked else Segment(" ", NULL_STYLE),
            *(label if label is not None else label_segments(row, name_w)),
            Segment(" ", NULL_STYLE)]
    util = cells["util"]
    filled, rest = bar(None if util is None else util / 100, bar_w)
    if filled:
        segs.append(Segment(filled, scale_style((util or 0) / 100)))
    if rest:
        segs.append(Segment(rest, NA_STYLE))
    segs.append(Segment(view_for("util").fmt(util, 5), NULL_STYLE if util is not None
                        else NA_STYLE))
    for c in COLUMNS[1:]:
        v = cells[c]
        view = view_for(c)
        st = NA_STYLE if v is None else (PROBLEM_STYLE if view.is_problem(v) else NULL_STYLE)
        segs.append(Segment(view.fmt(v, 6), st))
    mem = memory_text(cells["mem_used"], cells["mem_total"])
    if mem:
        used, total = cells["mem_used"], cells["mem_total"]
        full = used is not None and total and used / total > 0.9
        segs.append(Segment("  " + mem, PROBLEM_STYLE if full else NULL_STYLE))
    return segs


def io_text(frame: Frame | None, row: TreeRow, width: int, name_w: int) -> Text:
    """An I/O row (ui/io_rows.py): its label, then the device's (or the place's) rates where
    the CPU columns are."""
    t = Text(" ")
    twisty = ("▾ " if row.expanded else "▸ ") if row.expandable else "  "
    name = "  " * row.indent + twisty + row.label
    label = Text(name, style="italic")
    if row.note and len(name) + 3 + len(row.note) <= name_w:
        label.append("  " + row.note, style=NA_STYLE)
    label.truncate(name_w, pad=True)
    t.append_text(label)
    t.append(" ")
    nums = io_row_text(frame, frame.topology, row) if frame is not None else ""
    hot = frame is not None and io_row_problem(frame, frame.topology, row)
    t.append(nums, style=NA_STYLE if nums in ("", "n/a") else PROBLEM_STYLE if hot else "")
    t.truncate(width)
    return t


class TopologyTable(CachedLines, ScrollView, can_focus=True):
    """Rows of the topology tree with live metrics; posts Selected when the cursor moves."""

    BINDINGS: ClassVar[list[BindingType]] = [
        # Arrows only: k is the signal key and h/l pan in replay (keymap.py: one meaning each).
        Binding("up", "cursor(-1)", "Up", show=False),
        Binding("down", "cursor(1)", "Down", show=False),
        Binding("pageup", "cursor(-10)", show=False),
        Binding("pagedown", "cursor(10)", show=False),
        Binding("home", "cursor(-100000)", show=False),
        Binding("end", "cursor(100000)", show=False),
        Binding("enter", "toggle_fold", "Fold", show=False),
        Binding("right", "expand", show=False),
        Binding("left", "collapse", show=False),
        Binding("o", "toggle_io", "I/O", show=False),
    ]

    # No scrollbar: a tree longer than the view (a large node) would have one on every line,
    # and Textual then cuts each line at its edge and paints the bar with it at every frame
    # (9 % of `top`'s CPU on the 384-PU fake tree). The column heads say which rows show
    # (``span``, header_text); the cursor, the page keys and the wheel still scroll.
    DEFAULT_CSS = """
    TopologyTable { height: 1fr; scrollbar-size: 0 0; }
    """

    cursor: reactive[int] = reactive(0)
    """Index of the highlighted row in the visible rows."""

    class Selected(Message):
        """The cursor is on another row: ``row`` as it was when the message was sent (an I/O
        row and its NUMA node's row share ``obj_id``, the object whose metrics they show)."""

        def __init__(self, row: TreeRow) -> None:
            super().__init__()
            self.row = row

    class Refolded(Message):
        """Rows were folded or unfolded: the view under the tree may have more or less room."""

    class Scrolled(Message):
        """Other rows show (``span`` changed): the column heads say which."""

    def __init__(self, topology: Topology, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.topology = topology
        self.collapsed: set[int] = default_collapsed(topology)
        self.rows: list[TreeRow] = visible_rows(topology, self.collapsed)
        self.frame: Frame | None = None
        self.marked_pus: frozenset[int] = frozenset()   # positions into topology.pus
        self.marked_nodes: frozenset[int] = frozenset()  # NUMA OS indexes
        self._blank: Strip | None = None                  # the empty line below the rows
        # Per row index: (frame generation, its Text) and (Text key, cursor style, width,
        # Strip). A new frame repaints only the visible rows whose text changed, and a repaint
        # for another reason (cursor, scroll) reuses the Strips: Textual's cost per frame is
        # per line refreshed, and most lines do not change from one second to the next.
        self._gen = 0
        self._texts: dict[int, tuple[int, list[Segment], tuple[object, ...]]] = {}
        self._labels: dict[int, tuple[int, list[Segment]]] = {}
        self._strips: dict[int, tuple[tuple[object, ...], object, int, Strip]] = {}
        self._pu_pos = {p.os_index: i for i, p in enumerate(topology.pus)}

    # ---- public API ------------------------------------------------------------------------
    def set_frame(self, frame: Frame | None) -> None:
        self.frame = frame
        self._gen += 1
        if not self.is_mounted or not self.size.height:
            self.refresh()
            return
        # The widget's size and scroll position once: each is a look-up of its region
        # through the screen (a sixth of this view's cost when asked per row).
        size = self.size
        top = self.scroll_offset.y
        dirty = []
        for idx in range(top, min(top + size.height, len(self.rows))):
            old = self._texts.get(idx)
            _, key = self._segs(idx, size.width)
            if old is None or old[2] != key:
                dirty.append(idx - top)
        self.refresh_rows(dirty)

    def set_marks(self, pus: Iterable[int], nodes: Iterable[int]) -> None:
        """Mark rows covering these PUs (OS indexes) and NUMA nodes (a selected process)."""
        marked = frozenset(self._pu_pos[p] for p in pus if p in self._pu_pos)
        nodes = frozenset(nodes)
        if marked == self.marked_pus and nodes == self.marked_nodes:
            return                     # every frame sets them: repaint only on a change
        self.marked_pus = marked
        self.marked_nodes = nodes
        self._forget()
        self.refresh()

    def _forget(self) -> None:
        """Rows, marks or the width changed: no cached row is valid any more."""
        self._gen += 1
        self._texts.clear()
        self._labels.clear()

    def _segs(self, idx: int, width: int) -> tuple[list[Segment], tuple[object, ...]]:
        """Row ``idx``'s Segments for the current frame and a key that changes with its
        look."""
        got = self._texts.get(idx)
        if got is not None and got[0] == self._gen:
            return got[1], got[2]
        row = self.rows[idx]
        if row.io:                       # an I/O row's numbers are not the CPU cells
            text = row_text(self.frame, row, width)
            io_key: tuple[object, ...] = (text.plain, tuple(text.spans), width)
            # Every segment gets a style: NO_COLOR's monochrome filter reads .color of each
            # one (an unstyled Segment crashed the app there).
            io_segs = [s if s.style is not None else Segment(s.text, NULL_STYLE, s.control)
                       for s in text.render(self.app.console)]
            self._texts[idx] = (self._gen, io_segs, io_key)
            return io_segs, io_key
        cells = row_cells(self.frame, row)
        marked = self._is_marked(row)
        key: tuple[object, ...] = (row.obj_id, row.expanded, marked, width,
                                   row_look(cells, width))
        if got is not None and got[2] == key:
            # Shows the same as at the last frame: keep those Segments (building them is
            # ten times the cost of this key), only their generation moves on.
            self._texts[idx] = (self._gen, got[1], key)
            return got[1], key
        # The label changes with the rows and its width only: kept with the width it was
        # made for (a frame can come between a resize and the widget's Resize message).
        name_w = column_widths(width)[0]
        kept = self._labels.get(idx)
        if kept is None or kept[0] != name_w:
            kept = self._labels[idx] = (name_w, label_segments(row, name_w))
        segs = row_segments(row, width, marked, cells, kept[1])
        self._texts[idx] = (self._gen, segs, key)
        return segs, key

    @property
    def span(self) -> tuple[int, int, int]:
        """(first row shown, the row after the last one shown, every row)."""
        n = len(self.rows)
        if not self.size.height:                # not laid out yet: no rows hidden so far
            return 0, n, n
        top = self.scroll_offset.y
        return top, min(top + self.size.height, n), n

    @property
    def selected_obj(self) -> int:
        return self.rows[self.cursor].obj_id if self.rows else self.topology.root.id

    def _rebuild(self) -> None:
        """The rows again after a fold; the cursor stays on its row, else on the nearest row
        above it still shown (the one folding it), and the app hears which row that is even
        when its index did not change (the row under it may have)."""
        old, at = self.rows, self.cursor
        self.rows = visible_rows(self.topology, self.collapsed)
        self._forget()
        self.virtual_size = Size(self.size.width, len(self.rows))
        index = {r.key: i for i, r in enumerate(self.rows)}
        new = next((index[r.key] for r in reversed(old[:at + 1]) if r.key in index),
                   min(at, max(0, len(self.rows) - 1)))
        self.refresh()
        self.post_message(self.Refolded())
        if new != at:
            self.cursor = new            # watch_cursor says so
        else:
            self._tell_selected()

    # ---- Textual hooks -----------------------------------------------------------------------
    def on_mount(self) -> None:
        self.virtual_size = Size(self.size.width, len(self.rows))

    def on_resize(self) -> None:
        self.virtual_size = Size(self.size.width, len(self.rows))
        self._forget()
        self.post_message(self.Scrolled())        # as many rows as fit now

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        if round(old_value) != round(new_value):
            self.post_message(self.Scrolled())

    def watch_cursor(self, old: int, new: int) -> None:
        self.scroll_to_region(Region(0, new, 1, 1), animate=False, immediate=True)
        self.refresh()
        self._tell_selected()

    def _tell_selected(self) -> None:
        if self.rows:
            self.post_message(self.Selected(self.rows[self.cursor]))

    def validate_cursor(self, value: int) -> int:
        return max(0, min(value, len(self.rows) - 1))

    def _is_marked(self, row: TreeRow) -> bool:
        if row.numa_id is not None:
            os_i = self.topology[row.numa_id].os_index
            if os_i in self.marked_nodes:
                return True
        a, b = row.pu_range
        return any(a <= p < b for p in self.marked_pus) if b > a else False

    def render_line(self, y: int) -> Strip:
        return self._line_for(y, self.size.width, self.scroll_offset.y, self.has_focus)

    def _line_for(self, y: int, width: int, top: int, focus: bool) -> Strip:
        """Screen line ``y``; ``render_lines`` passes the width, scroll position and focus
        once per repaint (cached_lines.py)."""
        idx = top + y
        if idx >= len(self.rows):
            if self._blank is None or self._blank.cell_length != width:
                self._blank = Strip.blank(width, self.rich_style)
            return self._blank
        segs, key = self._segs(idx, width)
        cursor = (focus if idx == self.cursor else None)
        cached = self._strips.get(idx)
        if cached is not None and cached[0] == key and cached[1] == cursor and \
                cached[2] == width:
            return cached[3]
        if cursor is not None:
            segs = list(Segment.apply_style(segs, post_style=CURSOR if cursor else CURSOR_BLUR))
        strip = Strip(segs).extend_cell_length(width, NULL_STYLE).crop(0, width)
        self._strips[idx] = (key, cursor, width, strip)
        return strip

    def notify_style_update(self) -> None:
        self._blank = None                   # in the styles of before
        super().notify_style_update()

    def refresh(self, *regions: Region, repaint: bool = True, layout: bool = False,
                recompose: bool = False) -> TopologyTable:
        """Textual's refresh; forgets the drawn lines it covers (cached_lines.py)."""
        self.forget_lines(*regions)
        super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)
        return self

    def on_click(self, event: object) -> None:
        y = getattr(event, "y", None)
        if y is not None:
            self.cursor = self.scroll_offset.y + int(y)

    # ---- actions -------------------------------------------------------------------------------
    def action_cursor(self, delta: int) -> None:
        self.cursor = self.cursor + delta

    def action_toggle_fold(self) -> None:
        """Fold or unfold the row under the cursor. (Not ``action_toggle``: DOMNode's one flips
        a boolean attribute named in the binding, and a binding may still call it.)"""
        row = self.rows[self.cursor]
        if not row.expandable:
            return
        if row.expanded:
            self.collapsed.add(row.key)
        else:
            self.collapsed.difference_update(chain_ids(self.topology, row.key))
        self._rebuild()

    def toggle_io(self) -> None:
        """Unfold every place's I/O rows, or fold them all when none is folded."""
        keys = {r.key for r in visible_rows(self.topology, set())
                if DEVICE_BASE < r.key <= SUMMARY_BASE}
        if not keys:
            return
        if keys & self.collapsed:
            self.collapsed -= keys
        else:
            self.collapsed |= keys
        self._rebuild()

    def action_toggle_io(self) -> None:
        self.toggle_io()

    def fold_level(self, step: int) -> None:
        """+ (``step`` 1) unfolds the shallowest folded rows, - (-1) folds the deepest open
        ones (``tree_rows.refold_level``); the cursor stays on its row or the one folding
        it."""
        new = refold_level(self.topology, self.collapsed, step)
        if new == self.collapsed:
            return
        self.collapsed = new
        self._rebuild()

    def action_expand(self) -> None:
        if self.rows[self.cursor].expandable and not self.rows[self.cursor].expanded:
            self.action_toggle_fold()

    def action_collapse(self) -> None:
        row = self.rows[self.cursor]
        if row.expandable and row.expanded:
            self.action_toggle_fold()
            return
        for i in range(self.cursor - 1, -1, -1):      # go to the parent row
            if self.rows[i].indent < row.indent:
                self.cursor = i
                return
