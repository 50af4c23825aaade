"""What /proc gives per thread, as counters per polling interval (the proc backend's answer to
``record --events``): CPU time in user and kernel mode, minor and major faults (proc(5),
/proc/PID/task/TID/stat fields 10, 12, 14, 15) and voluntary and involuntary context
switches (``status``). One row per thread and poll, from the previous poll to this one,
charged to the PU the thread last ran on: as approximate as the backend's run time (a thread
that moved inside the interval is charged to its last PU; one that lived less than an
interval is missed), and said so in the header's ``counters.source``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from snumap_tui.trace.counters import counter_dtype

PROC_EVENTS = ["proc:utime-ns", "proc:stime-ns", "proc:minor-faults", "proc:major-faults",
               "proc:voluntary-switches", "proc:involuntary-switches"]
SOURCE = ("/proc polling: per thread per interval, charged to its last PU (approximate; "
          "perf events need the libbpf backend)")


def parse_stat_counters(text: str, tick_ns: int) -> tuple[int, int, int, int] | None:
    """(utime ns, stime ns, minflt, majflt) of a /proc/.../stat line."""
    rp = text.rfind(")")
    rest = text[rp + 2:].split() if rp >= 0 else []
    try:       # rest[k - 3] is field k
        return int(rest[11]) * tick_ns, int(rest[12]) * tick_ns, int(rest[7]), int(rest[9])
    except (IndexError, ValueError):
        return None


def parse_status_switches(text: str) -> tuple[int, int]:
    """(voluntary, nonvoluntary) context switches of a /proc/.../status text (0 if absent)."""
    vol = invol = 0
    for line in text.splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            vol = int(line.split()[1])
        elif line.startswith("nonvoluntary_ctxt_switches:"):
            invol = int(line.split()[1])
    return vol, invol


def read_thread(base: Path, stat_text: str, tick_ns: int) -> tuple[int, ...] | None:
    """The six cumulative values of one thread (its stat line already read)."""
    st = parse_stat_counters(stat_text, tick_ns)
    if st is None:
        return None
    try:
        sw = parse_status_switches((base / "status").read_text(errors="replace"))
    except OSError:
        sw = (0, 0)
    return (*st, *sw)


def interval_rows(prev: dict[int, tuple[int, ...]], cur: dict[int, tuple[int, ...]],
                  where: dict[int, tuple[int, int]], t0: int, t1: int) -> np.ndarray:
    """Rows (counter_dtype(6)) for the threads seen at both polls whose values moved:
    ``where`` maps tid -> (tgid, last cpu)."""
    tids = [t for t in cur if t in prev and cur[t] != prev[t]]
    rows = np.zeros(len(tids), counter_dtype(len(PROC_EVENTS)))
    for i, t in enumerate(tids):
        rows[i]["t_start"], rows[i]["t_end"] = t0, t1
        rows[i]["tid"] = t
        rows[i]["pid"], rows[i]["cpu"] = where[t]
        rows[i]["n"] = len(PROC_EVENTS)
        rows[i]["value"] = np.maximum(np.subtract(cur[t], prev[t]), 0)
        rows[i]["enabled"] = rows[i]["running"] = t1 - t0
    return rows
