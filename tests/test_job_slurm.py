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

sys.path.insert(0, str(Path(__file__).parent))
from slurm_cluster import SlurmCluster, SlurmUnavailable, run_recorded_job

SNUMAP = Path(sys.executable).with_name("snumap")


def report_json(path: Path) -> dict:
    p = subprocess.run([str(SNUMAP), "report", "--json", str(path)], capture_output=True,
                       text=True, timeout=60, check=True)
    return json.loads(p.stdout)


def test_two_node_mpi_job(tmp_path: Path) -> None:
    why = SlurmCluster.unavailable()
    if why:
        print(f"SKIP: {why}")
        pytest.skip(why)
    try:
        files, out = run_recorded_job(tmp_path, SNUMAP)
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
    for f in files:
        node = f.stem.rsplit("-", 1)[1]
        own = {p["pid"]: p["runtime_s"] for p in report_json(f)["processes"]}
        for r in ranks.values():
            if r["node"] == node:
                assert r["runtime_s"] > 0.05
                assert r["runtime_s"] == pytest.approx(own[r["local_pid"]], abs=1e-6)
    nodes = {n["node"]: n for n in job_r["nodes"]}
    assert set(nodes) == {"n1", "n2"} and all(n["ranks"] == 2 for n in nodes.values())
    assert job_r["imbalance"]["ranks"] is not None
