"""`snumap replay`: a recording shown again, with a time cursor.

Views: the core-vs-time (Gantt) chart of the scheduling trace, and `snumap top`'s topology
tree and heatmap built from the recorded samples at the cursor (the same ``derive(prev, cur)``
as live, the same widgets). The topology comes from the file, so it works on any machine,
without hwloc. Every key is listed in ``replay_help.KEYS`` (the ? screen).
"""

from __future__ import annotations

import datetime as _dt
import os
from typing import TYPE_CHECKING, ClassVar

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import BindingType
from textual.containers import Vertical
from textual.reactive import reactive
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import ContentSwitcher, Footer, Input, Static

from snumap_tui.ui import safe_screen
from snumap_tui.ui.counter_rows import CounterKeysMixin, level_name, region_levels, region_on
from snumap_tui.ui.driver import QuietDriverMixin
from snumap_tui.ui.gantt import (
    GanttState,
    Rendered,
    cell_detail,
    fmt_time,
    layout,
    render_gantt,
)
from snumap_tui.ui.keymap import bindings
from snumap_tui.ui.process_view import ProcessPanel, ProcessViewMixin
from snumap_tui.ui.replay_data import ReplayData
from snumap_tui.ui.replay_help import ReplayHelpScreen
from snumap_tui.ui.replay_keys import ReplayKeysMixin
from snumap_tui.ui.textfit import fit_pieces
from snumap_tui.ui.timeaxis import fmt_wall, resolution_label
from snumap_tui.ui.topology_view import TopologyTable, header_text

if TYPE_CHECKING:
    from textual.timer import Timer

    from snumap_tui.analysis.binning import GanttBins
    from snumap_tui.model.frame import Frame

SPEEDS = (0.01, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 60.0)
TICK_S = 0.1
MIN_SPAN_NS = 1000            # zoomed in to 1 us across the screen: single events apart
MIN_W, MIN_H = 50, 12         # below this the views say "too small" (as `snumap top` does)
VIEWS = ("gantt", "topology", "heatmap")      # tab's order; keys 1 2 3 are top's numbering
NULL_STYLE = Style()


def styled(line: list[Segment]) -> list[Segment]:
    """Every segment with a Style, never None: Textual's NO_COLOR filter reads ``.color`` of
    each segment's style and fails on None."""
    return [seg if seg.style is not None else Segment(seg.text, NULL_STYLE) for seg in line]


