"""A real Slurm job across two nodes, recorded with the README's line, merged and reported.

The cluster (tests/slurm_cluster.py) is munge + slurmctld + two slurmd on this machine. The job
runs an MPI program (MPICH through Slurm's PMI2) of 4 ranks, 2 per node, each spinning a
different time; it waits for the recorders to start. Checked: every rank is found, on its
node, and its run time in the merged report is the one its own node's recording reports.
Skips only where Slurm cannot start, saying why.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from slurm_cluster import SlurmCluster, SlurmUnavailable

SNUMAP = Path(sys.executable).with_name("snumap")

APP = r"""
#include <mpi.h>
#include <stdio.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
                          return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char **argv) {
    int r, n; volatile double x = 0;
    MPI_Init(&argc, &argv); MPI_Comm_rank(MPI_COMM_WORLD, &r); MPI_Comm_size(MPI_COMM_WORLD, &n);
    double t0 = now();
    while (now() - t0 < 0.15 * (r + 1)) for (int i = 0; i < 100000; i++) x += i;
    MPI_Barrier(MPI_COMM_WORLD);
    printf("rank %d of %d done\n", r, n);
    MPI_Finalize(); return 0;
}
"""

JOB = """#!/bin/sh
# wait (bounded) until the recorders run, then the MPI step on both nodes
i=0; while [ ! -e {go} ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
srun --mpi=pmi2 -n4 {app}
"""


def readme_line() -> str:
    """The line of README.md that records every node of a running job."""
    text = (Path(__file__).parents[1] / "README.md").read_text()
    lines = [ln.strip() for ln in text.splitlines()
             if ln.strip().startswith("srun --overlap --jobid")]
    assert lines, "README.md lost its `srun --overlap --jobid ...` line"
    return lines[0].split("#")[0].strip()


def report_json(path: Path) -> dict:
    p = subprocess.run([str(SNUMAP), "report", "--json", str(path)], capture_output=True,
                       text=True, timeout=60, check=True)
    return json.loads(p.stdout)


def test_two_node_mpi_job(tmp_path: Path) -> None:
    why = SlurmCluster.unavailable()
    if why is None and shutil.which("mpicc") is None:
        why = "mpicc not installed (apt install mpich libmpich-dev)"
    if why:
        print(f"SKIP: {why}")
        pytest.skip(why)
    app = tmp_path / "mpi_app"
    (tmp_path / "app.c").write_text(APP)
    subprocess.run(["mpicc", "-O1", "-o", str(app), str(tmp_path / "app.c")], check=True,
                   timeout=60)
    go = tmp_path / "go"
    job = tmp_path / "job.sh"
    job.write_text(JOB.format(go=go, app=app))
    job.chmod(0o755)
    cl = SlurmCluster(tmp_path / "cluster", nodes=2)
    try:
        cl.start()
    except SlurmUnavailable as exc:
        print(f"SKIP: Slurm cannot start here: {exc}")
        pytest.skip(f"Slurm cannot start here: {str(exc).splitlines()[0]}")
    try:
        jobid = cl.run(["sbatch", "--parsable", "-N2", "-n4", "-o", str(tmp_path / "out-%j"),
                        str(job)]).stdout.strip().split(";")[0]
        for _ in range(300):
            if cl.job_state(jobid) == "RUNNING":
                break
            time.sleep(0.1)
        line = readme_line().replace("JOBID", jobid).replace("snumap ", f"{SNUMAP} ", 1)
        line = line.replace("-o job-", f"-o {tmp_path}/job-")
        rec = subprocess.Popen(["sh", "-c", line], env=cl.env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
        for _ in range(600):     # a recorder writes its file's header once its tracer runs
            if sum(f.stat().st_size > 0 for f in tmp_path.glob("job-*.rec")) == 2 \
                    or rec.poll() is not None:
                break
            time.sleep(0.1)
        time.sleep(0.5)                  # both tracers attached
        go.touch()
        state = cl.wait_job(jobid, timeout=90)
        out, _ = rec.communicate(timeout=60)
        print(out)
        print((tmp_path / f"out-{jobid}").read_text())
        assert state == "COMPLETED", cl.logs()
    finally:
        cl.stop()
    files = sorted(tmp_path.glob(f"job-{jobid}-*.rec"))
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
