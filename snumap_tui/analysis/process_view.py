"""The replay's process view, as data: for one process and the chart's time columns, each
thread's share of each column it ran (0..1) and the process's memory per NUMA node at each
column's end (the last sample at or before it).

Threads are a process's tids in the run intervals; a thread runs on one PU at a time, so its
intervals, sorted by start, do not overlap and a prefix sum gives its busy time before any
time (``busy_before``), one searchsorted per column edge.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from snumap_tui.analysis.intervals import Intervals, busy_before
from snumap_tui.analysis.memory import RSS_NODE, MemoryTimeline


@dataclass
class ProcessStrips:
    pid: int
    edges: np.ndarray                         # cols + 1 column edges (ns)
    threads: dict[int, np.ndarray] = field(default_factory=dict)   # tid -> busy share per col
    memory: dict[int, np.ndarray] = field(default_factory=dict)    # node -> bytes per col (NaN)
    peak: dict[int, float] = field(default_factory=dict)           # node -> the recording's max


def thread_intervals(iv: Intervals, pid: int) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """tid -> (start, end) sorted, of this process's threads."""
    _, start, end, tid = iv.flat()
    if not len(tid):
        return {}
    pids = iv.pids(tid.astype(np.int64))
    sel = pids == pid
    out = {}
    for t in np.unique(tid[sel]).tolist():
        m = sel & (tid == t)
        o = np.argsort(start[m], kind="stable")
        out[int(t)] = (start[m][o], end[m][o])
    return out


def busiest_process(iv: Intervals) -> int | None:
    """The traced process that ran longest (None without any)."""
    _, start, end, tid = iv.flat()
    pids = iv.pids(tid.astype(np.int64))
    ok = pids > 0
    if not ok.any():
        return None
    u, inv = np.unique(pids[ok], return_inverse=True)
    busy = np.zeros(len(u), dtype=np.int64)
    np.add.at(busy, inv, (end - start)[ok])
    return int(u[int(np.argmax(busy))])


def strips(iv: Intervals, pid: int, t0: int, t1: int, cols: int,
           memory: MemoryTimeline | None,
           threads: dict[int, tuple[np.ndarray, np.ndarray]] | None = None) -> ProcessStrips:
    """The process view's rows over [t0, t1) in COLS columns."""
    cols = max(1, cols)
    edges = np.linspace(t0, t1, cols + 1).astype(np.int64)
    width = np.maximum(np.diff(edges), 1).astype(np.float64)
    out = ProcessStrips(pid, edges)
    for tid, (s, e) in (threads if threads is not None else thread_intervals(iv, pid)).items():
        b = busy_before(s, e, edges)
        out.threads[tid] = np.clip(np.diff(b) / width, 0.0, 1.0)
    if memory is not None and len(memory.t_ns):
        i = np.searchsorted(memory.t_ns, edges[1:], "right") - 1
        for node, v in sorted(memory.nodes.items()):
            col = np.where(i >= 0, v[np.maximum(i, 0)], np.nan).astype(np.float64)
            out.memory[node] = col
            out.peak[node] = float(v.max()) if len(v) else 0.0
    return out


def at_cursor(ps: ProcessStrips, t: int) -> tuple[float, dict[int, float]]:
    """(PUs the process used in the cursor's column, bytes per node there)."""
    c = int(np.clip(np.searchsorted(ps.edges, t, "right") - 1, 0, len(ps.edges) - 2))
    cpu = float(sum(v[c] for v in ps.threads.values()))
    mem = {n: float(v[c]) for n, v in ps.memory.items() if not np.isnan(v[c])}
    return cpu, mem


__all__ = ["RSS_NODE", "ProcessStrips", "at_cursor", "busiest_process", "strips",
           "thread_intervals"]
