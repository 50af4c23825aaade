"""`snumap replay`'s process view (key ``p``): under the core-vs-time chart, one process's
threads (the share of each column each ran), under each thread its counter figure per column
(IPC, or a recorded event's rate: ``X`` cycles; ui/counter_rows.py), and its memory per NUMA
node over the same columns, the time cursor's column highlighted and its values in the first
line.

The process is the one running in the chart's selected cell, else the last one shown, else
the traced process that ran longest. The data is analysis/process_view.py's; this module only
draws it. ``ProcessViewMixin`` gives the app its action and the hook its redraw calls.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from rich.segment import Segment
from rich.style import Style
from textual.app import App
from textual.strip import Strip
from textual.widget import Widget

from snumap_tui.analysis.counter_figures import Figure, ThreadSeries, columns, total_columns
from snumap_tui.analysis.memory import node_kinds, timelines, topology_nodes
from snumap_tui.analysis.process_view import (
    RSS_NODE,
    ProcessStrips,
    at_cursor,
    busiest_process,
    strips,
    thread_intervals,
)
from snumap_tui.textsafe import safe_text
from snumap_tui.ui import counter_rows
from snumap_tui.ui.gantt import AXIS_STYLE, CURSOR, LABEL_STYLES, LABEL_W
from snumap_tui.ui.metricspec import fmt_bytes
from snumap_tui.ui.palette import level_glyph

if TYPE_CHECKING:
    from snumap_tui.ui.gantt import GanttState
    from snumap_tui.ui.replay_data import ReplayData

HEIGHT = 12
THREAD_STYLE = Style(color="green3")
MEMORY_STYLE = Style(color="dodger_blue1")
NONE_STYLE = Style(color="grey35")
PLAIN = Style()


def _row(label: str, values: np.ndarray, full: float, style: Style, cursor: int,
         label_style: Style) -> list[Segment]:
    segs = [Segment(label.ljust(LABEL_W)[:LABEL_W], label_style), Segment(" ", PLAIN)]
    for c, v in enumerate(values.tolist()):
        if math.isnan(v):                                    # no sample yet
            glyph, st = "·", NONE_STYLE
        else:
            glyph, st = (level_glyph(v / full) if full > 0 else " "), style
            if v > 0 and glyph == " ":
                glyph = level_glyph(1e-9 + 1 / 8)           # ran a little: the lowest block
        segs.append(Segment(glyph, st + CURSOR if c == cursor else st))
    return segs


@dataclass
class Counters:
    """The counter rows' inputs: the threads' counts and the chosen figure (None: n/a and
    ``why``)."""

    series: ThreadSeries | None
    fig: Figure | None
    why: str = ""


def _counter_rows(ps: ProcessStrips, tids: list[int], c: Counters, cursor: int
                  ) -> tuple[dict[int, list[Segment]], str]:
    """Per thread its figure's row over the columns, labelled with the value at the cursor;
    and the header's piece (the process's figure at the cursor, or n/a and why)."""
    if c.series is None or c.fig is None:
        return {}, f"counters: n/a ({c.why})"
    fig = c.fig
    edges = ps.edges[cursor:cursor + 2]
    total = float(total_columns(c.series, list(ps.threads), edges, fig)[0])
    if fig.share:
        # A time event (task-clock) counts each thread's time on a PU: what its CPU row
        # already draws, so no second row of the same; the process's at the cursor in PUs,
        # as the CPU figure is (a share of one column over several threads passed 100 %).
        what = "n/a" if not math.isfinite(total) else f"{total:.2f} PUs"
        return {}, (f"{fig.name.removesuffix(' share')} at cursor {what} "
                    "(the CPU rows; X: next)")
    vals = {t: columns(c.series, t, ps.edges, fig) for t in tids}
    finite = [v[np.isfinite(v)] for v in vals.values()]
    top = 1.0 if fig.share else max((float(f.max()) for f in finite if len(f)), default=0.0)
    rows = {}
    for t, v in vals.items():
        val = counter_rows.fmt(float(v[cursor]), fig)
        label = f"{fig.name[:max(1, LABEL_W - 3 - len(val))]} {val}".rjust(LABEL_W - 1)
        rows[t] = [Segment(label[:LABEL_W].ljust(LABEL_W), counter_rows.COUNTER_STYLE),
                   Segment(" ", PLAIN),
                   *(Segment(ch, st) for ch, st in counter_rows.heat_row(v, top, cursor))]
    return rows, f"{fig.name} at cursor {counter_rows.fmt(total, fig)} (X: next)"


def draw(data: ReplayData, ps: ProcessStrips, cursor_t: int, width: int, height: int,
         comm: str, counters: Counters | None = None) -> list[list[Segment]]:
    """The view's lines: a header, the busiest threads (each with its counter row when the
    recording has counters), the memory rows."""
    cols = len(ps.edges) - 1
    cursor = int(np.clip(np.searchsorted(ps.edges, cursor_t, "right") - 1, 0, cols - 1))
    cpu, mem = at_cursor(ps, cursor_t)
    kinds = data.cache.setdefault("node_kinds", node_kinds(data.topology))
    table = getattr(data.recording, "nodes", None)       # a merged job: node:pid, local tids
    who = table.label(ps.pid) if table is not None else str(ps.pid)
    parts = [f"process {who} {comm}", f"at cursor: {cpu:.2f} PUs"]
    busiest = sorted(ps.threads, key=lambda t: -float(ps.threads[t].sum()))
    mem_rows = [n for n in sorted(ps.memory) if n != RSS_NODE] or list(ps.memory)
    room = max(0, height - 1 - len(mem_rows))
    crow, cpart = _counter_rows(ps, busiest[:room], counters or Counters(None, None, "?"),
                                cursor)
    per = 2 if crow else 1                                 # a thread's rows
    parts.append(cpart)
    if RSS_NODE in mem:
        parts.append(f"RSS {fmt_bytes(mem[RSS_NODE])}")
    parts += [f"N{n} {kinds.get(n, 'DRAM')} {fmt_bytes(b)}" for n, b in sorted(mem.items())
              if n != RSS_NODE]
    if not ps.memory:
        parts.append("memory: n/a (not in this recording)")
    head = " │ ".join(parts) + "   (p: hide)"
    lines = [[Segment(safe_text(head)[:width].ljust(width), AXIS_STYLE + Style(bold=True))]]
    shown = room // per
    for i, tid in enumerate(busiest[:shown]):
        name = safe_text(data.names.get(tid, "?"))
        local = table.split_tid(tid)[1] if table is not None else tid
        lines.append(_row(f"{local} {name}", ps.threads[tid], 1.0, THREAD_STYLE, cursor,
                          LABEL_STYLES[i % 2]))
        if tid in crow:
            lines.append(crow[tid])
    if len(busiest) > shown and shown:
        lines[-per][0] = Segment(f"+{len(busiest) - shown + 1} threads".ljust(LABEL_W)[:LABEL_W],
                                 LABEL_STYLES[0])
    for node in mem_rows:
        label = "RSS" if node == RSS_NODE else f"N{node} {kinds.get(node, 'DRAM')}"
        lines.append(_row(label, ps.memory[node], ps.peak.get(node, 0.0), MEMORY_STYLE,
                          cursor, AXIS_STYLE))
    return lines[:height]


class ProcessPanel(Widget):
    """The drawn lines (the app computes them on each redraw)."""

    DEFAULT_CSS = (f"ProcessPanel {{ height: {HEIGHT}; display: none; }}\n"
                   "Screen.-too-narrow ProcessPanel, Screen.-too-low ProcessPanel "
                   "{ display: none; }")

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.lines: list[list[Segment]] = []
        self.pid: int | None = None

    def on_resize(self) -> None:
        # The chart's columns changed with the terminal: draw the rows again at its width
        # (the app's own resize redraw can run before the chart has its new size).
        redraw = getattr(self.app, "_redraw", None)
        if self.display and redraw is not None:
            self.app.call_after_refresh(redraw)

    def render_line(self, y: int) -> Strip:
        if y < len(self.lines):
            return Strip(self.lines[y]).adjust_cell_length(self.size.width, PLAIN)
        return Strip.blank(self.size.width, PLAIN)


def selected_pid(data: ReplayData, state: GanttState, t: int) -> int | None:
    """The process running on the selected row at time t (None: idle or untraced)."""
    iv = data.intervals
    r = int(data.row_iv[state.sel_row]) if len(data.row_iv) > state.sel_row else -1
    if r < 0 or r >= len(iv.start):
        return None
    s, e, tid = iv.start[r], iv.end[r], iv.tid[r]
    i = int(np.searchsorted(s, t, "right")) - 1
    if i < 0 or t >= int(e[i]):
        return None
    pid = int(iv.pids(np.array([int(tid[i])], dtype=np.int64))[0])
    return pid if pid > 0 else None


class ProcessViewMixin:
    """``action_process_view`` (key p) and ``draw_process_view()`` for ReplayApp."""

    if TYPE_CHECKING:
        data: ReplayData
        state: GanttState
        cursor_t: int
        view: str

        def _redraw(self) -> None: ...

    def _panel(self) -> ProcessPanel:
        return cast("App[Any]", self).query_one(ProcessPanel)

    def action_process_view(self) -> None:
        panel = self._panel()
        panel.display = not panel.display
        if panel.display and self.view != "gantt":
            self.view = "gantt"
        self._redraw()

    def draw_process_view(self, cols: int) -> None:
        panel = self._panel()
        if not panel.display or self.view != "gantt":
            return
        d, st = self.data, self.state
        pid = selected_pid(d, st, self.cursor_t) or panel.pid or busiest_process(d.intervals)
        if pid is None:
            panel.lines = [[Segment("process view: no traced process in this recording",
                                    AXIS_STYLE)]]
            panel.refresh()
            return
        panel.pid = pid
        key = ("process view", pid)
        threads = d.cache.get(key)
        if threads is None:
            threads = d.cache[key] = thread_intervals(d.intervals, pid)
        mem = d.cache.get("process memory")
        if mem is None:
            rec = d.recording
            rows = rec.process_memory() if rec is not None and hasattr(
                rec, "process_memory") else None
            mem = d.cache["process memory"] = timelines(
                rows, topology_nodes(rec.topology)) if rows is not None else {}
        ps = strips(d.intervals, pid, st.t0, st.t1, cols, mem.get(pid), threads)
        # Named by its main thread, as ps does; by a thread of it when that never ran.
        comm = d.names.get(pid) or next((d.names[t] for t in sorted(threads)
                                         if t in d.names), "?")
        counters = Counters(counter_rows.series(d), counter_rows.figure(d, st),
                            counter_rows.why_none(d))
        panel.lines = draw(d, ps, self.cursor_t, panel.size.width or LABEL_W + 1 + cols,
                           panel.size.height or HEIGHT, comm, counters)
        panel.refresh()
