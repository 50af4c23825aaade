"""Study directories on a shared node (issue 30, items 1-9 and 13-15): root runs `snumap scale`
on studies another local user (uid 65534 here) wrote or can write, and reads studies whose
files are crafted. Nothing another user wrote is executed or applied, every study output is
written as every output is (safeout), names are escaped on the terminal, and every crafted
file is one line and exit 2 -- never a hang or a traceback."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from snumap_tui.study.synth import make_study

REPO = Path(__file__).resolve().parents[1]
SNUMAP = [sys.executable, "-m", "snumap_tui.cli"]
OTHER = 65534                      # the attacker: another local user (nobody)
ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="as root, with another user as attacker")


def scale(*args: str, cwd: Path | None = None, timeout: float = 120
          ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SNUMAP, "scale", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd or REPO, check=False)


def one_line(r: subprocess.CompletedProcess[str], *words: str) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout[-500:], r.stderr[-2000:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def in_process(*argv: str) -> tuple[int, str, str]:
    """`snumap ARGV` in this process: (exit status, stdout, stderr); a traceback raises."""
    from snumap_tui.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def give_to_other(*paths: Path) -> None:
    for p in paths:
        os.chown(p, OTHER, OTHER, follow_symlinks=False)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A study of one real run (`snumap scale -o S -- true`), copied by each test."""
    st = tmp_path_factory.mktemp("recorded") / "study"
    r = scale("-o", str(st), "--threads", "1", "--", "true")
    assert r.returncode == 0, r.stderr
    return st


def copy_of(recorded: Path, tmp_path: Path) -> Path:
    st = tmp_path / "study"
    shutil.copytree(recorded, st, symlinks=True)
    return st


def edit_manifest(st: Path, fn: Any) -> None:
    m = json.loads((st / "manifest.json").read_text())
    fn(m)
    (st / "manifest.json").write_text(json.dumps(m))


# ---- 1, 2: nothing another user wrote is run ---------------------------------------------------

def plant_payload(st: Path, tmp_path: Path) -> Path:
    """The owner's configuration puts PYTHONPATH, a directory with a sitecustomize.py, in its
    omp_env; returns the file the payload would make."""
    payload = tmp_path / "payload"
    payload.mkdir()
    pwned = tmp_path / "pwned"
    (payload / "sitecustomize.py").write_text(f"open({str(pwned)!r}, 'w').write('uid 0')\n")
    edit_manifest(st, lambda m: m["configurations"][0].update(
        omp_env={"PYTHONPATH": str(payload)}))
    return pwned


@needs_root
def test_a_study_another_user_owns_is_refused_and_its_payload_never_runs(
        recorded: Path, tmp_path: Path) -> None:
    """Item 1: the owner's configuration puts PYTHONPATH (a sitecustomize.py) in omp_env;
    root "resuming" it runs nothing of it."""
    st = copy_of(recorded, tmp_path)
    pwned = plant_payload(st, tmp_path)
    (st / "runs" / "t1-none-rep1.json").unlink()          # to be redone
    for p in [st, *st.rglob("*")]:
        give_to_other(p)
    one_line(scale("-o", str(st), "--threads", "1", "--", "true"), "owned by uid 65534",
             "refused")
    assert not pwned.exists()


@needs_root
def test_an_environment_planted_in_roots_own_manifest_is_not_applied(
        recorded: Path, tmp_path: Path) -> None:
    """Item 1, in a study root owns: omp_env, input_args and cpus come from the plan root
    made now, not from the file."""
    st = copy_of(recorded, tmp_path)
    pwned = plant_payload(st, tmp_path)
    r = scale("-o", str(st), "--threads", "1", "--repeat", "2", "--", "true")
    assert r.returncode == 0, r.stderr
    state = json.loads((st / "runs" / "t1-none-rep2.json").read_text())
    assert state["status"] == "ok", state
    assert not pwned.exists()


