"""The real `snumap top` in a real terminal (tmux): it draws this machine, then quits on q,
and on F10 as htop does."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def _tmux(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["tmux", *args], check=False, capture_output=True, text=True,
                          timeout=10)


def _screen(name: str) -> str:
    return _tmux("capture-pane", "-p", "-t", name).stdout


def _wait(name: str, pred, timeout: float = 15.0) -> str:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    text = ""
    while time.monotonic() < end:
        text = _screen(name)
        if pred(text):
            return text
        time.sleep(0.2)
    raise AssertionError(f"screen never matched; last screen:\n{text}")


def _alive(name: str) -> bool:
    return _tmux("has-session", "-t", name).returncode == 0


@pytest.mark.parametrize(("term", "quit_key"), [("xterm-256color", "q"), ("screen", "q"),
                                               ("xterm-256color", "F10")])
def test_top_in_tmux_draws_and_quits_on_q(term: str, quit_key: str) -> None:
    name = f"snumap-test-{uuid.uuid4().hex[:8]}"
    # pytest-textual-snapshot sets COLUMNS=80 LINES=24 for the test process, and Textual
    # takes its size from them before the terminal's: the app in the pane must not inherit them.
    cmd = (f"cd {REPO} && env -u COLUMNS -u LINES TERM={term} {sys.executable} "
           "-m snumap_tui.cli top --interval 0.5; sleep 0.1")
    assert _tmux("new-session", "-d", "-s", name, "-x", "120", "-y", "40", cmd).returncode == 0
    try:
        text = _wait(name, lambda s: "Machine" in s and "%" in s and "q Quit" in s)
        assert "snumap top" in text and "topology" in text, text
        assert "PU" in text or "Core" in text
        _tmux("send-keys", "-t", name, "2")
        _wait(name, lambda s: "heatmap" in s and "CPU %" in s)
        _tmux("send-keys", "-t", name, quit_key)
        end = time.monotonic() + 10
        while _alive(name) and time.monotonic() < end:
            time.sleep(0.1)
        assert not _alive(name), f"snumap top did not exit on {quit_key}"
    finally:
        if _alive(name):
            _tmux("kill-session", "-t", name)
