"""Outputs never destroy data (issue 23, class 1; README "Files and safety").

Every command that writes goes through snumap_tui/safeout.py: a temporary name beside the
output, renamed at the end; an output that is or holds an input refused; ``--force`` replaces
a file or a directory snumap wrote, never another directory; a recording in progress is
locked; a SIGTERM during record's set-up leaves nothing behind. The destructive cases run in
a subprocess: before the fix they truncated a memory-mapped input (SIGBUS)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from snumap_tui import store
from snumap_tui.analysis.synth import synthetic_topology, write_recording
from snumap_tui.cli import main
from snumap_tui.errors import SnumapError
from tests.test_analysis import SCENARIO, T0, T1, make_events
from tests.test_report import TASKS

sys.path.insert(0, str(Path(__file__).parent))
from jobrecs import WALL, node_rec

PY = sys.executable


@pytest.fixture()
def recording(tmp_path: Path) -> Path:
    return write_recording(tmp_path / "run.rec", synthetic_topology(2, 1, 1, 1, host="h"),
                           make_events(SCENARIO), tasks=TASKS,
                           markers=[(T0, "start"), (T1, "exit 0")])


def snumap(*args: str, cwd: Path | None = None, timeout: float = 60
           ) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "snumap_tui.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout, check=False)


def one_line_refusal(p: subprocess.CompletedProcess, *words: str) -> None:
    assert p.returncode == 2, p.stderr
    assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, p.stderr
    for w in words:
        assert w in p.stderr, p.stderr


def listing(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in d.iterdir() if p.is_file()}


# ---- export ---------------------------------------------------------------------------------

def test_parquet_to_the_current_directory_with_force_keeps_every_file(recording: Path) -> None:
    pytest.importorskip("pyarrow")
    d = recording.parent
    (d / "notes.txt").write_text("unrelated work\n")
    before = listing(d)
    p = snumap("export", "run.rec", "--format", "parquet", "-o", ".", "--force", cwd=d)
    one_line_refusal(p, "holds the input")
    assert listing(d) == before


def test_parquet_force_never_replaces_a_directory_snumap_did_not_write(
        recording: Path, tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    other = tmp_path / "results"
    other.mkdir()
    (other / "thesis.tex").write_text("months of work\n")
    p = snumap("export", str(recording), "--format", "parquet", "-o", str(other), "--force")
    one_line_refusal(p, "did not write")
    assert (other / "thesis.tex").read_text() == "months of work\n"
    # Its own earlier export is recognised (the marker) and replaced; nothing left beside it.
    from snumap_tui.safeout import MARKER

    out = tmp_path / "run.parquet"
    assert main(["export", str(recording), "--format", "parquet", "-o", str(out)]) == 0
    assert (out / MARKER).is_file()
    (out / "events.parquet").write_bytes(b"stale")
    assert main(["export", str(recording), "--format", "parquet", "-o", str(out),
                 "--force"]) == 0
    assert (out / "events.parquet").read_bytes()[:4] == b"PAR1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results", "run.parquet", "run.rec"]
    # An export from before the marker (only the five tables in it) is recognised too.
    (out / MARKER).unlink()
    assert main(["export", str(recording), "--format", "parquet", "-o", str(out),
                 "--force"]) == 0
    (out / MARKER).unlink()
    (out / "mine.csv").write_text("not snumap's\n")
    assert main(["export", str(recording), "--format", "parquet", "-o", str(out),
                 "--force"]) == 2
    assert (out / "mine.csv").exists()


@pytest.mark.parametrize("fmt", ["chrome", "csv", "perfetto"])
def test_export_onto_its_input_is_refused_and_the_input_kept(recording: Path, fmt: str) -> None:
    data = recording.read_bytes()
    hard = recording.parent / "same.rec"           # the same inode under another name
    os.link(recording, hard)
    for out in (recording, hard):
        p = snumap("export", str(recording), "--format", fmt, "-o", str(out), "--force")
        one_line_refusal(p, "is the input")
        assert recording.read_bytes() == data
    with store.open(recording) as rec:
        assert rec.complete and rec.event_count > 0


def test_a_failed_export_leaves_the_old_output_and_no_temporary(
        recording: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "trace.json"
    out.write_text("the previous export\n")

    def boom(*_a: object, **_k: object) -> int:
        raise SnumapError("disk on fire")
    monkeypatch.setattr("snumap_tui.export.chrome.write_chrome", boom)
    assert main(["export", str(recording), "--format", "chrome", "-o", str(out),
                 "--force"]) == 2
    assert out.read_text() == "the previous export\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.rec", "trace.json"]


# ---- merge ----------------------------------------------------------------------------------

def test_merge_onto_one_of_its_members_is_refused_and_the_member_kept(tmp_path: Path) -> None:
    a = node_rec(tmp_path / "a.rec", "a", 100 * 10**9, WALL, rank_pids={0: 500})
    b = node_rec(tmp_path / "b.rec", "b", 95 * 10**9, WALL, rank_pids={1: 500})
    data = a.read_bytes()
    p = snumap("merge", str(a), str(b), "-o", str(a), "--force")
    one_line_refusal(p, "is the input")
    assert a.read_bytes() == data
    # A merge that works is written under a temporary name and renamed: nothing else left.
    assert snumap("merge", str(a), str(b), "-o", str(tmp_path / "job.rec")).returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.rec", "b.rec", "job.rec"]


# ---- record ---------------------------------------------------------------------------------

def test_a_second_record_of_the_same_file_is_refused_while_the_first_runs(
        tmp_path: Path) -> None:
    out = tmp_path / "same.rec"
    first = subprocess.Popen([PY, "-m", "snumap_tui.cli", "record", "-o", str(out),
                              "--backend", "proc", "--", "sleep", "4"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert out.exists(), "the first recording never started"
        second = snumap("record", "-o", str(out), "--force", "--backend", "proc", "--", "true")
        one_line_refusal(second, "being written by another snumap")
        _, err = first.communicate(timeout=60)
    finally:
        first.kill()
    assert first.returncode == 0, err
    with store.open(out) as rec:
        assert rec.complete and rec.header["command"] == ["sleep", "4"]
    if os.geteuid() == 0:               # a root recording is private (perf.data's choice)
        assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["same.rec"]


def test_two_writers_that_start_at_once_cannot_both_take_the_name(tmp_path: Path) -> None:
    """The race the early check cannot see: both pass it, the first renames into place and
    keeps its lock; the second's rename is refused and its temporary file removed."""
    from snumap_tui.safeout import SafeOutput

    out = tmp_path / "same.rec"
    a = SafeOutput(out, force=True, lock=True)
    b = SafeOutput(out, force=True, lock=True)
    os.write(a.fd, b"first")
    writer_fd = os.dup(a.fd)          # the Writer's descriptor keeps the lock
    a.commit()
    with pytest.raises(SnumapError, match="being written by another snumap"):
        b.commit()
    assert out.read_bytes() == b"first"
    os.close(writer_fd)               # the first recording ends: the name may be replaced
    c = SafeOutput(out, force=True)
    os.write(c.fd, b"second")
    c.commit()
    assert out.read_bytes() == b"second"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["same.rec"]


