"""`snumap top --job`: the job view, the aggregator's consumer (jobview/aggregate.py).

Nodes as rows: name, state, the node's utilisation, the job's CPU there (in PUs' worth), a heat
strip of its PUs (its cores, NUMA nodes or packages when the PUs do not fit), its memory per
NUMA node and its GPUs. Under each node while they fit, its placement line (which rank runs on
which PU of the strip: a letter per rank, ``!`` where two share a PU) and a line per rank;
past what fits, one line per node (``n`` / ``N`` open and fold). The header gives the job's
imbalance across nodes and ranks, the bottom its findings with their fix. Enter opens the
selected node's full `top` view, fed by its stream (``NodeFeed``); q there comes back.

The keys are keymap.py's (``bindings("job")``).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any, ClassVar

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import BindingType
from textual.widgets import Footer, Static

from snumap_tui.analysis.jobfindings import live_findings
from snumap_tui.jobview.aggregate import (
    LIVE,
    JobAggregator,
    NodeView,
    imbalance,
    node_frame,
)
from snumap_tui.textsafe import safe_text
from snumap_tui.ui import safe_screen
from snumap_tui.ui.driver import QuietDriverMixin
from snumap_tui.ui.keymap import bindings, help_rows
from snumap_tui.ui.metricspec import fmt_bytes
from snumap_tui.ui.palette import NA_STYLE, level_glyph, scale_style

STRIP_TYPES = ("PU", "Core", "NUMANode", "Package")
SORTS = ("name", "busy", "job")
RANK_MARKS = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
NAME_W = 10
STATE = {"live": ("●", "green"), "waiting": ("…", "yellow"), "ended": ("■", "grey50"),
         "lost": ("✗", "red")}


def strip_for(v: NodeView, width: int) -> tuple[str, list[int], list[float]]:
    """The finest of PU / Core / NUMANode / Package whose objects fit WIDTH cells (with a
    gap between NUMA nodes): (type, OS indexes, utilisation %)."""
    for t in STRIP_TYPES:
        s = v.strips.get(t)
        if s is not None and 0 < len(s[0]) + len(v.numa_mem) - 1 <= width:
            return t, [int(x) for x in s[0]], [float(x) for x in s[1]]
    s = v.strips.get("Package")
    if s is None:
        return "", [], []
    return "Package", [int(x) for x in s[0]][:width], [float(x) for x in s[1]][:width]


def gaps(v: NodeView, kind: str, objs: list[int]) -> set[int]:
    """Positions of the strip before which a new NUMA node starts (PUs and cores)."""
    topo = v.topology
    if topo is None or kind not in ("PU", "Core"):
        return set()
    out, last = set(), None
    for i, o in enumerate(objs):
        obj = topo.find(kind, o)
        pu = topo.pus[obj.pu_range[0]].os_index if obj is not None else None
        numa = topo.numa_of(pu) if pu is not None else None
        key = numa.id if numa is not None else None
        if i and key != last:
            out.add(i)
        last = key
    return out


def heat(values: list[float], sep: set[int] | None = None) -> Text:
    t = Text()
    for i, u in enumerate(values):
        if sep and i in sep:
            t.append(" ")
        if math.isnan(u):
            t.append("·", NA_STYLE)
        else:
            t.append(level_glyph(u / 100.0), scale_style(u / 100.0))
    return t


def placement(v: NodeView, kind: str, objs: list[int], sep: set[int] | None = None) -> Text:
    """Under the strip: each rank's letter on the PUs (or objects) where its threads last
    ran; ``!`` where two ranks' threads share one; ``·`` where the job has none."""
    topo = v.topology
    cell: dict[int, set[int]] = {}
    pos = {o: i for i, o in enumerate(objs)}
    for k, r in enumerate(v.ranks):
        if r.rank is None and not r.threads:
            continue
        for t in r.threads:
            if t.pu < 0 or (t.cpu_pct is not None and t.cpu_pct < 5.0):
                continue
            o: int | None = t.pu
            if kind != "PU" and topo is not None:
                found = topo.ancestor_of_type(topo.pu(t.pu), kind) \
                    if t.pu in topo.pu_os_indexes else None
                o = found.os_index if found is not None else None
            if o is not None and o in pos:
                cell.setdefault(pos[o], set()).add(r.rank if r.rank is not None else -1 - k)
    out = Text()
    for i in range(len(objs)):
        if sep and i in sep:
            out.append(" ")
        ranks = cell.get(i)
        if not ranks:
            out.append("·", NA_STYLE)
        elif len(ranks) > 1 and kind in ("PU", "Core"):
            out.append("!", "bold red")
        else:
            first = min(ranks)
            out.append(RANK_MARKS[first % len(RANK_MARKS)] if first >= 0 else "+", "bold")
    return out


