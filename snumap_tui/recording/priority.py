"""`record --nice N`: the recorder's own scheduling priority, raised while the kernel's event
buffers fill.

The kernel drops scheduling events when a CPU's ring is full, and it fills when the recorder
does not get the CPU to empty it: under a context-switch storm on a machine whose PUs the
workload takes, the recorder at the workload's priority had about a third of one PU and lost
2-13 % of the events here; at nice -10 it lost none (docs/benchmarks.md, "Counters per run
interval"). But a recorder that always runs at -10 preempts the program at each of its
wake-ups, and a parallel program waits at its next barrier for the thread it preempted: an
OpenMP stencil on both PUs of this machine ran 5 % slower for it. So the priority follows the
pressure: every thread of the recorder goes to nice N (default -10, where it may: root or
CAP_SYS_NICE) when a drain finds the buffers filling, and back to the caller's priority once
they have stayed quiet for ``QUIET_S``. The command being recorded, forked before, and every
process it starts keep their own priority throughout.

`--nice 0` keeps the caller's priority throughout.
"""

from __future__ import annotations

import argparse
import errno as errno_mod
import os
import threading
import time
from collections.abc import Callable

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
                        help=f"the recorder's priority while the kernel's event buffers fill "
                             f"(default {DEFAULT_NICE} where it may: root or CAP_SYS_NICE; back "
                             "to the caller's when they are quiet; the recorded command keeps "
                             "its own); 0 keeps the caller's throughout")


def wanted(args: argparse.Namespace) -> tuple[int, bool]:
    """(nice, asked): the value to apply and whether the user named it."""
    text = getattr(args, "nice", None)
    if text is None:
        return DEFAULT_NICE, False
    return parse_nice(str(text)), True


def _refusal(exc: OSError, nice: int, current: int) -> str:
    if exc.errno in (errno_mod.EPERM, errno_mod.EACCES):
        return (f"the recorder stays at nice {current} (nice {nice} needs root or "
                "CAP_SYS_NICE): on a full machine events may be lost")
    return f"cannot set the recorder's priority to nice {nice}: {exc.strerror}"


class Priority:
    """Every thread of this process at ``nice`` while ``pressure()`` is called, at ``base``
    (the caller's) after ``QUIET_S`` of ``idle()`` calls; thread-safe (the drain thread calls
    both)."""

    QUIET_S = 2.0

    def __init__(self, nice: int, base: int | None = None,
                 tasks: Callable[[], list[int]] | None = None) -> None:
        self.base = os.getpriority(os.PRIO_PROCESS, 0) if base is None else base
        self.nice = min(nice, self.base)      # never below the caller's priority
        self.raised = False
        self.times_raised = 0
        self._last = 0.0
        self._lock = threading.Lock()
        self._tasks = tasks or _own_tasks

    def check(self) -> str | None:
        """Whether this process may take ``nice`` at all: None, or one line why not (then
        ``nice`` becomes ``base``: nothing to raise). Tried on the calling thread and undone."""
        if self.nice >= self.base:
            return None
        tid = threading.get_native_id()
        try:
            os.setpriority(os.PRIO_PROCESS, tid, self.nice)
        except OSError as exc:
            why = _refusal(exc, self.nice, self.base)
            self.nice = self.base
            return why
        os.setpriority(os.PRIO_PROCESS, tid, self.base)
        return None

    def pressure(self, now: float | None = None) -> None:
        """The buffers are filling: raise every thread, if not raised already."""
        with self._lock:
            self._last = time.monotonic() if now is None else now
            if not self.raised and self.nice < self.base:
                self._set(self.nice)
                self.raised = True
                self.times_raised += 1

    def idle(self, now: float | None = None) -> None:
        """A quiet drain: back to ``base`` once quiet for ``QUIET_S``."""
        with self._lock:
            now = time.monotonic() if now is None else now
            if self.raised and now - self._last >= self.QUIET_S:
                self._set(self.base)
                self.raised = False

    def _set(self, nice: int) -> None:
        for tid in self._tasks():
            try:
                os.setpriority(os.PRIO_PROCESS, tid, nice)
            except OSError:         # a thread that just ended; or a refusal: check() said it
                continue


def _own_tasks() -> list[int]:
    """This process's threads (/proc/self/task), the ones started later included once they
    exist: a thread inherits the nice value of the one that starts it."""
    try:
        return [int(t) for t in os.listdir("/proc/self/task") if t.isdigit()]
    except OSError:
        return [threading.get_native_id()]


def start(args: argparse.Namespace, say: object) -> Priority:
    """The recording's Priority after ``--nice``; a refusal is said only when the user named a
    value."""
    nice, asked = wanted(args)
    p = Priority(nice)
    why = p.check()
    if why and asked and callable(say):
        say(why)
    return p
