"""A recording as a Chrome trace (the JSON "Trace Event Format" that chrome://tracing and
Perfetto's UI open).

Layout: one process "CPUs" whose threads are the PUs (tid = OS index + 1, named "CPU n" and
sorted by OS index), so each PU is one track; each run interval is a complete event (ph "X")
named by the thread's comm and tid, with the pid/tid of the real task in ``args``. Markers are
global instant events (ph "i", s "g"); utilisation per PU from the intervals is not duplicated.
Timestamps are microseconds (floats, so nanoseconds survive as fractions) from the recording's
start, as the format specifies ``ts``/``dur`` in microseconds.

Regions (OpenMP regions, MPI calls, --probe functions, marker phases; store/regions.py) are
complete events on the tracks of the threads that ran them (pid and tid of the real task, so
the viewer groups them by process), category the region's kind (``omp``, ``mpi``, ``user``,
``marker``, plus ``wait`` for barriers and MPI waits); ``mark`` lines are instant events on
their thread (global when the writer did not say its tid).

Written as a stream, one CPU at a time, so a large recording is never one JSON object in memory.

A job merged from several nodes (``nodes``: each node's name and first merged PU number) keeps
one machine per node: one process per node ("CPUs of n1", pid = node index + 1) whose tracks
are that node's PUs by their own numbers; tasks are named ``comm node:tid``.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import IO, Any

from snumap_tui.analysis.intervals import UNTRACED, Intervals
from snumap_tui.export.tables import UNTRACED_COMM
from snumap_tui.store.regions import Regions
from snumap_tui.trace.events import TaskInfo
from snumap_tui.trace.region_catalog import MARK

CPU_PID = 1          # the synthetic "process" that holds one track per PU


def _names(tasks: Mapping[int, TaskInfo], label: Callable[[int], str] = str) -> dict[int, str]:
    """Slice names by tid: "comm tid", and the untraced pseudo-task's name without a tid."""
    out = {tid: f"{info.comm} {label(tid)}" for tid, info in tasks.items()}
    out[UNTRACED] = UNTRACED_COMM
    return out


def chrome_events(iv: Intervals, tasks: Mapping[int, TaskInfo],
                  markers: list[tuple[int, str]] = (),   # type: ignore[assignment]
                  host: str | None = None, nodes: Sequence[tuple[str, int]] | None = None,
                  label: Callable[[int], str] = str) -> Iterator[dict[str, Any]]:
    """The trace's events in order: metadata, then each CPU's slices, then markers."""
    names = _names(tasks, label)
    machines = list(nodes) if nodes else [(host or "", 0)]
    bases = [b for _, b in machines]

    def where(cpu: int) -> tuple[int, int]:      # (pid of its machine, its own PU number)
        k = max(0, bisect_right(bases, cpu) - 1)
        return CPU_PID + k, cpu - bases[k]

    for k, (name, _base) in enumerate(machines):
        yield {"ph": "M", "name": "process_name", "pid": CPU_PID + k, "tid": 0,
               "args": {"name": f"CPUs{' of ' + name if name else ''}"}}
        if nodes:
            yield {"ph": "M", "name": "process_sort_index", "pid": CPU_PID + k, "tid": 0,
                   "args": {"sort_index": k}}
    for cpu in iv.cpus.tolist():
        pid, own = where(cpu)
        yield {"ph": "M", "name": "thread_name", "pid": pid, "tid": own + 1,
               "args": {"name": f"CPU {own}"}}
        yield {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": own + 1,
               "args": {"sort_index": own}}
    t0 = iv.t0
    for r, cpu in enumerate(iv.cpus.tolist()):
        tids = iv.tid[r].tolist()
        pids = iv.pids(iv.tid[r]).tolist()
        mpid, own = where(cpu)
        for s, e, tid, pid in zip(iv.start[r].tolist(), iv.end[r].tolist(), tids, pids):
            yield {"ph": "X", "name": names.get(tid) or f"? {tid}", "cat": "sched",
                   "pid": mpid, "tid": own + 1, "ts": (s - t0) / 1e3, "dur": (e - s) / 1e3,
                   "args": {"tid": tid, "pid": pid}}
    for t, text in markers:
        yield {"ph": "i", "s": "g", "name": text, "pid": CPU_PID, "tid": 0, "ts": (t - t0) / 1e3}


def region_events(reg: Regions, tasks: Mapping[int, TaskInfo], t0: int
                  ) -> Iterator[dict[str, Any]]:
    """Region instances as slices on their threads' tracks, marks as instants."""
    from snumap_tui.analysis.regions import pair

    inst = pair(reg.rows)
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
    for rid, tid, pid, s, e in zip(inst.rid.tolist(), inst.tid.tolist(), inst.pid.tolist(),
                                   inst.start.tolist(), inst.end.tolist()):
        n = reg.names[rid]
        where = {"pid": pid, "tid": tid} if tid > 0 else {"pid": CPU_PID, "tid": 0}
        yield {"ph": "X", "name": n.name, "cat": n.kind + (",wait" if n.wait else ""),
               **where, "ts": (s - t0) / 1e3, "dur": (e - s) / 1e3, "args": {"role": n.role}}
    for r in reg.rows[reg.rows["op"] == MARK]:
        tid, pid = int(r["tid"]), int(r["pid"])
        ev: dict[str, Any] = {"ph": "i", "name": reg.names[int(r["rid"])].name, "cat": "marker",
                              "ts": (int(r["t_ns"]) - t0) / 1e3}
        if tid > 0:
            ev.update({"s": "t", "pid": pid or tid, "tid": tid})
        else:
            ev.update({"s": "g", "pid": CPU_PID, "tid": 0})
        yield ev


def write_chrome(out: IO[str], iv: Intervals, tasks: Mapping[int, TaskInfo],
                 markers: list[tuple[int, str]] = (),   # type: ignore[assignment]
                 host: str | None = None, meta: Mapping[str, Any] | None = None,
                 nodes: Sequence[tuple[str, int]] | None = None,
                 label: Callable[[int], str] = str,
                 regions: Regions | None = None) -> int:
    """Write the JSON object form ({"traceEvents": [...], ...}); returns the event count."""
    out.write('{"displayTimeUnit": "ns", "otherData": ')
    out.write(json.dumps(dict(meta or {})))
    out.write(', "traceEvents": [\n')
    n = 0
    evs: Iterator[dict[str, Any]] = chrome_events(iv, tasks, markers, host, nodes, label)
    if regions is not None and len(regions):
        import itertools

        evs = itertools.chain(evs, region_events(regions, tasks, iv.t0))
    for ev in evs:
        if n:
            out.write(",\n")
        out.write(json.dumps(ev, separators=(",", ":")))
        n += 1
    out.write("\n]}\n")
    return n