def node_line(v: NodeView, width: int, selected: bool) -> tuple[Text, tuple[str, list[int]]]:
    """One node's summary line, and its strip's (type, objects)."""
    mark, colour = STATE.get(v.status, ("?", "red"))
    line = Text()
    line.append(f"{safe_text(v.name)[:NAME_W]:<{NAME_W}}", "reverse" if selected else "bold")
    line.append(f" {mark} ", colour)
    busy = "  -" if v.busy_pct is None else f"{v.busy_pct:3.0f}"
    line.append(f"{busy}% {v.job_cpu_pct / 100:5.1f} ")
    mem = "".join(f" {m[0]}:{(m[1] or 0) / max(m[2] or 1, 1) * 100:.0f}%"
                  for m in v.numa_mem[:4]) if v.numa_mem else ""
    gpu = "".join(f" g{i}:{g.get('util') or 0:.0f}%" for i, g in enumerate(v.gpus[:4]))
    tail = (" mem" + mem if mem else "") + gpu
    room = max(4, width - len(line) - len(tail) - 2)
    kind, objs, vals = strip_for(v, room)
    if v.status not in (LIVE,) and v.why:
        line.append(safe_text(v.why)[:room + len(tail)], "italic")
        return line, (kind, objs)
    sep = gaps(v, kind, objs)
    line.append_text(heat(vals, sep))
    line.append(" " * max(1, room - len(objs) - len(sep) + 1))
    line.append(tail[:max(0, width - len(line))], "dim")
    return line, (kind, objs)


def gpu_locality(r: Any, gpus: list[dict[str, Any]]) -> str:
    """"GPU near" when most of the rank's memory is on a NUMA node that holds one of the
    node's GPUs, "GPU far" when not, "" without GPUs or memory figures."""
    near = {g.get("numa") for g in gpus if isinstance(g.get("numa"), int)}
    if not near or not r.numa_mem:
        return ""
    home = max(r.numa_mem.items(), key=lambda kv: kv[1])[0]
    return "GPU near" if home in near else "GPU far"


def rank_line(r: Any, width: int, gpus: list[dict[str, Any]] | None = None) -> Text:
    rank = "-" if r.rank is None else str(r.rank)
    cpu = "  -" if r.cpu_pct is None else f"{r.cpu_pct:3.0f}"
    pus = ",".join(str(t.pu) for t in r.threads[:6]) + ("…" if len(r.threads) > 6 else "")
    numa = " ".join(f"{n}:{fmt_bytes(b)}" for n, b in sorted(r.numa_mem.items())[:4])
    s = (f"   rank {rank:>4} {safe_text(r.comm)[:12]:<12} {cpu}%  PU {pus:<8} "
         f"bound {safe_text(r.affinity)[:10]:<10} {numa} {gpu_locality(r, gpus or [])}")
    return Text(s[:width], "dim" if r.rank is None else "")


def open_rows(nodes: list[NodeView], height: int, opened: set[int] | None) -> list[bool]:
    """Which nodes show their placement and rank lines: all when every node's lines fit
    HEIGHT (OPENED None), else those in OPENED (``n`` / ``N``)."""
    if opened is None:
        fits = sum(2 + len(v.ranks) for v in nodes) <= height
        return [fits and v.status == LIVE for v in nodes]
    return [v.index in opened and v.status == LIVE for v in nodes]


