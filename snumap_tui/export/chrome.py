"""A recording as a Chrome trace (the JSON "Trace Event Format" that chrome://tracing and
Perfetto's UI open).

Layout: one process "CPUs" whose threads are the PUs (tid = OS index + 1, named "CPU n" and
sorted by OS index), so each PU is one track; each run interval is a complete event (ph "X")
named by the thread's comm and tid, with the pid/tid of the real task in ``args``. Markers are
global instant events (ph "i", s "g"); utilisation per PU from the intervals is not duplicated.
Timestamps are microseconds (floats, so nanoseconds survive as fractions) from the recording's
start, as the format specifies ``ts``/``dur`` in microseconds.

Written as a stream, one CPU at a time, so a large recording is never one JSON object in memory.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import IO, Any

from snumap_tui.analysis.intervals import UNTRACED, Intervals
from snumap_tui.export.tables import UNTRACED_COMM
from snumap_tui.trace.events import TaskInfo

CPU_PID = 1          # the synthetic "process" that holds one track per PU


def _names(tasks: Mapping[int, TaskInfo]) -> dict[int, str]:
    """Slice names by tid: "comm tid", and the untraced pseudo-task's name without a tid."""
    out = {tid: f"{info.comm} {tid}" for tid, info in tasks.items()}
    out[UNTRACED] = UNTRACED_COMM
    return out


def chrome_events(iv: Intervals, tasks: Mapping[int, TaskInfo],
                  markers: list[tuple[int, str]] = (),   # type: ignore[assignment]
                  host: str | None = None) -> Iterator[dict[str, Any]]:
    """The trace's events in order: metadata, then each CPU's slices, then markers."""
    names = _names(tasks)
    yield {"ph": "M", "name": "process_name", "pid": CPU_PID, "tid": 0,
           "args": {"name": f"CPUs{' of ' + host if host else ''}"}}
    for cpu in iv.cpus.tolist():
        yield {"ph": "M", "name": "thread_name", "pid": CPU_PID, "tid": cpu + 1,
               "args": {"name": f"CPU {cpu}"}}
        yield {"ph": "M", "name": "thread_sort_index", "pid": CPU_PID, "tid": cpu + 1,
               "args": {"sort_index": cpu}}
    t0 = iv.t0
    for r, cpu in enumerate(iv.cpus.tolist()):
        tids = iv.tid[r].tolist()
        pids = iv.pids(iv.tid[r]).tolist()
        for s, e, tid, pid in zip(iv.start[r].tolist(), iv.end[r].tolist(), tids, pids):
            yield {"ph": "X", "name": names.get(tid) or f"? {tid}", "cat": "sched",
                   "pid": CPU_PID, "tid": cpu + 1, "ts": (s - t0) / 1e3, "dur": (e - s) / 1e3,
                   "args": {"tid": tid, "pid": pid}}
    for t, text in markers:
        yield {"ph": "i", "s": "g", "name": text, "pid": CPU_PID, "tid": 0, "ts": (t - t0) / 1e3}


def write_chrome(out: IO[str], iv: Intervals, tasks: Mapping[int, TaskInfo],
                 markers: list[tuple[int, str]] = (),   # type: ignore[assignment]
                 host: str | None = None, meta: Mapping[str, Any] | None = None) -> int:
    """Write the JSON object form ({"traceEvents": [...], ...}); returns the event count."""
    out.write('{"displayTimeUnit": "ns", "otherData": ')
    out.write(json.dumps(dict(meta or {})))
    out.write(', "traceEvents": [\n')
    n = 0
    for ev in chrome_events(iv, tasks, markers, host):
        if n:
            out.write(",\n")
        out.write(json.dumps(ev, separators=(",", ":")))
        n += 1
    out.write("\n]}\n")
    return n
