"""`snumap scale --slurm`: the study's runs as a Slurm job array on the local test cluster
(tests/slurm_cluster.py: munge, slurmctld and two slurmd on this machine), each task
recording its configuration on the node it got, into the same study directory; `scale
report` reads the result as it reads a local study."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from snumap_tui import store

sys.path.insert(0, str(Path(__file__).parent))
from slurm_cluster import SlurmCluster, SlurmUnavailable

SNUMAP = [sys.executable, "-m", "snumap_tui.cli"]


def test_slurm_array_records_every_configuration(tmp_path: Path) -> None:
    why = SlurmCluster.unavailable()
    if why:
        pytest.skip(why)
    cl = SlurmCluster(tmp_path / "cluster", nodes=2)
    try:
        cl.start()
    except SlurmUnavailable as exc:
        pytest.skip(f"Slurm cannot start here: {str(exc).splitlines()[0]}")
    st = tmp_path / "study"
    try:
        r = subprocess.run([*SNUMAP, "scale", "--threads", "1,2", "--places", "compact",
                            "--repeat", "2", "--regions", "none", "--slurm", "-t 5", "--wait",
                            "-o", str(st), "--", "sleep", "0.3"],
                           env=cl.env, capture_output=True, text=True, timeout=300, check=False)
        logs = cl.logs()
    finally:
        cl.stop()
    outs = "\n".join(p.read_text() for p in sorted((st / "slurm").glob("*.out")))
    assert r.returncode == 0, f"{r.stderr}\n{outs}\n{logs}"
    assert "submitted 4 runs as Slurm job array" in r.stderr
    man = json.loads((st / "manifest.json").read_text())
    runs = man["runs"]
    assert len(runs) == 4 and {x["status"] for x in runs} == {"ok"}, (runs, outs)
    job = man["slurm"][0]["job"]
    assert {x["slurm"]["SLURM_ARRAY_JOB_ID"] for x in runs} == {job}
    assert sorted(int(x["slurm"]["SLURM_ARRAY_TASK_ID"]) for x in runs) == [0, 1, 2, 3]
    assert {x["slurm"]["SLURMD_NODENAME"] for x in runs} <= {"n1", "n2"}
    for x in runs:                      # every configuration recorded, on its CPUs
        with store.open(st / x["recording"]) as rec:
            assert rec.complete and rec.header["command"] == ["sleep", "0.3"]
            assert rec.header["cpus"] == ([0] if x["config"] == "t1-compact" else [0, 1])
    rep = json.loads(subprocess.run([*SNUMAP, "scale", "report", str(st), "--json"],
                                    capture_output=True, text=True, timeout=60,
                                    check=True).stdout)
    assert rep["runs"] == {"planned": 4, "ok": 4}
    prog = next(n for n in rep["regions"] if n["region"] == "(program)")
    assert [a["threads"] for a in prog["rows"]] == [1, 2] and all(
        a["n"] == 2 and a["time_median_s"] >= 0.29 for a in prog["rows"])
