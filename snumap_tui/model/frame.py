"""A Frame: what the views draw. Built by ``derive(prev, cur, topology)`` from two Samples.

``values[metric]`` is a float64 array indexed by ``TopoObject.id`` (NaN = not available for that
object). ``get()`` turns NaN into None: a metric that cannot be computed is None, never 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from snumap_tui.model.iorates import IoRow
    from snumap_tui.model.threadcounts import ThreadDeltas
    from snumap_tui.sources.base import SourceStatus
    from snumap_tui.topology.model import Topology


@dataclass(frozen=True)
class TaskRow:
    pid: int
    tid: int
    comm: str
    user: str
    state: str
    cpu_pct: float | None        # % of one PU over the frame's interval
    last_cpu: int | None         # OS index of the PU it last ran on
    affinity: frozenset[int]     # OS indexes it may run on
    cgroup: str | None = None
    job: str | None = None       # "slurm:1234", "pbs:5678.server", "systemd:foo.service"
    cmdline: str | None = None
    numa_pages: dict[int, int] | None = None   # node OS index -> pages (only when asked)
    nthreads: int = 1
    rss_bytes: int | None = None   # resident set size (/proc/PID/stat field 24 x page size)
    # Per-process perf counters, only for processes asked for (Sampler.watch_counters):
    # per second over the interval, summed over its threads; None when not counted.
    counter_rates: dict[str, float] | None = None   # perf event name -> per second
    ctx_switches_s: float | None = None             # "context-switches" per second
    ipc: float | None = None       # instructions / cycles (None without a hardware PMU)
    ppid: int | None = None        # the parent process (the process tree, F5)
    # CPU time of its live threads since they started, seconds (utime + stime; htop's TIME+
    # also keeps the time of threads that ended)
    cpu_time_s: float | None = None
    # The part of cpu_pct spent in the kernel (stime; the rest, cpu_pct - sys_pct, is user
    # time): the list's CPU column when the chosen metric is system % or user %.
    sys_pct: float | None = None
    # Only for a process with per-thread counters (Sampler.watch_counters): each thread's
    # counts over the interval (model/threadcounts.py), and the process's memory per NUMA
    # node read at this sample (node OS index -> bytes; sources/procmem.py), ``memory_exact``
    # False when it is the RSS split in the last numa_maps walk's proportions.
    threads: ThreadDeltas | None = None
    memory_nodes: dict[int, int] | None = None
    memory_exact: bool | None = None
    memory_error: str | None = None     # why memory_nodes could not be read


@dataclass
class Frame:
    t_ns: int
    wall_ns: int
    dt_s: float
    topology: Topology
    values: dict[str, np.ndarray] = field(default_factory=dict)
    # Process-level rows (threads folded into processes; a thread view is the tasks source's),
    # busiest first. Any read-only Sequence of TaskRow: derive() gives a lazy one whose rows are
    # built on first access (model/taskrows.py), so look one process up with task(pid).
    tasks: Sequence[TaskRow] = field(default_factory=list)
    # Which sources fed this frame and which were unavailable (name -> status).
    sources: dict[str, SourceStatus] = field(default_factory=dict)
    # Per-metric flags, e.g. {"ipc": {"multiplexed"}}.
    flags: dict[str, set[str]] = field(default_factory=dict)
    # One row per NIC, InfiniBand port, disk and GPU, with its rates and where it sits.
    io: Sequence[IoRow] = field(default_factory=list)

    def get(self, metric: str, obj_id: int) -> float | None:
        arr = self.values.get(metric)
        if arr is None:
            return None
        v = float(arr[obj_id])
        return None if math.isnan(v) else v

    def task(self, pid: int) -> TaskRow | None:
        """The row of one process, without building the others' when the rows are lazy."""
        find = getattr(self.tasks, "find", None)
        if find is not None:
            return find(pid)
        return next((t for t in self.tasks if t.pid == pid), None)

    def metrics(self) -> list[str]:
        return list(self.values)

    def to_dict(self, tasks: Sequence[Any] | None = None) -> dict[str, Any]:
        """JSON form used by `snumap top --batch --json`: per object keyed "Type:os_index"
        (or "Type#logical" for objects without an OS index, e.g. caches); ``tasks``: the
        process rows to list (`-p`, `-u`), all of them when None."""
        objs: dict[str, dict[str, float | None]] = {}
        for o in self.topology:
            key = f"{o.type}:{o.os_index}" if o.os_index is not None and not o.is_cache \
                else f"{o.type}#{o.logical_index}"
            row = {m: self.get(m, o.id) for m in self.values}
            objs[key] = {m: v for m, v in row.items() if v is not None}
        return {
            "t_ns": self.t_ns, "wall_ns": self.wall_ns, "dt_s": self.dt_s,
            "objects": objs,
            # A thread's raw counts are not a row field in JSON: `top --batch --json -p PID`
            # adds the figures made from them (analysis/live_threads.py).
            "tasks": [{k: v for k, v in t.__dict__.items() if k != "threads"}
                      | {"affinity": sorted(t.affinity)}
                      for t in (self.tasks if tasks is None else tasks)],
            "sources": {k: s.to_dict() for k, s in self.sources.items()},
            "flags": {k: sorted(v) for k, v in self.flags.items()},
            **({"io": [dict(r.__dict__) for r in self.io]} if self.io else {}),
        }
