"""A recording as a Chrome trace (the JSON "Trace Event Format" that chrome://tracing and
Perfetto's UI open).

Layout: one process "CPUs" whose threads are the PUs (tid = OS index + 1, named "CPU n" and
sorted by OS index), so each PU is one track; each run interval is a complete event (ph "X")
named by the thread's comm and tid, with the pid/tid of the real task in ``args``. Markers are
global instant events (ph "i", s "g"); utilisation per PU from the intervals is not duplicated.
Timestamps are microseconds (floats, so nanoseconds survive as fractions) from the recording's
start, as the format specifies ``ts``/``dur`` in microseconds.

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
from snumap_tui.trace.events import TaskInfo

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


def write_chrome(out: IO[str], iv: Intervals, tasks: Mapping[int, TaskInfo],
                 markers: list[tuple[int, str]] = (),   # type: ignore[assignment]
                 host: str | None = None, meta: Mapping[str, Any] | None = None,
                 nodes: Sequence[tuple[str, int]] | None = None,
                 label: Callable[[int], str] = str) -> int:
    """Write the JSON object form ({"traceEvents": [...], ...}); returns the event count."""
    out.write('{"displayTimeUnit": "ns", "otherData": ')
    out.write(json.dumps(dict(meta or {})))
    out.write(', "traceEvents": [\n')
    n = 0
    for ev in chrome_events(iv, tasks, markers, host, nodes, label):
        if n:
            out.write(",\n")
        out.write(json.dumps(ev, separators=(",", ":")))
        n += 1
    out.write("\n]}\n")
    return n