@needs_root
def test_an_empty_directory_of_another_user_is_no_new_study(tmp_path: Path) -> None:
    """Item 2: root is given an empty directory another user owns (who could rename a
    manifest of their own over root's between runs)."""
    d = tmp_path / "theirs"
    d.mkdir(mode=0o755)
    give_to_other(d)
    one_line(scale("-o", str(d), "--threads", "1", "--", "true"), "owned by uid 65534")
    assert list(d.iterdir()) == []
    d.chmod(0o777)
    os.chown(d, 0, 0)
    one_line(scale("-o", str(d), "--threads", "1", "--", "true"), "writable by others")


@needs_root
def test_a_manifest_rewritten_during_the_study_does_not_change_what_runs(
        tmp_path: Path) -> None:
    """Item 2: each run rewrites manifest.json with ``command: sh -c 'touch PWNED'`` (what
    the owner of the directory did by rename); the next runs still run the planned
    command."""
    st = tmp_path / "study"
    pwned = tmp_path / "PWNED"
    code = ("import json, sys; p = sys.argv[1] + '/manifest.json'; m = json.load(open(p)); "
            f"m['command'] = ['sh', '-c', 'touch {pwned}']; "
            "open(p + '.new', 'w').write(json.dumps(m)); import os; os.replace(p + '.new', p)")
    r = scale("-o", str(st), "--threads", "1", "--repeat", "3", "--", sys.executable, "-c",
              code, str(st))
    assert r.returncode == 0, r.stderr
    assert not pwned.exists()
    for rep in (1, 2, 3):
        state = json.loads((st / "runs" / f"t1-none-rep{rep}.json").read_text())
        assert state["status"] == "ok" and state["command"][:2] == [sys.executable, "-c"], \
            state


# ---- 3: frequencies ------------------------------------------------------------------------------

def fake_cpufreq(root: Path, governor: str = "performance") -> Path:
    d = root / "cpu0" / "cpufreq"
    d.mkdir(parents=True)
    for name, v in (("cpuinfo_min_freq", "800000"), ("cpuinfo_max_freq", "3000000"),
                    ("scaling_min_freq", "800000"), ("scaling_max_freq", "3000000"),
                    ("scaling_governor", governor)):
        (d / name).write_text(v)
    return root


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*"))
            if p.is_file()}


@needs_root
def test_a_restore_file_applies_only_what_snumap_recorded(recorded: Path,
                                                          tmp_path: Path) -> None:
    """Item 3: a planted freq-restore.json naming any directory called cpufreq (a root-only
    file of the victim's), and one naming a CPU that is not there: the victim is untouched,
    the resume goes on, and a later resume is not stopped by it."""
    st = copy_of(recorded, tmp_path)
    victim = tmp_path / "victim" / "cpufreq"
    victim.mkdir(parents=True)
    (victim / "scaling_governor").write_text("performance")
    (victim / "scaling_governor").chmod(0o600)
    (st / "freq-restore.json").write_text(json.dumps({
        str(victim): {"scaling_governor": "powersave", "scaling_min_freq": "400000",
                      "scaling_max_freq": "400000"},
        "/sys/devices/system/cpu/cpu9999/cpufreq": {"scaling_governor": "powersave"}}))
    (st / "freq-restore.json").chmod(0o600)
    for _ in range(2):
        r = scale("-o", str(st), "--threads", "1", "--", "true")
        assert r.returncode == 0, r.stderr
        assert "Traceback" not in r.stderr
    assert (victim / "scaling_governor").read_text() == "performance"
    assert sorted(p.name for p in victim.iterdir()) == ["scaling_governor"]
    assert not (st / "freq-restore.json").exists()


@needs_root
def test_a_restore_file_of_another_user_is_refused(recorded: Path, tmp_path: Path) -> None:
    st = copy_of(recorded, tmp_path)
    f = st / "freq-restore.json"
    f.write_text("{}")
    give_to_other(f)
    one_line(scale("-o", str(st), "--threads", "1", "--", "true"), "frequency restore file",
             "owned by uid 65534")