def job_lines(nodes: list[NodeView], width: int, height: int, selected: int,
              opened: set[int] | None, start: int = 0) -> list[Text]:
    """The node rows that fit HEIGHT lines from node START on (``open_rows``)."""
    is_open = open_rows(nodes, height, opened)
    out: list[Text] = []
    for i, v in enumerate(nodes[start:], start):
        if len(out) >= height:
            break
        line, (kind, objs) = node_line(v, width, i == selected)
        out.append(line)
        if is_open[i]:
            pl = Text(" " * (NAME_W + 12))
            pl.append_text(placement(v, kind, objs, gaps(v, kind, objs)))
            pl.append(f"  ranks on {kind or 'PU'}s", "dim")
            out.append(pl)
            out += [rank_line(r, width, v.gpus) for r in v.ranks]
    return out[:height]


def first_shown(nodes: list[NodeView], height: int, opened: set[int] | None, start: int,
                selected: int) -> int:
    """The first node shown so that the selected one's lines are on screen."""
    is_open = open_rows(nodes, height, opened)
    size = [1 + (1 + len(v.ranks) if o else 0) for v, o in zip(nodes, is_open)]
    start = min(start, selected)
    while start < selected and sum(size[start:selected + 1]) > height:
        start += 1
    return start


def header(jobid: str, nodes: list[NodeView], imb: dict[str, Any], paused: bool,
           width: int = 80) -> Text:
    """Two lines: the job, its live nodes and imbalance (max - mean) / max across nodes and
    ranks (the max/mean too where there is room); the columns."""
    live = sum(v.status == LIVE for v in nodes)
    t = Text(f"job {safe_text(jobid)}", "bold")
    t.append(f" · {live}/{len(nodes)} nodes live · imbalance")
    for what in ("nodes", "ranks"):
        d = imb.get(what)
        t.append(f" {what} ")
        wide = width >= 120 and d
        t.append("n/a" if not d else f"{d['percent']:.0f}%"
                 + (f" (max/mean {d['max_over_mean']:.2f})" if wide else ""),
                 "bold yellow" if d and d["percent"] >= 20 else "")
    if paused:
        t.append("  [paused]", "reverse")
    t.truncate(width)
    cols = Text(f"\n{'NODE':<{NAME_W}}   BUSY  JOB  heat per PU (core, NUMA node)   "
                "mem used per NUMA node", "dim")
    cols.truncate(width + 1)
    return t + cols


class NodeFeed:
    """A node's frames from the aggregator, for its full `top` view (ui/app.py's feed)."""

    def __init__(self, agg: JobAggregator, index: int, lock: Any, interval_s: float) -> None:
        self.agg, self.index, self.lock = agg, index, lock
        self.interval_s = interval_s
        self._stop = threading.Event()

    def start(self, callback: Callable[[Any], None]) -> None:
        def loop() -> None:
            seen = -1
            while not self._stop.wait(min(0.25, self.interval_s / 2)):
                with self.lock:
                    frames = self.agg.frames_of(self.index)
                    frame = node_frame(self.agg, self.index) if frames != seen else None
                if frame is not None:
                    seen = frames
                    callback(frame)
        threading.Thread(target=loop, daemon=True, name="node-feed").start()

    def stop(self) -> None:
        self._stop.set()

    def set_interval(self, seconds: float) -> None:
        """The nodes' samplers keep the interval `top --job` started them with."""

    def watch_pid(self, pid: int | None) -> None:
        """The node's stream has its processes' memory already."""


