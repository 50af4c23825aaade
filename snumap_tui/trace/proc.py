"""The /proc polling backend: coarse, unprivileged, and it says so (``approximate = True``).

At every ``read()`` each followed thread's CPU time (proc(5): /proc/PID/task/TID/schedstat,
first field = time on a CPU in ns, since 2.6.x with CONFIG_SCHED_INFO; else utime + stime of
``stat`` in clock ticks) is compared with the previous poll, and the difference becomes one RUN
event charged to the CPU the thread last ran on (``stat`` field 39, ``processor``). A thread
that moved between CPUs inside one interval is charged entirely to the last one; threads that
lived less than an interval are missed. Threads that disappeared give an EXIT event.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from snumap_tui.sources._io import read_name_text
from snumap_tui.sources.base import SourceStatus
from snumap_tui.trace import events as ev
from snumap_tui.trace.base import Tracer
from snumap_tui.trace.proc_counters import PROC_EVENTS, SOURCE, interval_rows, read_thread
from snumap_tui.trace.tasks import TaskTable, tree_of


def parse_stat(text: str) -> tuple[str, int, int, int] | None:
    """(comm, ppid, cpu time in ticks, last cpu) from a /proc/PID/stat line (proc(5))."""
    lp, rp = text.find("("), text.rfind(")")
    if lp < 0 or rp < 0:
        return None
    rest = text[rp + 2:].split()
    # rest[0] is field 3 (state): field k is rest[k - 3].
    try:
        return text[lp + 1:rp], int(rest[1]), int(rest[11]) + int(rest[12]), int(rest[36])
    except (IndexError, ValueError):
        return None


def parse_schedstat(text: str) -> int | None:
    """ns spent on a CPU, from /proc/PID/schedstat ("run_ns wait_ns timeslices")."""
    try:
        return int(text.split()[0])
    except (IndexError, ValueError):
        return None


class _ProcEvent:
    """A /proc field standing where a perf EventSpec would (``name``, ``kind``, no PMU)."""

    kind = "proc"
    scale = 1.0
    unit = None
    needs_pmu = False

    def __init__(self, name: str) -> None:
        self.name = name


class ProcTracer(Tracer):
    """Per-thread CPU time and last CPU, polled from /proc."""

    name = "proc"
    approximate = True
    counts_intervals = True
    counter_source = SOURCE

    def __init__(self, proc: Path = Path("/proc")) -> None:
        self.proc = proc
        self._tick_ns = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
        self._roots: list[int] | None = None
        self._last: dict[int, tuple[int, int]] = {}     # tid -> (cpu ns, tgid)
        self._tasks = TaskTable(proc)
        # record --events: what /proc gives per thread and poll (trace/proc_counters.py)
        self._cvals: dict[int, tuple[int, ...]] = {}
        self._cprev: dict[int, tuple[int, ...]] = {}
        self._ct = 0

    @classmethod
    def status(cls) -> SourceStatus:
        ok = Path("/proc/self/task").is_dir()
        return SourceStatus("trace:proc", ok,
                            "approximate: CPU time per thread at each interval, charged to its "
                            "last CPU" if ok else "/proc is not mounted", None)

    def follow(self, pids: Iterable[int]) -> bool:
        if self._roots is not None:
            self._roots.extend(p for p in pids if p not in self._roots)
        return True

    def _pids(self) -> list[int]:
        if self._roots is None:
            return [int(p.name) for p in self.proc.iterdir() if p.name.isdigit()]
        return tree_of(self._roots, self.proc)

    def _poll(self) -> dict[int, tuple[int, int, int, str, int]]:
        """tid -> (cpu ns, last cpu, tgid, comm, ppid) of every followed thread now."""
        out = {}
        for pid in self._pids():
            try:
                tids = [t.name for t in (self.proc / str(pid) / "task").iterdir()]
            except OSError:
                continue
            for name in tids:
                base = self.proc / str(pid) / "task" / name
                try:
                    text = read_name_text(base / "stat")
                    st = parse_stat(text)
                    sched = read_name_text(base / "schedstat") if st else ""
                except OSError:
                    continue
                if st is None:
                    continue
                comm, ppid, ticks, cpu = st
                if self.counter_specs:
                    vals = read_thread(base, text, self._tick_ns)
                    if vals is not None:
                        self._cvals[int(name)] = vals
                ns = parse_schedstat(sched)
                out[int(name)] = (ns if ns is not None else ticks * self._tick_ns, cpu, pid,
                                  comm, ppid)
        return out

    def start(self, pids: Iterable[int] | None = None) -> None:
        self._roots = list(pids) if pids is not None else None
        if self.counter_specs:      # what it counts instead of perf events
            self.counter_dropped = [f"{s.name} not counted by the proc backend (perf events "
                                    "need the libbpf backend)" for s in self.counter_specs]
            self.counter_specs = [_ProcEvent(n) for n in PROC_EVENTS]
        self._ct = time.monotonic_ns()
        for tid, (ns, _cpu, tgid, comm, ppid) in self._poll().items():
            self._last[tid] = (ns, tgid)
            self._tasks.learn(tid, tgid=tgid, comm=comm, ppid=ppid)
        self._cprev, self._cvals = self._cvals, {}     # the first interval's baseline

    def read(self) -> ev.EventBatch:
        now = time.monotonic_ns()
        cur = self._poll()
        rows = []
        for tid, (ns, cpu, tgid, comm, ppid) in cur.items():
            prev = self._last.get(tid, (0, tgid))[0]
            self._tasks.learn(tid, tgid=tgid, comm=comm, ppid=ppid, t_ns=now)
            if ns > prev:
                rows.append((now, cpu, ev.RUN, tid, 0, tgid, -1, ns - prev))
        for tid, (_ns, tgid) in self._last.items():
            if tid not in cur:
                rows.append((now, 0, ev.EXIT, tid, 0, tgid, -1, 0))
        self._last = {tid: (v[0], v[2]) for tid, v in cur.items()}
        events = np.array(rows, dtype=ev.EVENT_DTYPE) if rows else ev.empty_events()
        batch = ev.EventBatch(events=events, tasks=self._tasks.take_infos())
        if self.counter_specs:
            where = {tid: (v[2], v[1]) for tid, v in cur.items()}
            batch.counters = interval_rows(self._cprev, self._cvals, where, self._ct, now)
            self._cprev, self._cvals, self._ct = self._cvals, {}, now
        return batch

    def stop(self) -> ev.EventBatch:
        return self.read()
