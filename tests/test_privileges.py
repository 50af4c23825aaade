"""snumap as root does not cross a privilege boundary (issue 23, class 2; README "Files and
safety"): the exporter's textfile never goes through a name another user can plant; export
never follows a link planted at its default output name; a root recording and export are
0600 unless --mode says otherwise; other users' command lines stay out of a recording unless
--keep-cmdlines; an --fsroot tree cannot make snumap read (or print) a file outside it."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from snumap_tui import store
from snumap_tui.analysis.synth import synthetic_topology, write_recording
from snumap_tui.cli import main
from snumap_tui.exporter.server import check_textfile_dir, write_textfile
from snumap_tui.model.sample import Sample
from tests.test_analysis import SCENARIO, make_events
from tests.test_report import TASKS

PY = sys.executable
ROOT = os.geteuid() == 0
SECRET = "--password=hunter2-secret"


@pytest.fixture()
def recording(tmp_path: Path) -> Path:
    return write_recording(tmp_path / "run.rec", synthetic_topology(2, 1, 1, 1, host="h"),
                           make_events(SCENARIO), tasks=TASKS)


def snumap(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "snumap_tui.cli", *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


# ---- the exporter's textfile ------------------------------------------------------------

def test_textfile_never_writes_through_links_planted_at_predictable_names(
        tmp_path: Path) -> None:
    victim = tmp_path / "shadow"
    victim.write_text("root-only content\n")
    d = tmp_path / "textfile"
    d.mkdir()
    pid = os.getpid()
    for name in (f".snumap.prom.{pid}.tmp", f".snumap.prom.{pid}.probe",
                 f".snumap.prom.{pid}.probe.tmp"):
        (d / name).symlink_to(victim)
    check_textfile_dir(str(d))
    write_textfile(d, b"snumap_up 1\n")
    assert victim.read_text() == "root-only content\n"
    assert (d / "snumap.prom").read_bytes() == b"snumap_up 1\n"
    assert stat.S_IMODE((d / "snumap.prom").stat().st_mode) == 0o644   # node_exporter reads it
    # A link planted at the final name is replaced itself, never followed.
    (d / "snumap.prom").unlink()
    (d / "snumap.prom").symlink_to(victim)
    write_textfile(d, b"snumap_up 2\n")
    assert victim.read_text() == "root-only content\n"
    assert not (d / "snumap.prom").is_symlink()
    assert sorted(p.name for p in d.iterdir() if not p.is_symlink()) == ["snumap.prom"]


# ---- export's default name ----------------------------------------------------------------

def test_export_does_not_follow_a_dangling_link_at_its_default_name(
        recording: Path, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere" / "created-by-root"
    target.parent.mkdir()
    link = tmp_path / "run.pftrace"                 # run.rec's default perfetto output
    link.symlink_to(target)
    p = snumap("export", str(recording), "--format", "perfetto")
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert "symbolic link" in p.stderr
    assert not target.exists() and link.is_symlink()
    # --force replaces the link itself
    assert snumap("export", str(recording), "--format", "perfetto", "--force").returncode == 0
    assert not target.exists() and not link.is_symlink() and link.stat().st_size > 0


# ---- modes --------------------------------------------------------------------------------

@pytest.mark.skipif(not ROOT, reason="the 0600 default is root's")
def test_root_outputs_are_private_unless_asked(recording: Path, tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        out = tmp_path / "t.json"
        assert main(["export", str(recording), "--format", "chrome", "-o", str(out)]) == 0
        assert stat.S_IMODE(out.stat().st_mode) == 0o600
        shared = tmp_path / "shared.csv"
        assert main(["export", str(recording), "--format", "csv", "-o", str(shared),
                     "--mode", "0644"]) == 0
        assert stat.S_IMODE(shared.stat().st_mode) == 0o644
        rec = tmp_path / "r.rec"
        p = snumap("record", "-o", str(rec), "--backend", "proc", "--", "true")
        assert p.returncode == 0, p.stderr
        assert stat.S_IMODE(rec.stat().st_mode) == 0o600
    finally:
        os.umask(old)
    pytest.importorskip("pyarrow")
    pq = tmp_path / "p.parquet"
    assert main(["export", str(recording), "--format", "parquet", "-o", str(pq)]) == 0
    assert stat.S_IMODE(pq.stat().st_mode) == 0o700
    assert {stat.S_IMODE(f.stat().st_mode) for f in pq.iterdir()} == {0o600}


def test_mode_option_is_checked(capsys: pytest.CaptureFixture[str]) -> None:
    for bad in ("4755", "rw", "0999"):
        with pytest.raises(SystemExit):
            main(["export", "x.rec", "--format", "csv", "--mode", bad])
        err = capsys.readouterr().err
        assert "--mode" in err and "permissions" in err and "Traceback" not in err


# ---- other users' command lines ---------------------------------------------------------------

def _cmdlines(path: Path) -> dict[int, set[str | None]]:
    seen: dict[int, set[str | None]] = {}
    with store.open(path) as rec:
        for s in rec.samples():
            procs = (s.readings.get("tasks") or {}).get("processes") or {}
            for pid, info in procs.items():
                seen.setdefault(int(pid), set()).add(info.get("cmdline"))
    return seen


needs_nobody = pytest.mark.skipif(not ROOT or shutil.which("setpriv") is None,
                                  reason="needs root and setpriv to run a process as nobody")
AS_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


@needs_nobody
@pytest.mark.parametrize("keep", [False, True])
def test_other_users_command_lines_are_kept_only_with_the_flag(tmp_path: Path,
                                                               keep: bool) -> None:
    other = subprocess.Popen([*AS_NOBODY, "sh", "-c", "sleep 30; :", "sh", SECRET])
    try:
        out = tmp_path / "sys.rec"
        p = snumap("record", "--system-wide", "--duration", "2.5", "--backend", "proc",
                   "-o", str(out), *(["--keep-cmdlines"] if keep else []))
        assert p.returncode == 0, p.stderr
    finally:
        other.send_signal(signal.SIGKILL)
        other.wait()
    seen = _cmdlines(out)
    assert other.pid in seen                        # the process is in the recording...
    everything = " ".join(c for cs in seen.values() for c in cs if c)
    if keep:
        assert SECRET in everything
    else:                                           # ...without its command line
        assert SECRET not in everything and seen[other.pid] == {None}
        assert any(c for cs in seen.values() for c in cs)    # root's own are kept


@needs_nobody
def test_the_traced_commands_line_is_kept_whoever_runs_it(tmp_path: Path) -> None:
    out = tmp_path / "cmd.rec"
    p = snumap("record", "--backend", "proc", "-o", str(out), "--",
               *AS_NOBODY, "sh", "-c", "sleep 1.5; :", "sh", "--token=mine")
    assert p.returncode == 0, p.stderr
    assert "--token=mine" in " ".join(c for cs in _cmdlines(out).values() for c in cs if c)


def test_drop_other_cmdlines_keeps_own_uid_and_the_tree() -> None:
    from snumap_tui.model.cmdlines import drop_other_cmdlines

    threads = {"pid": np.array([1, 10, 11, 11, 20]), "tid": np.array([1, 10, 11, 12, 20]),
               "ppid": np.array([0, 1, 10, 10, 1]), "uid": np.array([0, 1000, 1000, 1000, 1001]),
               "comm": ["init", "mpirun", "solver", "solver", "other"]}
    procs = {pid: {"cmdline": f"cmd {pid} {SECRET}", "user": "u"} for pid in (1, 10, 11, 20)}
    s = Sample(1, 2, {"tasks": {"threads": threads, "processes": procs}})
    got = drop_other_cmdlines(s, {0}, [10]).readings["tasks"]["processes"]
    assert {pid: bool(p["cmdline"]) for pid, p in got.items()} == \
        {1: True, 10: True, 11: True, 20: False}
    assert procs[20]["cmdline"]                     # the source's dicts are not changed


# ---- --fsroot -----------------------------------------------------------------------------

def test_fsroot_link_out_of_the_tree_is_refused_without_its_content(tmp_path: Path) -> None:
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$SECRETHASH:19000:0:99999:7:::\n")
    secret.chmod(0o600)
    tree = tmp_path / "tree"
    cpu = tree / "sys/devices/system/cpu"
    (cpu / "cpu0/topology").mkdir(parents=True)
    (tree / "proc").mkdir()
    for f in ("possible", "present"):
        (cpu / f).write_text("0\n")
    (cpu / "online").symlink_to(secret)
    for cmd in (["topo"], ["probe"], ["top", "--batch"]):
        p = snumap(*cmd, "--fsroot", str(tree))
        assert p.returncode == 2, (cmd, p.stdout, p.stderr)
        assert "SECRETHASH" not in p.stdout + p.stderr, cmd
        assert p.stderr.count("\n") == 1 and "online" in p.stderr, (cmd, p.stderr)
    # A link that stays inside the tree (a gathered tree's relative links) is fine.
    (cpu / "online").unlink()
    (cpu / "online").symlink_to("possible")
    p = snumap("probe", "--fsroot", str(tree))
    assert "out of the tree" not in p.stderr


def test_readme_says_the_rule_the_tests_check() -> None:
    text = (Path(__file__).parents[1] / "README.md").read_text()
    assert "## Files and safety" in text
    sec = text.split("## Files and safety", 1)[1].split("\n## ", 1)[0]
    for promise in ("mkstemp", "renamed into place", "0600", "--mode",
                    "never a directory snumap did not write", "No link is followed", "flock", "--keep-cmdlines",
                    "--fsroot", ".snumap-output", "0644"):
        assert promise in sec, promise


def test_every_fsroot_read_stays_inside_even_after_the_tree_changes(tmp_path: Path) -> None:
    """A link put in place after the tree was opened (``top --fsroot`` runs for hours) is
    not followed either; and a file with junk in it is reported without its content."""
    from snumap_tui.sources import all_sources
    from tests.fakefs import FakeRoot

    secret = tmp_path / "shadow"
    secret.write_text("root:$6$SECRETHASH:19000\n")
    fake = FakeRoot(tmp_path / "fs", cpus=2)
    (procstat,) = all_sources(fake.root, names=("procstat",))
    assert procstat.read()                             # the tree as gathered reads fine
    stat_file = fake.root / "proc/stat"
    stat_file.unlink()
    stat_file.symlink_to(secret)
    with pytest.raises(PermissionError) as exc:
        procstat.read()
    assert "SECRETHASH" not in str(exc.value) and "out of the --fsroot tree" in str(exc.value)
    # The sources' own fast paths (held descriptors, os.open per /proc file) check too.
    from snumap_tui.sources.confine import open_checked, top_of

    with pytest.raises(PermissionError):
        open_checked(stat_file, top_of(procstat._reader))


def test_a_failed_read_never_quotes_the_file(tmp_path: Path) -> None:
    from snumap_tui.model.sampler import Sampler
    from snumap_tui.sources.base import SourceStatus
    from snumap_tui.topology.build import load_topology

    class Junk:
        name = "junk"
        root = Path("/")

        def status(self) -> SourceStatus:
            return SourceStatus(self.name, True)

        def read(self) -> dict:
            return {"v": int("root:$6$SECRETHASH")}

        def close(self) -> None:
            pass

    s = Sampler(load_topology(synthetic="pu:2"), Path("/"), sources=[Junk()])
    s.sweep()
    reason = s.statuses()["junk"].reason or ""
    assert "read failed" in reason and "SECRETHASH" not in reason
    s.close()
