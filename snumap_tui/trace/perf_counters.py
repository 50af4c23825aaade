"""Counters per thread for the perf tracepoint backend (``record --events`` there): each event
opened on each traced thread (pid = tid, cpu -1: it follows the thread across PUs), read at
every decode (10 times a second), one row per thread and read.

Coarser than the libbpf backend's run intervals, and it says so in the header: a row covers
the time between two reads, not one run, and is charged to the PU of the thread's last switch
(its intervals on other PUs in between are not told apart); a thread's counters open when
the tracer first reports it (its fork), so what it counted before that read is missed.
enabled/running are kept per row: hardware events on threads are multiplexed by the kernel
like any others.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable

import numpy as np

from snumap_tui.native import perf_event as pe
from snumap_tui.native import perf_spec
from snumap_tui.trace import events as ev
from snumap_tui.trace.counters import _attr, counter_dtype

SOURCE = ("perf: per-thread counters read 10 times a second, charged to the thread's last PU "
          "(coarser than libbpf's per run interval)")
FORMAT = pe.PERF_FORMAT_TOTAL_TIME_ENABLED | pe.PERF_FORMAT_TOTAL_TIME_RUNNING


class ThreadReads:
    """Counters on threads: ``add`` opens them, ``rows`` reads them all into counter rows."""

    def __init__(self, specs: list[perf_spec.EventSpec]) -> None:
        self.specs = specs
        self.fds: dict[int, list[int]] = {}          # tid -> one fd per event (-1: none)
        self.pid: dict[int, int] = {}
        self.cpu: dict[int, int] = {}
        self.last: dict[int, np.ndarray] = {}        # tid -> (3, k) counter, enabled, running
        self.t_last: dict[int, int] = {}
        self.gone: list[int] = []

    def add(self, tid: int, pid: int, t_ns: int) -> None:
        if tid <= 0 or tid in self.fds:
            return
        fds = []
        for spec in self.specs:
            try:
                fds.append(pe.perf_event_open(_attr(spec), tid, -1, event=spec.name))
            except pe.PerfOpenError as e:
                if e.errno not in (errno.ESRCH, errno.ENOENT, errno.EOPNOTSUPP, errno.ENODEV,
                                   errno.EINVAL, errno.EACCES, errno.EPERM):
                    raise
                fds.append(-1)
        self.fds[tid] = fds
        self.pid[tid] = pid
        self.last[tid] = np.zeros((3, len(self.specs)), np.uint64)
        self.t_last[tid] = t_ns

    def see(self, events: np.ndarray, tracked: Iterable[int] | None) -> None:
        """Open counters on the threads these events name (forks' children, switches' both
        sides) that are traced; remember each one's last PU; close those that exited."""
        keep = None if tracked is None else set(tracked)
        sw = events[events["kind"] == ev.SWITCH]
        for tid, pid, cpu, t in zip(sw["tid"].tolist(), sw["pid"].tolist(),
                                    sw["cpu"].tolist(), sw["t_ns"].tolist()):
            if tid > 0 and (keep is None or tid in keep) and pid != ev.OUTSIDE:
                self.add(tid, pid, t)
                self.cpu[tid] = cpu
        fk = events[events["kind"] == ev.FORK]
        for tid, pid, t in zip(fk["tid2"].tolist(), fk["pid2"].tolist(), fk["t_ns"].tolist()):
            if keep is None or tid in keep:
                self.add(tid, pid if pid > 0 else tid, t)
        self.gone += events["tid"][events["kind"] == ev.EXIT].tolist()

    def rows(self, t_ns: int) -> np.ndarray:
        """A row per thread whose counters moved since the last read; exited threads are
        read a last time and closed."""
        k = len(self.specs)
        out = []
        for tid, fds in self.fds.items():
            cur = self.last[tid].copy()
            for i, fd in enumerate(fds):
                if fd < 0:
                    continue
                try:
                    (v,), en, run = pe.read_counter(fd, FORMAT)
                except OSError:
                    continue
                cur[:, i] = (v, en or 0, run or 0)
            d = cur - self.last[tid]
            if d[0].any() or d[1].any():
                row = np.zeros(1, counter_dtype(k))
                row["t_start"], row["t_end"] = self.t_last[tid], t_ns
                row["tid"], row["pid"] = tid, self.pid[tid]
                row["cpu"], row["n"] = max(self.cpu.get(tid, 0), 0), k
                row["value"], row["enabled"], row["running"] = d[0], d[1], d[2]
                out.append(row)
            self.last[tid], self.t_last[tid] = cur, t_ns
        for tid in self.gone:
            self.close_one(tid)
        self.gone = []
        return np.concatenate(out) if out else np.zeros(0, counter_dtype(k))

    def close_one(self, tid: int) -> None:
        for fd in self.fds.pop(tid, []):
            if fd >= 0:
                os.close(fd)
        for d in (self.pid, self.cpu, self.last, self.t_last):
            d.pop(tid, None)

    def close(self) -> None:
        for tid in list(self.fds):
            self.close_one(tid)