def test_leftover_restore_is_this_hosts_this_boots_and_only_cpufreq(tmp_path: Path) -> None:
    """What a killed study recorded is put back, CPU by CPU; a CPU gone is skipped, values
    not of a cpufreq file's form and other hosts' records are left alone."""
    from snumap_tui.study.freq import CpuFreq, restore_leftover

    root = fake_cpufreq(tmp_path / "sys")
    before = _tree(root)
    st = tmp_path / "st"
    st.mkdir(mode=0o700)
    f = CpuFreq(root, st / "freq-restore.json")
    f.set("1.2GHz")
    rec = json.loads((st / "freq-restore.json").read_text())
    assert rec["cpus"]["cpu0"]["scaling_governor"] == "performance"
    rec["cpus"]["cpu7"] = {"scaling_governor": "powersave"}             # not there any more
    rec["cpus"]["../../etc"] = {"scaling_governor": "x"}
    rec["cpus"]["cpu0"]["scaling_governor"] = "performance\nx"         # not a governor
    (st / "freq-restore.json").write_text(json.dumps(rec))
    other = dict(rec, host="another-node")
    (st / "freq-restore-another-node-1.json").write_text(json.dumps(other))
    said = restore_leftover(st, root)
    assert any("not restored" in s and "cpu7" in s for s in said), said
    after = _tree(root)
    assert after["cpu0/cpufreq/scaling_max_freq"] == before["cpu0/cpufreq/scaling_max_freq"]
    assert after["cpu0/cpufreq/scaling_min_freq"] == before["cpu0/cpufreq/scaling_min_freq"]
    assert not (st / "freq-restore.json").exists()
    assert (st / "freq-restore-another-node-1.json").exists()          # not this host's
    assert not (tmp_path / "etc").exists()


def test_a_slurm_task_records_before_it_changes(tmp_path: Path) -> None:
    """A Slurm task's frequencies are recorded (its own file) before the first change; when
    it is SIGKILLed, the next task or resume on that host puts them back."""
    from snumap_tui.study.freq import CpuFreq, restore_file_for_task, restore_leftover

    root = fake_cpufreq(tmp_path / "sys")
    before = _tree(root)
    st = tmp_path / "st"
    st.mkdir(mode=0o700)
    f = CpuFreq(root, restore_file_for_task(st))
    f.set("1.2GHz")
    (rec,) = st.glob("freq-restore-*.json")
    assert _tree(root) != before
    kept = json.loads(rec.read_text())
    assert kept["pid"] == os.getpid()
    assert restore_leftover(st, root) and _tree(root) == before        # ... as if it was gone
    f.saved = {}                                    # the task was killed: no restore() of its own
    f.set("1.2GHz")
    (rec,) = st.glob("freq-restore-*.json")
    rec.write_text(json.dumps(dict(json.loads(rec.read_text()), pid=1)))  # a live process
    assert restore_leftover(st, root) == [] and rec.exists()            # left to its task


# ---- 4, 5, 6: outputs --------------------------------------------------------------------------

@needs_root
def test_plots_never_follow_a_link_nor_replace_without_force(tmp_path: Path) -> None:
    """Item 4: --plot into a directory another user owns, holding a link to a root-only
    file, and an existing plot."""
    pytest.importorskip("matplotlib")
    make_study(tmp_path / "s", threads=[1, 2], serial={"a": 0.5})
    victim = tmp_path / "victim"
    victim.write_text("root's")
    victim.chmod(0o600)
    plots = tmp_path / "plots"
    plots.mkdir(mode=0o777)
    (plots / "speedup.svg").symlink_to(victim)
    give_to_other(plots, plots / "speedup.svg")
    one_line(scale("report", str(tmp_path / "s"), "--plot", str(plots)), "speedup.svg",
             "symbolic link")
    assert victim.read_text() == "root's"
    assert sorted(p.name for p in plots.iterdir()) == ["speedup.svg"]     # none written
    r = scale("report", str(tmp_path / "s"), "--plot", str(plots), "--force")
    assert r.returncode == 0, r.stderr
    assert victim.read_text() == "root's" and not (plots / "speedup.svg").is_symlink()
    assert stat.S_IMODE((plots / "speedup.svg").stat().st_mode) == 0o600
    one_line(scale("report", str(tmp_path / "s"), "--plot", str(plots)), "already exists")


