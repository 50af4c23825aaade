"""`snumap record --pid PID[,PID...]`: attach to running processes, as ``perf record -p`` does.

The processes, their threads and every process they have forked so far are the traced tree's
roots (the tracers seed their filter from them, trace/tasks.py ``seed_tree``), and what they
fork later joins it as a command's children do; regions are planned on their programs
(``/proc/PID/exe`` and the libraries they need; what they map later is found by the region
tracer's rescan). The recording ends when every one of them has exited, at ``--duration`` or
at Ctrl-C / SIGTERM (which are not passed on: snumap does not own them).

Checked before anything starts, one line each (exit 2): a pid that is not a number, a process
that does not exist, a thread id (the process is named), and another user's process when
snumap runs without root or a capability that lets it trace others (CAP_SYS_PTRACE,
CAP_PERFMON, CAP_SYS_ADMIN; perf_event_open checks ptrace access to the task).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from snumap_tui.errors import SnumapError

# include/uapi/linux/capability.h
CAP_SYS_PTRACE, CAP_SYS_ADMIN, CAP_PERFMON = 19, 21, 38
TRACE_OTHERS = (CAP_SYS_PTRACE, CAP_SYS_ADMIN, CAP_PERFMON)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pid", default=None, metavar="PID[,PID...]",
                        help="record these running processes (and what they fork from now "
                             "on) instead of a command, until they exit, --duration or Ctrl-C")


def parse_pids(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        p = part.strip()
        if not p.isdigit() or int(p) <= 0 or int(p) > 2 ** 31 - 1:
            raise SnumapError(f"--pid {text}: {p!r} is not a process id")
        if int(p) not in out:
            out.append(int(p))
    return out


def _status(pid: int, proc: Path) -> dict[str, str]:
    try:
        text = (proc / str(pid) / "status").read_text(errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        raise SnumapError(f"--pid {pid}: no such process") from None
    except OSError as exc:
        raise SnumapError(f"--pid {pid}: cannot read its status: {exc.strerror}") from None
    out = {}
    for line in text.splitlines():
        k, _, v = line.partition(":")
        out[k] = v.strip()
    return out


def check_pid(pid: int, *, proc: Path = Path("/proc"), euid: int | None = None,
              caps: int | None = None) -> dict[str, Any]:
    """What --pid PID attaches to ({"pid", "comm", "uid"}), or SnumapError saying why not."""
    from snumap_tui.sources.privileges import effective_caps
    from snumap_tui.textsafe import safe_text

    st = _status(pid, proc)
    tgid = int(st.get("Tgid", pid) or pid)
    if tgid != pid:
        raise SnumapError(f"--pid {pid}: a thread of process {tgid}; give --pid {tgid}")
    if st.get("State", "").startswith("Z"):
        raise SnumapError(f"--pid {pid}: the process has exited (a zombie)")
    uid = int((st.get("Uid") or "-1").split()[0])
    euid = os.geteuid() if euid is None else euid
    caps = effective_caps() if caps is None else caps
    if euid != 0 and uid != euid and not any(caps >> c & 1 for c in TRACE_OTHERS):
        raise SnumapError(f"--pid {pid}: belongs to uid {uid}, not you: recording another "
                          "user's process needs root or CAP_SYS_PTRACE / CAP_PERFMON")
    return {"pid": pid, "comm": safe_text(st.get("Name", "?")), "uid": uid}


class Attached:
    """The processes --pid names: the tree to trace, whether any is left, the header."""

    def __init__(self, pids: list[int], proc: Path = Path("/proc")) -> None:
        self.proc = proc
        self.procs = [check_pid(p, proc=proc) for p in pids]
        self.roots = [p["pid"] for p in self.procs]

    @classmethod
    def from_args(cls, args: argparse.Namespace, cmd: list[str]) -> Attached | None:
        text = getattr(args, "pid", None)
        if text is None:
            return None
        if cmd:
            raise SnumapError("--pid records running processes: give it or a command, not both")
        if getattr(args, "job", None):
            raise SnumapError("--pid and --job: one or the other")
        if getattr(args, "system_wide", False):
            raise SnumapError("--pid and --system-wide: one or the other (without --pid and "
                              "a command, record traces the whole system)")
        return cls(parse_pids(text), Path("/proc"))

    def tree(self) -> list[int]:
        """The roots and every process they forked so far."""
        from snumap_tui.trace.tasks import tree_of

        return sorted(tree_of(self.roots, self.proc))

    def binaries(self) -> list[str]:
        """The programs the tree runs, for region planning."""
        out: list[str] = []
        for pid in self.tree():
            try:
                exe = os.path.realpath(self.proc / str(pid) / "exe")
            except OSError:
                continue
            if exe.startswith("/") and os.path.isfile(exe) and exe not in out:
                out.append(exe)
        return out

    def alive(self) -> bool:
        """Whether any of the processes is still running (a zombie is not)."""
        for pid in self.roots:
            try:
                stat = (self.proc / str(pid) / "stat").read_text(errors="replace")
            except OSError:
                continue
            if stat.rpartition(")")[2].split()[:1] != ["Z"]:
                return True
        return False

    def header(self) -> dict[str, Any]:
        from snumap_tui.sources.tasks import parse_cmdline

        rows = []
        for p in self.procs:
            try:
                raw = (self.proc / str(p["pid"]) / "cmdline").read_bytes()
                cmdline = parse_cmdline(raw.decode("utf-8", "replace"))
            except OSError:
                cmdline = ""
            rows.append({**p, "cmdline": cmdline})
        return {"attached": rows,
                "command": (rows[0]["cmdline"].split() or None) if len(rows) == 1 else None}
