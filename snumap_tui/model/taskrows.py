"""Process rows of a Frame from two "tasks" readings (threads folded into processes).

CPU time is per thread in /proc/PID/task/TID/stat (utime, stime: fields 14 and 15 of proc(5),
in USER_HZ ticks); a process's CPU % is the sum of its threads' tick deltas over the interval,
as a percentage of one PU. A thread that was not there at the previous sample started during
the interval, so all its ticks belong to it. Without a previous "tasks" reading there is no
interval: CPU % is None, not 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from snumap_tui.model.frame import TaskRow


def _ticks(threads: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    tid = np.asarray(threads.get("tid", ()), dtype=np.int64)
    ticks = (np.asarray(threads.get("utime", ()), dtype=np.float64)
             + np.asarray(threads.get("stime", ()), dtype=np.float64))
    return tid, ticks


def thread_deltas(prev: Mapping[str, Any] | None, cur: Mapping[str, Any]) -> np.ndarray:
    """Ticks each of cur's threads ran during the interval (NaN without a previous reading)."""
    tid, ticks = _ticks(cur)
    if prev is None or "tid" not in prev:
        return np.full(tid.shape, np.nan)
    ptid, pticks = _ticks(prev)
    order = np.argsort(ptid, kind="stable")
    stid, sticks = ptid[order], pticks[order]
    at = np.searchsorted(stid, tid)
    at_c = np.minimum(at, max(len(stid) - 1, 0))
    seen = (at < len(stid)) & (stid[at_c] == tid) if len(stid) else np.zeros(tid.shape, bool)
    before = np.where(seen, sticks[at_c] if len(stid) else 0.0, 0.0)
    d = ticks - before
    # A recycled TID with fewer ticks than its predecessor is a new thread.
    return np.where(d < 0, ticks, d)


def derive_tasks(prev: Mapping[str, Any] | None, cur: Mapping[str, Any] | None, dt: float,
                 hz: float) -> list[TaskRow]:
    """One TaskRow per process, busiest first."""
    if cur is None or not cur.get("threads"):
        return []
    th = cur["threads"]
    pid = np.asarray(th.get("pid", ()), dtype=np.int64)
    tid = np.asarray(th.get("tid", ()), dtype=np.int64)
    if pid.size == 0:
        return []
    prev_threads = prev.get("threads") if prev else None
    delta = thread_deltas(prev_threads, th)
    pids, inv = np.unique(pid, return_inverse=True)
    ngroups = pids.size
    nthreads = np.bincount(inv, minlength=ngroups)
    timed = not np.isnan(delta).all() and dt > 0 and not math.isnan(dt) and hz > 0
    if timed:
        cpu_ticks = np.bincount(inv, weights=np.nan_to_num(delta), minlength=ngroups)
        cpu_pct = cpu_ticks / hz / dt * 100.0
    else:
        cpu_pct = np.full(ngroups, np.nan)
    # Busiest thread of each process (ties go to the main thread): its last CPU is shown.
    is_main = tid == pid
    score = np.nan_to_num(delta, nan=-1.0) + 0.5 * is_main
    order = np.lexsort((-score, inv))
    busiest = order[np.searchsorted(inv[order], np.arange(ngroups))]
    main = busiest.copy()
    main[inv[is_main]] = np.nonzero(is_main)[0]
    comm = th.get("comm", ())
    state = th.get("state", ())
    last_cpu = th.get("last_cpu", ())
    uid = th.get("uid", ())
    running = np.zeros(ngroups, dtype=bool)
    if len(state):
        running[inv[np.asarray(state) == "R"]] = True
    procs: Mapping[int, Mapping[str, Any]] = cur.get("processes") or {}
    rows: list[TaskRow] = []
    for g in range(ngroups):
        p = int(pids[g])
        info = procs.get(p, {})
        m, b = int(main[g]), int(busiest[g])
        lc = last_cpu[b] if len(last_cpu) else None
        lc = None if lc is None or (isinstance(lc, float) and math.isnan(lc)) else int(lc)
        pct = float(cpu_pct[g])
        user = info.get("user")
        if user is None and len(uid):
            user = str(uid[m])
        numa = info.get("numa_pages")
        rows.append(TaskRow(
            pid=p, tid=p, comm=str(comm[m]) if len(comm) else "", user=str(user or "?"),
            state="R" if running[g] else (str(state[m]) if len(state) else "?"),
            cpu_pct=None if math.isnan(pct) else pct, last_cpu=lc,
            affinity=frozenset(int(x) for x in info.get("affinity") or ()),
            cgroup=info.get("cgroup"), job=info.get("job"), cmdline=info.get("cmdline"),
            numa_pages={int(k): int(v) for k, v in numa.items()} if numa else None,
            nthreads=int(nthreads[g]),
            rss_bytes=int(info["rss_bytes"]) if info.get("rss_bytes") is not None else None))
    rows.sort(key=lambda r: (-(r.cpu_pct or 0.0), r.pid))
    return rows