class JobApp(QuietDriverMixin, App[Any]):
    """The job view (module docstring). Returns ("node", index) when Enter opens a node."""

    TITLE = "snumap top --job"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS: ClassVar[list[BindingType]] = list(bindings("job"))
    CSS = "#job-head { height: 2; } #job-nodes { height: 1fr; } #job-findings { height: auto; max-height: 8; }"

    def __init__(self, agg: JobAggregator, jobid: str, lock: Any = None,
                 refresh_s: float = 1.0, selected: int = 0) -> None:
        super().__init__()
        safe_screen.install(self)
        self.agg, self.jobid = agg, jobid
        self.lock = lock if lock is not None else threading.Lock()
        self.refresh_s = refresh_s
        self.selected = selected
        self.start = 0
        self.sort_i = 0
        self.paused = False
        self.opened: set[int] | None = None
        self.nodes: list[NodeView] = []
        self.findings: list[dict[str, Any]] = []

    def compose(self) -> ComposeResult:
        yield Static(id="job-head")
        yield Static(id="job-nodes")
        yield Static(id="job-findings")
        yield Footer()

    def on_mount(self) -> None:
        self.redraw()
        self.set_interval(self.refresh_s, self.tick)

    def tick(self) -> None:
        if not self.paused:
            self.redraw()

    def _order(self, nodes: list[NodeView]) -> list[NodeView]:
        key = SORTS[self.sort_i]
        if key == "busy":
            return sorted(nodes, key=lambda v: -(v.busy_pct or 0.0))
        if key == "job":
            return sorted(nodes, key=lambda v: -v.job_cpu_pct)
        return nodes

    def redraw(self) -> None:
        with self.lock:
            self.nodes = self._order(self.agg.nodes())
            self.findings = live_findings(self.nodes)
            snap_imb = imbalance(self.nodes)
            events = list(self.agg.events)
        w, h = self.size.width or 80, self.size.height or 24
        self.query_one("#job-head", Static).update(header(self.jobid, self.nodes, snap_imb,
                                                          self.paused, w))
        f = Text()
        for x in self.findings[:3]:
            f.append(f"! {safe_text(x['text'])}\n", "bold yellow")
            f.append(f"  fix: {safe_text(x['fix'])}", "cyan")
            f.append(f"  · confidence {x['confidence']}\n", "dim")
        if len(self.findings) > 3:
            f.append(f"… {len(self.findings) - 3} more findings (--batch --json lists them "
                     "all)\n", "yellow")
        for e in events[-2:]:
            f.append(f"# {safe_text(e)}\n", "dim")
        f.rstrip()
        self.query_one("#job-findings", Static).update(f)
        wrapped = sum(max(1, math.ceil(len(x) / max(1, w))) for x in f.plain.split("\n")) \
            if f.plain else 0
        room = max(1, h - 3 - min(8, wrapped))
        self.selected = min(self.selected, max(0, len(self.nodes) - 1))
        self.start = first_shown(self.nodes, room, self.opened, self.start, self.selected)
        lines = job_lines(self.nodes, w, room, self.selected, self.opened, self.start)
        self.query_one("#job-nodes", Static).update(Text("\n").join(lines))

    # ---- actions (keymap.py) -------------------------------------------------------------------
    def action_help(self) -> None:
        rows = "\n".join(f"{k:<14} {w}" for k, w in help_rows("job"))
        self.notify(rows, title="snumap top --job keys", timeout=10)

    def action_pause(self) -> None:
        self.paused = not self.paused
        self.redraw()

    def action_row(self, delta: int) -> None:
        self.selected = max(0, min(len(self.nodes) - 1, self.selected + delta))
        self.redraw()

    def action_sort(self) -> None:
        self.sort_i = (self.sort_i + 1) % len(SORTS)
        self.notify(f"nodes by {SORTS[self.sort_i]}", timeout=2)
        self.redraw()

    def action_fold_node(self, every: bool = False) -> None:
        if every:
            self.opened = set() if self.opened is None or self.opened else \
                {v.index for v in self.nodes}
        else:
            cur = self.nodes[self.selected].index if self.nodes else 0
            self.opened = set(self.opened or ())
            self.opened ^= {cur}
        self.redraw()

    def action_open_node(self) -> None:
        if self.nodes:
            self.exit(("node", self.nodes[self.selected].index, self.selected))


def run_job_view(agg: JobAggregator, streams: Any, jobid: str, interval_s: float) -> int:
    """The job view; Enter runs the node's `top` view on its stream, q there comes back."""
    from snumap_tui.ui.app import TopApp
    from snumap_tui.ui.hostinfo import HostInfo

    selected = 0
    while True:
        app = JobApp(agg, jobid, streams.locked(), refresh_s=min(1.0, interval_s),
                     selected=selected)
        result = app.run()
        if not (isinstance(result, tuple) and result[0] == "node"):
            return 0
        _, index, selected = result
        topo = agg.topology(index)
        if topo is None:
            continue
        name = agg.name(index)
        host = HostInfo(name, "via srun", "")

        def facts(host: HostInfo = host) -> HostInfo:
            return host

        top = TopApp(topo, feed=NodeFeed(agg, index, streams.locked(), interval_s),
                     host=facts, interval_s=interval_s, origin=None)
        top.run()