@needs_root
def test_parquet_export_never_writes_through_a_planted_temporary(tmp_path: Path) -> None:
    """Item 5: the old temporary name was .NAME.PID.tmp beside the output."""
    pytest.importorskip("pyarrow")
    make_study(tmp_path / "s", threads=[1, 2], serial={"a": 0.5})
    victim = tmp_path / "victim"
    victim.write_text("root's")
    out = tmp_path / "out.parquet"
    (tmp_path / f".{out.name}.{os.getpid()}.tmp").symlink_to(victim)
    rc, _out, err = in_process("scale", "export", str(tmp_path / "s"), "--format", "parquet",
                               "-o", str(out))
    assert rc == 0, err
    assert victim.read_text() == "root's"
    assert out.read_bytes()[:4] == b"PAR1"


@needs_root
def test_every_study_file_is_private_as_root(recorded: Path, tmp_path: Path) -> None:
    """Item 6: as root the manifest, run files, logs, exports and plots are 0600 in 0700
    directories, as record and --extrap make them."""
    st = recorded
    files = [st / "manifest.json", *(st / "runs").glob("*.json"), *(st / "runs").glob("*.log")]
    assert len(files) >= 3
    for p in files:
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
    for d in (st, st / "runs"):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    outs = []
    for fmt in ("json", "csv", "parquet"):
        if fmt == "parquet" and not _has("pyarrow"):
            continue
        out = tmp_path / f"m.{fmt}"
        r = scale("export", str(st), "--format", fmt, "-o", str(out))
        assert r.returncode == 0, r.stderr
        outs.append(out)
    if _has("matplotlib"):
        r = scale("report", str(st), "--plot", str(tmp_path / "plots"))
        assert r.returncode == 0, r.stderr
        outs += list((tmp_path / "plots").iterdir())
        assert stat.S_IMODE((tmp_path / "plots").stat().st_mode) == 0o700
    for p in outs:
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


# ---- 7, 8, 9: names, FIFOs, crafted files --------------------------------------------------------

EVIL = "\x1b]0;pwned\x07evil\x1b[2J"


def test_scale_report_escapes_names(tmp_path: Path) -> None:
    """Item 7: region names reach the terminal escaped (in the tree, the findings, the
    models); --json keeps them exact."""
    make_study(tmp_path / "s", threads=[1, 2, 4], serial={EVIL: 0.9, "\x1b[31mred": 0.0})
    r = scale("report", str(tmp_path / "s"))
    assert r.returncode == 0, r.stderr
    assert "\x1b" not in r.stdout and "\x07" not in r.stdout
    assert "\\x1b]0;pwned\\x07evil" in r.stdout
    j = json.loads(scale("report", str(tmp_path / "s"), "--json").stdout)
    assert EVIL in {n["region"] for n in j["regions"]}


def _fifo_study(tmp_path: Path, which: str) -> Path:
    st = tmp_path / "s"
    make_study(st, threads=[1, 2], serial={"a": 0.5})
    target = st / which
    target.unlink()
    os.mkfifo(target)
    return st


