"""`snumap scale` knows its observer (issue 29 item 5): each run also runs the command
untraced with the same environment and CPUs; the report puts the program's untraced time
beside the recorded one per configuration, warns over 3 %, and takes the program's speedup
and efficiency from the untraced times there (text, --json, export, view)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from snumap_tui.study import load
from snumap_tui.study.aggregate import PROGRAM
from snumap_tui.study.report import format_report
from snumap_tui.study.synth import make_study
from snumap_tui.study.untraced import run_untraced
from snumap_tui.ui.scale_view import table

SNUMAP = [sys.executable, "-m", "snumap_tui.cli"]
THREADS = [1, 2, 4, 8, 16]


def _program(agg: list[dict]) -> dict[int, dict]:
    return {a["threads"]: a for a in agg if a["region"] == PROGRAM}


def test_perturbed_study_takes_the_untraced_times(tmp_path: Path) -> None:
    # the case: +39 % at 16 threads, +5 % at 8, within noise below
    slow = {1: 0.0, 2: 0.01, 4: 0.02, 8: 0.05, 16: 0.39}
    make_study(tmp_path / "s", threads=THREADS, serial={"par": 0.0}, repeats=3,
               slowdown=slow)
    data = load(tmp_path / "s")
    prog = _program(data.aggregated())
    for p, a in prog.items():
        assert a["perturbation"] == pytest.approx(slow[p])
        assert a["untraced_median_s"] == pytest.approx(a["time_median_s"] / (1 + slow[p]))
        assert a["basis"] == "untraced"
        # speedup and efficiency are the untraced ones, not the recorded ones
        u1 = prog[1]["untraced_median_s"]
        assert a["speedup"] == pytest.approx(u1 / a["untraced_median_s"])
        assert a["efficiency"] == pytest.approx(u1 / a["untraced_median_s"] / p)
    # the region measured in a perturbed configuration is marked so
    par = {a["threads"]: a for a in data.aggregated() if a["region"] == "par"}
    assert par[16]["perturbed"] == pytest.approx(0.39) and par[4]["perturbed"] is None
    rep = data.report()
    pert = rep["perturbation"]
    assert pert["available"] and pert["program_basis"] == "untraced"
    assert [c["over"] for c in pert["configurations"]] == [False, False, False, True, True]
    assert "39.0 % at 16 threads" in pert["warning"]
    from snumap_tui.commands.scale import _perturbation_warning

    assert _perturbation_warning(tmp_path / "s") == pert["warning"]     # said after a study
    text = format_report(rep)
    assert "warning: the recorder slowed the program by more than 3 % in 2 of 5" in text
    assert "RECORDED  UNTRACED  PERTURB" in text
    assert "from its untraced times" in text
    finding = next(f for f in rep["findings"] if f["region"] == PROGRAM)
    assert "from its untraced times" in finding["text"]
    assert finding["efficiency"] == pytest.approx(prog[16]["efficiency"])
    # the view says the same
    view = table(data.aggregated(), PROGRAM).plain
    assert "+39.0 % !" in view and "from the untraced times" in view
    assert table(data.aggregated(), "par").plain.count(" *\n") == 2      # at 8 and 16
    # the export has the untraced time of each run
    out = tmp_path / "m.csv"
    subprocess.run([*SNUMAP, "scale", "export", str(tmp_path / "s"), "--format", "csv", "-o",
                    str(out)], check=True, capture_output=True, timeout=60)
    rows = [r for r in csv.DictReader(out.open()) if r["region"] == PROGRAM]
    assert len(rows) == 15 and all(float(r["untraced_s"]) > 0 for r in rows)
    j = json.loads(subprocess.run([*SNUMAP, "scale", "report", str(tmp_path / "s"), "--json"],
                                  check=True, capture_output=True, timeout=60).stdout)
    assert j["perturbation"]["warning"] == pert["warning"]
    # the program's model is of its untraced times, and the Extra-P file holds those
    assert "of its untraced times" in rep["models"]["models"][PROGRAM]["note"]
    ex = tmp_path / "e.txt"
    subprocess.run([*SNUMAP, "scale", "report", str(tmp_path / "s"), "--extrap", str(ex),
                    "--measure", "mean"], check=True, capture_output=True, timeout=60)
    text = ex.read_text()
    assert "# program: its untraced runs' times" in text
    prog16 = [float(x) for x in text.split("REGION program\n", 1)[1].splitlines()[4].split()[1:]]
    assert sorted(prog16) == pytest.approx(sorted(
        r["untraced_s"] for r in data.measurements if r["region"] == PROGRAM
        and r["threads"] == 16))


def test_unperturbed_study_keeps_the_recorded_times(tmp_path: Path) -> None:
    make_study(tmp_path / "s", threads=[1, 2, 4], serial={"a": 0.1}, repeats=2,
               slowdown={1: 0.0, 2: 0.01, 4: 0.02})
    data = load(tmp_path / "s")
    prog = _program(data.aggregated())
    assert {a["basis"] for a in prog.values()} == {"recorded"}
    assert prog[4]["speedup"] == pytest.approx(prog[1]["time_median_s"] /
                                               prog[4]["time_median_s"])
    rep = data.report()
    assert rep["perturbation"]["warning"] is None
    assert "warning:" not in format_report(rep)
    # a study made before the untraced runs: said, no figure invented
    make_study(tmp_path / "old", threads=[1, 2], serial={"a": 0.1})
    old = load(tmp_path / "old").report()
    assert not old["perturbation"]["available"]
    assert "perturbation: n/a" in format_report(old)


def test_untraced_run_gets_the_environment_and_cpus(tmp_path: Path) -> None:
    cpus = sorted(os.sched_getaffinity(0))[:1]
    code = ("import os, time; time.sleep(0.2); "
            "print(sorted(os.sched_getaffinity(0)), os.environ['OMP_NUM_THREADS'])")
    env = {**os.environ, "OMP_NUM_THREADS": "3"}
    before = os.sched_getaffinity(0)
    u = run_untraced([sys.executable, "-c", code], env, cpus, tmp_path / "u.log")
    assert u["exit_status"] == 0
    assert 0.2 <= u["time_s"] < 10.0
    assert (tmp_path / "u.log").read_text().strip() == f"{cpus} 3"
    assert os.sched_getaffinity(0) == before          # scale's own affinity is back
    bad = run_untraced(["false"], env, (), tmp_path / "b.log")
    assert bad["exit_status"] == 1
    gone = run_untraced(["no-such-program-here"], env, (), tmp_path / "g.log")
    assert gone["exit_status"] is None and "not found" in gone["why"]


def test_untraced_log_is_never_group_writable(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A user whose umask is 002: the untraced run's log is made as the recorded run's (and
    every file of the study: study/files.py study_mode), writable by no one else."""
    monkeypatch.setattr(os, "geteuid", lambda: 4242)
    old = os.umask(0o002)
    try:
        u = run_untraced(["true"], dict(os.environ), (), tmp_path / "u.log")
    finally:
        os.umask(old)
    assert u["exit_status"] == 0
    assert (tmp_path / "u.log").stat().st_mode & 0o022 == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="recording needs root")
def test_a_study_runs_each_configuration_untraced_too(tmp_path: Path) -> None:
    r = subprocess.run([*SNUMAP, "scale", "--threads", "1", "--repeat", "2", "--regions",
                        "none", "-o", str(tmp_path / "s"), "--", "sleep", "0.2"],
                       capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    states = [json.loads(f.read_text()) for f in sorted((tmp_path / "s" / "runs").glob(
        "*-rep*.json"))]
    assert [s["untraced"]["order"] for s in states] == ["before", "after"]   # interleaved
    for s in states:
        assert s["untraced"]["exit_status"] == 0
        assert 0.2 <= s["untraced"]["time_s"] < 5.0
        assert (tmp_path / "s" / "runs" / s["untraced"]["log"]).exists()
    rep = load(tmp_path / "s").report()
    (c,) = rep["perturbation"]["configurations"]
    assert c["n"] == 2 and c["untraced_s"] == pytest.approx(
        sum(s["untraced"]["time_s"] for s in states) / 2)        # the median of two