class GanttView(Widget, can_focus=True):
    """Draws ``render_gantt`` lines and the selected cell's detail; holds no state itself."""

    DEFAULT_CSS = "GanttView { height: 1fr; }"

    def __init__(self, data: ReplayData, state: GanttState, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.data = data
        self.state = state
        self.cursor_t: int | None = None
        self.rendered: Rendered | None = None
        self._lines: list[list[Segment]] = []
        self.redraws = 0
        self.painted = 0        # the redraw whose lines the compositor last asked for (bench)

    def rebuild(self) -> None:
        w, h = self.size.width, self.size.height
        if w <= 0 or h <= 0:
            return
        if self.cursor_t is not None:
            # The selected cell is the cursor's column at the width drawn now: a width
            # guessed while the chart was hidden (another view) put the detail line on
            # another time than the header's.
            self.state.sel_col = self.state.col_of(self.cursor_t,
                                                   layout(self.data, w, h - 1).cols)
        self.rendered = render_gantt(self.data, self.state, w, h - 1, self.cursor_t,
                                     letters=self.letters())
        detail = cell_detail(self.data, self.state, self.rendered.bins, w - 1)
        self._lines = [styled(line) for line in
                       (*self.rendered.lines, [Segment(f" {detail}")])]
        self.redraws += 1
        self.refresh()

    def letters(self) -> bool:
        """Colours cannot tell processes apart: NO_COLOR, or 16 colours or fewer (never in
        a screenshot: an SVG has every colour, ui/screenshot.py)."""
        if self.app.no_color or os.environ.get("NO_COLOR"):
            return True
        if getattr(self.app, "svg_colours", False):
            return False
        return self.app.console.color_system in (None, "standard", "windows")

    def on_resize(self) -> None:
        self.rebuild()

    def render_line(self, y: int) -> Strip:
        if y == 0:
            self.painted = self.redraws
        if y < len(self._lines):
            # Padded to the width: a short line (the legend) would otherwise end in the
            # widget's background colour, a dark block in the middle of the chart's row.
            return Strip(self._lines[y]).adjust_cell_length(self.size.width, NULL_STYLE)
        return Strip.blank(self.size.width, NULL_STYLE)


class ReplayTree(TopologyTable):
    """`snumap top`'s topology table as it is, but every segment styled (``styled``): its
    rows end in unstyled padding, which NO_COLOR's filter cannot take. Drop this class once
    topology_view.py styles its padding itself."""

    def render_line(self, y: int) -> Strip:
        strip = super().render_line(y)
        if any(seg.style is None for seg in strip):
            return Strip(styled(list(strip)), strip.cell_length)
        return strip


class ReplayApp(QuietDriverMixin, ReplayKeysMixin, ProcessViewMixin, CounterKeysMixin,
                App[int]):
    TITLE = "snumap replay"
    ENABLE_COMMAND_PALETTE = False
    CSS = """
    #header { height: 2; }
    #main { height: 1fr; }
    #views { height: 1fr; }
    #topology { height: 1fr; }
    #topo-head { height: 1; }
    #goto, #filter { display: none; }
    #too-small { height: 1fr; content-align: center middle; text-align: center; display: none; }
    Screen.-too-narrow #main, Screen.-too-low #main { display: none; }
    Screen.-too-narrow #too-small, Screen.-too-low #too-small { display: block; }
    """
    # As in `snumap top`: below MIN_W x MIN_H the screen gets -too-narrow / -too-low and the
    # CSS above swaps the views for a message.
    # The ignores: Textual declares these two `ClassVar[...] | None`, which is not a valid
    # ClassVar, so mypy takes them for instance variables that a ClassVar may not override
    # (and without the ClassVar ruff's RUF012 objects).
    HORIZONTAL_BREAKPOINTS: ClassVar[list[tuple[int, str]]] = [  # type: ignore[misc]
        (0, "-too-narrow"), (MIN_W, "-wide-enough")]
    VERTICAL_BREAKPOINTS: ClassVar[list[tuple[int, str]]] = [  # type: ignore[misc]
        (0, "-too-low"), (MIN_H, "-high-enough")]

    # keymap.KEYMAP's keys (one map for top and replay: a key means one thing in both).
    BINDINGS: ClassVar[list[BindingType]] = list(bindings("replay"))

    playing: reactive[bool] = reactive(False)
    """The cursor advances by speed x wall time while playing."""

    view: reactive[str] = reactive("gantt")
    """gantt (core-vs-time), topology or heatmap (these two: the samples at the cursor)."""

    def __init__(self, data: ReplayData, speed: float = 1.0) -> None:
        super().__init__()
        safe_screen.install(self)        # no terminal control in a name reaches the screen
        self.data = data
        self.state = GanttState(data.t0, data.t1)
        self.metric_i = 0
        self.cursor_t = data.t0
        self.speed = speed
        self._timer: Timer | None = None
        self._frame: Frame | None = None
        self.line_mode: str | None = None      # the open line: "filter", "search" or None
        self._line_before: tuple[object, ...] = ()     # what escape puts back
        # Set by on_mount: before it there are no widgets to draw into, so a cursor or view
        # set before the app runs is only stored (App.is_mounted is a method that takes a
        # widget, not this flag).
        self._views_up = False      # the samples' Frame at the cursor (tree, heat)

    # ---- layout --------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Static(id="header")
        with Vertical(id="main"), ContentSwitcher(initial=self.view, id="views"):
            yield GanttView(self.data, self.state, id="gantt")
            with Vertical(id="topology"):
                yield Static(id="topo-head")
                yield ReplayTree(self.data.topology, id="tree")
            from snumap_tui.ui.panels import HeatmapPanel
            yield HeatmapPanel(id="heatmap")
        yield ProcessPanel(id="process-view")     # under the chart (p), hidden at start
        yield Static(id="too-small")
        yield Input(placeholder="go to time: seconds from the start (e.g. 12.5), or the wall "
                    "clock (10:42:07.5)", id="goto")
        yield Input(placeholder="only these processes: words of a name, a PID (enter keeps, "
                    "esc cancels)", id="filter", select_on_focus=False)
        yield Footer()

    def on_mount(self) -> None:
        self._views_up = True
        self._focus_view()
        self.query_one("#too-small", Static).update(
            f"Terminal too small.\nsnumap replay needs at least {MIN_W}×{MIN_H}.\n"
            "Enlarge the window, or press q to quit.")
        self.call_after_refresh(self._redraw)
        if self.data.pending and self.data.recording is not None:
            self.run_worker(self._read_rest, thread=True, group="rest", exit_on_error=False)

    def _read_rest(self) -> None:
        """In a thread: the events of the nodes the first screen did not need, then the whole
        job's data in place of the first nodes' (the rows and what the user set stay)."""
        from snumap_tui.ui.replay_data import load_replay

        full = load_replay(self.data.recording)
        if self._views_up:
            self.call_from_thread(self._adopt, full)

    def _adopt(self, full: ReplayData) -> None:
        self.data.adopt(full)
        self._redraw()

    def on_unmount(self) -> None:
        """No drawing after the widgets are gone (a play tick racing the quit)."""
        self._views_up = False
        if self._timer is not None:
            self._timer.stop()
            self._timer = None

    @property
    def too_small(self) -> bool:
        w, h = self.size
        return w < MIN_W or h < MIN_H

    # ---- drawing -------------------------------------------------------------------------------
    def _header(self) -> Text:
        """Two lines; a piece that does not fit is left out whole (never cut to ``│ 3.7``), so
        each line lists its pieces most important first."""
        d, w = self.data, self.size.width
        one: list[tuple[str, str]] = [(" snumap replay ", "bold reverse"), (f" {d.host}", "bold"),
                                      (f" │ {fmt_time(d.t1 - d.t0)}", "")]
        if d.pending:
            one.append((f" │ reading {d.pending} more nodes…", "bold yellow"))
        if d.lost:
            one.append((f" │ {d.lost} lost", "bold red"))
        damaged = getattr(d.recording, "damaged", None)
        if damaged:
            one.append((f" │ damaged: {len(damaged)} part(s) skipped", "bold red"))
        one.append((f" │ {d.header.get('backend') or '?'}", ""))
        start = d.header.get("start_wall_ns")
        if start:
            one.append((" │ " + _dt.datetime.fromtimestamp(start / 1e9, _dt.timezone.utc)
                        .strftime("%Y-%m-%d %H:%M:%S UTC"), ""))
        kernel = d.header.get("kernel") or d.topology.meta.get("OSRelease")
        if kernel:
            one.append((f" │ Linux {kernel}", ""))
        two: list[tuple[str, str]] = [
            (f" ▶ {self.speed:g}x " if self.playing else " ‖ paused ",
             "bold green" if self.playing else "bold yellow"),
            (f" t={self._at(self.cursor_t)}", "")]
        if self.view == "gantt":
            two.append((f" │ span {fmt_time(self.state.span)}", ""))
            if self.state.only_key is not None:
                k = self.state.only_key          # by a counter figure: a step of its scale
                only = level_name(d, self.state, k) if region_on(d, self.state) else \
                    d.key_name(self.state.mode, k)
                two.append((f" │ only {only}", "bold"))
            if self.state.filter_text:
                none = self.state.only_tids is not None and not len(self.state.only_tids)
                two.append((f" │ filter '{self.state.filter_text}'"
                            + (": no match" if none else ""), "bold yellow"))
            by = region_levels(d, self.state) if region_on(d, self.state) else None
            two.append((f" │ by {self.state.mode}" + (f" {by[1].name}" if by else ""), ""))
        elif self._frame is None:
            two.append((" │ no samples recorded here: n/a", "bold magenta"))
        else:
            f = self._frame
            a, b = fmt_time(f.t_ns - f.dt_s * 1e9 - d.t0), fmt_time(f.t_ns - d.t0)
            two.append((f" │ sample {a}–{b}", ""))
            two.append((f" │ {self.metric_view().title}", ""))
        if d.approximate:
            two.append((" │ /proc polling: coarse, approximate", "bold magenta"))
        wall = self._wall(self.cursor_t)
        if wall:
            two.append((f" │ {wall} UTC", ""))
        t = fit_pieces(one, w)
        t.append("\n")
        t.append_text(fit_pieces(two, w))
        return t

    def _at(self, t: int) -> str:
        """The cursor's time with the digits one column of the chart needs."""
        col_ns = self.state.span // max(1, self.span_cols()) if self._views_up else 10 ** 6
        return resolution_label(t - self.data.t0, max(1, col_ns))

    def _wall(self, t: int) -> str | None:
        off = self.wall_offset()
        return None if off is None else fmt_wall(off + t - self.data.t0, 3)

    def _sync_cursor(self) -> None:
        st = self.state
        cols = self.span_cols()
        st.sel_col = st.col_of(self.cursor_t, cols)
        self.query_one(GanttView).cursor_t = self.cursor_t

    def _redraw(self) -> None:
        if not self._views_up:
            return
        if self.view != "gantt":
            self._frame = self.frame_at(self.cursor_t)
        self.query_one("#header", Static).update(self._header())
        if self.too_small:
            return
        if self.view == "gantt":
            self._sync_cursor()
            self.query_one(GanttView).rebuild()
            self.draw_process_view(self.span_cols())
        elif self.view == "topology":
            self._draw_head()
            self.query_one(TopologyTable).set_frame(self._frame)
        else:
            from snumap_tui.ui.panels import HeatmapPanel

            self.query_one(HeatmapPanel).show(self.data.topology, self._frame,
                                              self.metric_view())

    def _draw_head(self) -> None:
        """The tree's column heads, with the rows it shows when it is longer than its view."""
        tree = self.query_one(TopologyTable)
        self.query_one("#topo-head", Static).update(header_text(self.size.width, tree.span))

    def on_topology_table_scrolled(self, message: TopologyTable.Scrolled) -> None:
        if self._views_up and self.view == "topology" and not self.too_small:
            self._draw_head()

    def frame_at(self, t: int) -> Frame | None:
        """The Frame at the recorded sample after ``t``: each of its sources against its own
        previous read, and a source it did not read over the interval between its reads
        around it (None without samples)."""
        rec = self.data.recording
        if rec is None or not hasattr(rec, "sample_times"):
            return None
        times = rec.sample_times
        if len(times) < 2:
            return None
        import numpy as np

        from snumap_tui.store.series import frame_around

        i = int(np.clip(np.searchsorted(times, t, "right"), 1, len(times) - 1))
        return frame_around(rec, times, i, self.data.topology)

    # ---- cursor and view -----------------------------------------------------------------------
    def span_cols(self) -> int:
        gv = self.query_one(GanttView)
        return layout(self.data, gv.size.width or 80, max(1, gv.size.height - 1)).cols

    def set_cursor(self, t: int) -> None:
        d, st = self.data, self.state
        self.cursor_t = int(min(max(t, d.t0), d.t1 - 1))
        if not st.t0 <= self.cursor_t < st.t1:          # keep the cursor on screen
            span = st.span
            st.t0 = max(d.t0, min(self.cursor_t - span // 2, d.t1 - span))
            st.t1 = st.t0 + span
        self._redraw()

    def action_step(self, n: int) -> None:
        """One column left or right: the cursor goes to that column's centre."""
        st = self.state
        col_ns = st.span / max(1, self.span_cols())
        col = int((self.cursor_t - st.t0) // col_ns) + n
        self.set_cursor(int(st.t0 + (col + 0.5) * col_ns))

    def action_jump(self, where: int) -> None:
        self.set_cursor(self.data.t0 if where == 0 else self.data.t1 - 1)

    def action_play(self) -> None:
        """space: play or pause; at the end of the recording play starts again from the
        beginning (as a player does)."""
        if not self.playing and self.cursor_t >= self.data.t1 - 1:
            self.set_cursor(self.data.t0)
        self.playing = not self.playing

    def watch_playing(self, playing: bool) -> None:
        if playing and self._timer is None:
            self._timer = self.set_interval(TICK_S, self._tick)
        elif not playing and self._timer is not None:
            self._timer.stop()
            self._timer = None
        self._redraw()

    def _tick(self) -> None:
        nxt = self.cursor_t + int(self.speed * TICK_S * 1e9)
        if nxt >= self.data.t1:
            self.playing = False
            nxt = self.data.t1 - 1
        self.set_cursor(nxt)

    def action_slower(self) -> None:
        self.action_speed(-1)

    def action_faster(self) -> None:
        self.action_speed(1)

    def action_speed(self, step: int) -> None:
        i = min(range(len(SPEEDS)), key=lambda k: abs(SPEEDS[k] - self.speed))
        self.speed = SPEEDS[max(0, min(len(SPEEDS) - 1, i + step))]
        self._redraw()

    def zoom(self, factor: float) -> None:
        d, st = self.data, self.state
        span = int(min(max(st.span * factor, MIN_SPAN_NS), d.t1 - d.t0))
        frac = (self.cursor_t - st.t0) / st.span
        t0 = int(self.cursor_t - frac * span)
        st.t0 = max(d.t0, min(t0, d.t1 - span))
        st.t1 = st.t0 + span
        self._redraw()

    def action_zoom(self, factor: float) -> None:
        self.zoom(factor)

    def action_zoom_all(self) -> None:
        self.state.t0, self.state.t1 = self.data.t0, self.data.t1
        self._redraw()

    def pan(self, frac: float) -> None:
        d, st = self.data, self.state
        span = st.span
        st.t0 = int(max(d.t0, min(st.t0 + frac * span, d.t1 - span)))
        st.t1 = st.t0 + span
        self.cursor_t = int(min(max(self.cursor_t, st.t0), st.t1 - 1))
        self._redraw()

    def action_pan(self, frac: float) -> None:
        self.pan(frac)

    def action_row(self, n: int) -> None:
        st = self.state
        gv = self.query_one(GanttView)
        rows = layout(self.data, gv.size.width or 80, max(1, gv.size.height - 1)).rows
        st.sel_row = max(0, min(len(self.data.labels) - 1, st.sel_row + n))
        if st.sel_row < st.row0:
            st.row0 = st.sel_row
        elif st.sel_row >= st.row0 + rows:
            st.row0 = st.sel_row - rows + 1
        self._redraw()

    def action_marker(self, step: int) -> None:
        """The cursor to the next (previous) marker: ``mark`` lines, phase begins, the
        command's start and exit."""
        ticks = self.data.ticks         # sorted anew at each read: once here
        half = max(1, self.state.span // max(1, self.span_cols())) // 2
        if step > 0:
            hit = next((m for m in ticks if m[0] > self.cursor_t + half), None)
        else:
            hit = next((m for m in reversed(ticks) if m[0] < self.cursor_t - half), None)
        if hit is None:
            self.notify("no marker " + ("after" if step > 0 else "before") + " the cursor"
                        if ticks else "this recording has no markers", severity="warning")
            return
        self.set_cursor(hit[0])
        # The marker's name is the traced program's text: not markup (ticks escaped it).
        self.notify(f"marker at {fmt_time(hit[0] - self.data.t0)}: {hit[1]}", timeout=3,
                    markup=False)

    def action_colour(self) -> None:
        modes = self.data.modes
        cur = modes.index(self.state.mode) if self.state.mode in modes else -1
        self.state.mode = modes[(cur + 1) % len(modes)]
        self.state.only_key = None
        self._redraw()

    def action_fold_node(self, every: bool = False) -> None:
        """A job of several nodes: fold the selected row's node into one row (or open it);
        N: every node, like the selected one."""
        labels = self.data.labels
        if not labels or labels[0].node is None:
            return
        node = labels[min(self.state.sel_row, len(labels) - 1)].node
        on = node not in self.data.folded
        self.data.fold(None if every else node, fold=on)
        new = self.data.labels
        first = next((i for i, lab in enumerate(new) if lab.node == node), 0)
        self.state.sel_row = first
        self.state.row0 = min(self.state.row0, first)
        self._redraw()

    def rendered_bins(self) -> GanttBins | None:
        r = self.query_one(GanttView).rendered
        return r.bins if r is not None else None

    def _focus_view(self) -> None:
        views: dict[str, type[Widget]] = {"gantt": GanttView, "topology": TopologyTable}
        focus = views.get(self.view)
        if focus is not None:
            self.query_one(focus).focus()

    def action_next_view(self) -> None:
        if isinstance(self.focused, Input):       # tab is a priority key: not in a line
            return
        self.view = VIEWS[(VIEWS.index(self.view) + 1) % len(VIEWS)]

    def action_view(self, view: str) -> None:
        self.view = view

    def watch_view(self, view: str) -> None:
        if not self._views_up:
            return
        self.query_one("#views", ContentSwitcher).current = view
        self._focus_view()
        self._redraw()

    def action_help(self) -> None:
        self.push_screen(ReplayHelpScreen())

    def on_resize(self) -> None:
        self.call_after_refresh(self._redraw)


def parse_time(text: str) -> float:
    """'12.5', '12.5s', '250ms', '1:02.5' (minutes:seconds) -> seconds from the start, typed
    as every duration is (snumap_tui/durations.py); ValueError when it is not one."""
    from snumap_tui.durations import parse_duration
    from snumap_tui.errors import SnumapError

    try:
        return parse_duration(text, positive=False)
    except SnumapError as exc:
        raise ValueError(str(exc)) from None
