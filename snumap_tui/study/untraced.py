"""A configuration run untraced: the command alone, with the recorded run's environment and
CPU affinity, timed from its spawn to its exit -- the program's time without the observer,
beside which `snumap scale report` puts the recorded one (the recorder's perturbation).

The command is spawned by posix_spawn (vfork and exec: no copy of this interpreter) from a
thread whose affinity is the run's CPUs for that moment, so it starts on them as the recorded
command does (``record --cpus`` sets it in the held child before its exec); its end is read
from a pidfd, so the time stops at its exit, not at a polling tick.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from snumap_tui.study.files import open_log

POLL_MS = 200          # how often a wait looks at the stop flag


def run_untraced(cmd: Sequence[str], env: dict[str, str], cpus: Sequence[int], log: Path,
                 stop: dict[str, int] | None = None) -> dict[str, Any]:
    """Run CMD once untraced, its output to LOG (made; replaced); returns ``time_s`` (spawn
    to exit), ``exit_status`` (negative: killed by that signal) and ``log``. A command that
    cannot be started gives exit_status None and ``why``. KeyboardInterrupt when STOP's
    ``sig`` is set meanwhile (the command is killed first)."""
    exe = shutil.which(cmd[0], path=env.get("PATH")) if "/" not in cmd[0] else cmd[0]
    if exe is None:
        return {"time_s": None, "exit_status": None, "why": f"{cmd[0]}: not found",
                "log": log.name}
    fd = open_log(log)          # the program's own output, as the recorded run's
    null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    old = os.sched_getaffinity(0)
    try:
        if cpus:
            os.sched_setaffinity(0, cpus)       # this thread's: the spawned command inherits it
        t0 = time.monotonic_ns()
        try:
            pid = os.posix_spawn(exe, list(cmd), env, file_actions=[
                (os.POSIX_SPAWN_DUP2, null, 0), (os.POSIX_SPAWN_DUP2, fd, 1),
                (os.POSIX_SPAWN_DUP2, fd, 2)],
                # what Python ignores, the command gets back (as subprocess does)
                setsigdef=(signal.SIGPIPE, signal.SIGXFSZ))
        except OSError as exc:
            return {"time_s": None, "exit_status": None, "log": log.name,
                    "why": f"{cmd[0]}: {exc.strerror or exc}"}
    finally:
        if cpus:
            os.sched_setaffinity(0, old)
        os.close(fd)
        os.close(null)
    t1, status = _wait(pid, stop)
    return {"time_s": round((t1 - t0) / 1e9, 9), "exit_status": status, "log": log.name}


def _wait(pid: int, stop: dict[str, int] | None) -> tuple[int, int]:
    """(exit time in monotonic ns, exit status) of child PID."""
    pfd = os.pidfd_open(pid)
    try:
        poll = select.poll()
        poll.register(pfd, select.POLLIN)
        while not poll.poll(POLL_MS):
            if stop and stop.get("sig"):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise KeyboardInterrupt
        t1 = time.monotonic_ns()
    finally:
        os.close(pfd)
    _pid, raw = os.waitpid(pid, 0)
    return t1, os.waitstatus_to_exitcode(raw)
