"""`snumap top --job`: what a node's stream costs, what the aggregator costs, how soon it shows.

1. Frame bytes per node per second (at 1 s, one frame a second): the real node sampler
   (jobview/node.py) on this machine, following two spinning processes of a pretend job
   (SLURM_JOB_ID in their environment, as Slurm's linuxproc tracking finds them); and the
   synthetic streams of analysis/jobsynth.py on a 32-PU node (8 ranks) and a 192-PU node
   (96 ranks), in the same wire format. Beside it, the node sampler's CPU per frame and
   `top --batch --json`'s (its sampler with the process list, the JSON line).
2. The aggregator at 64, 256 and 1,000 synthetic node streams, each in a fresh process:
   per 1 s tick, every node's frame lines fed (jobview/aggregate.py) and the snapshot taken
   with the findings and the imbalance (what `top --job` computes each tick); its CPU as %
   of one core at 1 s and the process's peak RSS (VmHWM, the lines of --ticks frames of
   every node held in memory included). Targets: 1,000 nodes <= 5 % and <= 300 MB.
3. Time from `top --job` to the first frame of every node on the local two-node Slurm
   (tests/slurm_cluster.py; skipped where Slurm cannot run): `top --job J --batch --json
   --count 1` prints its first line once every node sent a frame.

    .venv/bin/python bench/job_view.py [--ticks 20] [--no-slurm]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests"))

from _report import table, write_section

SPIN = "import time\nwhile True: sum(range(10000)); time.sleep(0.001)\n"


def real_node_bytes(frames: int = 6) -> tuple[float, float, float, float, int]:
    """(bytes of the T record, mean bytes per F record, node sampler CPU ms per frame, of
    which the job scan, threads followed) of the real sampler here."""
    from snumap_tui.jobview.node import NodeStream
    from snumap_tui.topology.build import load_topology

    env = {**os.environ, "SLURM_JOB_ID": "990001", "SLURMD_NODENAME": "bench"}
    kids = [subprocess.Popen([sys.executable, "-c", SPIN],
                             env={**env, "PMI_RANK": str(r)}) for r in range(2)]
    try:
        time.sleep(0.5)
        topo = load_topology()
        node = NodeStream(topo, "990001", 1.0, node="bench")
        t_bytes = len(node.topology_record())
        node.start()
        sizes, cpu, scan = [], [], []
        sent: list[bytes] = []
        threads = 0
        real_scan = node.scan

        def timed_scan() -> list[int]:
            c = time.process_time()
            try:
                return real_scan()
            finally:
                scan.append(time.process_time() - c)

        node.scan = timed_scan  # type: ignore[method-assign]
        for _ in range(frames):
            time.sleep(1.0)                     # `top --job`'s default interval
            c0 = time.process_time()
            data = node.frame_record()
            cpu.append(time.process_time() - c0)
            if data is not None:
                sizes.append(len(data))
                sent.append(data)
        from snumap_tui.jobview.wire import Assembler

        asm = Assembler()
        for line in b"".join(sent).splitlines(keepends=True):
            rec = asm.feed(line)
            if rec is not None and "t" in rec.arrays:
                threads = len(rec.arrays["t"])
        node.close()
        return (t_bytes, statistics.mean(sizes), 1000 * statistics.median(cpu),
                1000 * statistics.median(scan), threads)
    finally:
        for k in kids:
            k.kill()
            k.wait()


def top_batch_cpu_ms(frames: int = 6) -> float:
    """CPU per frame of `top --batch --json`'s work: its sampler (process list included)
    and the JSON line."""
    from snumap_tui.commands.top import _json_default, make_sampler
    from snumap_tui.topology.build import load_topology

    topo = load_topology()
    s = make_sampler(topo, Path("/"), 1.0, None, None)
    s.sweep()
    cpu = []
    for _ in range(frames):
        time.sleep(1.0)
        c0 = time.process_time()
        f = s.frame()
        if f is not None:
            json.dumps(f.to_dict(), default=_json_default)
        cpu.append(time.process_time() - c0)
    s.close()
    return 1000 * statistics.median(cpu)


def synthetic_bytes(pkgs: int, numa: int, cores: int, ranks: int) -> tuple[int, float, int]:
    from snumap_tui.analysis.jobsynth import SyntheticNode
    from snumap_tui.analysis.synth import synthetic_topology

    n = SyntheticNode(0, synthetic_topology(pkgs, numa, cores, 2), ranks=ranks)
    t = len(n.topology_lines())
    sizes = [len(n.frame_lines(i)) for i in range(5)]
    return t, statistics.mean(sizes), len(n.pu_os)


RUNS = 5     # runs of the aggregator per node count


def aggregator_child(nodes: int, ticks: int) -> None:
    """In a fresh process: print JSON {cpu_ms_per_tick, feed_ms, snapshot_ms, hwm_mb}."""
    from snumap_tui.analysis.jobfindings import live_findings
    from snumap_tui.analysis.jobsynth import synthetic_job
    from snumap_tui.jobview.aggregate import JobAggregator, imbalance
    from snumap_tui.jobview.launch import SrunStreams

    job = synthetic_job(nodes, slow=(nodes // 2,))

    def labelled(lines: bytes, i: int) -> bytes:         # as `srun --label` writes them
        return b"".join(b"%d: %s" % (i, x) for x in lines.splitlines(keepends=True))

    # each tick as the bytes srun's stdout gives, read by the stream reader's own code
    # (SrunStreams.take: the label, the lock, the feed, the collector freeze once all report)
    frames = [b"".join(labelled(n.frame_lines(t), i) for i, n in enumerate(job))
              for t in range(ticks)]
    agg = JobAggregator()
    streams = SrunStreams([], agg)
    for line in io.BytesIO(b"".join(labelled(n.topology_lines(), i) for i, n in enumerate(job))):
        streams.take(line)
    feed_s, snap_s = [], []
    for t in range(ticks):
        c0 = time.process_time()
        for line in io.BytesIO(frames[t]):
            streams.take(line)
        c1 = time.process_time()
        views = agg.nodes()
        live_findings(views)
        imbalance(views)
        c2 = time.process_time()
        feed_s.append(c1 - c0)
        snap_s.append(c2 - c1)
    hwm = 0
    for row in Path("/proc/self/status").read_text().splitlines():
        if row.startswith("VmHWM:"):
            hwm = int(row.split()[1]) // 1024
    # the first tick builds every node's view from scratch: the steady state is the ticks
    # after it, their mean (a full garbage collection every few ticks is CPU too)
    print(json.dumps({"feed_ms": 1000 * statistics.median(feed_s),
                      "snapshot_ms": 1000 * statistics.median(snap_s),
                      "mean_tick_ms": 1000 * statistics.mean(
                          f + s for f, s in list(zip(feed_s, snap_s))[1:]),
                      "max_tick_ms": 1000 * max(f + s for f, s in zip(feed_s, snap_s)),
                      "hwm_mb": hwm, "maxrss_mb":
                      resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}))


def first_frame_on_slurm(runs: int = 3) -> list[float] | str:
    from slurm_cluster import SlurmCluster, SlurmUnavailable

    why = SlurmCluster.unavailable()
    if why:
        return why
    with tempfile.TemporaryDirectory(prefix="snumap-bench-job-") as d:
        w = Path(d)
        try:
            cl = SlurmCluster(w / "cl", nodes=2)
            cl.start()
        except SlurmUnavailable as exc:
            return str(exc).splitlines()[0]
        try:
            (w / "job.sh").write_text("#!/bin/sh\nsrun -n2 sleep 300\n")
            (w / "job.sh").chmod(0o755)
            jid = cl.run(["sbatch", "--parsable", "-N2", "-n2", "-o", str(w / "out"),
                          str(w / "job.sh")]).stdout.strip()
            while cl.job_state(jid) != "RUNNING":
                time.sleep(0.2)
            times = []
            for _ in range(runs):
                t0 = time.monotonic()
                p = subprocess.Popen([sys.executable, "-m", "snumap_tui.cli", "top", "--job",
                                      jid, "--batch", "--json", "--count", "1"], env=cl.env,
                                     stdout=subprocess.PIPE, text=True)
                assert p.stdout is not None
                first = json.loads(p.stdout.readline())
                times.append(time.monotonic() - t0)
                p.wait(timeout=60)
                assert all(n["status"] == "live" for n in first["nodes"]), first
            cl.run(["scancel", jid], check=False)
            return times
        finally:
            cl.stop()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ticks", type=int, default=20)
    ap.add_argument("--no-slurm", action="store_true")
    ap.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        aggregator_child(args.child, args.ticks)
        return 0

    t_bytes, f_bytes, node_ms, scan_ms, threads = real_node_bytes()
    batch_ms = top_batch_cpu_ms()
    rows: list[list[object]] = [["this machine, real sampler", os.cpu_count(), f"2 processes, {threads} threads",
             t_bytes, f"{f_bytes:.0f}", f"{node_ms:.2f}"]]
    for pkgs, numa, cores, ranks in ((2, 2, 4, 8), (2, 4, 12, 96)):
        t, f, pus = synthetic_bytes(pkgs, numa, cores, ranks)
        rows.append(["synthetic stream (jobsynth)", pus, f"{ranks} ranks", t, f"{f:.0f}", "-"])
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    body = (f"Load average when it started: {load} (CPU times are per process; a busy "
            "machine's shared caches and cores make them longer).\n\n"
            "### Frame bytes per node per second (one frame a second)\n\n"
            + table(["node", "PUs", "job there", "topology record, once (B)",
                     "frame (B/s)", "sampler CPU per frame (ms)"], rows)
            + f"\n`top --batch --json` on this machine: {batch_ms:.2f} ms CPU per frame "
              "(its sampler with the process list and the JSON line), beside the node "
              f"sampler's {node_ms:.2f} ms, of which {scan_ms:.2f} ms the scan for the job's "
              "processes (sources/jobprocs.py classifies each process new to the node by its "
              "cgroup and environment: it grows with the node's process churn).\n\n")
    agg_rows: list[list[object]] = []
    for n in (64, 256, 1000):
        # a fresh process per run, RUNS runs: this VM's neighbours move one run's CPU times
        # by up to a fifth, so the row is the run of the median mean tick, with the range
        runs = []
        for _ in range(RUNS):
            out = subprocess.run([sys.executable, __file__, "--child", str(n), "--ticks",
                                  str(args.ticks)], capture_output=True, text=True, check=True)
            runs.append(json.loads(out.stdout))
            print(n, runs[-1])
        runs.sort(key=lambda x: x["mean_tick_ms"])
        r = runs[len(runs) // 2]
        cpu = (f"{r['mean_tick_ms'] / 10:.2f} % ({runs[0]['mean_tick_ms'] / 10:.2f}"
               f"-{runs[-1]['mean_tick_ms'] / 10:.2f})")
        agg_rows.append([n, f"{r['feed_ms']:.1f}", f"{r['snapshot_ms']:.1f}", cpu,
                         f"{r['max_tick_ms']:.0f}", max(x["hwm_mb"] for x in runs)])
    body += ("### The aggregator at N synthetic node streams (1 s interval)\n\n"
             "Each node: 32 PUs (2 packages, 4 NUMA nodes, 16 cores), 16 ranks pinned one per "
             "core, one of them slower (analysis/jobsynth.py). Feed: each tick's lines as srun's "
             "stdout gives them (`N: ` labels), read by the stream reader's own code "
             "(SrunStreams.take: the label, the lock, the aggregator's feed); snapshot + "
             "findings: the nodes' views, every finding and the imbalance (the per-rank, "
             "per-core and job sums in one numpy pass over all nodes, jobview/threadstats.py)."
             "\n\n"
             + table(["nodes", "feed ms/tick (median)", "snapshot + findings ms/tick (median)",
                      f"CPU, % of one core (mean tick after the first; median of {RUNS} runs, range)",
                      "slowest tick (ms)", "peak RSS (MB)"],
                     agg_rows)
             + "\nTargets: 1,000 nodes at 1 s <= 5 % of one core and <= 300 MB.\n\n")
    if not args.no_slurm:
        ff = first_frame_on_slurm()
        if isinstance(ff, str):
            body += f"### Time to the first frame of every node\n\nnot measured: {ff}\n"
        else:
            body += ("### Time to the first frame of every node (local two-node Slurm)\n\n"
                     f"`top --job J --batch --json --count 1` to its first line: median "
                     f"{statistics.median(ff):.2f} s over {len(ff)} runs "
                     f"({', '.join(f'{x:.2f}' for x in ff)} s): srun's step launch, the "
                     "samplers' Python start and topology, two sweeps.\n")
    print(body)
    write_section("job_view", "snumap top --job: stream bytes, aggregator cost, first frame",
                  body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
