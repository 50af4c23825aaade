"""Per batch job: CPU seconds and resident memory per NUMA node, hardware counters.

A job is what ``sources.jobs.detect_job`` finds in a process's cgroup (Slurm's ``job_N``,
PBS's job id). From the tasks readings of successive Samples:

- CPU seconds per NUMA node: each of the job's threads' tick delta over the interval
  (``taskrows.thread_deltas``, the same pairing as the process view) is given to the NUMA node
  of the PU it last ran on (/proc/PID/task/TID/stat field 39), and added up;
- resident memory per NUMA node: /proc/PID/numa_maps of the job's processes, which the tasks
  source re-reads every ``refresh_s`` (a page walk: the slower cadence);
- hardware counters: the per-thread perf counters the tasks source opens on watched processes
  (``TasksSource.want_counters``), their deltas added up per job.

Counters start when the exporter first sees the job; a job with no process left is dropped
at the next full process list, so the state does not grow with every job ever seen.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from snumap_tui.exporter.families import node_of_cpu
from snumap_tui.model.metrics import perf_counter_name
from snumap_tui.model.taskrows import reading_hz, thread_deltas
from snumap_tui.topology.model import Topology

BATCH_SCHEDULERS = ("slurm", "pbs")
JobKey = tuple[str, str, str]          # (scheduler, job id, user)


def split_job(job: str | None) -> tuple[str, str] | None:
    """"slurm:1234" -> ("slurm", "1234"); None for no job or a systemd unit."""
    if not job:
        return None
    sched, _, jid = job.partition(":")
    return (sched, jid) if sched in BATCH_SCHEDULERS and jid else None


@dataclass
class JobSnapshot:
    cpu_seconds: dict[tuple[JobKey, str], float] = field(default_factory=dict)  # (job, node)
    resident_bytes: dict[tuple[JobKey, str], float] = field(default_factory=dict)
    counters: dict[tuple[JobKey, str], float] = field(default_factory=dict)    # (job, counter)
    processes: dict[JobKey, int] = field(default_factory=dict)


class JobTotals:
    """Accumulates per-job series from the tasks readings."""

    def __init__(self, topology: Topology, page_bytes: int | None = None) -> None:
        self.node_of = node_of_cpu(topology)
        self.page_bytes = page_bytes or os.sysconf("SC_PAGE_SIZE")
        self.pids: dict[int, JobKey] = {}
        self._prev_threads: dict[str, np.ndarray] | None = None
        self._prev_counters: dict[int, dict[str, float]] = {}
        self._cpu: dict[tuple[JobKey, str], float] = {}
        self._mem: dict[JobKey, dict[str, float]] = {}
        self._mem_pid: dict[int, dict[str, float]] = {}
        self._covered: np.ndarray | None = None
        self._cnt: dict[tuple[JobKey, str], float] = {}
        self.snapshot = JobSnapshot()

    def add(self, reading: Mapping[str, Any] | None) -> bool:
        """Take one tasks reading; True when the set of job processes changed (the caller
        then asks the sampler to watch the new set)."""
        if not reading:
            return False
        procs: Mapping[int, Mapping[str, Any]] = reading.get("processes") or {}
        partial = reading.get("partial")
        before = set(self.pids)
        for pid, info in procs.items():
            sj = split_job(info.get("job"))
            if sj is not None:
                self.pids[int(pid)] = (sj[0], sj[1], str(info.get("user") or ""))
        if partial is None:                     # a full list: forget the processes that ended
            self.pids = {p: k for p, k in self.pids.items() if p in procs}
        self._cpu_time(reading, partial)
        self._memory(procs)
        self._perf(procs)
        live = set(self.pids.values())
        if partial is None:
            self._cpu = {k: v for k, v in self._cpu.items() if k[0] in live}
            self._cnt = {k: v for k, v in self._cnt.items() if k[0] in live}
            self._prev_counters = {p: v for p, v in self._prev_counters.items()
                                   if p in self.pids}
        nproc: dict[JobKey, int] = {}
        for k in self.pids.values():
            nproc[k] = nproc.get(k, 0) + 1
        self.snapshot = JobSnapshot(
            cpu_seconds=dict(self._cpu),
            resident_bytes={(k, n): v for k, m in self._mem.items() for n, v in m.items()},
            counters=dict(self._cnt), processes=nproc)
        return set(self.pids) != before

    def _cpu_time(self, reading: Mapping[str, Any], partial: Any) -> None:
        threads = reading.get("threads") or {}
        pid = np.asarray(threads.get("pid", ()), dtype=np.int64)
        mine = np.isin(pid, np.fromiter(self.pids, dtype=np.int64, count=len(self.pids)))
        cur = {k: np.asarray(threads[k])[mine] for k in ("pid", "tid", "last_cpu", "utime",
                                                          "stime") if k in threads}
        prev, covered = self._prev_threads, self._covered
        self._prev_threads = cur
        self._covered = None if partial is None else np.asarray(partial, dtype=np.int64)
        if prev is None or not mine.any():
            return
        d = thread_deltas(prev, cur, covered)
        hz = reading_hz(reading)
        for p, cpu, ticks in zip(cur["pid"].tolist(), cur["last_cpu"].tolist(), d.tolist()):
            if math.isnan(ticks) or ticks <= 0:
                continue
            key = (self.pids[p], self.node_of.get(cpu, ""))
            self._cpu[key] = self._cpu.get(key, 0.0) + ticks / hz

    def _memory(self, procs: Mapping[int, Mapping[str, Any]]) -> None:
        """Resident bytes per node of each job: the last numa_maps of each of its processes
        (a process missing from a partial reading, or whose numa_maps could not be read this
        time, keeps its last one)."""
        for pid in self.pids:
            pages = (procs.get(pid) or {}).get("numa_pages")
            if pages is not None:
                self._mem_pid[pid] = {str(n): float(v) * self.page_bytes
                                      for n, v in pages.items()}
        self._mem_pid = {p: v for p, v in self._mem_pid.items() if p in self.pids}
        mem: dict[JobKey, dict[str, float]] = {}
        for pid, per_node in self._mem_pid.items():
            per = mem.setdefault(self.pids[pid], {})
            for n, b in per_node.items():
                per[n] = per.get(n, 0.0) + b
        self._mem = mem

    def _perf(self, procs: Mapping[int, Mapping[str, Any]]) -> None:
        for pid, key in self.pids.items():
            c = (procs.get(pid) or {}).get("counters")
            if not c:
                continue
            now = {perf_counter_name(e): float(v) for e, v in zip(c["events"], c["value"])}
            was = self._prev_counters.get(pid)
            self._prev_counters[pid] = now
            if was is None:
                continue
            for name, v in now.items():
                d = v - was.get(name, math.nan)
                if d >= 0:
                    k = (key, name)
                    self._cnt[k] = self._cnt.get(k, 0.0) + d
