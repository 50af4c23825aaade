"""`snumap replay`'s keys that `snumap top` shares (keymap.py): the typed filter (``/``) and
search (F3), both as you type, the metric (``m``, F2), escape; and replay's own: only the
selected cell's process (enter), go to a time (``:``), the wall-clock axis (``w``).

A mixin of ``ReplayApp`` (replay.py holds the views, the cursor and the drawing).
"""

from __future__ import annotations

import datetime as _dt
from typing import TYPE_CHECKING, Any, cast

from textual.app import App
from textual.widgets import Input

from snumap_tui.ui.gantt import layout
from snumap_tui.ui.metricspec import MetricView, heatmap_metrics, view_for
from snumap_tui.ui.replay_data import matching_tids, next_run
from snumap_tui.ui.screens import metric_picker
from snumap_tui.ui.topology_view import TopologyTable

if TYPE_CHECKING:
    from snumap_tui.model.frame import Frame
    from snumap_tui.ui.gantt import GanttState
    from snumap_tui.ui.replay_data import ReplayData

# The line under the chart, by what it is open for (``line_mode``).
LINE_HINTS = {
    "filter": "only these processes, as you type: words of a name, a PID (enter keeps, "
              "esc cancels)",
    "search": "find a process, as you type: the cursor to its next run (F3: the one after; "
              "enter keeps, esc goes back)",
}


