"""Scheduling events as one numpy structured array: the currency between tracers, the store,
analysis and the views.

All timestamps are CLOCK_MONOTONIC nanoseconds (bpf_ktime_get_ns(); perf events opened with
use_clockid=1, clockid=CLOCK_MONOTONIC; time.monotonic_ns() for /proc polling and Samples).

Fields per kind:
- SWITCH:   cpu; tid = prev tid; tid2 = next tid; arg = prev_state (kernel's TASK_* bits,
            0 = runnable, i.e. preempted); pid/pid2 = prev/next tgid when known, else -1;
            OUTSIDE (-2) = that task is outside the traced tree (recordings of a command, not
            --system-wide): its run time is "other (not traced)", not a task's. Such a
            recording keeps switches with a traced task on either side and, on CPUs the tree
            has used, switches into and out of idle, so untraced time there is bounded.
            Recordings made before OUTSIDE existed have -1 there (partners counted as tasks).
            arg = -1: a switch-in the kernel did not trace, reconstructed by the tracer
            (trace/reconstruct.py) at the latest event proving the task was not yet running
            (its wakeup_new, its switch-out on another CPU, its migration, its first wakeup
            after a sleep), never earlier than the previous switch on that CPU (perf sched
            timehist's rule, which recordings made before this rule used alone).
            arg = -2: a switch-in the kernel's sched_switch did not report, seen where the
            switch completed (the sched_exit_tp tracepoint, Linux >= 6.16), at that time.
            Only -1 is marked in the run intervals (analysis/intervals.py: ``inferred_ns``);
            -2 is seen, at the time the switch completed.
- WAKEUP / WAKEUP_NEW: cpu = target cpu; tid = woken tid; pid = its tgid (or -1).
- MIGRATE:  cpu = dest cpu; tid; arg = orig cpu.
- FORK:     cpu; tid = parent tid; tid2 = child tid; pid = parent tgid; pid2 = child tgid.
- EXEC:     cpu; tid; pid. (the new comm comes through the task table)
- EXIT:     cpu; tid; pid.
- RUN:      /proc polling only: tid ran on cpu for arg nanoseconds ending at t_ns (approximate).

tid 0 is the idle task ("swapper/N").
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

OUTSIDE = -2     # pid/pid2 of a SWITCH: the task is not in the traced tree (see above)

SWITCH, WAKEUP, WAKEUP_NEW, MIGRATE, FORK, EXEC, EXIT, RUN = 1, 2, 3, 4, 5, 6, 7, 8
# In the eBPF tracers' rings only, never stored: a task's name from that moment on (its 16
# bytes in arg, tid2, pid2; bpf/sched_event.h), turned into a TaskInfo (trace/tasks.py).
COMM = 9
# arg of a SWITCH whose switch-in was not traced: reconstructed from evidence, or seen at the
# end of the switch (see above).
INFERRED_SWITCH_IN, SEEN_SWITCH_IN = -1, -2
# Task ids below this index dense tables (Linux's pid_max is at most 2^22); readers key larger
# ones (a merged job's qualified ids, a crafted file's 2^31-1) sparsely.
DENSE_TID_MAX = 1 << 23
KIND_NAMES = {SWITCH: "switch", WAKEUP: "wakeup", WAKEUP_NEW: "wakeup_new", MIGRATE: "migrate",
              FORK: "fork", EXEC: "exec", EXIT: "exit", RUN: "run"}

EVENT_DTYPE = np.dtype([
    ("t_ns", "<u8"),
    ("cpu", "<u4"),
    ("kind", "u1"),
    ("tid", "<i4"),
    ("tid2", "<i4"),
    ("pid", "<i4"),
    ("pid2", "<i4"),
    ("arg", "<i8"),
])


def empty_events(n: int = 0) -> np.ndarray:
    return np.zeros(n, dtype=EVENT_DTYPE)


@dataclass
class TaskInfo:
    tid: int
    pid: int            # tgid
    comm: str
    ppid: int = -1
    t_ns: int = 0       # when this name was seen (comm changes at exec)


@dataclass
class EventBatch:
    """What a tracer hands over at each read(): events in time order (per CPU at least),
    names of tasks seen since the last batch, and events lost per CPU since the last batch.
    ``counters``: run intervals with their counter deltas (trace/counters.py's dtype), from a
    tracer started with events to count; None otherwise."""

    events: np.ndarray = field(default_factory=empty_events)
    tasks: list[TaskInfo] = field(default_factory=list)
    lost: dict[int, int] = field(default_factory=dict)
    counters: np.ndarray | None = None
