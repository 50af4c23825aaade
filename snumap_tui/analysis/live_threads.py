"""`top`'s process view as data: the selected process's threads over the last interval, and its
memory per NUMA node with the high-water mark since the view started looking at it.

The figures are the report's (analysis/attribution.py ``derived``: IPC = Σinstructions /
Σcycles, GHz = cycles / on-CPU time, MPKI, LLC miss ratio, faults, migrations, "n/a (why)"
where an event is not counted), made from each thread's counts over one interval
(model/threadcounts.py) instead of a recording's run intervals. A thread's on-CPU time is its
task-clock (the kernel's own count of the time it ran), else the /proc ticks it ran in the
interval (utime + stime: 10 ms steps); its share is of the process's on-CPU time, and CPU % is
of one PU over the interval. The process row sums its live threads (threads that ended during
the interval are in the process's counter rates, not here).

Memory per node comes from the tasks source's ``memory_nodes`` (sources/procmem.py), its kind
as hwloc names it (analysis/memory.py ``node_kinds``); ``MemoryWatch`` keeps the largest figure
per node and in all (the process's RSS) since it was (re)started on a process.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from snumap_tui.analysis.attribution import TASK_CLOCK, derived, event_index
from snumap_tui.analysis.attribution_text import _num, _ratio
from snumap_tui.textsafe import safe_text

if TYPE_CHECKING:
    from snumap_tui.model.threadcounts import ThreadDeltas

MIGRATIONS = ("cpu-migrations", "migrations")
FIGURES = ("ipc", "ghz", "mpki", "llc_miss_ratio", "faults", "migrations")


def _figures(events: list[str], sums: np.ndarray, on_cpu_ns: int, dt: float
             ) -> dict[str, Any]:
    """derived()'s figures of these counts, with per-second rates of every event."""
    j = event_index(events, MIGRATIONS)
    mig = None if j is None else int(sums[j])
    figs, why = derived(events, sums, on_cpu_ns, mig)
    if mig is None:
        why["migrations"] = "cpu-migrations not counted"
    row = {"events": {e: float(v) for e, v in zip(events, sums.tolist())},
           "rates": {e: float(v) / dt for e, v in zip(events, sums.tolist())}, **figs}
    if why:
        row["na"] = why
    return row


def thread_figures(d: ThreadDeltas) -> dict[str, Any]:
    """{"dt_s", "events", "multiplexed", "on_cpu_from", "threads": [row per thread, busiest
    first], "process": the row of their sums}. A row: tid, comm, last_cpu, on_cpu_s, cpu_pct
    (of one PU), share (of the process's on-CPU time), events and rates (only the events
    counted for that thread), and the figures of ``FIGURES`` (None, with ``na[figure]``
    saying why)."""
    events = list(d.events)
    dt = d.dt_s
    tc = event_index(events, TASK_CLOCK)
    rows = []
    for i, tid in enumerate(d.tids.tolist()):
        counted = [j for j in range(len(events)) if not math.isnan(d.delta[i, j])]
        ev = [events[j] for j in counted]
        sums = d.delta[i, counted]
        if tc is not None and tc in counted:
            ns, src = float(d.delta[i, tc]), "task-clock"
        elif not math.isnan(d.ticks[i]) and d.hz > 0:
            ns, src = d.ticks[i] / d.hz * 1e9, "/proc utime+stime"
        else:
            ns, src = math.nan, ""
        row = {"tid": int(tid), "comm": d.comm[i], "last_cpu": d.last_cpu[i],
               "on_cpu_s": None if math.isnan(ns) else ns / 1e9, "on_cpu_from": src,
               **_figures(ev, sums, 0 if math.isnan(ns) else int(ns), dt)}
        row["cpu_pct"] = None if math.isnan(ns) else ns / 1e9 / dt * 100.0
        rows.append(row)
    total = sum(r["on_cpu_s"] or 0.0 for r in rows)
    for r in rows:
        r["share"] = (r["on_cpu_s"] / total) if total > 0 and r["on_cpu_s"] is not None \
            else None
    rows.sort(key=lambda r: (-(r["on_cpu_s"] or 0.0), r["tid"]))
    counted = [j for j in range(len(events)) if not np.isnan(d.delta[:, j]).all()]
    sums = np.nansum(d.delta[:, counted], axis=0) if counted else np.zeros(0)
    proc = {"threads": len(rows), "on_cpu_s": total, "share": 1.0 if total > 0 else None,
            "cpu_pct": total / dt * 100.0,
            **_figures([events[j] for j in counted], sums, int(total * 1e9), dt)}
    return {"dt_s": dt, "events": events, "multiplexed": list(d.multiplexed),
            "on_cpu_from": sorted({r["on_cpu_from"] for r in rows if r["on_cpu_from"]}),
            "threads": rows, "process": proc, **({"error": d.error} if d.error else {})}


