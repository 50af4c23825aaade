"""`record --nice`: the recorder raises its own threads (so it drains the kernel's buffers on
a full machine) and never the command it records."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from snumap_tui import store
from snumap_tui.commands.record_priority import parse_nice, raise_this_thread
from snumap_tui.errors import SnumapError

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
def test_recorder_raised_command_not(tmp_path, opt, want) -> None:
    """The command prints its own nice value and its parent's (the recorder's main thread,
    which forked it): the recorder runs at WANT, the command at what the caller had."""
    out = tmp_path / "r.rec"
    caller = os.getpriority(os.PRIO_PROCESS, 0)
    r = record("-o", str(out), "--regions", "none", *opt, "--",
               "sh", "-c", "cat /proc/self/stat; cat /proc/$PPID/stat")
    assert r.returncode == 0, r.stderr
    mine, parent = [line for line in r.stdout.splitlines() if ")" in line][:2]
    assert stat_nice(mine) == caller
    assert stat_nice(parent) == min(want, caller)
    with store.open(out) as rd:
        assert rd.header["recorder_nice"] == min(want, caller)


@pytest.mark.skipif(not ROOT or shutil.which("setpriv") is None,
                    reason="needs root to become another user (setpriv)")
def test_without_the_right_it_says_why() -> None:
    """An unprivileged user cannot raise a priority: one line saying so, nothing raised."""
    code = ("from snumap_tui.commands.record_priority import raise_this_thread as r; "
            "import os; print(r(-10)); print(os.getpriority(os.PRIO_PROCESS, 0))")
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
        got.append(raise_this_thread(before + 1))
        got.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == before)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert got == [None, True]
