"""`top --batch` on a fake tree (tests/fakefs.py): command lines whole when piped, and `-p`
naming no process is one line and exit 2, not an empty list for ever (issue 30 item 19)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fakefs import FakeRoot


def top(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "snumap_tui.cli", "top", "--batch", "-n",
                           "1", *argv], capture_output=True, text=True, timeout=120,
                          check=False, env={k: v for k, v in os.environ.items()
                                            if k != "COLUMNS"})


def test_piped_batch_keeps_whole_command_lines(tmp_path: Path) -> None:
    FakeRoot(tmp_path / "fs", cpus=2)
    args = ["lmp_mpi", "-in", "in.lj", *[f"-var{i}" for i in range(30)], "-log", "end.log"]
    (tmp_path / "fs" / "proc" / "4200" / "cmdline").write_bytes(
        b"\0".join(a.encode() for a in args) + b"\0")
    p = top("--fsroot", str(tmp_path / "fs"))
    assert p.returncode == 0, p.stderr
    row = next(ln for ln in p.stdout.splitlines() if ln.lstrip().startswith("4200 "))
    assert row.rstrip().endswith("-log end.log"), row
    assert len(row) > 200


def test_p_of_no_process_is_one_line(tmp_path: Path) -> None:
    FakeRoot(tmp_path / "fs", cpus=2)
    p = top("--fsroot", str(tmp_path / "fs"), "-p", "77777")
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip().splitlines() == [
        f"snumap: -p 77777: no such process under {tmp_path / 'fs'}"]
    some = top("--fsroot", str(tmp_path / "fs"), "-p", "4200,77777")
    assert some.returncode == 0 and "no process 77777" in some.stderr
