"""The header, the heatmap panel, the history sparkline and the process panel.

Each takes data (a Frame, a Topology, TaskRows) through a method, never a sampler: the live app
and replay drive them the same way. Text building is in pure functions next to each widget.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from itertools import groupby
from typing import Any

from rich.console import Group
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Input, Static

from snumap_tui.model.frame import Frame, TaskRow
from snumap_tui.sources.base import SourceStatus
from snumap_tui.textsafe import safe_text
from snumap_tui.topology.model import Topology
from snumap_tui.ui.backdrop import Backdrop, TextLines
from snumap_tui.ui.heatmap import Heatmap
from snumap_tui.ui.hostinfo import HostInfo, format_uptime, source_marks
from snumap_tui.ui.io_rows import strip_lines
from snumap_tui.ui.metricspec import MetricView, fmt_bytes
from snumap_tui.ui.palette import BAR_STYLES, NA_STYLE, bar, scale_style
from snumap_tui.ui.process_table import SORT_NAME, ProcessTable
from snumap_tui.ui.processes import GroupRow, affinity_label
from snumap_tui.ui.textfit import cut_words, fit_pieces, truncate_words
from snumap_tui.ui.tree_rows import node_memory

OK_STYLE = Style(color="green", bold=True)
BAD_STYLE = Style(color="red")


def header_lines(host: HostInfo, sources: dict[str, SourceStatus], *, paused: bool,
                 interval_s: float, metric: MetricView, view: str, width: int,
                 origin: tuple[str, str] | None = None, static: bool = False) -> Text:
    """Two lines: the machine, then what is live and what is not.

    ``origin`` says the numbers are not this machine's live ones: ("fsroot", DIR) for a
    gathered tree (``static``: its counters did not move, a snapshot) or ("topology", NAME)
    for another machine's tree (--topology/--synthetic: no live data at all)."""
    # Whole pieces or none (at 80 columns the model name was cut to "Intel (R) Xeo"): the
    # CPU model, the longest, is shortened at a word instead when it is what does not fit.
    # The machine's own strings (a tree or file may carry any): escaped (textsafe).
    host = replace(host, host=safe_text(host.host), kernel=safe_text(host.kernel),
                   cpu_model=safe_text(host.cpu_model))
    kernel = f" │ {'Linux ' if width >= 100 else ''}{host.kernel}"
    rest = []
    if host.uptime_s is not None:
        rest.append(f" │ up {format_uptime(host.uptime_s)}")
    if host.load is not None:
        rest.append(" │ load " + " ".join(f"{x:.2f}" for x in host.load))
    fixed = len(" snumap top ") + len(f" {host.host}") + len(kernel) + sum(map(len, rest))
    model = cut_words(f" │ {host.cpu_model}", max(0, width - fixed))
    pieces = [(" snumap top ", "bold reverse"), (f" {host.host}", "bold"), (kernel, ""),
              *([(model, "")] if len(model) > 4 else []), *((r, "") for r in rest)]
    t = fit_pieces(pieces, width)
    t.append("\n")
    line2 = Text()
    kind, name = origin or ("live", "")
    if kind == "topology":
        line2.append(cut_words(f" ■ topology of {name} — no live data: not this machine",
                               width - 4) + " ", style="bold yellow")
        line2.append("(i)", style="italic")
        truncate_words(line2, width)
        t.append_text(line2)
        return t
    if paused:
        line2.append(" ‖ PAUSED ", style="bold yellow")
    elif kind == "demo":
        line2.append(f" ■ demo load on {name} ", style="bold yellow")
    elif kind == "fsroot" and static:
        line2.append(f" ■ static snapshot of {name} ", style="bold yellow")
    elif kind == "fsroot":
        line2.append(f" ▶ tree {name} ", style="bold green")
    else:
        line2.append(" ▶ live ", style="bold green")
    marks = source_marks(sources)
    # The sources summary is what must fit at 80 columns: compact marks ("●proc ○PMU"), and
    # the view name only when there is room.
    mark_len = sum(len(n) + 2 for n, _, _ in marks) + 4
    snap = kind == "fsroot" and static
    head = "│ " if snap else f" {interval_s:g}s │ {view} │ "
    tail = f"{metric.title} │ "
    if len(line2) + len(head) + len(tail) + mark_len > width:
        head = "│ " if snap else f" {interval_s:g}s │ "
    if snap and len(line2) + len(head) + len(tail) + mark_len > width:
        tail = ""                       # the snapshot's name says more than the metric
    line2.append(head + tail)
    if not sources:
        line2.append("sources: waiting for the first sample", style=NA_STYLE)
    for n, ok, _ in marks:
        line2.append("●" if ok else "○", style=OK_STYLE if ok else BAD_STYLE)
        line2.append(_SHORT.get(n, n) + " ", style="" if ok else NA_STYLE)
    if any(not ok for _, ok, _ in marks):
        line2.append("i:why", style="italic")
    truncate_words(line2, width)
    t.append_text(line2)
    return t


