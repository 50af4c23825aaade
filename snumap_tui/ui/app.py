"""`snumap top`: the Textual application.

Frames come from a *feed* (the live sampler, or anything with start/stop) on another thread and
reach the app as ``FrameReady`` messages. ``FrameReady.can_replace`` lets a newer frame replace
one still waiting in the queue, so a slow terminal (SSH over a bad link) shows the latest frame
instead of lagging behind; the history (for the sparkline) is appended on the feed's thread so
dropped frames still count there. Only the visible view is redrawn per frame.

The keys are ``keymap.KEYMAP``'s (shared with `snumap replay`: a key means one thing in
both); the ? screen lists them.
"""

from __future__ import annotations

import asyncio
import signal
from collections import deque
from collections.abc import Callable, Sequence
from typing import ClassVar, Protocol

from rich.markup import escape as escape_markup
from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import BindingType
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import ContentSwitcher, DataTable, Input, Static

from snumap_tui.heap import LongLived
from snumap_tui.model.frame import Frame, TaskRow
from snumap_tui.model.metrics import Catalogue
from snumap_tui.topology.model import Topology
from snumap_tui.ui import safe_screen
from snumap_tui.ui.app_processes import ProcessListMixin
from snumap_tui.ui.app_tree import TreeExtrasMixin
from snumap_tui.ui.backdrop import (
    Backdrop,
    BackdropScreen,
    BackdropSwitcher,
    QuietFooter,
    TextLines,
)
from snumap_tui.ui.driver import QuietDriverMixin
from snumap_tui.ui.hostinfo import HostInfo, source_marks
from snumap_tui.ui.io_detail import ProcessIoLines
from snumap_tui.ui.keymap import bindings
from snumap_tui.ui.metricspec import (
    MetricView,
    heatmap_metrics,
    use_catalogue,
    view_for,
)
from snumap_tui.ui.panels import (
    HeatmapPanel,
    ProcessPanel,
    header_lines,
    task_detail,
)
from snumap_tui.ui.process_table import ProcessTable
from snumap_tui.ui.processes import (
    GROUP_MODES,
    group_tasks,
    numa_of_task,
)
from snumap_tui.ui.screens import HelpScreen, SourcesScreen, metric_picker
from snumap_tui.ui.thread_panel import ThreadViewMixin
from snumap_tui.ui.topology_view import TopologyTable, header_text

VIEWS = ("topology", "heatmap", "processes")
INTERVALS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)   # the + and - steps
MIN_W, MIN_H = 50, 12
# While no process list is on screen, the feed reads the whole list this often (only the
# selected process every frame, for its highlight): the list is a third of a sweep's cost.
TASKS_IDLE_S = 5.0


class FrameFeed(Protocol):
    """What the app needs from a source of Frames (the live sampler's adapter)."""

    interval_s: float

    def start(self, callback: Callable[[Frame], None]) -> None: ...

    def stop(self) -> None: ...

    def set_interval(self, seconds: float) -> None: ...

    def watch_pid(self, pid: int | None) -> None: ...

    # Optional: ``watch_counters(pid)``, per-thread perf counters on this process (None: on
    # none); the processes view's details show their rates.

    # Optional: ``tasks_cadence(seconds)``, how often the whole process list is needed
    # (0: every frame); a feed without it reads it every frame.


class FrameReady(Message):
    """A new Frame from the feed; a newer one replaces it if it has not been handled yet."""

    def __init__(self, frame: Frame) -> None:
        super().__init__()
        self.frame = frame

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, FrameReady)


