"""Each thread's counts over one interval, for the processes whose per-thread counters are
open (``TasksSource.want_counters``: `top`'s selected process, `top --batch -p PID`).

The tasks source reads every thread's perf counters cumulatively (sources/perf.py
``ThreadCounters.read``: ``tids``, ``per_thread``); this pairs two readings thread by thread and
keeps the increases, with the /proc ticks each thread ran in the same interval (its CPU time
where task-clock is not counted). A thread the previous reading did not have started its
counters inside the interval (they are opened when it is found), so all its counts are the
interval's; a count that went backwards (a recycled tid) is not known (NaN). The figures built
on these (on-CPU share, IPC, GHz, MPKI ...) are analysis/live_threads.py's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True, eq=False)
class ThreadDeltas:
    """One process's threads over one interval of ``dt_s`` seconds."""

    dt_s: float
    events: tuple[str, ...]
    tids: np.ndarray           # int64 (n,)
    comm: tuple[str, ...]      # each thread's name (/proc/PID/task/TID/stat)
    last_cpu: tuple[int | None, ...]
    delta: np.ndarray          # float64 (n, k): each event's increase, NaN where not known
    ticks: np.ndarray          # float64 (n,): utime + stime ticks in the interval (NaN)
    hz: float                  # the unit of ``ticks``
    multiplexed: tuple[str, ...] = ()   # events scaled for multiplexing (running < enabled)
    error: str | None = None   # why some counters could not be opened (perf_event_open)


def thread_deltas(prev: Mapping[str, Any] | None, cur: Mapping[str, Any], dt: float,
                  ticks: np.ndarray, hz: float) -> dict[int, ThreadDeltas]:
    """Per process with per-thread counters in ``cur`` (and the process in ``prev``):
    its threads' deltas. ``ticks``: the interval's /proc ticks of each row of cur's
    ``threads`` columns (NaN: unknown), as taskrows' thread_deltas gives them."""
    out: dict[int, ThreadDeltas] = {}
    procs = cur.get("processes") or {}
    before = (prev.get("processes") or {}) if prev else {}
    if not (dt > 0) or not procs:
        return out
    th = cur.get("threads") or {}
    row_pid = np.asarray(th.get("pid", ()), dtype=np.int64)
    row_tid = np.asarray(th.get("tid", ()), dtype=np.int64)
    for pid, info in procs.items():
        c = info.get("counters")
        pc = (before.get(pid) or {}).get("counters")
        if not c or not pc or "per_thread" not in c or "per_thread" not in pc:
            continue
        events = tuple(str(e) for e in c["events"])
        tids = np.asarray(c["tids"], dtype=np.int64)
        now = np.asarray(c["per_thread"], dtype=np.float64).reshape(len(tids), len(events))
        was = _aligned(pc, events, tids)
        d = now - np.nan_to_num(was, nan=0.0)
        d[d < 0] = np.nan                       # went backwards: a recycled tid
        mine = np.flatnonzero(row_pid == pid)         # its rows among every process's
        rows = dict(zip(row_tid[mine].tolist(), mine.tolist()))
        idx = [rows.get(int(t)) for t in tids.tolist()]
        comm = th.get("comm", ())
        lcpu = th.get("last_cpu", ())
        mux = np.asarray(c.get("multiplexed", np.zeros(len(events), bool)), dtype=bool)
        out[int(pid)] = ThreadDeltas(
            dt, events, tids,
            tuple(str(comm[i]) if i is not None and len(comm) else "?" for i in idx),
            tuple(_cpu(lcpu[i]) if i is not None and len(lcpu) else None for i in idx),
            d, np.array([ticks[i] if i is not None and i < len(ticks) else np.nan
                         for i in idx], dtype=np.float64), float(hz),
            tuple(e for e, m in zip(events, mux.tolist()) if m), info.get("counters_error"))
    return out


def _aligned(reading: Mapping[str, Any], events: tuple[str, ...], tids: np.ndarray
             ) -> np.ndarray:
    """The earlier reading's per-thread counts laid out as ``tids`` x ``events`` (NaN where
    it had no such thread or event: the thread is new, its counts are all the interval's)."""
    pev = [str(e) for e in reading["events"]]
    ptids = np.asarray(reading["tids"], dtype=np.int64).tolist()
    pv = np.asarray(reading["per_thread"], dtype=np.float64).reshape(len(ptids), len(pev))
    at = {t: i for i, t in enumerate(ptids)}
    col = {e: j for j, e in enumerate(pev)}
    out = np.full((len(tids), len(events)), np.nan)
    for i, t in enumerate(tids.tolist()):
        r = at.get(t)
        if r is None:
            continue
        for j, e in enumerate(events):
            k = col.get(e)
            if k is not None:
                out[i, j] = pv[r, k]
    return out


def _cpu(v: Any) -> int | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else int(f)