@pytest.mark.parametrize("which", ["manifest.json", "runs/t1-compact-rep1.json"])
def test_a_fifo_in_a_study_never_hangs(tmp_path: Path, which: str) -> None:
    """Item 8: a FIFO at the manifest or a run file: report, export, view, --extrap and a
    resume answer at once (a run file that cannot be read is a damaged run)."""
    st = _fifo_study(tmp_path, which)
    runs = [("report", str(st)), ("report", str(st), "--json"),
            ("export", str(st), "--format", "csv", "-o", str(tmp_path / "o.csv")),
            ("report", str(st), "--extrap", str(tmp_path / "x.txt")),
            ("view", str(st), "--screenshot", str(tmp_path / "v.svg"))]
    for argv in runs:
        r = scale(*argv, timeout=60)
        if which == "manifest.json":
            one_line(r, "manifest.json", "not a regular file")
        else:
            assert r.returncode == 0, (argv, r.stderr)
    if which == "manifest.json" and ROOT:
        one_line(scale("-o", str(st), "--", "prog", timeout=60), "not a regular file")
    rep = json.loads(scale("report", str(st), "--json").stdout) if which != "manifest.json" \
        else None
    if rep is not None:
        assert rep["runs"].get("damaged") == 1, rep["runs"]


def _deep(n: int) -> str:
    return "[" * n + "]" * n


# (where, edit of the manifest or of run t1-compact-rep1's file, words of the one line)
CRAFTED = [
    ("manifest", lambda m: m["configurations"][0].update(threads=0), "threads"),
    ("manifest", lambda m: m["configurations"][0].update(threads="abc"), "threads"),
    ("manifest", lambda m: m.update(version=None), "version"),
    ("manifest", lambda m: m["plan"][0].update(repeat="x"), "repeat"),
    ("manifest", lambda m: m.update(machine="a string"), "machine"),
    ("manifest", lambda m: m["configurations"][0].update(input_value="NaN!"), "input_value"),
    ("manifest", lambda m: m["configurations"][0].update(key="../../etc/x"), "key"),
    ("manifest", lambda m: m.update(plan={"a": 1}), "plan"),
    ("run", lambda s: s["measurements"].update(regions={"a": 1}), "regions"),
    ("run", lambda s: s["measurements"]["regions"][0].pop("region"), "region"),
    ("run", lambda s: s["measurements"]["program"].update(time_s="abc"), "time_s"),
    ("run", lambda s: s["measurements"]["regions"][0].update(time_s=1e308), "time_s"),
    ("run", lambda s: s.update(status=["ok"]), "status"),
]


@pytest.mark.parametrize("case", range(len(CRAFTED)))
def test_crafted_study_files_are_one_line(tmp_path: Path, case: int) -> None:
    """Item 9: each crafted field is one line and exit 2 (a manifest) or a damaged run the
    report counts (a run file), across report, --json, export, --extrap and view."""
    where, edit, words = CRAFTED[case]
    st = tmp_path / "s"
    make_study(st, threads=[1, 2], serial={"a": 0.5})
    if where == "manifest":
        edit_manifest(st, edit)
    else:
        f = st / "runs" / "t1-compact-rep1.json"
        s = json.loads(f.read_text())
        edit(s)
        f.write_text(json.dumps(s))
    for argv in (["report", str(st)], ["report", str(st), "--json"],
                 ["export", str(st), "--format", "json", "-o", str(tmp_path / "o.json"),
                  "--force"],
                 ["report", str(st), "--extrap", str(tmp_path / "x.txt"), "--force"]):
        rc, out, err = in_process("scale", *argv)
        if where == "manifest":
            lines = err.strip().splitlines()
            assert rc == 2 and len(lines) == 1 and words in lines[0], (argv, err)
        else:
            assert rc == 0, (argv, err)
    if where == "run":
        rc, out, _err = in_process("scale", "report", str(st), "--json")
        assert json.loads(out)["runs"]["damaged"] == 1


@pytest.mark.parametrize("text", [_deep(100_000), '{"format": "snumap-study", "version": NaN}',
                                  '{"format": "snumap-study", "version": 1e999}',
                                  "[" + "{}," * 3_000_000 + "{}]"],
                         ids=["deep", "nan", "1e999", "3M objects"])
