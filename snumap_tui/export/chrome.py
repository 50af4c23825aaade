"""A recording as a Chrome trace (the JSON "Trace Event Format" that chrome://tracing and
Perfetto's UI open), for small recordings (`snumap export` refuses above 1 M events and points
at --format perfetto, whose native trace loads at any size).

Layout:
- a process "CPUs" whose threads are the PUs (tid = OS index + 1, named "CPU n", sorted by OS
  index): each run interval a complete event (ph "X") named by the thread's comm and tid, with
  the pid/tid of the real task in ``args``;
- every traced process with its threads (their real pid and tid): each run interval again, on
  the thread's own track, named "CPU n";
- a process "metrics" with counter events (ph "C"): utilisation and IPC per PU, power per
  package, memory per NUMA node (export/counters.py);
- markers as global instant events (ph "i", s "g").
The two synthetic processes take pids above any kernel pid (pid_max is at most 2^22).

Regions (OpenMP regions, MPI calls, --probe functions, marker phases; store/regions.py) are
complete events on the tracks of the threads that ran them (pid and tid of the real task, so
the viewer groups them by process), category the region's kind (``omp``, ``mpi``, ``user``,
``marker``, plus ``wait`` for barriers and MPI waits); ``mark`` lines are instant events on
their thread (global when the writer did not say its tid).


Time base: ``ts``/``dur`` are microseconds (the format's unit) of the recording's
CLOCK_MONOTONIC clock, unchanged (floats, so nanoseconds survive as fractions): the same clock
as CSV, Parquet and Perfetto exports, and as the recording itself.

Written as a stream, one CPU at a time, so the trace is never one JSON object in memory.

A job merged from several nodes (``nodes``: each node's name and first merged PU number) keeps
one machine per node: one process per node ("CPUs of n1", pid = CPU_PID + node index) whose
tracks are that node's PUs by their own numbers; tasks are named ``comm node:tid``.
"""

from __future__ import annotations

import itertools
import json
from bisect import bisect_right
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import IO, Any

import numpy as np

from snumap_tui.analysis.intervals import UNTRACED, Intervals
from snumap_tui.export.counters import Track
from snumap_tui.export.tables import UNTRACED_COMM
from snumap_tui.store.regions import Regions
from snumap_tui.trace.events import TaskInfo
from snumap_tui.trace.region_catalog import MARK

CPU_PID = 1 << 30            # the synthetic "process" that holds one track per PU
METRICS_PID = CPU_PID - 1    # ... and the one that holds the counters (nodes count up)
Counters = tuple[list[Track], Iterator[tuple[int, np.ndarray, np.ndarray]]]


def _names(tasks: Mapping[int, TaskInfo], label: Callable[[int], str] = str) -> dict[int, str]:
    """Slice names by tid: "comm tid", and the untraced pseudo-task's name without a tid."""
    out = {tid: f"{info.comm} {label(tid)}" for tid, info in tasks.items()}
    out[UNTRACED] = UNTRACED_COMM
    return out


def _thread_events(iv: Intervals, tasks: Mapping[int, TaskInfo],
                   label: Callable[[int], str] = str) -> Iterator[dict[str, Any]]:
    """Each traced thread's run intervals on its own track (real pid, tid)."""
    cpu, start, end, tid = iv.flat()
    keep = tid > 0
    cpu, start, end, tid = cpu[keep], start[keep], end[keep], tid[keep]
    order = np.lexsort((start, tid))
    cpu, start, end, tid = cpu[order], start[order], end[order], tid[order]
    pid = iv.pids(tid)
    pids = np.where(pid > 0, pid, tid)
    for p in np.unique(pids).tolist():
        main = tasks.get(p)
        yield {"ph": "M", "name": "process_name", "pid": p, "tid": 0,
               "args": {"name": main.comm if main else f"pid {p}"}}
    for t in np.unique(tid).tolist():
        info = tasks.get(t)
        p = info.pid if info and info.pid > 0 else iv.pid_of_tid.get(t, t)
        yield {"ph": "M", "name": "thread_name", "pid": p if p > 0 else t, "tid": t,
               "args": {"name": f"{info.comm if info else '?'} {label(t)}"}}
    for c, s, e, t, p in zip(cpu.tolist(), start.tolist(), end.tolist(), tid.tolist(),
                             pids.tolist()):
        yield {"ph": "X", "name": f"CPU {c}", "cat": "thread", "pid": p, "tid": t,
               "ts": s / 1e3, "dur": (e - s) / 1e3, "args": {"cpu": c}}


def _counter_events(counters: Counters) -> Iterator[dict[str, Any]]:
    tracks, values = counters
    first = True
    for t_ns, idx, vals in values:
        if first:
            yield {"ph": "M", "name": "process_name", "pid": METRICS_PID, "tid": 0,
                   "args": {"name": "metrics"}}
            first = False
        for i, v in zip(idx.tolist(), vals.tolist()):
            yield {"ph": "C", "name": tracks[i].name, "pid": METRICS_PID, "tid": 0,
                   "ts": t_ns / 1e3, "args": {"value": v}}


