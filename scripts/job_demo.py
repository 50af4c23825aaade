"""A two-node Slurm job on this machine, recorded, merged, reported and screenshotted.

What the closing note of issue 11 shows, from the real thing: tests/slurm_cluster.py starts
munge, slurmctld and two slurmd (nodes n1, n2) in a temporary directory, runs a 4-rank MPICH
job recorded with the README's line, then `snumap merge`, `snumap report` and two SVG
screenshots of `snumap replay` (screenshots/replay-job-2nodes*.svg). Needs root, slurm-wlm,
munge and mpich (scripts/setup.sh test installs them).

    .venv/bin/python scripts/job_demo.py [--report FILE]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from slurm_cluster import run_recorded_job


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--report", default=None, help="also write the merged report here")
    args = ap.parse_args()
    snumap = Path(sys.executable).with_name("snumap")
    with tempfile.TemporaryDirectory(prefix="snumap-job-demo-") as d:
        files, out = run_recorded_job(Path(d), snumap)
        print(out)
        merged = Path(d) / "job.rec"
        subprocess.run([str(snumap), "merge", *map(str, files), "-o", str(merged)], check=True)
        report = subprocess.run([str(snumap), "report", str(merged)], check=True,
                                capture_output=True, text=True).stdout
        print(report)
        if args.report:
            Path(args.report).write_text(report)
        shots = REPO / "screenshots"
        for name, keys in (("replay-job-2nodes.svg", "3"),
                           ("replay-job-2nodes-folded.svg", "3,down,down,n")):
            subprocess.run([str(snumap), "replay", str(merged), "--screenshot",
                            str(shots / name), "--size", "120x30", "--keys", keys], check=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
