"""The checked-in CO-RE objects (bpf/*.bpf.o) are the builds of the sources beside them.

``--check`` needs no compiler: it compares the SHA-256 of each source and the headers it
includes with what bpf/objects.json recorded at the last build, so a source edited without
``python3 scripts/build_bpf.py`` fails here. ``--verify`` rebuilds with clang and compares bytes
(the build is reproducible with the toolchain the manifest records)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "build_bpf.py"


def run(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(cwd / "scripts" / "build_bpf.py"), *args],
                          capture_output=True, text=True, timeout=300, check=False)


def test_objects_match_their_sources() -> None:
    out = run("--check")
    assert out.returncode == 0, out.stderr
    manifest = json.loads((REPO / "bpf" / "objects.json").read_text())
    assert set(manifest) == {p.name[:-2] + ".o" for p in (REPO / "bpf").glob("*.bpf.c")}


def test_check_fails_when_a_source_changes(tmp_path: Path) -> None:
    """A copy of the tree with one header edited: --check names the stale object."""
    for d in ("bpf", "scripts"):
        shutil.copytree(REPO / d, tmp_path / d)
    hdr = tmp_path / "bpf" / "sched_event.h"
    hdr.write_text(hdr.read_text() + "\n/* edited */\n")
    out = run("--check", cwd=tmp_path)
    assert out.returncode == 1
    assert "sched.bpf.c (or a header it includes) changed since sched.bpf.o was built" in \
        out.stderr
    assert "rebuild with `python3 scripts/build_bpf.py`" in out.stderr


@pytest.mark.skipif(shutil.which("clang") is None, reason="needs clang (scripts/setup.sh test)")
def test_rebuild_is_byte_identical_elsewhere(tmp_path: Path) -> None:
    """Built again in another directory, the objects are the checked-in bytes (no path of the
    build machine, no timestamp)."""
    for d in ("bpf", "scripts"):
        shutil.copytree(REPO / d, tmp_path / d)
    out = run("--verify", cwd=tmp_path)
    if "cannot compare bytes" in out.stderr:
        pytest.skip(out.stderr.strip())
    assert out.returncode == 0, out.stderr
    assert b"/tmp" not in (REPO / "bpf" / "sched.bpf.o").read_bytes()
