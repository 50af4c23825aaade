"""`record --nice`: the recorder raises its own threads (so it drains the kernel's buffers on
a full machine) and never the command it records."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from snumap_tui import store
from snumap_tui.errors import SnumapError
from snumap_tui.recording.priority import Priority, parse_nice

PY = sys.executable
ROOT = os.geteuid() == 0


def record(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "snumap_tui.cli", "record", *args], check=False,
                          capture_output=True, text=True, timeout=120)


def stat_nice(text: str) -> int:
    """The nice field of a /proc/PID/stat line (the 19th; the name may hold spaces)."""
    return int(text[text.rindex(")") + 2:].split()[16])


def test_parse_nice() -> None:
    assert parse_nice("-10") == -10 and parse_nice(" 5 ") == 5 and parse_nice("0") == 0
    for bad in ("", "x", "-21", "20", "1.5", "0x5"):
        with pytest.raises(SnumapError):
            parse_nice(bad)


@pytest.mark.parametrize("bad", ["abc", "-40", "99"])
def test_bad_nice_is_one_line_before_anything(tmp_path, bad) -> None:
    out = tmp_path / "r.rec"
    r = record("-o", str(out), "--nice", bad, "--", "true")
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "--nice" in r.stderr
    assert "Traceback" not in r.stderr and not out.exists()


@pytest.mark.skipif(not ROOT, reason="raising a priority needs root or CAP_SYS_NICE")
@pytest.mark.parametrize(("opt", "want"), [([], -10), (["--nice", "-5"], -5),
                                           (["--nice", "0"], 0)])
def test_recorder_raised_only_under_pressure_command_never(tmp_path, opt, want) -> None:
    """The command prints its own nice value and its parent's (the recorder's main thread,
    which forked it): with nothing filling the buffers the recorder stays at the caller's
    priority, the command too; the header names the value taken under pressure."""
    out = tmp_path / "r.rec"
    caller = os.getpriority(os.PRIO_PROCESS, 0)
    r = record("-o", str(out), "--regions", "none", *opt, "--",
               "sh", "-c", "cat /proc/self/stat; cat /proc/$PPID/stat")
    assert r.returncode == 0, r.stderr
    mine, parent = [line for line in r.stdout.splitlines() if ")" in line][:2]
    assert stat_nice(mine) == caller
    assert stat_nice(parent) == caller
    with store.open(out) as rd:
        assert rd.header["recorder_nice"] == min(want, caller)


@pytest.mark.skipif(not ROOT, reason="raising a priority needs root or CAP_SYS_NICE")
def test_priority_follows_the_pressure() -> None:
    """pressure() raises every thread it is given to NICE; idle() brings them back to the
    caller's only after QUIET_S without pressure."""
    import threading
    import time

    from snumap_tui.recording.priority import Priority

    ready, done = threading.Event(), threading.Event()
    tids: list[int] = []

    def worker() -> None:
        tids.append(threading.get_native_id())
        ready.set()
        done.wait(30)

    t = threading.Thread(target=worker)
    t.start()
    ready.wait(10)
    base = os.getpriority(os.PRIO_PROCESS, tids[0])
    p = Priority(-10, base=base, tasks=lambda: tids)
    try:
        assert p.check() is None and p.nice == min(-10, base)
        now = time.monotonic()
        p.pressure(now)
        assert os.getpriority(os.PRIO_PROCESS, tids[0]) == p.nice and p.raised
        p.idle(now + p.QUIET_S / 2)
        assert os.getpriority(os.PRIO_PROCESS, tids[0]) == p.nice       # not quiet long
        p.idle(now + p.QUIET_S + 0.1)
        assert os.getpriority(os.PRIO_PROCESS, tids[0]) == base and not p.raised
        p.pressure(now + 10)
        assert p.times_raised == 2
    finally:
        done.set()
        t.join()


def test_drains_that_fill_signal_pressure() -> None:
    """The drain thread calls pressure() after a large drain and idle() after a small one."""
    import time

    import numpy as np

    from snumap_tui.recording.runtime import Drainer

    class Tracer:
        def __init__(self) -> None:
            self.sizes = [Drainer.PRESSURE // 48 + 1, 1, 0]

        def drain(self) -> np.ndarray:
            n = self.sizes.pop(0) if self.sizes else 0
            return np.zeros(n, dtype=np.uint64)

        def drain_capped(self) -> bool:
            return False

    class Seen:
        def __init__(self) -> None:
            self.calls: list[str] = []

        def pressure(self) -> None:
            self.calls.append("pressure")

        def idle(self) -> None:
            self.calls.append("idle")

    seen = Seen()
    d = Drainer(Tracer(), seen)
    try:
        deadline = time.monotonic() + 5
        while len(seen.calls) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        d._stop.set()
    assert seen.calls[:3] == ["pressure", "idle", "idle"]


@pytest.mark.skipif(not ROOT or shutil.which("setpriv") is None,
                    reason="needs root to become another user (setpriv)")
def test_without_the_right_it_says_why() -> None:
    """An unprivileged user cannot raise a priority: one line saying so, nothing raised."""
    code = ("from snumap_tui.recording.priority import Priority; "
            "import os; print(Priority(-10).check()); print(os.getpriority(os.PRIO_PROCESS, 0))")
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                        "--inh-caps=-all", PY, "-c", code], capture_output=True, text=True,
                       env=env, cwd="/", check=False, timeout=60)
    assert p.returncode == 0, p.stderr
    why, nice = p.stdout.splitlines()
    assert "needs root or CAP_SYS_NICE" in why and "nice -10" in why
    assert int(nice) == os.getpriority(os.PRIO_PROCESS, 0)


def test_never_lowers() -> None:
    """Asking for a lower priority than the thread has changes nothing (in a child thread)."""
    import threading

    got: list[object] = []

    def run() -> None:
        before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        p = Priority(before + 1, base=before, tasks=lambda: [threading.get_native_id()])
        got.append(p.check())
        p.pressure()
        got.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == before)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert got == [None, True]
