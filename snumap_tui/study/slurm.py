"""`snumap scale --slurm`: the study's pending runs as one Slurm job array.

Task I of the array records run I of a list written beside the job script
(``STUDY/slurm/job-N.runs``), on the node Slurm gives it, into the same study directory (a
shared file system): ``snumap scale task STUDY --list FILE --index $SLURM_ARRAY_TASK_ID``.
Each task writes only its own run's files; the manifest is rebuilt under a lock after each.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from snumap_tui.errors import SnumapError
from snumap_tui.selfcmd import snumap_argv
from snumap_tui.study.files import make_dir, read_bytes, write_text
from snumap_tui.study.manifest import RunPlan, Study
from snumap_tui.textsafe import safe_text
from snumap_tui.threadpools import user_environ

SCRIPT = """#!/bin/sh
# snumap scale: one run of the study per array task ({n} runs)
exec {snumap} --index "$SLURM_ARRAY_TASK_ID"
"""


def submit(study: Study, runs: list[RunPlan], sbatch_opts: str, wait: bool = False) -> str:
    """Write the job script and run list, submit them as ``sbatch --array=0-N``; returns the
    job id. SnumapError (one line) when sbatch is missing or refuses."""
    if shutil.which("sbatch") is None:
        raise SnumapError("--slurm: sbatch is not installed here")
    try:
        opts = shlex.split(sbatch_opts or "")
    except ValueError as exc:
        raise SnumapError(f"--slurm {sbatch_opts!r}: {exc}") from None
    if not runs:
        raise SnumapError("--slurm: every run of the study is already complete")
    d = study.dir.resolve()
    sdir = d / "slurm"
    make_dir(sdir)
    stamp = time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"
    listf = sdir / f"job-{stamp}.runs"
    write_text(listf, "".join(f"{r.id}\n" for r in runs))
    script = sdir / f"job-{stamp}.sh"
    # this very snumap (study/runner.py snumap_argv), whatever directory sbatch starts it in
    task = snumap_argv("scale", "task", str(d), "--list", str(listf))
    write_text(script, SCRIPT.format(n=len(runs), snumap=shlex.join(task)), executable=True)
    argv = ["sbatch", "--parsable", f"--array=0-{len(runs) - 1}", "-J", "snumap-scale",
            "-o", str(sdir / "%A_%a.out"), *opts, *(["--wait"] if wait else []), str(script)]
    # the array's tasks inherit this environment: the user's, not snumap's pinned pools
    r = subprocess.run(argv, capture_output=True, text=True, check=False, env=user_environ())
    if r.returncode != 0 and not (wait and r.stdout.strip()):
        why = (r.stderr.strip() or r.stdout.strip()).splitlines()
        raise SnumapError(f"sbatch refused the study's job array: {why[-1] if why else '?'}")
    job = r.stdout.strip().split(";")[0].splitlines()[0] if r.stdout.strip() else "?"
    jobs = study.manifest.setdefault("slurm", [])
    jobs.append({"job": job, "runs": [x.id for x in runs], "script": f"slurm/{script.name}",
                 "sbatch": argv[1:-1], "submitted": stamp})
    study.save(keys=("slurm",))
    return job


def task_run(study: Study, list_file: Path, index: int) -> RunPlan:
    """The run that array task INDEX records."""
    try:
        text = read_bytes(list_file, trust=True, what="run list").decode("utf-8", "replace")
    except FileNotFoundError:
        raise SnumapError(f"{safe_text(list_file)}: no such run list") from None
    ids = [x.strip() for x in text.splitlines() if x.strip()]
    if not 0 <= index < len(ids):
        raise SnumapError(f"task index {index} is outside the job's {len(ids)} runs")
    plan = {p.id: p for p in study.plan()}
    if ids[index] not in plan:
        raise SnumapError(f"run {safe_text(ids[index])[:80]} is not in the study's plan")
    return plan[ids[index]]


def describe() -> dict[str, Any]:
    return {"how": "sbatch --array, one run per task"}
