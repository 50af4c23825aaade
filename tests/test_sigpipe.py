"""SIGPIPE: snumap keeps Python's 'ignored' (a scraper hanging up must not kill the exporter,
and main() called in-process must not arm it in the caller), a closed stdout ends a command
quietly, and the command `record` runs gets the default, as from a shell."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from snumap_tui.cli import main


def test_main_leaves_sigpipe_ignored(capsys) -> None:
    assert signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN
    assert main(["topo", "--synthetic", "pack:1 core:2 pu:1"]) == 0
    assert signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN


def test_closed_stdout_is_a_quiet_end() -> None:
    code = ("import sys; from snumap_tui.cli import main; "
            "sys.exit(main(['topo', '--synthetic', 'pack:8 core:64 pu:2', '--full']))")
    r, w = os.pipe()
    os.close(r)                      # nobody reads: the first flush fails
    p = subprocess.run([sys.executable, "-c", code], stdout=w, stderr=subprocess.PIPE,
                       text=True, timeout=60, check=False)
    os.close(w)
    assert p.returncode == 141, p.stderr
    assert "Traceback" not in p.stderr and "Exception ignored" not in p.stderr, p.stderr


def test_the_recorded_command_gets_the_default_sigpipe(tmp_path: Path) -> None:
    out = tmp_path / "ign.txt"
    p = subprocess.run([sys.executable, "-m", "snumap_tui.cli", "record", "--backend", "proc",
                        "--regions", "none", "-o", str(tmp_path / "x.rec"), "--", "sh", "-c",
                        f"grep SigIgn /proc/self/status > {out}"],
                       capture_output=True, text=True, timeout=120, check=False)
    assert p.returncode == 0, p.stderr
    mask = int(out.read_text().split()[1], 16)
    assert not mask & (1 << (signal.SIGPIPE - 1)), out.read_text()