class TopApp(QuietDriverMixin, ProcessListMixin, ThreadViewMixin, TreeExtrasMixin,
             App[int]):
    """The live view. Takes a Topology, a feed and a host-facts function (all injectable, so
    tests run it with hand-made frames and a fixed host)."""

    TITLE = "snumap top"
    CSS_PATH = "top.tcss"
    ENABLE_COMMAND_PALETTE = False
    # The screen gets -too-narrow / -too-low below the minimum size; top.tcss then hides the
    # views and shows a message instead (no layout arithmetic on a 20x5 terminal).
    # The ignores: Textual declares these two `ClassVar[...] | None`, which is not a valid
    # ClassVar, so mypy takes them for instance variables that a ClassVar may not override
    # (and without the ClassVar ruff's RUF012 objects).
    HORIZONTAL_BREAKPOINTS: ClassVar[list[tuple[int, str]]] = [  # type: ignore[misc]
        (0, "-too-narrow"), (MIN_W, "-wide-enough")]
    VERTICAL_BREAKPOINTS: ClassVar[list[tuple[int, str]]] = [  # type: ignore[misc]
        (0, "-too-low"), (MIN_H, "-high-enough")]

    BINDINGS: ClassVar[list[BindingType]] = list(bindings("top"))

    view: reactive[str] = reactive("topology")
    """The visible view: topology, heatmap or processes."""

    paused: reactive[bool] = reactive(False)
    """When paused, frames keep arriving (and history keeps filling) but nothing is redrawn."""

    def __init__(self, topology: Topology, feed: FrameFeed | None = None,
                 host: Callable[[], HostInfo] | None = None, interval_s: float = 1.0,
                 history: int = 120, catalogue: Catalogue | None = None,
                 origin: tuple[str, str] | None = None, sort_key: str = "cpu",
                 pids: frozenset[int] | None = None, user: str | None = None) -> None:
        super().__init__()
        safe_screen.install(self)        # no terminal control in a name reaches the screen
        # The process list's sort, tree, filter, -p and -u (app_processes.py).
        self._init_process_list(sort_key, pids, user)
        # Not this machine's live numbers: ("fsroot", DIR) for --fsroot, ("topology", NAME)
        # for --topology/--synthetic; the header says so instead of "live".
        self.origin = origin
        self.crash: str | None = None         # one line for the shell when the app crashed
        # The user's metrics (--metrics FILE): the views take their scale, unit and header
        # from it, and the metric picker (m) offers them right after the usual ones.
        use_catalogue(catalogue)
        self.topology = topology
        self._init_thread_view()            # the process view, p (thread_panel.py)
        self.feed = feed
        self.host_fn = host or (lambda: HostInfo("?", "?", "?"))
        self.interval_s = interval_s
        self.history: deque[Frame] = deque(maxlen=history)
        self.frame: Frame | None = None
        self.metric_i = 0
        self._metric_views: tuple[Frame, list[MetricView]] | None = None
        self.group_mode = "none"
        self.selected_pid: int | None = None
        self.selected_obj = topology.root.id
        self.selected_label = "Machine"       # the selected row's label, as the tree shows it
        self.selected_io: tuple[int, ...] = ()   # an I/O row's devices (Topology.io indexes)
        self.shown_tasks: Sequence[TaskRow] = []
        self.frames_drawn = 0
        self._head_for: tuple[int, tuple[int, int, int]] | None = None  # the column heads'
        self._head_key: tuple[object, ...] | None = None   # what the header shows now
        self._init_tree_extras()
        self._shown: dict[str, tuple[object, ...]] = {}
        self.counted_pid: int | None = None    # whose perf counters the feed reads
        self._process_io = ProcessIoLines()
        # Set by on_mount: before it there are no widgets to draw into, so a frame pushed or a
        # view chosen before the app runs is only stored (App.is_mounted is a method that
        # takes a widget, not this flag).
        self._views_up = False
        self._heap = LongLived()            # settled after the first frame (heap.py)

    # ---- layout --------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield TextLines(id="header")
        with Backdrop(id="main"), BackdropSwitcher(initial=self.view, id="views"):
            with Backdrop(id="topology"):
                yield TextLines(id="topo-head")
                yield TopologyTable(self.topology, id="tree")
                yield ProcessTable(id="topo-procs", cursor=False)
                yield TextLines(id="spark")
            yield HeatmapPanel(id="heatmap")
            yield ProcessPanel(id="processes")
        yield Static(id="too-small")
        yield QuietFooter()

    def get_default_screen(self) -> BackdropScreen:
        return BackdropScreen(id="_default")

    def on_mount(self) -> None:
        try:
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, self.exit, 0)
        except (NotImplementedError, RuntimeError, ValueError):
            pass       # not the main thread (tests) or no signals: q and ctrl+c still work
        self._views_up = True
        self.query_one("#too-small", Static).update(
            f"Terminal too small.\nsnumap top needs at least {MIN_W}×{MIN_H}.\n"
            "Enlarge the window, or press q to quit.")
        # The view's focus, the feed's task cadence and the first draw (for a view chosen
        # before the app ran too: its watcher could not draw then).
        self.watch_view(self.view)
        if self.feed is not None:
            self._tell_feed_kthreads()
            self.feed.start(self._on_feed_frame)

    def _lists_tasks(self) -> bool:
        """A process list is on screen: the processes view, or the topology view's busiest
        processes under the tree."""
        return self.view == "processes" or (self.view == "topology"
                                            and self._busiest_fit[1] > 0)

    def _tell_feed_tasks(self) -> None:
        """Attributes down: the feed reads the whole process list every frame while a list
        shows it (at the chosen interval, as every other figure), else every TASKS_IDLE_S."""
        cadence = getattr(self.feed, "tasks_cadence", None)
        if callable(cadence):
            cadence(0.0 if self._lists_tasks() else TASKS_IDLE_S)

    def on_unmount(self) -> None:
        if self.feed is not None:
            self.feed.stop()
        self._heap.release()

    def on_resize(self) -> None:
        self._redraw()

    @property
    def too_small(self) -> bool:
        w, h = self.size
        return w < MIN_W or h < MIN_H

    # ---- frames ----------------------------------------------------------------------------------
    def _on_feed_frame(self, frame: Frame) -> None:
        """Called on the feed's thread: keep the history complete, let the UI drop stale frames."""
        self.history.append(frame)
        self.post_message(FrameReady(frame))

    def on_frame_ready(self, message: FrameReady) -> None:
        # A frame the feed posted while the app shuts down arrives after its screens are
        # gone (Textual stops running first): nothing to draw into.
        if self.paused or not self.is_running:
            return
        self.frame = message.frame
        self._redraw()
        # Start-up is over (imports, widgets, the sampler's sources): what lives now lives
        # until the end, and full collections stop walking it (heap.py).
        self._heap.settle()

    def push_frame(self, frame: Frame) -> None:
        """Show a frame now (tests, replay, screenshots): same path as the feed's."""
        self.history.append(frame)
        if not self.paused:
            self.frame = frame
            self._redraw()

    # ---- drawing -------------------------------------------------------------------------------
    def metric_views(self) -> list[MetricView]:
        """What ``m`` cycles through: the metrics with a value somewhere in this frame
        (worked out once per frame: the header and the history line both ask)."""
        if self.frame is None:
            return [view_for("util")]
        cached = self._metric_views
        if cached is None or cached[0] is not self.frame:
            cached = self._metric_views = (self.frame, heatmap_metrics(self.frame.values))
        return cached[1]

    @property
    def metric(self) -> MetricView:
        ms = self.metric_views()
        return ms[self.metric_i % len(ms)]

    def _redraw(self) -> None:
        if not self._views_up:
            return
        self.frames_drawn += 1
        width = self.size.width
        sources = self.frame.sources if self.frame else {}
        host = self.host_fn()
        static = self.frame is not None and self.frame.get("util_pct", self.topology.root.id) \
            is None
        # The header changes every few seconds (load, uptime, a source's state), not every
        # frame: its Text is built only when what it shows changed.
        head_key = (host, tuple(source_marks(sources)), self.paused,
                    self.interval_s, self.metric.title, self.view, width, self.origin, static)
        if head_key != self._head_key:
            self._head_key = head_key
            # Fixed-height widgets: update without a layout pass (the costliest part of a
            # frame).
            self._update_static("#header", header_lines(
                host, sources, paused=self.paused, interval_s=self.interval_s,
                metric=self.metric, view=self.view, width=width, origin=self.origin,
                static=static))
        if self.too_small:
            return
        selected = self._selected_task()
        pus = sorted(selected.affinity) if selected else []
        nodes = numa_of_task(self.topology, selected) if selected else set()
        mark = selected.last_cpu if selected else None
        if self.view == "topology":
            tree = self.query_one(TopologyTable)
            self._draw_head(tree)
            tree.set_marks(pus, nodes)
            tree.set_frame(self.frame)
            self._draw_busiest(tree)
            self._draw_spark()
        elif self.view == "heatmap":
            self.query_one(HeatmapPanel).show(self.topology, self.frame, self.metric, pus, mark)
        else:
            self._draw_processes(selected)

    def _draw_head(self, tree: TopologyTable) -> None:
        """The tree's column heads, with the rows shown when the tree is longer than its
        view; built again only when the width or those rows change."""
        key = (self.size.width, tree.span)
        if self._head_for != key:
            self._head_for = key
            self.query_one("#topo-head", Static).update(header_text(*key), layout=False)

    def _update_static(self, selector: str, text: Text) -> None:
        """Update a fixed-height Static without a layout pass, and not at all when its text
        and styles are what it already shows (the header changes every few seconds, not
        every frame): Textual's cost is per widget repainted."""
        key = (text.plain, tuple(text.spans))
        if self._shown.get(selector) == key:
            return
        self._shown[selector] = key
        self.query_one(selector, Static).update(text, layout=False)

    def _selected_task(self) -> TaskRow | None:
        if self.selected_pid is None or self.frame is None:
            return None
        return self.frame.task(self.selected_pid)

    def _draw_processes(self, selected: TaskRow | None) -> None:
        panel = self.query_one(ProcessPanel)
        tasks = self._tasks()
        self.shown_tasks = tasks
        if selected is None and tasks and self.group_mode == "none":
            selected = tasks[0]           # the busiest: its details show at once
            self.selected_pid = selected.pid
            if self.feed is not None:
                self.feed.watch_pid(selected.pid)
        if self.group_mode == "none":
            col = self.cpu_column()            # the chosen metric's, per process
            self.query_one("#proc-table", ProcessTable).set_cpu_column(col, self.mem_total())
            panel.show_tasks(self.topology, tasks, self.selected_pid, self.sort_key,
                             self.filter_text, self.tree_prefixes, self.descending,
                             self.narrowing_note() + (f" · {col.note}" if col.note else ""))
        else:
            panel.show_groups(self.topology, group_tasks(tasks, self.group_mode), self.group_mode)
        self._watch_counters()
        detail = task_detail(self.topology, selected, self.size.width,
                             counting=selected is not None and selected.pid == self.counted_pid,
                             memory=not self.thread_view)
        devices = self._process_io.text(self.feed, selected.pid if selected else None,
                                        self.size.width)
        if devices is not None:                 # its GPUs and adapters (ui/io_detail.py)
            detail.append("\n")
            detail.append_text(devices)
        panel.show_detail(detail)
        self._draw_thread_view(selected)
        title = (f"sort {self.sort_key} · group {self.group_mode}"
                 + (" · tree" if self.tree_view else "")
                 + (f" · filter '{escape_markup(self.filter_text)}'" if self.filter_text
                    else ""))
        if panel.border_title != title:
            panel.border_title = title        # setting it repaints the whole panel, every time

    def _watch_counters(self) -> None:
        """The selected process's perf counters, only while the processes view shows its
        details (they cost file descriptors per thread and a read per sweep); switched to the
        new selection when it changes, and off when the view does."""
        watch = getattr(self.feed, "watch_counters", None)
        want = self.selected_pid if self.view == "processes" and callable(watch) else None
        if want == self.counted_pid:
            return
        self.counted_pid = want
        if callable(watch):
            watch(want)

    # ---- events from the views ---------------------------------------------------------------
    def on_topology_table_selected(self, message: TopologyTable.Selected) -> None:
        row = message.row
        self.selected_obj, self.selected_label, self.selected_io = row.obj_id, row.label, row.io
        if self.view == "topology" and self._views_up:
            self._draw_spark()

    def on_topology_table_refolded(self, message: TopologyTable.Refolded) -> None:
        """The tree's height changed: the busiest processes get the room at once (not with
        the next frame, which may be seconds away or paused)."""
        if self.view == "topology" and self._views_up and not self.too_small:
            tree = self.query_one(TopologyTable)
            self._draw_busiest(tree)
            self._draw_head(tree)

    def on_topology_table_scrolled(self, message: TopologyTable.Scrolled) -> None:
        if self.view == "topology" and self._views_up and not self.too_small:
            self._draw_head(self.query_one(TopologyTable))

    def on_data_table_row_highlighted(self, message: DataTable.RowHighlighted) -> None:
        key = message.row_key.value or ""
        if key.startswith("g:") or not key.isdigit():
            return
        pid = int(key)
        if pid != self.selected_pid:
            self.selected_pid = pid
            if self.feed is not None:
                self.feed.watch_pid(pid)
            self._redraw()

    # ---- actions -------------------------------------------------------------------------------
    def watch_view(self, view: str) -> None:
        if not self._views_up:
            return
        self.query_one("#views", ContentSwitcher).current = view
        self._tell_feed_tasks()
        self._watch_counters()
        if view == "topology":
            self.query_one(TopologyTable).focus()
        elif view == "processes":
            self.query_one("#proc-table", DataTable).focus()
        self._redraw()

    def watch_paused(self, paused: bool) -> None:
        if not paused and self.history:
            self.frame = self.history[-1]
        self._redraw()

    def action_view(self, view: str) -> None:
        self.view = view

    def action_next_view(self) -> None:
        if isinstance(self.focused, Input):
            return
        self.view = VIEWS[(VIEWS.index(self.view) + 1) % len(VIEWS)]

    def action_metric(self, step: int) -> None:
        self.metric_i += step
        self._redraw()

    def action_pick_metric(self) -> None:
        """F2: every metric of the frame; those with no data here are listed, marked, and
        cannot be picked (``m`` skips them)."""
        values = self.frame.values if self.frame else {}
        self.push_screen(metric_picker(values, self.metric.key), self._picked_metric)

    def _picked_metric(self, key: str | None) -> None:
        keys = [m.key for m in self.metric_views()] if self.frame else []
        if key in keys:
            self.metric_i = keys.index(key)      # the view stays: its metric changes
            self._redraw()

    def action_pause(self) -> None:
        self.paused = not self.paused

    def action_slower(self) -> None:
        self.action_interval(1)

    def action_faster(self) -> None:
        self.action_interval(-1)

    def action_interval(self, step: int) -> None:
        """The next step up or down from the current interval (which --interval may have set
        between two steps, or outside them: then - from 0.01 s stays there)."""
        cur = self.interval_s
        if step > 0:
            self.interval_s = next((v for v in INTERVALS if v > cur * 1.001), cur)
        else:
            self.interval_s = next((v for v in reversed(INTERVALS) if v < cur * 0.999), cur)
        if self.feed is not None:
            self.feed.set_interval(self.interval_s)
        self._redraw()

    def action_group(self) -> None:
        self.group_mode = GROUP_MODES[(GROUP_MODES.index(self.group_mode) + 1) % len(GROUP_MODES)]
        self.view = "processes"
        self._redraw()

    def action_detail(self, step: int) -> None:
        """+ and -: the topology tree unfolded (folded) a level, as htop's + and - unfold and
        fold its process tree; from another view the tree is shown, as ``o`` does."""
        self.view = "topology"
        self.query_one(TopologyTable).fold_level(step)

    def action_toggle_io(self) -> None:
        """Unfold (or fold) the I/O rows under every NUMA node of the tree."""
        self.view = "topology"
        self.query_one(TopologyTable).toggle_io()

    def action_sources(self) -> None:
        self.push_screen(SourcesScreen(self.frame.sources if self.frame else {}))

    def _fatal_error(self) -> None:
        """An exception inside the app: keep one line for the shell (``snumap top`` exits 2
        with it) and the traceback in a file, instead of Textual's screen-long dump and an
        exit status of 0."""
        import tempfile
        import traceback

        exc = self._exception
        self.crash = f"{type(exc).__name__}: {exc}" if exc is not None else "unknown error"
        try:
            with tempfile.NamedTemporaryFile("w", prefix="snumap-top-crash-", suffix=".txt",
                                             delete=False) as f:
                if exc is not None:
                    f.write("".join(traceback.format_exception(exc)))
                self.crash += f" (traceback in {f.name})"
        except OSError:
            pass
        self._close_messages_no_wait()

    def action_help(self) -> None:
        self.push_screen(HelpScreen())