SETUP_TERM = """
import os, signal, sys, time
import snumap_tui.commands.common as common

def slow_topology(args):
    os.kill(os.getpid(), signal.SIGTERM)     # as Slurm or systemd would, mid set-up
    time.sleep(10)
    raise SystemExit(99)

common.topology_from_args = slow_topology
from snumap_tui.cli import main
sys.exit(main(["record", "-o", sys.argv[1], "--backend", "proc", "--", "true"]))
"""


def test_sigterm_during_record_setup_leaves_nothing_behind(tmp_path: Path) -> None:
    out = tmp_path / "run.rec"
    p = subprocess.run([PY, "-c", SETUP_TERM, str(out)], capture_output=True, text=True,
                       timeout=60, check=False)
    assert p.returncode not in (0, 99, -15), p.stderr     # ended by the set-up's clean-up
    assert list(tmp_path.iterdir()) == []
    # and so the rerun is not refused
    assert snumap("record", "-o", str(out), "--backend", "proc", "--", "true").returncode == 0


def test_record_never_replaces_the_program_it_runs(tmp_path: Path) -> None:
    prog = tmp_path / "solver"
    prog.write_bytes(Path("/bin/true").read_bytes())
    prog.chmod(0o755)
    data = prog.read_bytes()
    p = snumap("record", "-o", str(prog), "--force", "--backend", "proc", "--", str(prog))
    one_line_refusal(p, "is the input")
    assert prog.read_bytes() == data


def test_replay_screenshot_follows_the_same_rule(recording: Path, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.svg"
    link = tmp_path / "shot.svg"
    link.symlink_to(target)                      # dangling: would be created through the link
    p = snumap("replay", str(recording), "--screenshot", str(link), "--size", "80x24")
    one_line_refusal(p, "symbolic link")
    assert not target.exists()
    p = snumap("replay", str(recording), "--screenshot", str(link), "--size", "80x24",
               "--force")
    assert p.returncode == 0, p.stderr
    assert not target.exists() and not link.is_symlink()
    assert link.read_text().lstrip().startswith("<svg")
    p = snumap("replay", str(recording), "--screenshot", str(recording), "--force")
    one_line_refusal(p, "is the input")
