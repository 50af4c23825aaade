"""`record --nice N`: the recorder's own scheduling priority.

The kernel drops scheduling events when a CPU's ring is full, and it fills when the recorder
does not get the CPU to empty it: under a context-switch storm on a machine whose PUs the
workload takes, the recorder at the workload's priority had about a third of one PU and
lost 2-13 % of the events in every run here; at nice -10 it lost none (docs/benchmarks.md,
"Counters per run interval"). So `record` raises its own threads to nice -10 by default
where it may (root, or CAP_SYS_NICE), after it has forked the command it records: the
command, and every process it starts, keeps the priority it was given. Threads inherit the
nice value of the thread that creates them, so raising the main thread before the drain,
region and job threads start raises them all.

The recorder's CPU time does not grow with it: the same events are decoded and written either
way; what changes is that the recorder's share comes first when the machine is full. On a
machine with an idle PU the priority changes nothing. `--nice 0` keeps the caller's.
"""

from __future__ import annotations

import argparse
import errno as errno_mod
import os
import threading

from snumap_tui.errors import SnumapError

DEFAULT_NICE = -10


def parse_nice(text: str) -> int:
    """A nice value, -20..19 (SnumapError otherwise)."""
    try:
        n = int(text.strip(), 10)
    except ValueError:
        raise SnumapError(f"--nice: {text!r} is not a whole number (-20 to 19)") from None
    if not -20 <= n <= 19:
        raise SnumapError(f"--nice: {n} is outside -20 to 19")
    return n


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nice", default=None, metavar="N",
                        help=f"the recorder's own priority (default {DEFAULT_NICE} where it may: "
                             "root or CAP_SYS_NICE; the recorded command keeps its own), so "
                             "that it empties the kernel's event buffers before they overflow "
                             "on a full machine; 0 keeps the caller's")


def wanted(args: argparse.Namespace) -> tuple[int, bool]:
    """(nice, asked): the value to apply and whether the user named it."""
    text = getattr(args, "nice", None)
    if text is None:
        return DEFAULT_NICE, False
    return parse_nice(str(text)), True


def raise_this_thread(nice: int) -> str | None:
    """Set the calling thread's nice value to NICE when that is higher priority than it has
    (never lowers it); None when done or nothing to do, else one line saying why not."""
    tid = threading.get_native_id()
    try:
        current = os.getpriority(os.PRIO_PROCESS, tid)
    except OSError as exc:
        return f"cannot read the recorder's priority: {exc.strerror}"
    if nice >= current:
        return None
    try:
        os.setpriority(os.PRIO_PROCESS, tid, nice)
    except OSError as exc:
        if exc.errno in (errno_mod.EPERM, errno_mod.EACCES):
            return (f"the recorder stays at nice {current} (nice {nice} needs root or "
                    "CAP_SYS_NICE): under a full machine events may be lost")
        return f"cannot set the recorder's priority to nice {nice}: {exc.strerror}"
    return None


def apply(args: argparse.Namespace, say: object) -> int:
    """Raise the calling (main) thread as ``--nice`` asks, before the recorder's other threads
    start; a refusal is said only when the user named a value. The nice value in effect."""
    nice, asked = wanted(args)
    why = raise_this_thread(nice)
    if why and asked and callable(say):
        say(why)
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