@dataclass
class MemoryWatch:
    """A process's memory per NUMA node, and its high-water marks since ``start``: what `top`
    shows from the moment its process view opens on a process (a new process, or the view
    opened again, starts again)."""

    kinds: dict[int, str] = field(default_factory=dict)   # node OS index -> memory kind
    pid: int | None = None
    peak: dict[int, int] = field(default_factory=dict)
    peak_total: int = 0
    samples: int = 0

    def start(self, pid: int | None) -> None:
        self.pid, self.peak, self.peak_total, self.samples = pid, {}, 0, 0

    def update(self, pid: int, nodes: dict[int, int] | None, exact: bool | None = None
               ) -> dict[str, Any] | None:
        """This sample's figures: {"nodes": [{"node", "kind", "bytes", "peak"}], "total",
        "peak_total", "exact", "samples"}; None when the sample has none."""
        if pid != self.pid:
            self.start(pid)
        if nodes is None:
            return None
        total = sum(nodes.values())
        for n, b in nodes.items():
            self.peak[n] = max(self.peak.get(n, 0), b)
        self.peak_total = max(self.peak_total, total)
        self.samples += 1
        return {"nodes": [{"node": n, "kind": self.kinds.get(n, "DRAM"), "bytes": nodes.get(n, 0),
                           "peak": p} for n, p in sorted(self.peak.items())],
                "total": total, "peak_total": self.peak_total, "exact": exact,
                "samples": self.samples}


# ---- text (top --batch, and the lines the live view styles) ----------------------------------
_HEAD = (f"{'TID':>7} {'COMM':<12} {'CPU%':>5} {'share':>5} {'task-clk':>8} {'IPC':>4} "
         f"{'GHz':>4} {'MPKI':>5} {'flt/s':>6} {'migr/s':>6}")
_NA_NAMES = {"ipc": "IPC", "ghz": "GHz", "mpki": "MPKI", "faults": "faults",
             "migrations": "migrations"}
# Events the columns already show: the rest get a column each when the width allows.
_SHOWN = {"task-clock", "page-faults", "cpu-migrations", "faults", "migrations"}


def _short(event: str) -> str:
    """An event's column head: perf's name, shortened to 8 cells (context-switches: cs/s)."""
    short = {"context-switches": "cs", "cache-references": "c-ref", "cache-misses": "c-miss",
             "branch-misses": "br-mis", "instructions": "instr"}.get(event, event)
    return safe_text(short)[:6] + "/s"


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.0f}%" if v >= 10 else f"{v:.1f}%"


def _ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v * 1e3:.0f}ms" if v >= 0.01 else f"{v * 1e3:.2f}ms"


def _line(label: str, r: dict[str, Any], extra: list[str], width: int) -> str:
    rates = r["rates"]
    flt = rates.get("page-faults", rates.get("faults"))
    mig = rates.get("cpu-migrations", rates.get("migrations"))
    share = None if r.get("share") is None else 100 * r["share"]
    s = (f"{label} {_pct(r.get('cpu_pct')):>5} {_pct(share):>5} {_ms(r.get('on_cpu_s')):>8} "
         f"{_ratio(r.get('ipc')):>4} {_ratio(r.get('ghz')):>4} {_ratio(r.get('mpki')):>5} "
         f"{_num(flt):>6} {_num(mig):>6}")
    s += "".join(f" {_num(rates.get(e)):>8}" for e in extra)
    return s[:width]