_SHORT = {"procstat": "proc"}


def spark_title(label: str, view: MetricView, history: Sequence[float | None],
                width: int) -> Text:
    """``Package 0 · CPU % over the last 120 samples  now 92%  min 3%  max 99%``."""
    vals = [v for v in history if v is not None]
    t = Text(f" {label}", style="bold")
    t.append(f" · {view.title} over the last {len(history)} samples  ")
    if vals:
        t.append(f"now {view.fmt(history[-1], 0).strip()}  min {view.fmt(min(vals), 0).strip()}"
                 f"  max {view.fmt(max(vals), 0).strip()}")
    else:
        t.append("not available here", style=NA_STYLE)
    t.truncate(width)
    return t


def spark_bars(glyphs: str) -> list[Segment]:
    """The history line under the title: a space, then one segment per run of equal blocks
    in the block's colour (a Text with a span per run cost Rich's span walk at every frame,
    for a line that is nothing but runs)."""
    out = [Segment(" ")]
    for ch, run in groupby(glyphs):
        n = len(list(run))
        out.append(Segment(ch * n, BAR_STYLES.get(ch)))
    return out


class HeatmapPanel(VerticalScroll):
    """Scrolls the heatmap when even 1-column cells do not fit."""

    DEFAULT_CSS = """
    HeatmapPanel { height: 1fr; }
    HeatmapPanel > Static { width: 100%; }
    """

    def compose(self) -> ComposeResult:
        yield Static(id="heatmap-body")

    def show(self, topo: Topology, frame: Frame | None, view: MetricView,
             highlight: Sequence[int] = (), mark: int | None = None) -> None:
        values = None
        if frame is not None:
            from snumap_tui.ui.metricspec import resolve

            name = resolve(frame.values, view.key)
            values = frame.values.get(name) if name else None
        # Before its first layout (the view was just switched to) the panel has no size yet:
        # the screen less the header and footer is close; on_resize lays it out again.
        height = self.size.height or (self.app.size.height - 3 if self.is_attached else 21)
        self._last = (topo, frame, view, tuple(highlight), mark)
        # The I/O strip under the map: a line per NUMA node with devices (ui/io_rows.py).
        width = self.size.width or (self.app.size.width if self.is_attached else 80)
        strip = strip_lines(frame, topo, max(20, width - 1))[:max(0, height // 4)]
        heat = Heatmap(topo, values, view, height=max(4, height - len(strip)),
                       highlight=highlight, mark=mark, mem=lambda node: node_memory(frame, node))
        body: Any = heat if not strip else Group(heat, Text("\n".join(strip)))
        self.query_one("#heatmap-body", Static).update(body)

    def on_resize(self) -> None:
        last = getattr(self, "_last", None)
        if last is not None:
            self.show(*last)


def _per_s(v: float) -> str:
    """A rate as the eye compares them: 0, 12, 3.4k, 1.2M (per second)."""
    if v >= 1e6:
        return f"{v / 1e6:.1f}M"
    if v >= 1e3:
        return f"{v / 1e3:.1f}k"
    return f"{v:.0f}"


# The counter labels, long and (when the long ones do not fit the width) short.
_COUNTER_LABELS = (("ctx switches", "ctxsw", "context-switches"),
                   ("migrations", "migr", "cpu-migrations"),
                   ("page faults", "faults", "page-faults"))
# The built-in per-thread events (sources/perf.py HW_EVENTS, SW_EVENTS): what the line shows
# after them are the ones `top --events` added.
_PANEL_EVENTS = {e for _, _, e in _COUNTER_LABELS} | {
    "task-clock",                     # THREAD_SW_EVENTS': on-CPU time, the process view's
    "cycles", "instructions", "cache-references", "cache-misses", "branch-misses",
    "stalled-cycles-frontend", "stalled-cycles-backend"}


def counters_text(t: TaskRow, counting: bool = True, width: int | None = None) -> Text:
    """The selected process's perf counters, summed over its threads (Sampler.watch_counters):
    context switches, migrations and page faults per second (software events, every Linux),
    and IPC when the PMU counts cycles and instructions (not in most VMs: it says so).
    ``counting``: the counters were asked for, so no rates yet means "from the next sample".
    ``width``: when the line would not fit, it uses short labels (an 80-column terminal)."""
    rates = t.counter_rates
    out = Text(" counters: ")
    if not rates:
        out.append("from the next sample" if counting else "n/a (not measured here)",
                   style=NA_STYLE)
        return out
    for short in (False, True):
        out = Text(" counters: " if not short else " ")
        for long_label, short_label, event in _COUNTER_LABELS:
            v = rates.get(event)
            out.append(f"{short_label if short else long_label} ")
            out.append(f"{_per_s(v)}/s  " if v is not None else "n/a  ",
                       style="bold" if v else ("" if v is not None else NA_STYLE))
        if t.ipc is not None:
            out.append("IPC ")
            out.append(f"{t.ipc:.2f}", style="bold")
        elif "cycles" in rates:
            out.append("IPC n/a (no instructions counted)" if not short
                       else "IPC n/a (no instr.)", style=NA_STYLE)
        else:
            out.append("IPC n/a (no hardware PMU)" if not short else "IPC n/a (no PMU)",
                       style=NA_STYLE)
        for event, v in rates.items():      # `top --events`: the user's own, after ours
            if event not in _PANEL_EVENTS:
                out.append(f"  {safe_text(event)} ")
                out.append(f"{_per_s(v)}/s", style="bold" if v else "")
        if width is None or out.cell_len <= width:
            break
    return out


def _fit_fields(head: str, fields: Sequence[tuple[str, str]], width: int) -> str:
    """``head`` and the (label, value) fields, two spaces apart: with labels when they fit the
    width, else without the labels that the value explains by itself (a PID's user, its
    thread count), else cut with an ellipsis by the caller."""
    full = head + "".join(f"  {k} {v}".rstrip() for k, v in fields)
    if len(full) <= width:
        return full
    terse = {"user": "", "threads": "thr", "may run on": "on", "last PU": "PU"}
    parts = []
    for k, v in fields:
        k2 = terse.get(k, k)
        parts.append(f"  {v} {k2}" if k2 == "thr" else f"  {k2} {v}" if k2 else f"  {v}")
    return head + "".join(parts)


def numa_memory_text(numa_pages: dict[int, int], width: int, page_size: int = 4096) -> Text:
    """``N0 ██████ 30.8M  N1 ██ 4.1M`` when that fits the width; else without the bars; else
    the nodes holding the most pages, as many as fit, and how many more hold the rest (a
    machine with 8 or 16 NUMA nodes does not run off the line)."""
    total = sum(numa_pages.values()) or 1
    nodes = sorted(numa_pages.items())
    with_bars = Text()
    for node, pages in nodes:
        filled, _ = bar(pages / total, 6)
        with_bars.append(f"N{node} ")
        with_bars.append(filled.ljust(6), style=scale_style(pages / total))
        with_bars.append(f" {fmt_bytes(pages * page_size)}  ")
    if with_bars.cell_len <= width:
        return with_bars
    plain = "  ".join(f"N{n} {fmt_bytes(p * page_size)}" for n, p in nodes)
    if len(plain) <= width:
        return Text(plain)
    out = Text()
    busiest = sorted(nodes, key=lambda item: (-item[1], item[0]))
    for i, (node, pages) in enumerate(busiest):
        rest = busiest[i:]
        more = f"+{len(rest)} nodes {fmt_bytes(sum(p for _, p in rest) * page_size)}"
        item = f"N{node} {fmt_bytes(pages * page_size)}  "
        # Room for this node and, after it, the "+k nodes" of the ones still left.
        if out.cell_len + len(item) + len(more) > width:
            out.append(more, style=NA_STYLE)
            break
        out.append(item)
    return out


def task_detail(topo: Topology, t: TaskRow | None, width: int, page_size: int = 4096,
                counting: bool = False, memory: bool = True) -> Text:
    """The selected process: where it may run, where it ran, its counters (``counters_text``)
    and its memory per NUMA node (``memory`` False: the process view under it shows it, with
    its kinds and high-water marks, read at every sample)."""
    if t is None:
        return Text(" no process selected", style=NA_STYLE)
    head = f" {t.pid} {safe_text(t.comm)}"
    fields = [("user", safe_text(t.user)), *([("job", safe_text(t.job))] if t.job else []),
              ("threads", str(t.nthreads)), ("may run on", affinity_label(topo, t.affinity)),
              ("last PU", str(t.last_cpu) if t.last_cpu is not None else "n/a")]
    out = Text(_fit_fields(head, fields, width))
    out.stylize("bold", 0, len(head))
    out.truncate(width, overflow="ellipsis")
    out.append("\n")
    counters = counters_text(t, counting, width)
    counters.truncate(width, overflow="ellipsis")
    out.append_text(counters)
    if not memory:
        return out
    label = " memory per NUMA node: " if width >= 60 else " memory: "
    mem = Text(label)
    if t.numa_pages:
        mem.append_text(numa_memory_text(t.numa_pages, width - len(label), page_size))
    else:
        mem.append("n/a (numa_maps not read for this process)", style=NA_STYLE)
    mem.truncate(width, overflow="ellipsis")
    out.append("\n")
    out.append_text(mem)
    return out


class ProcessPanel(Backdrop):
    """Filter input, the process (or group) table and the selected process's details.

    The table's title line says what is shown: how many processes, the sort, the grouping and
    the active filter (read from the app's ``sort_key``/``filter_text`` when the caller does
    not pass them)."""

    DEFAULT_CSS = """
    ProcessPanel { height: 1fr; }
    ProcessPanel > Input { display: none; height: 3; }
    ProcessPanel.-filtering > Input { display: block; }
    ProcessPanel > ProcessTable { height: 1fr; }
    ProcessPanel > #proc-detail { height: auto; max-height: 6; }
    ProcessPanel > #proc-threads { display: none; height: auto; max-height: 50%; }
    ProcessPanel.-threads > #proc-threads { display: block; }
    """

    def compose(self) -> ComposeResult:
        # Not all selected on focus: typing after / goes on from the filter there is.
        yield Input(placeholder="filter: words, user:NAME, job:TEXT (enter keeps, esc cancels)",
                    id="proc-filter", select_on_focus=False)
        yield ProcessTable(id="proc-table")
        yield TextLines(id="proc-detail")
        yield TextLines(id="proc-threads")      # the process view (p): ui/thread_panel.py

    def _state(self, sort_key: str | None, filter_text: str | None) -> tuple[str, str]:
        sort_key = sort_key if sort_key is not None else getattr(self.app, "sort_key", "cpu")
        filt = filter_text if filter_text is not None else getattr(self.app, "filter_text", "")
        return sort_key, filt

    def show_tasks(self, topo: Topology, tasks: Sequence[TaskRow], selected: int | None,
                   sort_key: str | None = None, filter_text: str | None = None,
                   prefixes: Sequence[str] | None = None, descending: bool | None = None,
                   note: str = "") -> None:
        """The processes; ``prefixes``: the tree's branches (the list is a tree, F5)."""
        sort_key, filt = self._state(sort_key, filter_text)
        table = self.query_one(ProcessTable)
        table.descending = sort_key == "cpu" if descending is None else descending
        what = (f"{len(tasks)} process{'es' if len(tasks) != 1 else ''}"
                + (" as a tree" if prefixes is not None else "") + note)
        title = table_title(what, sort_key, "none", filt, table.descending,
                            table.cpu_col.label)
        empty = f"no process matches '{filt}'" if filt else "no process to show"
        table.set_tasks(topo, tasks, selected, sort_key, title, empty, prefixes)

    def show_groups(self, topo: Topology, groups: Sequence[GroupRow], mode: str,
                    sort_key: str | None = None, filter_text: str | None = None) -> None:
        sort_key, filt = self._state(sort_key, filter_text)
        n = len(groups)
        title = table_title(f"{n} {'job' if mode == 'job' else 'user'}{'s' if n != 1 else ''}"
                            " (enter: fold/unfold)", sort_key, mode, filt)
        empty = f"no process matches '{filt}'" if filt else "no process to show"
        self.query_one(ProcessTable).set_groups(topo, groups, mode, sort_key, title, empty)

    def show_detail(self, text: Text) -> None:
        table = self.query_one(ProcessTable)
        if not table.lines:
            text = Text(" " + table.empty_note, style=NA_STYLE)   # nothing stale under it
        # The selected process's facts rarely change between frames: an unchanged text is
        # not handed to Textual (every update repaints the widget).
        key = (text.plain, tuple(text.spans))
        if getattr(self, "_detail_shown", None) != key:
            # A layout pass only when its number of lines changes (the process view, p,
            # takes the memory line over).
            lines = text.plain.count("\n")
            relayout = lines != getattr(self, "_detail_lines", lines)
            self._detail_shown, self._detail_lines = key, lines
            self.query_one("#proc-detail", Static).update(text, layout=relayout)


    def show_threads(self, text: Text) -> None:
        """The process view's lines (a layout pass only when their number changes)."""
        key = (text.plain, tuple(text.spans))
        if getattr(self, "_threads_shown", None) != key:
            lines = text.plain.count("\n")
            old = getattr(self, "_threads_lines", -1)
            self._threads_shown, self._threads_lines = key, lines
            self.query_one("#proc-threads", TextLines).update(text, layout=lines != old)


def table_title(what: str, sort_key: str, mode: str, filter_text: str,
                descending: bool | None = None, cpu_label: str = "CPU%") -> Text:
    """`` 42 processes · sorted by CPU% ▼ · filter 'user:bob' `` over the table
    (``cpu_label``: what the CPU column shows, task_column.py)."""
    t = Text(f" {what}", style="bold")
    if mode == "none":
        down = sort_key == "cpu" if descending is None else descending
        name = cpu_label if sort_key == "cpu" else SORT_NAME.get(sort_key, sort_key)
        t.append(f" · sorted by {name} {'▼' if down else '▲'}")
    else:
        t.append(f" · grouped by {mode}")
    if filter_text:
        t.append(" · filter ")
        t.append(f"'{filter_text}'", style="bold yellow")
        t.append(" (esc clears)", style=NA_STYLE)
    else:
        t.append("  < > sort · t tree · / filter · k signal · p threads", style=NA_STYLE)
    return t
