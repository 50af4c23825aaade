"""A recorder killed while the command is held at an exec (SIGKILL, the OOM killer) must not
leave the user's program stopped for good (trace/hold_guard.py)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from snumap_tui.trace.hold_guard import HoldGuard
from snumap_tui.trace.libbpf import LibbpfTracer


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def _wait_state(pid: int, want: set[str], timeout: float) -> str:
    end = time.monotonic() + timeout
    while True:
        st = _state(pid)
        if st in want or time.monotonic() > end:
            return st
        time.sleep(0.02)


def test_the_guard_lets_go_what_is_still_held_when_its_pipe_closes_without_end() -> None:
    a = subprocess.Popen(["sleep", "30"])
    b = subprocess.Popen(["sleep", "30"])
    guard = HoldGuard([])
    try:
        for p in (a, b):
            os.kill(p.pid, signal.SIGSTOP)
            assert _wait_state(p.pid, {"T"}, 5) == "T"
            guard.held(p.pid)
        guard.resumed(b.pid)                # let go by the recorder: not the guard's any more
        assert guard._pipe is not None
        guard._pipe.close()                 # the recorder is gone: no "end"
        guard._pipe = None
        assert guard.proc is not None
        guard.proc.wait(timeout=10)
        assert _wait_state(a.pid, {"S", "R"}, 5) in {"S", "R"}
        assert _state(b.pid) == "T"         # resumed() took it off: the guard leaves it
    finally:
        guard.close()
        for p in (a, b):
            p.kill()
            p.wait()


def test_end_leaves_every_process_as_it_is() -> None:
    a = subprocess.Popen(["sleep", "30"])
    guard = HoldGuard([])
    try:
        os.kill(a.pid, signal.SIGSTOP)
        assert _wait_state(a.pid, {"T"}, 5) == "T"
        guard.held(a.pid)
        guard.close()
        time.sleep(0.2)
        assert _state(a.pid) == "T"
    finally:
        a.kill()
        a.wait()


@pytest.mark.skipif(not LibbpfTracer.status().available or not shutil.which("sleep"),
                    reason="the libbpf backend cannot run here (root, BTF)")
def test_a_command_held_at_its_exec_runs_on_after_the_recorder_is_killed(tmp_path: Path) -> None:
    """The recorder is stopped (so it cannot let the exec go), the command execs a program
    it has not seen (held: stopped in the kernel), the recorder is SIGKILLed: the program
    runs on. Before the guard it stayed in state T for good."""
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\nsleep 1.5\nexec tail -f /dev/null\n")
    script.chmod(0o755)
    rec = subprocess.Popen([sys.executable, "-m", "snumap_tui.cli", "record", "-o",
                            str(tmp_path / "r.rec"), "--", str(script)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
    child = None
    try:
        end = time.monotonic() + 30
        while child is None and time.monotonic() < end and rec.poll() is None:
            kids = Path(f"/proc/{rec.pid}/task/{rec.pid}/children").read_text().split()
            # Released: the command runs the script (its first exec is behind it).
            child = next((int(k) for k in kids
                          if Path(f"/proc/{k}/comm").read_text().strip() == "run.sh"), None)
            time.sleep(0.05)
        assert child is not None, "the recorder never started the command"
        os.kill(rec.pid, signal.SIGSTOP)
        # The exec of tail is held: stopped by the kernel, with nobody to let it go.
        assert _wait_state(child, {"T"}, 10) == "T"
        os.kill(rec.pid, signal.SIGKILL)
        rec.wait()
        assert _wait_state(child, {"S", "R", "Z", "gone"}, 10) != "T"
    finally:
        if rec.poll() is None:
            os.kill(rec.pid, signal.SIGKILL)
            rec.wait()
        if child is not None:
            try:
                os.kill(child, signal.SIGKILL)
            except OSError:
                pass


def test_a_stopped_process_of_the_tree_it_was_not_told_of_is_let_go_too() -> None:
    """The kernel stops an exec before the drain reads its record: the guard finds it in the
    roots' tree."""
    root = subprocess.Popen(["sh", "-c", "sleep 30; :"])
    guard = HoldGuard([root.pid])
    kid = 0
    try:
        end = time.monotonic() + 5
        kids: list[str] = []
        while not kids and time.monotonic() < end:
            kids = Path(f"/proc/{root.pid}/task/{root.pid}/children").read_text().split()
            time.sleep(0.02)
        kid = int(kids[0])
        os.kill(kid, signal.SIGSTOP)
        assert _wait_state(kid, {"T"}, 5) == "T"
        assert guard._pipe is not None
        guard._pipe.close()
        guard._pipe = None
        assert guard.proc is not None
        guard.proc.wait(timeout=10)
        assert _wait_state(kid, {"S", "R"}, 5) in {"S", "R"}
    finally:
        guard.close()
        if kid:
            os.kill(kid, signal.SIGKILL)
        root.kill()
        root.wait()
