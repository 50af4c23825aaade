"""`snumap exporter` as a user runs it: bad input is one line and exit 2; --textfile writes
DIR/snumap.prom atomically at each interval; SIGTERM stops it cleanly."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SNUMAP = [sys.executable, "-m", "snumap_tui.cli", "exporter"]


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SNUMAP, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO, check=False)


def one_line_exit_2(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("snumap: "), done.stderr
    assert "Traceback" not in done.stderr
    for w in words:
        assert w in lines[0], lines[0]


def test_port_in_use() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        one_line_exit_2(run("--listen", f"127.0.0.1:{port}"), "in use", str(port))


@pytest.mark.parametrize(("listen", "words"), [
    ("no-such-host.invalid:9464", ("resolve", "no-such-host.invalid")),
    ("127.0.0.1:99999", ("out of range",)),
    ("localhost", ("HOST:PORT",)),
    ("192.0.2.1:9464", ("no such address",)),     # TEST-NET-1: not an address of this host
])
def test_bad_listen_address(listen: str, words: tuple[str, ...]) -> None:
    one_line_exit_2(run("--listen", listen), *words)


def test_unwritable_textfile_dir(tmp_path: Path) -> None:
    one_line_exit_2(run("--textfile", str(tmp_path / "missing")), "not a directory")
    f = tmp_path / "a-file"
    f.write_text("")
    one_line_exit_2(run("--textfile", str(f)), "not a directory")
    # Root ignores permission bits; a read-only mount does not stop us being root either,
    # but /proc is a directory nobody may create files in.
    one_line_exit_2(run("--textfile", "/proc"), "cannot write")


def test_bad_interval_and_foreign_topology() -> None:
    one_line_exit_2(run("--interval", "0"), "--interval")
    one_line_exit_2(run("--synthetic", "pack:2 pu:2"), "this machine")


def test_textfile_is_replaced_atomically_and_promtool_accepts_it(tmp_path: Path) -> None:
    out = tmp_path / "textfile"
    out.mkdir()
    p = subprocess.Popen([*SNUMAP, "--textfile", str(out), "--interval", "0.1s"],
                         stderr=subprocess.PIPE, text=True, cwd=REPO)
    target = out / "snumap.prom"
    seen: set[str] = set()
    try:
        end = time.monotonic() + 30
        reads = 0
        while len(seen) < 5 and time.monotonic() < end:
            try:
                text = target.read_text()
            except FileNotFoundError:
                time.sleep(0.01)
                continue
            reads += 1
            # Never half a file: every read is a whole exposition.
            assert text.endswith("\n") and "snumap_exporter_sweeps_total" in text, text[-200:]
            sweeps = next(line for line in text.splitlines()
                          if line.startswith("snumap_exporter_sweeps_total"))
            seen.add(sweeps)
        assert len(seen) >= 5, f"the file was not rewritten at each interval ({reads} reads)"
        assert p.poll() is None
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(20)
    assert p.returncode == 0
    assert p.stderr is not None
    err = p.stderr.read()
    assert "Traceback" not in err and "writing" in err
    assert "serving http" not in err            # --textfile alone opens no port
    # No temporary file left behind.
    assert sorted(x.name for x in out.iterdir()) == ["snumap.prom"]
    if shutil.which("promtool"):
        done = subprocess.run(["promtool", "check", "metrics"], input=target.read_bytes(),
                              capture_output=True, timeout=30, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
