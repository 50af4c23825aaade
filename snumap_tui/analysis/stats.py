"""Per-task and per-PU statistics of a recording's run intervals and wakeups.

All group-bys are one sort plus ``reduceat``/``bincount`` over the whole interval set; nothing
loops over events in Python. What counts as a migration: a thread's consecutive run intervals on
two different PUs, which every tracer backend (even /proc polling, coarsely) can show; the
kernel's own sched_migrate_task count is reported beside it when the recording has those events.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from snumap_tui.analysis.intervals import Intervals, busy_before
from snumap_tui.topology.model import Topology


@dataclass
class TaskStats:
    tid: int
    pid: int
    runtime_ns: int
    cpus: dict[int, int]                 # PU OS index -> ns
    numa: dict[int, int]                 # NUMA node OS index -> ns
    migrations: int = 0
    numa_migrations: int = 0
    kernel_migrations: int | None = None
    switch_ins: int = 0
    latency_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


def numa_of_cpus(topology: Topology, cpus: np.ndarray) -> np.ndarray:
    """NUMA node OS index of each PU OS index (-1 when the topology has none)."""
    out = np.full(len(cpus), -1, dtype=np.int64)
    for i, c in enumerate(cpus.tolist()):
        try:
            n = topology.numa_of(int(c))
        except KeyError:
            n = None
        if n is not None and n.os_index is not None:
            out[i] = n.os_index
    return out


def task_stats(iv: Intervals, topology: Topology) -> dict[int, TaskStats]:
    """Run time per thread in total, per PU and per NUMA node; switch-ins and migrations."""
    cpu, start, end, tid = iv.flat()
    if not len(tid):
        return {}
    dur = end - start
    node_of_row = numa_of_cpus(topology, iv.cpus)
    row = np.searchsorted(iv.cpus, cpu)
    node = node_of_row[row]
    out: dict[int, TaskStats] = {}
    pid_of = iv.pid_of_tid
    # (tid, cpu) sums.
    key = (tid.astype(np.int64) << 20) | row
    uk, inv = np.unique(key, return_inverse=True)
    sums = np.bincount(inv, weights=dur).astype(np.int64)
    counts = np.bincount(inv)
    for k, ns, n in zip(uk.tolist(), sums.tolist(), counts.tolist()):
        t, r = k >> 20, k & 0xFFFFF
        ts = out.get(t)
        if ts is None:
            ts = out[t] = TaskStats(t, pid_of.get(t, -1), 0, {}, {})
        c = int(iv.cpus[r])
        ts.cpus[c] = ts.cpus.get(c, 0) + ns
        ts.runtime_ns += ns
        ts.switch_ins += n
        nd = int(node_of_row[r])
        if nd >= 0:
            ts.numa[nd] = ts.numa.get(nd, 0) + ns
    # Migrations: consecutive intervals of a thread (in time) on different PUs / nodes.
    order = np.lexsort((start, tid))
    st, sc, sn = tid[order], cpu[order], node[order]
    same = st[1:] == st[:-1]
    moved = same & (sc[1:] != sc[:-1])
    moved_node = same & (sn[1:] != sn[:-1])
    for name, mask in (("migrations", moved), ("numa_migrations", moved_node)):
        if mask.any():
            ut, cnt = np.unique(st[1:][mask], return_counts=True)
            for t, n in zip(ut.tolist(), cnt.tolist()):
                setattr(out[t], name, n)
    return out


def runqueue_latency(wake_t: np.ndarray, wake_tid: np.ndarray, in_t: np.ndarray,
                     in_tid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Wakeup -> switch-in delays: (tid, ns, switch-in time) per wakeup that was followed by the thread being
    switched in. A wakeup followed by another wakeup of the same thread before it ran keeps
    only the later one (the kernel reports a wakeup per try_to_wake_up that found it asleep)."""
    t = np.concatenate([wake_t.astype(np.int64), in_t.astype(np.int64)])
    tid = np.concatenate([wake_tid.astype(np.int64), in_tid.astype(np.int64)])
    is_wake = np.concatenate([np.ones(len(wake_t), bool), np.zeros(len(in_t), bool)])
    # Switch-ins sort before wakeups at the same ns: a wakeup never precedes its own switch-in
    # by zero time in a way that would pair it with an earlier run.
    order = np.lexsort((is_wake, t, tid))
    t, tid, is_wake = t[order], tid[order], is_wake[order]
    pair = is_wake[:-1] & ~is_wake[1:] & (tid[:-1] == tid[1:])
    idx = np.flatnonzero(pair)
    return tid[idx], t[idx + 1] - t[idx], t[idx + 1]


def percentiles(values: np.ndarray, qs: tuple[int, ...] = (50, 90, 99)) -> dict[str, float]:
    if not len(values):
        return {}
    p = np.percentile(values.astype(np.float64), qs)
    out = {f"p{q}": float(v) for q, v in zip(qs, p)}
    out["max"] = float(values.max())
    return out


def idle_pus_during(iv: Intervals, t0: np.ndarray, t1: np.ndarray,
                    busy_below: float = 0.5,
                    nodes: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """How many PU rows were busy less than ``busy_below`` of each window [t0[i], t1[i]):
    "were PUs idle while this thread waited?" One row at a time (memory: the windows, not
    rows x windows), the window edges looked up in sorted order (a searchsorted with sorted
    needles walks each row once), busy time from the row's kept prefix sum (``Intervals.cum``).
    NODES: (each row's node, each window's node) of a merged job: a PU of another node is
    never counted idle for a thread of this one (it could not have run there)."""
    idle = np.zeros(len(t0), dtype=np.int64)
    edges = np.concatenate([t0, t1]).astype(np.int64)
    order = np.argsort(edges, kind="stable")
    x = edges[order]
    at = np.empty(len(edges), dtype=np.int64)        # where each edge is in x
    at[order] = np.arange(len(edges))
    at0, at1 = at[:len(t0)], at[len(t0):]
    limit = busy_below * (t1 - t0)
    for r, (st, en) in enumerate(zip(iv.start, iv.end)):
        mine = True if nodes is None else nodes[1] == nodes[0][r]
        if not len(st):
            idle += mine
            continue
        busy = busy_before(st, en, x, iv.cum(r))
        idle += ((busy[at1] - busy[at0]) < limit) & mine
    return idle

