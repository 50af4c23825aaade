"""Screenshots of `snumap top --job`'s job view (screenshots/top-job-*.svg), from the real app.

- two nodes: a real local two-node Slurm (tests/slurm_cluster.py, task/affinity), a 4-rank
  MPICH job with two ranks bound to one PU per node (``--cpu-bind=map_cpu:0,0``), its
  samplers started by the real srun line of `top --job`; and the same job rerun with the
  finding's fix. Needs root, slurm-wlm, munge, mpich.
- 64 nodes: synthetic node streams in the same wire format (analysis/jobsynth.py).

Each at 80x24 and 160x50. Prints the findings before and after the fix.

    .venv/bin/python scripts/job_screenshots.py [--no-slurm]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from snumap_tui.analysis.jobfindings import live_findings
from snumap_tui.analysis.jobsynth import synthetic_job
from snumap_tui.jobview.aggregate import JobAggregator
from snumap_tui.jobview.launch import SrunStreams, srun_argv
from snumap_tui.ui.job_view import JobApp
from snumap_tui.ui.screenshot import save_screenshot

SIZES = ("80x24", "160x50")
OUT = REPO / "screenshots"
SPIN = r"""
#include <mpi.h>
#include <time.h>
int main(int c, char **v) { int r; volatile double x = 0; MPI_Init(&c, &v);
  MPI_Comm_rank(MPI_COMM_WORLD, &r); time_t t0 = time(0);
  while (time(0) - t0 < 60) for (int i = 0; i < 100000; i++) x += i;
  MPI_Finalize(); return 0; }
"""


def shots(agg: JobAggregator, jobid: str, name: str) -> None:
    for size in SIZES:
        out = OUT / f"top-job-{name}-{size}.svg"
        save_screenshot(JobApp(agg, jobid, refresh_s=3600), out, size, force=True)
        print("wrote", out)


def synthetic(nodes: int = 64) -> None:
    agg = JobAggregator()
    job = synthetic_job(nodes, slow=(17,))
    for n in job:
        for line in n.topology_lines().splitlines(keepends=True):
            agg.feed(n.index, line)
    for step in range(3):
        for n in job:
            for line in n.frame_lines(step).splitlines(keepends=True):
                agg.feed(n.index, line)
    shots(agg, "synthetic", f"{nodes}nodes")


def two_nodes() -> None:
    from slurm_cluster import SlurmCluster

    with tempfile.TemporaryDirectory(prefix="snumap-topjob-") as d:
        w = Path(d)
        (w / "spin.c").write_text(SPIN)
        subprocess.run(["mpicc", "-O1", "-o", str(w / "spin"), str(w / "spin.c")], check=True)
        with SlurmCluster(w / "cl", nodes=2, task_plugin="affinity") as cl:
            fix = None
            for name, step in (("2nodes-oversubscribed",
                                "srun --mpi=pmi2 -n4 --cpu-bind=map_cpu:0,0 ./spin"),
                               ("2nodes-fixed", None)):
                step = step or fix
                script = w / f"{name}.sh"
                script.write_text(f"#!/bin/sh\n{step}\n")
                script.chmod(0o755)
                # run from the job's directory, as a user would (./spin): the fix shown is
                # the user's own line, with no temporary path of this machine in it
                jid = cl.run(["sbatch", "--parsable", "-N2", "-n4", f"--chdir={w}",
                              "-o", str(w / "out-%j"), str(script)]).stdout.strip()
                while cl.job_state(jid) != "RUNNING":
                    time.sleep(0.2)
                time.sleep(2)                      # the ranks started
                agg = JobAggregator(list(cl.nodes))
                streams = SrunStreams(srun_argv(jid, 2, 1.0), agg, env=cl.env)
                streams.start()
                try:
                    time.sleep(4.5)
                    with streams.locked():
                        found = live_findings(agg.nodes())
                    print(f"{name}: findings", json.dumps(found, indent=1))
                    fix = next((f["fix"] for f in found if f["kind"] == "oversubscribed"),
                               fix)
                    with streams.locked():
                        shots(agg, jid, name)
                finally:
                    streams.stop()
                    cl.run(["scancel", jid], check=False)
                    cl.wait_job(jid)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-slurm", action="store_true", help="only the synthetic 64 nodes")
    args = ap.parse_args()
    synthetic()
    if not args.no_slurm:
        two_nodes()
    return 0


if __name__ == "__main__":
    sys.exit(main())
