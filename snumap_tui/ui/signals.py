"""Sending a signal to a process from `snumap top` (htop's F9 / k).

Only where the user may: ``os.kill(pid, 0)`` asks the kernel the same question a real signal
would (kill(2): the sender's real or effective UID must match the target's real or saved UID,
or the sender has CAP_KILL), so the list is offered only when the answer is yes, and the
reason is said when it is no. Never for another machine's tree (--fsroot, --topology): the
PIDs there are not this machine's.
"""

from __future__ import annotations

import os
import signal

#: (name, number, what it asks), the most useful first; TERM is htop's default.
SIGNALS: tuple[tuple[str, int, str], ...] = (
    ("SIGTERM", int(signal.SIGTERM), "ask it to end (it may clean up)"),
    ("SIGINT", int(signal.SIGINT), "as Ctrl-C"),
    ("SIGHUP", int(signal.SIGHUP), "hang-up (many daemons reload)"),
    ("SIGKILL", int(signal.SIGKILL), "end it at once (no clean-up)"),
    ("SIGSTOP", int(signal.SIGSTOP), "stop (freeze) it"),
    ("SIGCONT", int(signal.SIGCONT), "let a stopped process go on"),
    ("SIGUSR1", int(signal.SIGUSR1), "user signal 1"),
    ("SIGUSR2", int(signal.SIGUSR2), "user signal 2"),
)


def why_not(pid: int) -> str | None:
    """None when this user may signal ``pid``, else one line saying why not."""
    if pid <= 0:
        return f"{pid} is not a process"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return f"process {pid} has ended"
    except PermissionError:
        return (f"you may not signal process {pid}: it belongs to another user "
                "(root or CAP_KILL may)")
    return None


def send(pid: int, signum: int) -> str:
    """Send it; one line saying what happened (sent, or why not)."""
    reason = why_not(pid)
    if reason is not None:
        return reason
    name = signal.Signals(signum).name
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        return f"process {pid} has ended"
    except PermissionError:
        return f"you may not signal process {pid}"
    return f"sent {name} to {pid}"