def thread_lines(fig: dict[str, Any], width: int = 80, limit: int | None = None) -> list[str]:
    """The thread table: a head, a line per thread (busiest first, at most ``limit``), the
    process's sums, then a line per figure that is n/a for every thread, saying why."""
    events = [e for e in fig["events"] if e not in _SHOWN]
    head = _HEAD
    extra = []
    for e in events:                       # the other events, per second, as the width allows
        col = f" {_short(e):>8}"
        if len(head) + len(col) > width:
            break
        head += col
        extra.append(e)
    out = [head[:width]]
    rows = fig["threads"]
    shown = rows if limit is None else rows[:limit]
    for r in shown:
        out.append(_line(f"{r['tid']:>7} {safe_text(r['comm'])[:12]:<12}", r, extra, width))
    if len(shown) < len(rows):
        out.append(f"{'':>7} +{len(rows) - len(shown)} more threads"[:width])
    p = fig["process"]
    out.append(_line(f"{'all':>7} {str(p['threads']) + ' threads':<12}", p, extra, width))
    first = rows[0] if rows else p
    for key, name in _NA_NAMES.items():
        why = (first.get("na") or {}).get(key)
        if why and all(r.get(key) is None for r in rows):
            out.append(f"  {name} n/a: {why}"[:width])
    if fig.get("error"):
        out.append(f"  counters not opened on every thread: {safe_text(fig['error'])}"[:width])
    if len(extra) < len(events):
        out.append(f"  +{len(events) - len(extra)} events not shown at this width "
                   "(--json has them)"[:width])
    if fig["multiplexed"]:
        out.append(("  multiplexed (scaled by enabled/running): "
                    + ", ".join(safe_text(e) for e in fig["multiplexed"]))[:width])
    other = [f for f in fig["on_cpu_from"] if f != "task-clock"]
    if other:
        out.append(f"  on-CPU time from {', '.join(other)} where task-clock is not counted"
                   [:width])
    return out


def memory_line(mem: dict[str, Any] | None, fmt: Any, width: int = 80,
                why: str | None = None) -> str:
    """``N0 DRAM 64.2M (max 64.2M)  N1 HBM 0B (max 1.0M)  all 64.2M (max 70.0M)``; ``fmt``
    writes a byte count; ``why``: the reason when there is none."""
    if mem is None:
        return f"n/a ({safe_text(why) if why else 'not read yet for this process'})"
    parts = [f"N{n['node']} {safe_text(n['kind'])} {fmt(n['bytes'])} (max {fmt(n['peak'])})"
             for n in mem["nodes"]]
    parts.append(f"all {fmt(mem['total'])} (max {fmt(mem['peak_total'])})"
                 + ("" if mem["exact"] is not False else ", estimate"))
    return "  ".join(parts)[:width]


def process_detail(task: Any, watch: MemoryWatch) -> dict[str, Any]:
    """The process view of one process row (model.frame.TaskRow, with per-thread counters
    asked for): {"pid", "comm", "threads": thread_figures or None, "why" when None,
    "memory": MemoryWatch.update or None}."""
    out: dict[str, Any] = {"pid": task.pid, "comm": task.comm}
    if task.threads is not None:
        out["threads"] = thread_figures(task.threads)
    else:
        out["threads"] = None
        out["why"] = "from the next sample (counters are opened at the first)" \
            if task.counter_rates is None else "no thread counted in this interval"
    out["memory"] = watch.update(task.pid, task.memory_nodes, task.memory_exact)
    if out["memory"] is None and task.memory_error:
        out["memory_why"] = task.memory_error
    return out


def detail_lines(detail: dict[str, Any], fmt: Any, width: int = 80,
                 limit: int | None = None) -> list[str]:
    """``process_detail`` as text: a title, the memory line, the thread table (its notes
    last: what a short terminal cuts)."""
    out = [f"process {detail['pid']} {safe_text(detail['comm'])}: threads over the last "
           "interval"[:width],
           ("memory per NUMA node: " + memory_line(detail["memory"], fmt, width,
                                                   detail.get("memory_why")))[:width]]
    fig = detail["threads"]
    out += thread_lines(fig, width, limit) if fig is not None else \
        [f"  n/a ({detail.get('why', 'not counted')})"[:width]]
    return out
