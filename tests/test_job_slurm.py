"""A real Slurm job across two nodes, recorded with the README's line, merged and reported.

The cluster (tests/slurm_cluster.py) is munge + slurmctld + two slurmd on this machine. The job
runs an MPI program (MPICH through Slurm's PMI2) of 4 ranks, 2 per node, each spinning a
different time; it waits for the recorders to start. Checked: every rank is found, on its
node, and its run time in the merged report is the one its own node's recording reports.
Skips only where Slurm cannot start, saying why.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from snumap_tui import store

sys.path.insert(0, str(Path(__file__).parent))
from slurm_cluster import (
    SlurmCluster,
    SlurmUnavailable,
    cgroup_unavailable,
    run_batch_form,
    run_recorded_job,
)

SNUMAP = Path(sys.executable).with_name("snumap")


def job_procs(path: Path) -> list[dict]:
    from snumap_tui.analysis.jobreport import job_processes

    with store.open(path) as rec:
        return job_processes(rec)


def report_json(path: Path) -> dict:
    p = subprocess.run([str(SNUMAP), "report", "--json", str(path)], capture_output=True,
                       text=True, timeout=60, check=True)
    return json.loads(p.stdout)


@pytest.mark.parametrize("proctrack", ["linuxproc", "cgroup"])
def test_two_node_mpi_job(tmp_path: Path, proctrack: str) -> None:
    """proctrack/linuxproc: the recorders find the job by its processes' environment;
    proctrack/cgroup: by Slurm's cgroup tree (v1 here: /slurm_<node>/uid_U/job_J/step_S)."""
    why = SlurmCluster.unavailable() or (cgroup_unavailable() if proctrack == "cgroup" else None)
    if why:
        print(f"SKIP: {why}")
        pytest.skip(why)
    try:
        files, out = run_recorded_job(tmp_path, SNUMAP, proctrack=proctrack)
    except SlurmUnavailable as exc:
        print(f"SKIP: Slurm cannot start here: {exc}")
        pytest.skip(f"Slurm cannot start here: {str(exc).splitlines()[0]}")
    print(out)
    jobid = files[0].name.split("-")[1]
    assert [f.name for f in files] == [f"job-{jobid}-n1.rec", f"job-{jobid}-n2.rec"], out
    merged = tmp_path / "job.rec"
    m = subprocess.run([str(SNUMAP), "merge", *map(str, files), "-o", str(merged)],
                       capture_output=True, text=True, timeout=120, check=False)
    assert m.returncode == 0, m.stderr
    text = subprocess.run([str(SNUMAP), "report", str(merged)], capture_output=True, text=True,
                          timeout=60, check=True).stdout
    print(text)
    job_r = report_json(merged)["job"]
    ranks = {r["rank"]: r for r in job_r["ranks"] if r["comm"] == "mpi_app"}
    assert sorted(ranks) == [0, 1, 2, 3], job_r["ranks"]
    assert {r: ranks[r]["node"] for r in ranks} == {0: "n1", 1: "n1", 2: "n2", 3: "n2"}
    assert all(ranks[r]["rank_var"] == "PMI_RANK" for r in ranks)
    # every process of a rank: its run time in the merged report is its own node's, and a
    # rank's time is that of its processes (a rank's child inherits its PMI_RANK)
    merged_rt = {p["pid"]: p["runtime_s"] for p in report_json(merged)["processes"]}
    procs = job_procs(merged)
    own = {f.stem.rsplit("-", 1)[1]: {p["pid"]: p["runtime_s"]
                                      for p in report_json(f)["processes"]} for f in files}
    for r in ranks.values():
        mine = [p for p in procs if p["rank"] == r["rank"] and p["step"] == r["step"]]
        assert all(p["node"] == r["node"] for p in mine)
        for p in mine:
            assert merged_rt.get(p["pid"], 0.0) == pytest.approx(
                own[p["node"]].get(p["local_pid"], 0.0), abs=1e-6)
        assert r["runtime_s"] == pytest.approx(sum(merged_rt.get(p["pid"], 0.0) for p in mine),
                                               abs=1e-6)
        assert r["runtime_s"] > 0.05
    nodes = {n["node"]: n for n in job_r["nodes"]}
    assert set(nodes) == {"n1", "n2"} and all(n["ranks"] == 2 for n in nodes.values())
    assert job_r["imbalance"]["ranks"] is not None
    app_steps = {p["step"] for p in procs if p["comm"] == "mpi_app"}
    assert len(app_steps) == 1 and "batch" in {p["step"] for p in procs}
    if proctrack == "cgroup":
        # the extern step's process carries no Slurm environment: only its cgroup
        # (/slurm_<node>/uid_U/job_J/step_extern) says it is the job's
        assert "extern" in {p["step"] for p in procs}


def test_batch_script_form(tmp_path: Path) -> None:
    """The README's form inside a batch script: one recorder per node (not one per task),
    both steps recorded, both files closed cleanly when the job ends."""
    why = SlurmCluster.unavailable()
    if why:
        print(f"SKIP: {why}")
        pytest.skip(why)
    try:
        files, out = run_batch_form(tmp_path, SNUMAP)
    except SlurmUnavailable as exc:
        print(f"SKIP: Slurm cannot start here: {exc}")
        pytest.skip(f"Slurm cannot start here: {str(exc).splitlines()[0]}")
    print(out)
    assert len(files) == 2 and "already exists" not in out, out
    for f in files:
        with store.open(f) as rec:
            assert rec.complete and not rec.damaged
    merged = tmp_path / "job.rec"
    subprocess.run([str(SNUMAP), "merge", *map(str, files), "-o", str(merged)], check=True,
                   timeout=120)
    procs = [p for p in job_procs(merged) if p["comm"] == "mpi_app"]
    steps = sorted({p["step"] for p in procs})
    assert len(steps) == 2, procs                       # both MPI steps
    first = {(p["rank"], p["node"]) for p in procs if p["step"] == steps[0]}
    assert sorted(first) == [(0, "n1"), (1, "n1"), (2, "n2"), (3, "n2")]
    second = {(p["rank"], p["node"]) for p in procs if p["step"] == steps[1]}
    assert sorted(second) == [(0, "n1"), (1, "n2")]
