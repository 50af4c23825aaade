"""`snumap top --job JOBID`: a running Slurm job, live, from the login node; and `top --stream`,
the node's sampler that srun starts on every node of it (jobview/).

The login side asks Slurm for the job's nodes, starts one sampler per node with srun
(jobview/launch.py), feeds their lines to the aggregator (jobview/aggregate.py) and shows the
job: the live view (ui/job_view.py), or with ``--batch`` one text block / JSON object per
interval, with the findings (analysis/jobfindings.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from snumap_tui.errors import SnumapError
from snumap_tui.textsafe import safe_lines, safe_text

#: How long the first frame of every node may take before the batch output starts without it.
FIRST_WAIT_S = 30.0


def jobid_of(args: argparse.Namespace) -> str:
    jobid = args.job or os.environ.get("SLURM_JOB_ID", "")
    if not jobid:
        raise SnumapError("--job without JOBID means the job of this allocation, and "
                          "SLURM_JOB_ID is not set here: give the job id (squeue --me)")
    return str(jobid)


def run_job(args: argparse.Namespace) -> int:
    from snumap_tui.commands.common import topology_from_args

    jobid = jobid_of(args)
    if args.stream:
        from snumap_tui.jobview.node import run

        return run(topology_from_args(args), jobid, args.interval, count=args.count)
    if any(getattr(args, k, None) for k in ("topology", "synthetic", "fsroot")):
        raise SnumapError("--job shows the job's own nodes: --topology, --synthetic and "
                          "--fsroot name another machine")
    from snumap_tui.jobview.aggregate import JobAggregator
    from snumap_tui.jobview.launch import SrunStreams, job_info, srun_argv

    names, _fields = job_info(jobid)
    agg = JobAggregator(names)
    say = (lambda s: print(f"snumap: {safe_lines(s)}", file=sys.stderr, flush=True))
    streams = SrunStreams(srun_argv(jobid, len(names), args.interval), agg,
                          on_message=say if args.batch else None)
    streams.start()
    try:
        if args.batch:
            return run_batch(agg, streams, jobid, args)
        if not sys.stdout.isatty():
            raise SnumapError("the live view needs a terminal; use --batch for text or --json")
        from snumap_tui.ui.job_view import run_job_view

        return run_job_view(agg, streams, jobid, args.interval)
    finally:
        streams.stop()


def job_json(agg: Any, jobid: str, node_frames: bool = False) -> dict[str, Any]:
    """One interval of the job as ``--batch --json`` prints it; NODE_FRAMES: each node's
    last frame too, as `top --batch --json` prints a frame (``frame`` of each node)."""
    from snumap_tui.analysis.jobfindings import live_findings
    from snumap_tui.jobview.aggregate import node_frame

    snap = agg.snapshot()
    if node_frames:
        for n in snap["nodes"]:
            f = node_frame(agg, n["index"])
            n["frame"] = None if f is None else f.to_dict()
    return {"job": jobid, "wall_ns": time.time_ns(), **snap,
            "findings": live_findings(agg.nodes())}


def job_text(snap: dict[str, Any], jobid: str) -> str:
    """One interval as text, 80 columns: a line per node, per rank, then the findings."""
    from snumap_tui.commands.top import wrap_line

    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    out = [f"== {stamp}  job {jobid}  {len(snap['nodes'])} node(s)",
           f"{'NODE':<12}{'STATE':<8}{'BUSY%':>6}{'JOB%':>7}{'RANKS':>6}  MEM/NUMA"]
    for n in snap["nodes"]:
        busy = "-" if n["busy_pct"] is None else f"{n['busy_pct']:.0f}"
        mem = " ".join(f"{m['node']}:{(m['used'] or 0) / 2**30:.1f}G" for m in n["numa"][:4])
        out.append(f"{safe_text(n['node'])[:11]:<12}{n['status']:<8}{busy:>6}"
                   f"{n['job_cpu_pct']:>7.0f}{len(n['ranks']):>6}  {mem}")
        for r in n["ranks"]:
            rank = "-" if r["rank"] is None else str(r["rank"])
            cpu = "-" if r["cpu_pct"] is None else f"{r['cpu_pct']:.0f}"
            pus = ",".join(str(t["pu"]) for t in r["threads"][:8])
            out.append(f"  rank {rank:>4} pid {r['pid']:>7} {safe_text(r['comm'])[:14]:<14}"
                       f" cpu {cpu:>4}%  on PU {pus}  bound {safe_text(r['affinity'])[:16]}")
    for f in snap.get("findings", []):
        out += wrap_line(f"! {f['text']}")
        out += wrap_line(f"  fix: {f['fix']}", indent="      ")
        out += wrap_line(f"  confidence {f['confidence']}")
    for e in snap.get("events", []):
        out += wrap_line(f"# {e}")
    return safe_lines("\n".join(out) + "\n")


def run_batch(agg: Any, streams: Any, jobid: str, args: argparse.Namespace) -> int:
    """Wait for every node's first frame (at most FIRST_WAIT_S), then one snapshot per
    interval until --count, Ctrl-C, or srun's end."""
    printed = 0
    try:
        end = time.monotonic() + FIRST_WAIT_S
        while time.monotonic() < end and not streams.done.is_set():
            with streams.locked():
                if agg.all_reported():
                    break
            time.sleep(0.05)
        next_t = time.monotonic()
        events_seen = 0
        while args.count is None or printed < args.count:
            with streams.locked():
                snap = job_json(agg, jobid, getattr(args, "node_frames", False))
            for e in snap["events"][events_seen:]:
                print(f"snumap: {safe_lines(e)}", file=sys.stderr, flush=True)
            events_seen = len(snap["events"])
            printed += 1        # before the write: a reader may interrupt as soon as it reads
            if args.json:
                sys.stdout.write(json.dumps(snap) + "\n")
            else:
                sys.stdout.write(job_text(snap, jobid))
            sys.stdout.flush()
            if streams.done.is_set():
                break
            next_t += args.interval
            streams.done.wait(max(0.0, next_t - time.monotonic()))
    except KeyboardInterrupt:
        return 130 if printed == 0 else 0
    return 0