def test_crafted_manifest_text_is_one_line(tmp_path: Path, text: str) -> None:
    """A manifest 100,000 levels deep, NaN, a number too large for a float, 3 M objects."""
    st = tmp_path / "s"
    make_study(st, threads=[1], serial={"a": 0.5})
    (st / "manifest.json").write_text(text)
    rc, _out, err = in_process("scale", "report", str(st))
    assert rc == 2 and len(err.strip().splitlines()) == 1, err


def test_extrap_without_a_completed_run_is_one_line(tmp_path: Path) -> None:
    st = tmp_path / "s"
    make_study(st, threads=[1, 2], serial={"a": 0.5})
    for f in (st / "runs").glob("*.json"):
        f.unlink()
    rc, _out, err = in_process("scale", "report", str(st), "--extrap", str(tmp_path / "x.txt"))
    assert rc == 2 and "no completed run" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "x.txt").exists()


# ---- 13, 14, 15: a first day -------------------------------------------------------------------

@needs_root
def test_children_run_the_parents_snumap_whatever_the_directory(tmp_path: Path) -> None:
    """Item 13: run from a directory holding another `snumap_tui` package (a checkout without
    its native part, or anyone's), every run still records with the parent's snumap."""
    decoy = tmp_path / "cwd"
    (decoy / "snumap_tui").mkdir(parents=True)
    (decoy / "snumap_tui" / "__init__.py").write_text(
        "raise SystemExit('decoy snumap_tui imported')\n")
    parent = ("import sys; sys.path.insert(0, sys.argv.pop(1)); "
              "from snumap_tui.cli import main; sys.exit(main())")
    r = subprocess.run([sys.executable, "-c", parent, str(REPO), "scale", "-o",
                        str(tmp_path / "st"), "--threads", "1", "--", "true"],
                       capture_output=True, text=True, timeout=120, cwd=decoy, check=False)
    assert r.returncode == 0, r.stderr
    assert "1 runs recorded" in r.stderr, r.stderr
    state = json.loads((tmp_path / "st" / "runs" / "t1-none-rep1.json").read_text())
    assert state["status"] == "ok", state


def test_extrap_names_every_file_it_writes_and_a_rerun_writes_none(tmp_path: Path) -> None:
    """Item 14: two placements are two Extra-P files: both are named; a rerun without
    --force refuses before writing any; with --force both are replaced."""
    make_study(tmp_path / "s", threads=[1, 2, 4], serial={"a": 0.5},
               places=["compact", "spread"])
    out = tmp_path / "study1.txt"
    r = scale("report", str(tmp_path / "s"), "--extrap", str(out))
    assert r.returncode == 0, r.stderr
    written = sorted(p.name for p in tmp_path.glob("study1*"))
    assert written == ["study1-compact.txt", "study1-spread.txt"]
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("Extra-P input"))
    assert str(tmp_path / "study1-compact.txt") in line and \
        str(tmp_path / "study1-spread.txt") in line
    (tmp_path / "study1-spread.txt").unlink()
    before = (tmp_path / "study1-compact.txt").read_bytes()
    one_line(scale("report", str(tmp_path / "s"), "--extrap", str(out)), "study1-compact.txt",
             "already exists")
    assert not (tmp_path / "study1-spread.txt").exists()          # nothing half-written
    r = scale("report", str(tmp_path / "s"), "--extrap", str(out), "--force")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "study1-compact.txt").read_bytes() == before
    j = json.loads(scale("report", str(tmp_path / "s"), "--json", "--extrap", str(out),
                         "--force").stdout)
    assert sorted(Path(x).name for x in j["extrap"]) == written


def test_dry_run_prints_each_command_with_its_input(tmp_path: Path) -> None:
    """Item 15: the commands, {input} substituted, as the help promises."""
    r = scale("--threads", "1,2", "--input", "small=-n 100", "--input", "big=-n 1000",
              "--dry-run", "--", "./app", "{input}", "--out=x{input}")
    assert r.returncode == 0, r.stderr
    assert "./app -n 100 '--out=x-n 100'" in r.stdout, r.stdout
    assert "./app -n 1000 '--out=x-n 1000'" in r.stdout, r.stdout
    assert r.stdout.count("./app") == 4


