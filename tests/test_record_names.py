"""A process name that is not UTF-8 (anyone may set one: prctl(PR_SET_NAME) takes any 15
bytes) neither stops a recording nor reaches the file undecodable: every backend, system-wide
and with a command, against real processes renamed while snumap records."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from snumap_tui import store
from snumap_tui.sources._io import c_string, decode_name, read_name_text
from snumap_tui.trace.proc import parse_stat
from snumap_tui.trace.tasks import parse_status
from tests.test_trace_backends import backend_or_skip, snumap_record

PY = sys.executable
SHOWN = "\\xffbad"          # how snumap names a task called b"\xffbad"

# Renames itself to b"\xffbad" after WAIT s, then runs a new thread (a task first seen under
# that name) and burns CPU for SECS s.
RENAMED = r"""
import ctypes, sys, threading, time
wait, secs = float(sys.argv[1]), float(sys.argv[2])
time.sleep(wait)
ctypes.CDLL(None).prctl(15, b"\xffbad", 0, 0, 0)
def burn():
    end = time.monotonic() + secs
    while time.monotonic() < end:
        pass
t = threading.Thread(target=burn)
t.start()
burn()
t.join()
"""

BACKENDS = ["libbpf", "perf", "bcc", "proc"]


def test_names_decode_without_failing(tmp_path: Path) -> None:
    assert decode_name(b"\xffbad") == SHOWN
    assert decode_name("café".encode()) == "café"
    assert c_string(b"\xffbad\0\0junk") == SHOWN
    assert SHOWN.encode("utf-8")          # no lone surrogate: storable, printable
    f = tmp_path / "stat"
    f.write_bytes(b"42 (\xff) bad) S 1 " + b"0 " * 40 + b"\n")
    got = parse_stat(read_name_text(f))
    assert got is not None and got[0] == "\\xff) bad" and got[1] == 1
    f.write_bytes(b"Name:\t\xffbad\nTgid:\t42\nPPid:\t1\n")
    assert parse_status(read_name_text(f)) == (42, 1, SHOWN)


def _names(path: Path) -> set[str]:
    with store.open(path) as rec:
        return {t.comm for t in rec.tasks.values()}


@pytest.mark.parametrize("backend", BACKENDS)
def test_record_system_wide_beside_a_renamed_process(tmp_path: Path, backend: str) -> None:
    """One renamed before snumap starts (found by the start-up scan of /proc), one renamed
    while it records (found by the tracer)."""
    backend_or_skip(backend)
    before = subprocess.Popen([PY, "-c", RENAMED, "0", "8"])
    during = subprocess.Popen([PY, "-c", RENAMED, "1.5", "1"])
    try:
        time.sleep(0.3)
        proc, out = snumap_record(tmp_path, backend, [], "--duration", "3")
    finally:
        for p in (before, during):
            p.kill()
            p.wait()
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert SHOWN in _names(out)


@pytest.mark.parametrize("backend", BACKENDS)
def test_record_a_command_that_renames_itself(tmp_path: Path, backend: str) -> None:
    backend_or_skip(backend)
    other = subprocess.Popen([PY, "-c", RENAMED, "0", "8"])
    try:
        time.sleep(0.3)
        proc, out = snumap_record(tmp_path, backend, [PY, "-c", RENAMED, "0.3", "1"])
    finally:
        other.kill()
        other.wait()
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert SHOWN in _names(out)