def chrome_events(iv: Intervals, tasks: Mapping[int, TaskInfo],
                  markers: list[tuple[int, str]] = (),   # type: ignore[assignment]
                  host: str | None = None, counters: Counters | None = None,
                  nodes: Sequence[tuple[str, int]] | None = None,
                  label: Callable[[int], str] = str) -> Iterator[dict[str, Any]]:
    """The trace's events in order: metadata, each CPU's slices, each thread's slices,
    counters, markers."""
    names = _names(tasks, label)
    machines = list(nodes) if nodes else [(host or "", 0)]
    bases = [b for _, b in machines]

    def where(cpu: int) -> tuple[int, int]:      # (pid of its machine, its own PU number)
        k = max(0, bisect_right(bases, cpu) - 1)
        return CPU_PID + k, cpu - bases[k]

    for k, (name, _base) in enumerate(machines):
        yield {"ph": "M", "name": "process_name", "pid": CPU_PID + k, "tid": 0,
               "args": {"name": f"CPUs{' of ' + name if name else ''}"}}
        yield {"ph": "M", "name": "process_sort_index", "pid": CPU_PID + k, "tid": 0,
               "args": {"sort_index": k - len(machines)}}
    for cpu in iv.cpus.tolist():
        pid, own = where(cpu)
        yield {"ph": "M", "name": "thread_name", "pid": pid, "tid": own + 1,
               "args": {"name": f"CPU {own}"}}
        yield {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": own + 1,
               "args": {"sort_index": own}}
    for r, cpu in enumerate(iv.cpus.tolist()):
        tids = iv.tid[r].tolist()
        pids = iv.pids(iv.tid[r]).tolist()
        mpid, own = where(cpu)
        for s, e, tid, pid in zip(iv.start[r].tolist(), iv.end[r].tolist(), tids, pids):
            yield {"ph": "X", "name": names.get(tid) or f"? {tid}", "cat": "sched",
                   "pid": mpid, "tid": own + 1, "ts": s / 1e3, "dur": (e - s) / 1e3,
                   "args": {"tid": tid, "pid": pid}}
    yield from _thread_events(iv, tasks, label)
    if counters is not None:
        yield from _counter_events(counters)
    for t, text in markers:
        yield {"ph": "i", "s": "g", "name": text, "pid": CPU_PID, "tid": 0, "ts": t / 1e3}


def region_events(reg: Regions, tasks: Mapping[int, TaskInfo],
                  bounds: tuple[int, int] | None = None) -> Iterator[dict[str, Any]]:
    """Region instances as slices on their threads' tracks, marks as instants (times on the
    recording's clock, as every other event). With the recording's BOUNDS, an instance open
    at its start or end is clipped to it, ``args.clipped`` saying where."""
    from snumap_tui.analysis.regions import CUT_NAMES, instances

    inst, cut = instances(reg.rows, bounds)
    named: set[tuple[int, int]] = set()
    for pid, tid in sorted(set(zip(inst.pid.tolist(), inst.tid.tolist()))):
        if tid <= 0:
            continue
        if (pid, 0) not in named:
            named.add((pid, 0))
            info = tasks.get(pid)
            yield {"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                   "args": {"name": f"{info.comm if info else '?'} {pid}"}}
        info = tasks.get(tid)
        yield {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
               "args": {"name": f"{info.comm if info else '?'} {tid}"}}
    for rid, tid, pid, s, e, c in zip(inst.rid.tolist(), inst.tid.tolist(), inst.pid.tolist(),
                                      inst.start.tolist(), inst.end.tolist(), cut.tolist()):
        n = reg.names[rid]
        where = {"pid": pid, "tid": tid} if tid > 0 else {"pid": CPU_PID, "tid": 0}
        args = {"role": n.role, "clipped": CUT_NAMES[c]} if c else {"role": n.role}
        yield {"ph": "X", "name": n.name, "cat": n.kind + (",wait" if n.wait else ""),
               **where, "ts": s / 1e3, "dur": (e - s) / 1e3, "args": args}
    for r in reg.rows[reg.rows["op"] == MARK]:
        tid, pid = int(r["tid"]), int(r["pid"])
        ev: dict[str, Any] = {"ph": "i", "name": reg.names[int(r["rid"])].name, "cat": "marker",
                              "ts": int(r["t_ns"]) / 1e3}
        if tid > 0:
            ev.update({"s": "t", "pid": pid or tid, "tid": tid})
        else:
            ev.update({"s": "g", "pid": CPU_PID, "tid": 0})
        yield ev


def write_chrome(out: IO[str], iv: Intervals, tasks: Mapping[int, TaskInfo],
                 markers: list[tuple[int, str]] = (),   # type: ignore[assignment]
                 host: str | None = None, meta: Mapping[str, Any] | None = None,
                 counters: Counters | None = None,
                 nodes: Sequence[tuple[str, int]] | None = None,
                 label: Callable[[int], str] = str,
                 regions: Regions | None = None) -> int:
    """Write the JSON object form ({"traceEvents": [...], ...}); returns the event count."""
    out.write('{"displayTimeUnit": "ns", "otherData": ')
    out.write(json.dumps(dict(meta or {})))
    out.write(', "traceEvents": [\n')
    n = 0
    evs: Iterator[dict[str, Any]] = chrome_events(iv, tasks, markers, host, counters, nodes,
                                                  label)
    if regions is not None and len(regions):
        evs = itertools.chain(evs, region_events(regions, tasks, (iv.t0, iv.t1)))
    for ev in evs:
        if n:
            out.write(",\n")
        out.write(json.dumps(ev, separators=(",", ":")))
        n += 1
    out.write("\n]}\n")
    return n