def test_a_manifest_swapped_during_report_is_read_once(tmp_path: Path) -> None:
    """The report reads the manifest once (a writer renaming over it meanwhile changes
    nothing of a report in progress)."""
    st = tmp_path / "s"
    make_study(st, threads=[1, 2], serial={"a": 0.5})
    stop = threading.Event()

    def swap() -> None:
        good = (st / "manifest.json").read_bytes()
        while not stop.is_set():
            (st / "m.tmp").write_bytes(b"{}")
            os.replace(st / "m.tmp", st / "manifest.json")
            (st / "m.tmp").write_bytes(good)
            os.replace(st / "m.tmp", st / "manifest.json")

    t = threading.Thread(target=swap, daemon=True)
    t.start()
    try:
        for _ in range(5):
            rc, _out, err = in_process("scale", "report", str(st), "--json")
            assert rc in (0, 2) and "Traceback" not in err, err
            if rc == 2:
                assert len(err.strip().splitlines()) == 1, err
    finally:
        stop.set()
        t.join()


@needs_root
def test_a_users_own_study_under_umask_002_stays_theirs_to_run() -> None:
    """A user whose umask is 002 (user private groups) makes a study, then resumes it: its
    files are never group-writable, so the trust check does not refuse its own owner. (In a
    forked child that became that user: every module is imported before.)"""
    import codecs
    import tempfile

    import snumap_tui.study.freq
    import snumap_tui.topology.jsonlimits  # noqa: F401 - imported before the fork
    from snumap_tui.study.manifest import open_study

    codecs.lookup("ascii")                 # safeout reads the umask in /proc as ASCII

    with tempfile.TemporaryDirectory() as d:
        home = Path(d)
        home.chmod(0o755)
        os.chown(home, OTHER, OTHER)
        pid = os.fork()
        if pid == 0:                                       # the user
            code = 1
            try:
                os.setgroups([])
                os.setgid(OTHER)
                os.setuid(OTHER)
                os.umask(0o002)
                make_study(home / "study", threads=[1, 2], serial={"a": 0.5})
                s = open_study(home / "study", trust=True)
                s.save()
                code = 0 if len(s.run_states()) == 2 else 3
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        for p in [home / "study", *(home / "study").rglob("*")]:
            st = p.lstat()
            assert st.st_uid == OTHER and not st.st_mode & 0o022, (p, oct(st.st_mode))


def test_what_the_fuzzer_found_stays_found(tmp_path: Path) -> None:
    """tests/fuzz_study.py's finds: 2^64 in a float column and 1.5 bytes in an int one of
    the Parquet export; a memory figure without nodes; a lone surrogate in a name (no export
    could encode it); a directory named like a restore file during a resume."""
    pytest.importorskip("pyarrow")
    from snumap_tui.study import manifest as M
    from snumap_tui.study.freq import restore_leftover

    st = tmp_path / "s"
    make_study(st, threads=[1, 2], serial={"a": 0.5}, figures=True)
    f = st / "runs" / "t1-compact-rep1.json"
    s = json.loads(f.read_text())
    s["measurements"]["program"]["counters"]["mpki"] = 2**64
    s["measurements"]["program"]["memory"]["rss_bytes"] = 1.5
    s["measurements"]["regions"][0]["memory"].pop("nodes")        # a memory without nodes
    f.write_text(json.dumps(s))
    rc, _out, err = in_process("scale", "export", str(st), "--format", "parquet", "-o",
                               str(tmp_path / "o.parquet"))
    assert rc == 0, err
    s["measurements"]["regions"][0]["region"] = "\udcff"           # a lone surrogate
    f.write_text(json.dumps(s))
    for fmt in ("csv", "parquet"):
        rc, _out, err = in_process("scale", "export", str(st), "--format", fmt, "-o",
                                   str(tmp_path / f"o.{fmt}"), "--force")
        assert rc == 0, err
    rc, out, _err = in_process("scale", "report", str(st), "--json")
    assert json.loads(out)["runs"]["damaged"] == 1
    (st / "freq-restore.json").mkdir()
    study, _ = M.create_or_resume(st, json.loads((st / "manifest.json").read_text()))
    for _ in range(2):
        said = restore_leftover(study.dir, tmp_path / "no-sysfs")
        assert any("not a regular file" in x for x in said), said