class ReplayKeysMixin:
    """Needs the app's ``data``, ``state``, ``view``, ``_frame``, ``metric_i``, ``_redraw``,
    ``_focus_view``, ``set_cursor`` and the gantt widget's ``rendered``."""

    if TYPE_CHECKING:
        data: ReplayData
        state: GanttState
        view: str
        _frame: Frame | None
        metric_i: int
        cursor_t: int
        line_mode: str | None
        _line_before: tuple[object, ...]

        def span_cols(self) -> int: ...

        def zoom(self, factor: float) -> None: ...

        def _redraw(self) -> None: ...

        def _focus_view(self) -> None: ...

        def set_cursor(self, t: int) -> None: ...

        def rendered_bins(self) -> Any: ...

    @property
    def _as_app(self) -> App[Any]:
        return cast("App[Any]", self)

    # ---- metric (heatmap) ----------------------------------------------------------------------
    def metric_view(self) -> MetricView:
        ms = heatmap_metrics(self._frame.values) if self._frame is not None else []
        return ms[self.metric_i % len(ms)] if ms else view_for("util")

    def action_metric(self, step: int) -> None:
        self.metric_i += step               # the view stays: its metric changes
        self._redraw()

    def action_pick_metric(self) -> None:
        values = self._frame.values if self._frame is not None else {}
        self._as_app.push_screen(metric_picker(values, self.metric_view().key),
                                 self._picked_metric)

    def _picked_metric(self, key: str | None) -> None:
        keys = [m.key for m in heatmap_metrics(self._frame.values)] if self._frame else []
        if key in keys:
            self.metric_i = keys.index(key)
            self._redraw()

    def action_detail(self, step: int) -> None:
        """+ -: the topology view's tree a level deeper or shallower; elsewhere the time
        zoomed in or out at the cursor."""
        if self.view == "topology":
            self._as_app.query_one(TopologyTable).fold_level(step)
        else:
            self.zoom(0.5 if step > 0 else 2.0)

    # ---- the typed line: filter (/ F4) and search (F3), both as you type ---------------------
    def _open_line(self, mode: str, value: str) -> None:
        box = self._as_app.query_one("#filter", Input)
        self._as_app.query_one("#goto", Input).display = False
        self.line_mode = mode
        box.placeholder = LINE_HINTS[mode]
        box.display = True
        box.border_title = None
        box.value = value
        box.cursor_position = len(value)
        box.focus()

    def action_filter(self) -> None:
        """``/``: a typed filter, as in top: words of a process or thread name, a PID; the
        chart follows each key."""
        if self.line_mode != "filter":
            self._line_before = (self.state.filter_text,)
            self._open_line("filter", self.state.filter_text)

    def action_search(self) -> None:
        """F3: the cursor to the next run of a process matching what is typed, from where it
        was when the line opened; F3 while the line is open: the run after the cursor."""
        if self.line_mode == "search":
            self._search(self._as_app.query_one("#filter", Input).value, after=True)
            return
        self._line_before = (self.cursor_t, self.state.sel_row, self.state.row0)
        self._open_line("search", "")

    def on_input_changed(self, message: Input.Changed) -> None:
        if message.input.id != "filter" or self.line_mode is None:
            return
        if self.line_mode == "filter":
            if message.value.strip() != self.state.filter_text:
                self.apply_filter(message.value)
        else:
            self._search(message.value, after=False)

    def _search(self, text: str, after: bool) -> None:
        box = self._as_app.query_one("#filter", Input)
        query = text.strip()
        if not query:
            box.border_title = None
            return
        if after:       # past the cursor's column, so F3 moves on to another column's run
            start = self.cursor_t + max(1, self.state.span // max(1, self.span_cols()))
        else:
            start = int(cast("int", self._line_before[0]))
        hit = next_run(self.data, matching_tids(self.data, query), start, running=not after)
        if hit is None:
            box.border_title = (f"no run of '{query}' after "
                                + ("the cursor" if after else "where the search began"))
            return
        box.border_title = None
        t, row = hit
        self._select_row(row)
        self.set_cursor(t)

    def _select_row(self, row: int) -> None:
        """The chart's selected row, scrolled into view."""
        st = self.state
        gv = self._as_app.query_one("#gantt")
        rows = layout(self.data, gv.size.width or 80, max(1, gv.size.height - 1)).rows
        st.sel_row = row
        if not st.row0 <= row < st.row0 + rows:
            st.row0 = max(0, row - rows // 2)

    def _close_line(self) -> None:
        self.line_mode = None
        self._as_app.query_one("#filter", Input).display = False
        self._focus_view()

    def apply_filter(self, text: str) -> None:
        text = text.strip()
        self.state.filter_text = text
        self.state.only_tids = matching_tids(self.data, text) if text else None
        self._redraw()

    def action_only_selected(self) -> None:
        """enter: only the process (thread, group) that ran most in the selected cell."""
        bins = self.rendered_bins()
        if bins is None:
            return
        i = self.state.sel_row - self.state.row0
        if 0 <= i < bins.key.shape[0]:
            k = int(bins.key[i, self.state.sel_col])
            if k >= 0:
                self.state.only_key = k
                self._redraw()
                return
        self._as_app.notify("select a busy cell first", severity="warning")

    def action_clear_filter(self) -> None:
        """escape: cancel an open line (the filter, or the cursor, as before it opened; the
        go-to line closes); else drop the filter and the selection's focus."""
        mode, before = self.line_mode, self._line_before
        if mode is not None:
            self._close_line()
            if mode == "filter":
                self.apply_filter(str(before[0]))
            else:
                t, self.state.sel_row, self.state.row0 = (int(cast("int", v)) for v in before)
                self.set_cursor(t)
            return
        goto = self._as_app.query_one("#goto", Input)
        if goto.display:
            goto.display = False
            self._focus_view()
            return
        self.state.only_key = None
        self.state.only_tids = None
        self.state.filter_text = ""
        self._redraw()

    # ---- time ----------------------------------------------------------------------------------
    def wall_offset(self) -> int | None:
        """Wall-clock ns of the recording's start (t0), None when the file does not say."""
        h = self.data.header
        if not h.get("start_wall_ns") or h.get("start_monotonic_ns") is None:
            return None
        return int(h["start_wall_ns"]) + self.data.t0 - int(h["start_monotonic_ns"])

    def action_wall_clock(self) -> None:
        if self.state.wall_ns is not None:
            self.state.wall_ns = None
        else:
            self.state.wall_ns = self.wall_offset()
            if self.state.wall_ns is None:
                self._as_app.notify("this recording has no wall-clock start",
                                    severity="warning")
        self._redraw()

    def action_goto(self) -> None:
        if self.line_mode is not None:
            self._close_line()
        goto = self._as_app.query_one("#goto", Input)
        goto.display = True
        goto.border_title = None
        goto.value = ""
        goto.focus()

    def on_input_submitted(self, message: Input.Submitted) -> None:
        """The filter applies; a time goes there; anything else keeps the go-to line open,
        says why, and how to write a time."""
        if message.input.id == "filter":
            mode = self.line_mode
            self._close_line()
            if mode == "filter":
                self.apply_filter(message.value)
            return
        goto = self._as_app.query_one("#goto", Input)
        try:
            t = self.time_from_text(message.value)
        except ValueError:
            goto.border_title = (f"not a time: {message.value.strip()[:20]!r}; "
                                 "try 12.5, 250ms, 1:02.5 or 10:42:07 (escape: close)")
            goto.focus()
            return
        goto.border_title = None
        goto.display = False
        self._focus_view()
        self.set_cursor(t)

    def time_from_text(self, text: str) -> int:
        """A time typed into the go-to line, as ns on the recording's clock: seconds from the
        start (see ``parse_time``), or a wall-clock time of day ``HH:MM:SS[.f]`` (UTC, the
        day of the recording)."""
        from snumap_tui.ui.replay import parse_time

        s = text.strip()
        if s.count(":") == 2:
            off = self.wall_offset()
            if off is None:
                raise ValueError(text)
            h, m, sec = s.split(":")
            start = _dt.datetime.fromtimestamp(off / 1e9, _dt.timezone.utc)
            day = start.replace(hour=0, minute=0, second=0, microsecond=0)
            wall = day.timestamp() * 1e9 + (int(h) * 3600 + int(m) * 60 + float(sec)) * 1e9
            rel = int(wall - off)
            if not 0 <= rel <= self.data.t1 - self.data.t0:
                raise ValueError(text)
            return self.data.t0 + rel
        return self.data.t0 + int(parse_time(s) * 1e9)
