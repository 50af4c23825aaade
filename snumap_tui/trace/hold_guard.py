"""A guard for the processes the region probes hold at their exec (trace/region_bpf.py).

A held process is stopped (SIGSTOP from bpf/regions.bpf.c) until the recorder has probed its
program and sends SIGCONT. A recorder killed meanwhile (SIGKILL, the OOM killer, a job's time
limit) never sends it, and the user's program would stay stopped for good. So while execs are
held, a tiny process of its own (its own session: a Ctrl-C in the terminal does not reach it;
no descriptor of the recorder's, so no BPF link or file lock) is told each held pid and each
resumed one through a pipe; when the pipe closes without ``end`` -- the recorder is gone --
it lets every process still held run, and every stopped process of the traced tree (the
roots it was given and their descendants, by /proc's parent links): one the kernel stopped
before the drain thread read its exec record has not been told. A process of that tree the
user had stopped (Ctrl-Z) is let go too: better than a program stopped for good.
"""

from __future__ import annotations

import subprocess
import sys
from typing import IO

# The guard's whole program (python -I -S: no site, no user path; ~10 ms to start).
_GUARD = """
import os, signal, sys
held = set()
roots = {int(a) for a in sys.argv[1:]}
for line in sys.stdin:
    op, _, pid = line.strip().partition(" ")
    if op == "end":
        sys.exit(0)
    if pid.isdigit():
        (held.add if op == "+" else held.discard)(int(pid))
parent, state = {}, {}
for d in os.listdir("/proc"):
    try:
        with open(f"/proc/{d}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
        parent[int(d)], state[int(d)] = int(rest[1]), rest[0]
    except (OSError, ValueError, IndexError):
        pass
tree, grew = set(roots), True
while grew:
    new = {p for p, pp in parent.items() if pp in tree and p not in tree}
    tree |= new
    grew = bool(new)
held |= {p for p in tree if state.get(p) == "T"}
for pid in held:
    try:
        os.kill(pid, signal.SIGCONT)
    except OSError:
        pass
"""


class HoldGuard:
    """The guard process and the pipe that tells it which processes are held."""

    def __init__(self, roots: list[int]) -> None:
        """ROOTS: the traced tree's first processes (the command, the --pid processes)."""
        self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _GUARD, *map(str, roots)], stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True,
            start_new_session=True)
        self._pipe: IO[bytes] | None = self.proc.stdin

    def _say(self, line: str) -> None:
        if self._pipe is None:
            return
        try:
            self._pipe.write(line.encode() + b"\n")
            self._pipe.flush()
        except (OSError, ValueError):   # the guard is gone: nothing left to tell
            self._pipe = None

    def held(self, pid: int) -> None:
        """PID is stopped at its exec until ``resumed``."""
        self._say(f"+ {pid}")

    def resumed(self, pid: int) -> None:
        self._say(f"- {pid}")

    def close(self) -> None:
        """Every held process has been let go: the guard ends without doing anything."""
        self._say("end")
        if self._pipe is not None:
            try:
                self._pipe.close()
            except OSError:
                pass
            self._pipe = None
        if self.proc is not None:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
