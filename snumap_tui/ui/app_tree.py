"""What `snumap top`'s topology view shows under the tree: the busiest processes (htop's
one-screen overview, when the tree leaves room) and the history line of the selected row's
metric. A mixin of ``TopApp``, drawn at each frame by its ``_redraw``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.text import Text

from snumap_tui.model.frame import Frame, TaskRow
from snumap_tui.ui.backdrop import TextLines
from snumap_tui.ui.io_rows import io_row_value, io_row_view
from snumap_tui.ui.metricspec import MetricView, resolve
from snumap_tui.ui.palette import NA_STYLE, spark_glyph
from snumap_tui.ui.panels import spark_bars, spark_title
from snumap_tui.ui.process_table import HEAD_ROWS, ProcessTable
from snumap_tui.ui.processes import sort_tasks
from snumap_tui.ui.topology_view import TopologyTable

# The topology view lists the busiest processes under the tree when the tree leaves at least
# this many lines free (a small machine: one look shows where the work runs and whose it is).
BUSIEST_MIN_FREE = 6


class TreeExtrasMixin:
    """State: the history line's values per frame and the list's fit and last input. Needs
    the app's ``frame``, ``history``, ``metric``, ``topology``, ``selected_obj``,
    ``selected_label``, ``selected_io``, ``_shown``, ``size``, ``query_one``, ``cpu_column``, ``mem_total``,
    ``_sort_by_column`` and ``_tell_feed_tasks``."""

    _spark_for: tuple[str, int, tuple[int, ...]] | None
    _spark_vals: dict[int, tuple[Frame, float | None, str]]      # id -> frame, value, block
    _busiest_fit: tuple[int, int]                                 # (tree rows, list lines)
    _busiest_key: tuple[Sequence[TaskRow], tuple[int, int], object] | None

    if TYPE_CHECKING:
        frame: Any
        history: Any
        topology: Any
        selected_obj: int
        selected_label: str
        selected_io: tuple[int, ...]
        _shown: dict[str, tuple[object, ...]]
        size: Any

        @property
        def metric(self) -> MetricView: ...

        def query_one(self, selector: Any, expect_type: Any = None) -> Any: ...

        def cpu_column(self) -> Any: ...

        def mem_total(self) -> float | None: ...

        def _sort_by_column(self, tasks: list[TaskRow], invert: bool) -> list[TaskRow]: ...

        def _tell_feed_tasks(self) -> None: ...

    def _init_tree_extras(self) -> None:
        self._spark_for = None
        self._spark_vals = {}
        self._busiest_fit = (-1, -1)
        self._busiest_key = None

    def _draw_spark(self) -> None:
        obj = self.topology[self.selected_obj]
        io = self.selected_io
        # An I/O row's line follows its devices' traffic (or its GPUs' use), not the metric
        # of the NUMA node it sits under.
        view = io_row_view(self.topology, io) if io else self.metric
        # Each frame's value and block are worked out once for the metric and row shown
        # (the history holds up to 120 frames; only the new one is looked up at a frame).
        if self._spark_for != (view.key, obj.id, io):
            self._spark_for, self._spark_vals = (view.key, obj.id, io), {}
        known = self._spark_vals
        hist: list[float | None] = []
        blocks: list[str] = []
        vals: dict[int, tuple[Frame, float | None, str]] = {}
        for f in list(self.history):
            got = known.get(id(f))
            if got is None or got[0] is not f:
                if io:
                    v = io_row_value(f, self.topology, io)
                else:
                    name = resolve(f.values, view.key)
                    v = f.get(name, obj.id) if name else None
                got = (f, v, spark_glyph(v, view.norm))
            # The frame is kept with its value, so its id cannot be another frame's while
            # it is in here.
            vals[id(f)] = got
            hist.append(got[1])
            blocks.append(got[2])
        self._spark_vals = vals
        width = self.size.width
        span = max(1, width - 2)
        glyphs = "".join(blocks[-span:]).rjust(span)
        title = spark_title(self.selected_label, view, hist, width)
        key = (title.plain, tuple(title.spans), glyphs)
        if self._shown.get("#spark") != key:
            self._shown["#spark"] = key
            self.query_one("#spark", TextLines).update_lines([title, spark_bars(glyphs)])

    def _busiest_lines(self, tree: TopologyTable) -> int:
        """Lines under the tree for the busiest processes: what the tree (and a blank line
        after it) leaves of the view, 0 when that is under BUSIEST_MIN_FREE."""
        # The view: the screen less the header (2), the footer (1), the column heads (1) and
        # the sparkline (2).
        free = self.size.height - 6 - (len(tree.rows) + 1)
        return free if free >= BUSIEST_MIN_FREE else 0

    def _draw_busiest(self, tree: TopologyTable) -> None:
        """The busiest processes under a tree that leaves room for them (htop's one-screen
        overview). They come from the frame's process list, which the feed reads in full
        every frame while the list is shown (``_lists_tasks``), at the chosen interval."""
        table = self.query_one("#topo-procs", ProcessTable)
        n = self._busiest_lines(tree)
        fit = (len(tree.rows), n)
        if fit != self._busiest_fit:
            shown_before = self._busiest_fit[1] > 0
            self._busiest_fit = fit
            tree.styles.height = len(tree.rows) + 1 if n else "1fr"
            table.styles.height = n or 1
            table.display = bool(n)
            if shown_before != bool(n):
                self._tell_feed_tasks()        # the list follows the interval while shown
        if not n:
            return
        tasks = self.frame.tasks if self.frame else []
        # Between full reads of the process list the frame overlays the selected process's
        # fresh row on the last full reading: the list shows full reads only (its title says
        # how often), so it is rebuilt when the full reading or the room changes, not every
        # frame (building and sorting every row each frame was a tenth of the view's cost).
        tasks = getattr(tasks, "base", tasks)
        col = self.cpu_column()              # the chosen metric's, per process (view 3's)
        if self._busiest_key is not None and self._busiest_key[0] is tasks \
                and self._busiest_key[1] == fit and self._busiest_key[2] == col:
            return
        self._busiest_key = (tasks, fit, col)   # the object itself: an id could be reused
        top = getattr(tasks, "top", None)
        rows = n - HEAD_ROWS
        if col.kind != "cpu":
            shown = self._sort_by_column(list(tasks), invert=False)[:rows]
        else:
            shown = top(rows, "cpu") if top is not None else sort_tasks(tasks, "cpu")[:rows]
        table.set_cpu_column(col, self.mem_total())
        title = Text(" busiest processes" + (f" by {col.label}" if col.kind != "cpu" else ""),
                     style="bold")
        if shown and shown[0].cpu_pct is None:
            # The first full read has nothing to measure against: rates come with the next.
            title.append(" · CPU % from the next read", style=NA_STYLE)
        title.append("  3 all processes", style=NA_STYLE)
        table.set_tasks(self.topology, shown, None, "cpu", title, "no process to show")