def test_a_lone_surrogate_is_refused_wherever_it_is_and_a_pair_is_text(tmp_path: Path) -> None:
    """study/files.py read_json: a lone surrogate (only a JSON escape can make one) in a key
    or a value, in either case of hex digits, is refused; an escaped pair (an emoji, as
    json.dumps writes it) and escaped backslashes are text."""
    from snumap_tui.errors import SnumapError
    from snumap_tui.study.files import read_json

    f = tmp_path / "x.json"
    for text in ('{"\\udcff": 1}', '{"a": ["\\uD800"]}', '{"a": {"b": "x\\uDfFf"}}'):
        f.write_text(text)
        with pytest.raises(SnumapError, match="lone surrogate"):
            read_json(f)
    for text, value in (('{"a": "\\ud83d\\ude00"}', {"a": "\U0001F600"}),
                        ('{"a": "\\\\ud800"}', {"a": "\\ud800"}),
                        ('{"\\u00e9": "\\ud7ff"}', {"\u00e9": "\ud7ff"})):
        f.write_text(text)
        assert read_json(f) == value


def test_run_states_reads_a_run_file_again_only_once_it_changed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each save reads every run's state: a file read before is taken from memory until it
    is replaced (a new state written), rewritten in place, or made writable by others (then
    refused in a trusted study, as on its first read)."""
    import snumap_tui.study.manifest as M
    from snumap_tui.study import files

    st = tmp_path / "s"
    make_study(st, threads=[1, 2], serial={"a": 0.1})
    study = M.open_study(st, trust=True)
    first = study.run_states()
    rid = min(first)
    f = study.run_file(rid, "json")
    reads: list[str] = []

    def counting(path: Any, **kw: Any) -> Any:
        reads.append(Path(path).name)
        return files.read_json(path, **kw)

    monkeypatch.setattr(M, "read_json", counting)
    assert study.run_states() == first and reads == []
    study.write_run(rid, {**first[rid], "why": "again"})        # replaced by rename
    assert study.run_states()[rid]["why"] == "again" and reads == [f.name]
    data = json.loads(f.read_text())
    data["why"] = "rewritten in place"
    with open(f, "r+", encoding="utf-8") as w:                   # same inode, new content
        w.write(json.dumps(data))
        w.truncate()
    assert study.run_states()[rid]["why"] == "rewritten in place"
    f.chmod(0o666)
    with pytest.raises(files.TrustError):
        study.run_states()


def test_a_running_run_is_pending_only_when_its_lock_is_free(tmp_path: Path) -> None:
    """A run left ``running`` is being recorded elsewhere (a Slurm task) while its lock is
    held, and redone once it is free; a lock file that is a FIFO or a link holds nothing."""
    import snumap_tui.study.manifest as M

    st = tmp_path / "s"
    make_study(st, threads=[1, 2], serial={"a": 0.1})
    study = M.open_study(st, trust=True)
    rid = min(study.run_states())
    study.write_run(rid, {**study.run_states()[rid], "status": "running"})
    lock = study.run_file(rid, "lock")
    with M.flocked(lock, f"run {rid}"):
        assert rid not in {p.id for p in study.pending()}
    assert rid in {p.id for p in study.pending()}
    lock.unlink()
    os.mkfifo(lock)
    assert rid in {p.id for p in study.pending()}
    lock.unlink()
    lock.symlink_to(tmp_path / "elsewhere")
    assert rid in {p.id for p in study.pending()}
