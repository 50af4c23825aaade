"""The process table: a line-based widget that draws only the visible rows.

Why not a plain DataTable: it re-measured every column and rebuilt every cell at each frame
(~70 ms of CPU per frame at 120x40, 7 % of a core at a 1 s interval). Here a frame replaces a
list of rows; ``render_line`` turns only the visible ones into Strips, cached per row by its
cells, so a row whose numbers did not change costs a dict look-up (the approach of the topology
view). It still *is* a DataTable subclass, for one reason: the app finds it with
``query_one("#proc-table", DataTable)`` and listens to ``DataTable.RowHighlighted`` (row key:
the PID, or ``g:KEY`` for a group), and tests read it with ``row_count``, ``get_row_at`` and
``columns``. None of DataTable's own row storage or layout is used.

| key              | action |
|------------------|--------|
| up/down          | move the selection (k is the app's: a signal, as in htop) |
| pageup/pagedown  | a page |
| home/end         | first / last row |
| enter            | select a process; fold / unfold a group |
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import DataTable
from textual.widgets._data_table import Row, RowKey

from snumap_tui.model.frame import TaskRow
from snumap_tui.topology.model import Topology
from snumap_tui.ui.cached_lines import CachedLines
from snumap_tui.ui.palette import NA_STYLE
from snumap_tui.ui.processes import GroupRow, affinity_label, command_label
from snumap_tui.ui.table_lines import (
    TASK_LABELS,
    Col,
    Line,
    _cpu,
    _mem,
    fmt_cpu_time,
    group_columns,
    line_str,
    line_text,
    task_columns,
    widths,
)
from snumap_tui.ui.task_column import CPU, CpuColumn, column_value

HEAD_ROWS = 2                    # the title line and the column headers stay in place
# sort key -> the column it sorts (every column sorts: htop's F6, < and >)
SORT_COLUMN = {"pid": "PID", "user": "USER", "job": "JOB", "cpu": "CPU%", "mem": "MEM",
               "thr": "THR", "time": "TIME+", "pu": "PU", "affinity": "AFFINITY",
               "name": "COMMAND"}
SORT_NAME = {"cpu": "CPU%", "pid": "PID", "user": "user", "name": "command", "job": "job",
             "mem": "memory", "thr": "threads", "time": "CPU time", "pu": "PU",
             "affinity": "affinity"}
HEAD_STYLE = Style(bold=True, reverse=True)
GROUP_STYLE = Style(bold=True, color="cyan")
CURSOR = Style(reverse=True)
CURSOR_BLUR = Style(bgcolor="grey30")


class ProcessTable(CachedLines, DataTable[str], can_focus=True):
    """Rows of processes or groups with a fixed title and header; see the module docstring."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "move(-1)", show=False),
        Binding("down", "move(1)", show=False),
        Binding("pageup", "page(-1)", show=False),
        Binding("pagedown", "page(1)", show=False),
        Binding("home", "move(-1000000)", show=False),
        Binding("end", "move(1000000)", show=False),
        Binding("enter", "choose", show=False),
    ]

    # No visible scrollbars (size 0: the cursor and the wheel still scroll; the title says how
    # many rows there are). Textual's scrollbars here stole two columns and (the virtual width
    # being the width before they appeared) a row for a horizontal one; their thumbs' partial
    # blocks (``▃▃``, ``▏``) read as stray sparkline cells, even through the help overlay.
    DEFAULT_CSS = """
    ProcessTable { height: 1fr; overflow-x: hidden; scrollbar-size: 0 0; }
    """

    def __init__(self, *, id: str | None = None, cursor: bool = True) -> None:
        self.lines: list[Line] = []          # before DataTable's init, which asks row_count
        # False: a read-only list (the topology view's busiest processes) draws no cursor
        # and takes no focus; the keys stay with the view it is part of.
        self.shows_cursor = cursor
        self._ycache: dict[int, Strip] = {}  # screen row -> drawn strip (see render_lines)
        self._ystamp: tuple[object, ...] = ()
        super().__init__(id=id, cursor_type="row", show_cursor=False)
        self.can_focus = cursor
        self.cols: list[Col] = task_columns(120)
        self.sort_key = "cpu"
        self.descending = True               # the sort's direction (the header's arrow)
        self._drawn_desc = True
        self.title = Text("")
        self.empty_note = ""
        self.row_cursor = 0
        self.open_groups: set[str] = set()
        self._groups: Sequence[GroupRow] = ()
        self._topo: Topology | None = None
        self._mode = "none"
        self._aff: dict[frozenset[int], str] = {}
        self._cells: dict[tuple[object, ...], tuple[str, ...]] = {}   # shown values -> cells
        self._has_job = True
        self._strips: dict[tuple[object, ...], Strip] = {}
        self._cols_key: tuple[Col, ...] = tuple(self.cols)
        self._keep: tuple[bool, ...] = ()    # which of TASK_LABELS the columns show
        self._ws_key: tuple[object, ...] = ()
        self._ws: list[int] = []
        self._cpu_i = 3
        self._base: Style | None = None      # rich_style, once per repaint (it walks the DOM)
        self._drawn_cols: tuple[Col, ...] = ()     # the columns the screen shows now
        # What the CPU% column shows: the chosen metric's per-process number (task_column.py)
        self.cpu_col: CpuColumn = CPU
        self._mem_total: float | None = None

    # ---- the compatibility surface (DataTable's reading API) ---------------------------------
    @property
    def row_count(self) -> int:
        return len(self.lines)

    @property
    def ordered_rows(self) -> list[Row]:
        return []                      # DataTable's own rows: none (its internals ask)

    def _scroll_cursor_into_view(self, animate: bool = False) -> None:
        return                         # DataTable's cursor is unused; see _keep_cursor_visible

    def get_row_at(self, row_index: int) -> list[str]:
        return list(self.lines[row_index].cells)

    @property
    def selected_key(self) -> str | None:
        return self.lines[self.row_cursor].key if self.lines else None

    # ---- data ----------------------------------------------------------------------------------
    def _for(self, topo: Topology) -> None:
        """Cells and PU-set labels are of one topology: another one starts them again."""
        if self._topo is not topo:
            self._topo, self._aff, self._cells = topo, {}, {}

    def _affinity(self, topo: Topology, aff: frozenset[int]) -> str:
        self._for(topo)
        got = self._aff.get(aff)
        if got is None:
            got = self._aff[aff] = affinity_label(topo, aff)
        return got

    def _cells_at(self, topo: Topology, tasks: Sequence[TaskRow], i: int,
                  prefix: str = "") -> tuple[str, ...]:
        shown_key = getattr(tasks, "shown_key", None)
        if shown_key is None:
            return self.task_cells(topo, tasks[i], prefix)
        self._for(topo)
        # A lazy TaskRows: the row is built only for raw values not seen with these columns
        raw = ("raw", self._keep, self.cpu_col.kind, self._mem_total, prefix, shown_key(i))
        try:
            got = self._cells.get(raw)
        except TypeError:                        # a value a crafted recording made unhashable
            return self.task_cells(topo, tasks[i], prefix)
        if got is None:
            got = self.task_cells(topo, tasks[i], prefix)
            if len(self._cells) > 4096:          # raw values change more often than cells
                self._cells.clear()
            self._cells[raw] = got
        return got

    def task_cells(self, topo: Topology, t: TaskRow, prefix: str = "") -> tuple[str, ...]:
        """A process's cells for the columns shown now, from a cache keyed by the values they
        show and by those columns: a process whose numbers did not change (most of them, most
        frames) costs one tuple and a look-up. ``prefix``: the tree's branches before the
        command. (The columns are in the key: without them a row cached at 60 columns kept
        its 60-column cells after a resize to 120, its CPU % under JOB.)"""
        keep = self._keep
        cpu = column_value(self.cpu_col.kind, t, self._mem_total)
        raw = (keep, t.pid, prefix, t.user, t.job, cpu, t.rss_bytes, t.nthreads,
               round(t.cpu_time_s, 2) if t.cpu_time_s is not None and keep[6] else None,
               t.last_cpu, t.affinity, t.cmdline or t.comm)
        got = self._cells.get(raw)
        if got is None:
            cells = (str(t.pid), t.user, t.job or "", _cpu(cpu), _mem(t.rss_bytes),
                     str(t.nthreads), fmt_cpu_time(t.cpu_time_s) if keep[6] else "",
                     "" if t.last_cpu is None else str(t.last_cpu),
                     self._affinity(topo, t.affinity),
                     prefix + command_label(t.cmdline, t.comm))
            if len(self._cells) > 4096:
                self._cells.clear()
            got = self._cells[raw] = tuple(c for c, k in zip(cells, keep) if k)
        return got

    def set_tasks(self, topo: Topology, tasks: Sequence[TaskRow], selected: int | None,
                  sort_key: str, title: Text, empty_note: str,
                  prefixes: Sequence[str] | None = None) -> None:
        """Show processes (already filtered and sorted); keep ``selected`` under the cursor.
        Rows are formatted when drawn (see ``Line``). ``prefixes``: the process tree's
        branches, one per row, drawn before the command."""
        self._mode = "none"
        self._task_columns()
        # A lazy TaskRows gives its pids without building its rows: only the rows drawn are
        # built (``Line.cells`` reads ``tasks[i]`` when first shown).
        pids_of = getattr(tasks, "pids", None)
        pids = [int(p) for p in pids_of()] if pids_of is not None else [t.pid for t in tasks]
        lines = [Line(str(p), None, "task", p,
                      make=partial(self._cells_at, topo, tasks, i,
                                   prefixes[i] if prefixes is not None else ""))
                 for i, p in enumerate(pids)]
        cursor = next((i for i, p in enumerate(pids) if p == selected), None)
        self._replace(lines, sort_key, title, empty_note, cursor)
        if cursor is None and lines and selected is not None:
            # The selected process is gone or filtered out: the row under the cursor is the
            # selection now, so the details pane does not describe a row nobody sees.
            self._announce()

    def set_cpu_column(self, col: CpuColumn, mem_total: float | None = None) -> None:
        """What the CPU% column shows from the next ``set_tasks`` on (the chosen metric's
        per-process number); ``mem_total``: the machine's memory, for MEM%."""
        if (col, mem_total) != (self.cpu_col, self._mem_total):
            self.cpu_col, self._mem_total = col, mem_total
            self._strips.clear()
            self.refresh()

    def set_groups(self, topo: Topology, groups: Sequence[GroupRow], mode: str,
                   sort_key: str, title: Text, empty_note: str) -> None:
        """Show one header row per group; an unfolded group lists its processes under it."""
        self._mode = mode
        self._groups = groups
        self.cols = group_columns(mode)
        self._columns_compat()
        lines: list[Line] = []
        for g in groups:
            is_open = g.key in self.open_groups
            lines.append(Line(f"g:{g.key}", (g.key, str(g.nprocs), str(g.nthreads),
                                             f"{g.cpu_pct:.1f}", _mem(g.rss_bytes),
                                             self._affinity(topo, g.affinity), g.top), "group",
                              unfolded=is_open))
            if is_open:
                for t in g.members:
                    lines.append(Line(str(t.pid), (f"   {t.pid} {t.user}", "", str(t.nthreads),
                                                   _cpu(t.cpu_pct), _mem(t.rss_bytes),
                                                   self._affinity(topo, t.affinity),
                                                   command_label(t.cmdline, t.comm)),
                                              "member", t.pid))
        old = self.selected_key
        cursor = next((i for i, ln in enumerate(lines) if ln.key == old), None)
        self._replace(lines, sort_key, title, empty_note, cursor)

    def _task_columns(self) -> bool:
        """The process columns for the width now; True when they changed."""
        # Before the first layout the widget has no size yet: the screen's width is close.
        cols = task_columns(self.size.width or (self.app.size.width if self.is_attached
                                                else 120))
        if cols == self.cols and self._keep:
            return False
        self.cols = cols
        labels = {c.label for c in cols}
        self._keep = tuple(lab in labels for lab in TASK_LABELS)
        self._columns_compat()
        return True

    def _columns_compat(self) -> None:
        """``columns`` as DataTable has it (key -> object with a label), for readers; and the
        per-column facts ``render_line`` would otherwise recompute for every row."""
        self._cols_key = tuple(self.cols)
        self._has_job = any(c.label == "JOB" for c in self.cols)
        self._cpu_i = next(i for i, c in enumerate(self.cols) if c.label == "CPU%")
        self.columns = {c.label: _ColumnLabel(c.label) for c in self.cols}  # type: ignore[misc]

    def _replace(self, lines: list[Line], sort_key: str, title: Text, empty_note: str,
                 cursor: int | None) -> None:
        # A new count of rows only repaints the rows that differ and the title; a new sort or
        # an empty table repaints everything.
        changed_shape = (sort_key != self.sort_key or empty_note != self.empty_note
                         or self.descending != self._drawn_desc
                         or not lines or not self.lines or self._drawn_cols != self._cols_key)
        self._drawn_cols = self._cols_key
        self._drawn_desc = self.descending
        title_changed = title.plain != self.title.plain or title.spans != self.title.spans
        old, cursor_before, top_before = self.lines, self.row_cursor, self.scroll_offset.y
        self.lines, self.sort_key, self.title, self.empty_note = lines, sort_key, title, empty_note
        if cursor is not None:
            self.row_cursor = cursor
        self.row_cursor = max(0, min(self.row_cursor, len(lines) - 1))
        self._set_virtual_size(len(lines))
        self._keep_cursor_visible()
        if len(self._strips) > 4 * max(64, self.size.height):
            self._strips.clear()
        if changed_shape or not self.is_mounted or top_before != self.scroll_offset.y:
            self.refresh()
            return
        # Only the rows whose cells changed repaint (Textual's cost is per repainted line,
        # through every widget layered over it), the row the cursor left and the one it is on.
        # Only the rows on screen are compared (and so formatted).
        top = self.scroll_offset.y
        moved = (cursor_before, self.row_cursor) if cursor_before != self.row_cursor else ()
        dirty = [0] if title_changed else []                  # the title, line 0 on screen
        for i in range(top, min(top + self._rows_h(), max(len(lines), len(old)))):
            if (i >= len(old) or i >= len(lines) or i in moved
                    or not old[i].looks_like(lines[i])):
                dirty.append(i - top + HEAD_ROWS)
        self.refresh_rows(dirty)

    def _set_virtual_size(self, nlines: int) -> None:
        """The scrollable height, without a layout: ``virtual_size`` is a reactive with
        ``layout=True``, so assigning it reflows the whole screen (every footer key measured
        again, ~2 ms) each time the number of processes changes, i.e. most frames. The table's
        own height is ``1fr`` and does not depend on it; only the scroll range does."""
        size = Size(self.size.width, nlines + HEAD_ROWS)
        if size != self.virtual_size:
            self.set_reactive(Widget.virtual_size, size)
            if self.is_mounted:
                self._scroll_update(size)

    # ---- drawing -------------------------------------------------------------------------------
    def _rows_h(self) -> int:
        return max(1, self.size.height - HEAD_ROWS)

    def _keep_cursor_visible(self) -> None:
        top = self.scroll_offset.y
        h = self._rows_h()
        if self.row_cursor < top:
            top = self.row_cursor
        elif self.row_cursor >= top + h:
            top = self.row_cursor - h + 1
        top = max(0, min(top, max(0, len(self.lines) - h)))
        if top != self.scroll_offset.y:
            self.scroll_to(y=top, animate=False, immediate=True)
            self.refresh()

    def header_text(self, ws: Sequence[int]) -> Text:
        mark = SORT_COLUMN.get(self.sort_key) if self._mode == "none" else None
        arrow = "▼" if self.descending else "▲"
        cpu = self.cpu_col.label if self._mode == "none" else "CPU%"
        labels = [(cpu if c.label == "CPU%" else c.label)
                  + (arrow if c.label == mark else "") for c in self.cols]
        return line_text(labels, self.cols, ws, HEAD_STYLE)

    def render_lines(self, crop: Region) -> list[Strip]:
        """The dirty rows straight from ``render_line``, each cached (cached_lines.py)."""
        self._base = None           # DataTable's render_lines only sets its own cell styles
        return CachedLines.render_lines(self, crop)

    def _styled_render_lines(self, crop: Region) -> list[Strip]:
        return super(DataTable, self).render_lines(crop)

    def _line_for(self, y: int, width: int, top: int, focus: bool) -> Strip:
        return self._line(y, width, top, focus)

    def _widths(self, width: int) -> list[int]:
        """``widths`` of the columns, computed once per set of columns and width."""
        key = (self._cols_key, width)
        if self._ws_key != key:
            self._ws_key, self._ws = key, widths(self.cols, width)
        return self._ws

    def notify_style_update(self) -> None:
        kept = getattr(self, "_strips", None)
        if kept is not None:
            kept.clear()                     # padded in the styles of before
        super().notify_style_update()

    def refresh(self, *regions: Region, repaint: bool = True, layout: bool = False,
                recompose: bool = False) -> ProcessTable:
        """Textual's refresh; forgets the drawn rows it covers (see ``render_lines``)."""
        self.forget_lines(*regions)
        super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)
        return self

    def render_line(self, y: int) -> Strip:
        return self._line(y, self.size.width, self.scroll_offset.y, self.has_focus)

    def _line(self, y: int, width: int, top: int, focus: bool) -> Strip:
        """Screen line ``y``; ``render_lines`` passes the width, scroll position and focus
        once per repaint (each is a walk through Textual's reactives, per line it was a
        tenth of a frame)."""
        ws = self._widths(width)
        if y == 0:
            return self._strip(("title", self.title.plain, tuple(self.title.spans), width),
                               lambda: self.title, width)
        if y == 1:
            key = ("head", tuple(c.label for c in self.cols), self.sort_key, self.descending,
                   self._mode, width, self.cpu_col.label)
            return self._strip(key, lambda: self.header_text(ws), width)
        idx = top + y - HEAD_ROWS
        if not self.lines:
            note = self.empty_note if y == HEAD_ROWS else ""
            return self._strip(("empty", note, width), lambda: Text(" " + note, style=NA_STYLE),
                               width)
        if idx >= len(self.lines):
            return self._strip(("blank", width), Text, width)
        ln = self.lines[idx]
        cur = (focus if idx == self.row_cursor and self.shows_cursor else None)
        row_key = ("row", ln.cells, ln.kind, ln.unfolded, self._cols_key, cur, width)
        got = self._strips.get(row_key)
        if got is None:
            got = self._strips[row_key] = self._row_strip(ln, ws, cur, width)
        return got

    def _row_strip(self, ln: Line, ws: Sequence[int], cur: bool | None, width: int) -> Strip:
        """A row straight to one Segment: a row has one style (group, n/a, cursor), so going
        through Text and its render costs more than the row is worth."""
        cells = ln.cells
        styles: list[Style] = []
        if ln.kind == "group":
            cells = (("▾ " if ln.unfolded else "▸ ") + cells[0], *cells[1:])
            styles.append(GROUP_STYLE)
        elif cells[self._cpu_i] == "n/a":
            styles.append(NA_STYLE)
        if cur is not None:
            styles.append(CURSOR if cur else CURSOR_BLUR)
        seg = Segment(line_str(cells, self.cols, ws), Style.combine(styles) if styles else None)
        return Strip([seg]).extend_cell_length(width, self._base_style()).crop(0, width)

    def _base_style(self) -> Style:
        if self._base is None:
            self._base = self.rich_style
        return self._base

    def _strip(self, key: tuple[object, ...], make: object, width: int) -> Strip:
        got = self._strips.get(key)
        if got is None:
            text = make()                                   # type: ignore[operator]
            segs = list(text.render(self.app.console))
            got = Strip(segs).extend_cell_length(width, self._base_style()).crop(0, width)
            self._strips[key] = got
        return got

    # ---- events ----------------------------------------------------------------------------------
    def on_resize(self) -> None:
        """New columns for the new width at once, every row's cells made again for them
        (not at the next frame, which may be seconds away or paused)."""
        self._strips.clear()
        if self._mode == "none" and self._task_columns():
            for ln in self.lines:
                ln.remake()
            self._drawn_cols = self._cols_key
        self._set_virtual_size(len(self.lines))
        self.refresh()

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()

    async def _on_click(self, event: events.Click) -> None:
        idx = self.scroll_offset.y + event.y - HEAD_ROWS
        if 0 <= idx < len(self.lines):
            self._move_to(idx)

    def _on_mouse_move(self, event: events.MouseMove) -> None:
        return                         # no hover highlight: nothing to recompute on mouse moves

    def _move_to(self, idx: int) -> None:
        idx = max(0, min(idx, len(self.lines) - 1))
        if not self.lines or idx == self.row_cursor:
            return
        self.row_cursor = idx
        self._keep_cursor_visible()
        self.refresh()
        self._announce()

    def _announce(self) -> None:
        """Tell the app (DataTable's message, the PID as row key) which row is selected."""
        ln = self.lines[self.row_cursor]
        key = str(ln.pid) if ln.pid is not None else ln.key
        self.post_message(DataTable.RowHighlighted(self, self.row_cursor, RowKey(key)))

    def action_move(self, delta: int) -> None:
        self._move_to(self.row_cursor + delta)

    def action_page(self, direction: int) -> None:
        self._move_to(self.row_cursor + direction * max(1, self._rows_h() - 1))

    def action_choose(self) -> None:
        if not self.lines:
            return
        ln = self.lines[self.row_cursor]
        if ln.kind == "group":
            g = ln.key[2:]
            self.open_groups.symmetric_difference_update({g})
            if self._topo is not None:
                self.set_groups(self._topo, self._groups, self._mode, self.sort_key, self.title,
                                self.empty_note)
            return
        self._announce()
        self.post_message(DataTable.RowSelected(self, self.row_cursor, RowKey(str(ln.pid))))


@dataclass(frozen=True)
class _ColumnLabel:
    label: Text | str
