"""The job view of `top --job` (ui/job_view.py) and the node drill-down, on the aggregator fed
with node streams in the wire format (analysis/jobsynth.py), and the aggregator itself."""

from __future__ import annotations

import asyncio
import gc
import threading
from pathlib import Path

import numpy as np
import pytest

from snumap_tui.analysis.jobfindings import live_findings, spread_fix
from snumap_tui.analysis.jobsynth import synthetic_job
from snumap_tui.jobview import wire
from snumap_tui.jobview.aggregate import LIVE, LOST, JobAggregator, node_frame
from snumap_tui.ui.app import TopApp
from snumap_tui.ui.hostinfo import HostInfo
from snumap_tui.ui.job_view import JobApp, NodeFeed


def fed(nodes: int, frames: int = 2, **kw: object) -> JobAggregator:
    agg = JobAggregator()
    kw.setdefault("ranks", 8)               # half the 16 cores of the synthetic node
    job = synthetic_job(nodes, **kw)  # type: ignore[arg-type]
    for n in job:
        for line in n.topology_lines().splitlines(keepends=True):
            agg.feed(n.index, line)
    for step in range(frames):
        for n in job:
            for line in n.frame_lines(step).splitlines(keepends=True):
                agg.feed(n.index, line)
    return agg


def test_wire_round_trip_and_bounds() -> None:
    arr = np.arange(5000, dtype=np.float32)
    data = wire.encode("F", 7, {"x": 1}, {"a": arr})
    lines = data.splitlines(keepends=True)
    assert len(lines) > 1 and all(len(x) <= wire.MAX_LINE + 1 for x in lines)
    asm = wire.Assembler()
    recs = [asm.feed(x) for x in lines]
    rec = recs[-1]
    assert rec is not None and all(r is None for r in recs[:-1])
    assert rec.kind == "F" and rec.seq == 7 and rec.header == {"x": 1}
    assert np.array_equal(rec.arrays["a"], arr)
    # a piece lost: that record is dropped and counted, the next one decodes
    asm2 = wire.Assembler()
    for x in lines[:1] + lines[2:]:
        assert asm2.feed(x) is None
    assert asm2.bad >= 1
    assert asm2.feed(wire.encode("E", 8, {"why": "x"})) is not None
    # garbage and a record claiming more bytes than it has
    assert asm2.feed(b"SJ1 F1 0/1 !!!notbase64\n") is None
    assert wire.decode_body("F", 1, b"") is None


def test_two_nodes_in_the_view_and_batch_form() -> None:
    agg = fed(2)
    snap = agg.snapshot()
    assert [n["status"] for n in snap["nodes"]] == [LIVE, LIVE]
    ranks = [r["rank"] for n in snap["nodes"] for r in n["ranks"]]
    assert ranks == list(range(16))
    # rank r on node i: its thread on the first PU of core r (synthetic_job's placement)
    n0 = snap["nodes"][0]
    assert [r["threads"][0]["pu"] for r in n0["ranks"]] == [0, 2, 4, 6, 8, 10, 12, 14]

    async def go() -> None:
        app = JobApp(agg, "42", refresh_s=10)
        async with app.run_test(size=(160, 50)) as pilot:
            await pilot.pause()
            text = str(app.query_one("#job-nodes").render())
            assert "node0000" in text and "node0001" in text
            assert "rank    8" in text            # the second node's first rank, open
            assert "0123 4567" in text.replace("·", "")     # the ranks on the cores, by NUMA node
            await pilot.press("down")
            await pilot.press("enter")
            await pilot.pause()
        assert app.return_value == ("node", 1, 1)
    asyncio.run(go())


def test_64_nodes_fold_to_a_line_each() -> None:
    agg = fed(64)

    async def go() -> None:
        app = JobApp(agg, "64", refresh_s=10)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            lines = str(app.query_one("#job-nodes").render()).splitlines()
            assert lines[0].startswith("node0000") and "rank" not in "".join(lines)
            for _ in range(30):
                await pilot.press("down")
            await pilot.pause()
            shown = str(app.query_one("#job-nodes").render())
            assert "node0030" in shown and "node0000" not in shown   # scrolled
            await pilot.press("n")                # open the selected node
            await pilot.pause()
            assert "rank  240" in str(app.query_one("#job-nodes").render())
    asyncio.run(go())


def test_node_drill_down_is_top_fed_by_the_stream() -> None:
    agg = fed(2)
    frame = node_frame(agg, 1)
    assert frame is not None and frame.topology is agg.topology(1)
    assert sorted(t.pid for t in frame.tasks) == [100_008 + i for i in range(8)]
    assert frame.get("util_pct", frame.topology.root.id) is not None
    lock = threading.Lock()

    async def go() -> None:
        feed = NodeFeed(agg, 1, lock, 0.05)
        app = TopApp(agg.topology(1), feed=feed,      # type: ignore[arg-type]
                     host=lambda: HostInfo("node0001", "via srun", ""), interval_s=1.0)
        async with app.run_test(size=(120, 40)) as pilot:
            for _ in range(40):
                await pilot.pause(0.05)
                if app.frame is not None:
                    break
            assert app.frame is not None
            assert app.frame.task(100_008) is not None
            await pilot.press("3")                    # the process list: the job's ranks
            await pilot.pause()
    asyncio.run(go())


def test_findings_on_streams() -> None:
    agg = fed(4, frames=3, slow=(2,), ranks=16)       # a rank per core
    kinds = {(f["kind"], f["node"]) for f in live_findings(agg.nodes())}
    assert kinds == {("slow_node", "node0002")}
    half = [f for f in live_findings(fed(2).nodes()) if f["kind"] == "idle_cores"]
    assert [(f["node"], f["cores"]) for f in half] == [
        ("node0000", list(range(8, 16))), ("node0001", list(range(8, 16)))]
    assert half[0]["fix"].startswith("srun --ntasks-per-node=16 ")
    agg.end(3, "task 3: Killed")
    assert agg.nodes()[3].status == LOST and agg.events == ["node0003: task 3: Killed"]


def test_spread_fix_rewrites_the_jobs_own_line() -> None:
    assert spread_fix("srun --mpi=pmi2 --cpu-bind=map_cpu:0,0 -n4 ./a", False) == \
        "srun --cpu-bind=cores --mpi=pmi2 -n4 ./a"
    assert spread_fix(None, True).startswith("OMP_PLACES=cores OMP_PROC_BIND=spread")


def test_damaged_streams_never_raise() -> None:
    """A node's stream is another process's output: flipped bytes, cut lines, a topology that
    is not one, arrays that do not fit it -- dropped and counted, never an exception."""
    import random

    rng = random.Random(31)
    node = synthetic_job(1)[0]
    good = node.topology_lines() + node.frame_lines(0) + node.frame_lines(1)
    for _ in range(300):
        data = bytearray(good)
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        agg = JobAggregator()
        for line in bytes(data).splitlines(keepends=True):
            agg.feed(0, line)
        agg.snapshot()
        live_findings(agg.nodes())
    agg = JobAggregator()
    agg.feed(0, wire.encode("T", 0, {"topology": {"format": "snumap-topology", "objects": 5}}))
    assert agg.nodes()[0].status == LOST
    agg = JobAggregator()
    agg.feed(0, node.topology_lines())
    agg.feed(0, wire.encode("F", 9, {"m": ["util_pct"], "comm": "x"},
                            {"m": np.zeros((1, 3), np.float32), "t": np.zeros((2, 4), np.int32),
                             "p": np.zeros(3)}))
    v = agg.nodes()[0]
    assert v.busy_pct is None and v.ranks == [] and v.strips == {}


def test_job_argument_errors_are_one_line(tmp_path: object) -> None:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["PATH"] = "/nonexistent"            # no scontrol, no srun
    for argv, want in ((["--job", "12x"], "a Slurm job id is a number"),
                       (["--job"], "SLURM_JOB_ID is not set"),
                       (["--job", "12"], "needs Slurm's scontrol"),
                       (["--job", "12", "--synthetic", "pack:1 pu:2"], "another machine")):
        p = subprocess.run([sys.executable, "-m", "snumap_tui.cli", "top", *argv, "--batch"],
                           capture_output=True, text=True, env=env, timeout=60, check=False)
        assert p.returncode == 2, (argv, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1 and want in p.stderr, (argv, p.stderr)


def _view(name: str, ranks: list, numa: int = 2, gpus: list | None = None,
          frames: int = 3) -> object:
    from snumap_tui.analysis.synth import synthetic_topology
    from snumap_tui.jobview.aggregate import NodeView

    topo = synthetic_topology(1, numa, 2, 1)          # PUs 0-1 on node 0, 2-3 on node 1...
    v = NodeView(0, name, LIVE, topology=topo, frames=frames, alloc=f"0-{2 * numa - 1}",
                 gpus=gpus or [])
    v._index_of = {"NUMANode": (np.array([o.id for o in topo.numa_nodes]),
                                np.array([o.os_index for o in topo.numa_nodes]))}
    v.ranks = ranks
    return v


def _rank(rank: int, threads: list[tuple[int, float]], numa_mem: dict[int, int],
          aff: str = "") -> object:
    from snumap_tui.jobview.aggregate import RankView, ThreadView

    pu_numa = {0: 0, 1: 0, 2: 1, 3: 1}
    return RankView("n1", rank, 1000 + rank, "app", "0", sum(c for _, c in threads),
                    [ThreadView(2000 + rank * 10 + i, pu, c) for i, (pu, c) in
                     enumerate(threads)], aff, numa_mem, sum(numa_mem.values()),
                    sorted({pu_numa[p] for p, _ in threads}))


def test_numa_spread_memory_far_and_idle_findings() -> None:
    from snumap_tui.analysis.jobfindings import idle, memory_far, numa_spread, oversubscribed

    # one rank's threads on both NUMA nodes, 90% of its memory on node 0
    v = _view("n1", [_rank(0, [(0, 90.0), (2, 90.0)], {0: 9 << 30, 1: 1 << 30})])
    [f] = numa_spread(v)  # type: ignore[arg-type]
    assert "NUMA nodes 0, 1" in f["text"] and "90%" in f["text"]
    assert "OMP_PROC_BIND=close" in f["fix"] and "--membind=0" in f["fix"]
    # ... its threads on node 0 only: nothing
    assert numa_spread(_view("n1", [_rank(0, [(0, 90.0), (1, 90.0)],  # type: ignore[arg-type]
                                               {0: 9 << 30})])) == []
    # memory on node 0, the GPU on node 1
    far = _view("n1", [_rank(0, [(0, 90.0)], {0: 8 << 30})],
                gpus=[{"name": "nvml0", "numa": 1, "util": 80.0}])
    [g] = memory_far(far)  # type: ignore[arg-type]
    from snumap_tui.ui.job_view import rank_line

    assert str(rank_line(far.ranks[0], 120, far.gpus)).endswith("GPU far")  # type: ignore[attr-defined]
    assert "NUMA node 0" in g["text"] and "--gpu-bind=closest" in g["fix"]
    assert memory_far(_view("n1", [_rank(0, [(2, 90.0)], {1: 8 << 30})],  # type: ignore[arg-type]
                            gpus=[{"name": "nvml0", "numa": 1}])) == []
    # a node where the job does nothing beside a busy one
    busy = _view("n1", [_rank(0, [(0, 95.0)], {0: 1 << 30})])
    quiet = _view("n2", [_rank(1, [(0, 1.0)], {0: 1 << 30})])
    quiet.name = "n2"  # type: ignore[attr-defined]
    assert [f["node"] for f in idle([busy, quiet])] == ["n2"]  # type: ignore[list-item]
    # two threads of one rank on one PU, PU 1 idle: OMP_PLACES; unpinned: medium
    [o] = oversubscribed(_view("n1", [_rank(0, [(0, 50.0), (0, 48.0)], {0: 1})],  # type: ignore[arg-type]
                               numa=1))
    assert o["fix"].startswith("OMP_PLACES=cores") and o["confidence"].startswith("medium")
    assert o["idle_pus"] == [1]


def test_static_header_parts_sent_when_they_change() -> None:
    enc = wire.Encoder()
    head = {"t": 1, "m": ["util_pct"], "comm": ["a", "b"]}
    arrays = {"m": np.ones((1, 4), np.float32), "c": np.ones(2, np.float32)}
    first = enc.frame(1, head, arrays)
    same = enc.frame(2, {**head, "t": 2}, arrays)
    grown = enc.frame(3, {**head, "t": 3, "comm": ["a", "b", "c"]},
                      {**arrays, "c": np.ones(3, np.float32)})
    again = enc.frame(4, {**head, "t": 4, "comm": ["a", "b", "c"]},
                      {**arrays, "c": np.ones(3, np.float32)})
    assert len(same) < len(first)
    asm = wire.Assembler()
    r1, r2 = asm.feed(first), asm.feed(same)
    assert r1 is not None and r2 is not None
    assert r2.header["comm"] == ["a", "b"] and r2.header["t"] == 2 and r2.arrays["c"].shape == (2,)
    # the record with the change lost: the next delta does not fit the old shapes, dropped
    assert asm.feed(again) is None and asm.bad == 1
    asm2 = wire.Assembler()
    asm2.feed(first)
    r3 = asm2.feed(grown)
    r4 = asm2.feed(again)
    assert r3 is not None and r4 is not None and r4.header["comm"] == ["a", "b", "c"]
    # a delta before any full record
    assert wire.Assembler().feed(same) is None


def test_srun_failing_is_said_per_node() -> None:
    """srun that cannot start the step: every node ends with srun's own last line."""
    from snumap_tui.jobview.launch import SrunStreams

    agg = JobAggregator(["n1", "n2"])
    script = "echo 'srun: error: Unable to create step for job 7: Invalid' >&2; exit 1"
    streams = SrunStreams(["sh", "-c", script], agg)
    streams.start()
    assert streams.done.wait(30)
    streams.stop()
    views = agg.nodes()
    assert [v.status for v in views] == ["ended", "ended"]
    assert views[0].why == "srun ended (exit 1: srun: error: Unable to create step for job " \
        "7: Invalid)"


def test_srun_lines_are_routed_by_label() -> None:
    """srun --label's "N: " prefix says whose line it is; a task's death on stderr ends it."""
    from snumap_tui.jobview.launch import SrunStreams

    node = synthetic_job(2)
    out = b"".join(f"{i}: ".encode() + line for n in node for i in (n.index,)
                   for line in (n.topology_lines() + n.frame_lines(0) + n.frame_lines(1))
                   .splitlines(keepends=True))
    agg = JobAggregator(["a", "b"])
    path = "/dev/stdin"
    streams = SrunStreams(["sh", "-c", f"cat {path}; echo 'srun: error: n2: task 1: Killed' >&2"],
                          agg)
    streams.start()
    assert streams.proc is not None and streams.proc.stdin is not None
    streams.proc.stdin.write(out)
    streams.proc.stdin.close()
    assert streams.done.wait(30)
    # every node reported: what lived then left the collector's generations, until stop
    assert streams._heap.settled and gc.get_freeze_count() > 0
    streams.stop()
    assert not streams._heap.settled and gc.get_freeze_count() == 0
    a, b = agg.nodes()
    assert (a.name, a.frames, a.status) == ("node0000", 2, "ended")
    assert (b.name, b.status, b.why) == ("node0001", "lost", "Killed")


def test_job_view_keys_come_from_the_keymap() -> None:
    from snumap_tui.ui.keymap import bindings, entries

    assert [(b.key, b.action) for b in JobApp.BINDINGS] == [  # type: ignore[union-attr]
        (b.key, b.action) for b in bindings("job")]
    for k in entries("job"):                         # the app implements every action
        assert hasattr(JobApp, "action_" + (k.action("job") or "").split("(")[0]), k
    assert {k.keys for k in entries("job")} >= {"enter", "q,f10", "up", "down", "s", "n"}


def test_sort_pause_and_help_keys() -> None:
    agg = fed(4, frames=3, slow=(1,), ranks=16)

    async def go() -> None:
        app = JobApp(agg, "7", refresh_s=10)
        async with app.run_test(size=(120, 30)) as pilot:
            await pilot.pause()
            names = [v.name for v in app.nodes]
            assert names == ["node0000", "node0001", "node0002", "node0003"]
            await pilot.press("s", "s")               # by the job's CPU: the slow node last
            await pilot.pause()
            assert [v.name for v in app.nodes][-1] == "node0001"
            await pilot.press("space")
            await pilot.pause()
            assert "[paused]" in str(app.query_one("#job-head").render())
            await pilot.press("question_mark")
            await pilot.pause()
            assert app.is_running
    asyncio.run(go())


def test_report_findings_from_a_recordings_figures() -> None:
    """`report`'s side: a rank whose two threads ran on both NUMA nodes of a node while its
    memory stayed on node 0 (the report's per-thread NUMA time and per-process memory)."""
    from types import SimpleNamespace

    from snumap_tui.analysis.jobfindings import report_findings
    from snumap_tui.analysis.synth import synthetic_topology

    rec = SimpleNamespace(
        topology=synthetic_topology(1, 2, 2, 1), nodes=None, header={"node": "n1"},
        infos=[{"what": "job processes", "columns": ["pid", "node", "step", "rank", "comm"],
                "rows": [[100, "n1", "0", 0, "app"]]}])
    report = {"duration_s": 10.0,
              "tasks": [{"pid": 100, "tid": 100, "cpus": {"0": 9.0}, "numa": {"0": 9.0},
                         "runtime_s": 9.0, "pus": "0"},
                        {"pid": 100, "tid": 101, "cpus": {"2": 9.0}, "numa": {"1": 9.0},
                         "runtime_s": 9.0, "pus": "2"}],
              "processes": [{"pid": 100, "memory": {"nodes": {"0": 9 << 30, "1": 1 << 28}}}]}
    found = report_findings(rec, report, {"nodes": [{"node": "n1"}]})
    assert [f["kind"] for f in found] == ["numa_spread", "idle_cores"], found
    assert "NUMA nodes 0, 1" in found[0]["text"] and "97%" in found[0]["text"]
    assert "over the recording" in found[0]["confidence"]
    assert found[1]["cores"] == [1, 3]            # the second core of each NUMA node


def test_the_node_samplers_run_this_snumap_whatever_the_working_directory() -> None:
    """srun starts the samplers through selfcmd's boot line (this package first on sys.path),
    never `python -m`, which would import a working directory's snumap_tui (issue 30 item 13)."""
    import snumap_tui
    from snumap_tui.jobview.launch import srun_argv
    from snumap_tui.selfcmd import BOOT

    argv = srun_argv("42", 2, 1.0, python="/opt/py/bin/python3")
    i = argv.index("/opt/py/bin/python3")
    assert argv[i + 1:i + 3] == ["-c", BOOT] and "-m" not in argv
    assert argv[i + 3] == str(Path(snumap_tui.__file__).resolve().parent.parent)
    assert argv[i + 4:i + 7] == ["top", "--stream", "--job=42"]


def test_nodes_of_one_hardware_share_its_topology() -> None:
    """Identical nodes (their host names apart) hold one Topology; another shape its own;
    each node keeps its own name, host and allocation."""
    from snumap_tui.analysis.jobsynth import SyntheticNode
    from snumap_tui.analysis.synth import synthetic_topology

    def topo(host: str, cores: int) -> object:
        t = synthetic_topology(2, 2, cores, 2).to_dict()
        t["meta"]["HostName"] = host
        t["root"]["infos"] = [["HostName", host]]
        return t

    agg = JobAggregator()
    nodes = [SyntheticNode(i, ranks=4) for i in range(3)]
    for n, cores in zip(nodes, (4, 4, 2)):
        head = {"node": n.name, "host": f"h{n.index}", "alloc": f"0-{n.index + 1}",
                "topology": topo(f"h{n.index}", cores), "sources": {}}
        for line in wire.encode("T", 1, head).splitlines(keepends=True):
            agg.feed(n.index, line)
    t0, t1, t2 = (agg.topology(i) for i in range(3))
    assert t0 is not None and t0 is t1 and t2 is not None and t2 is not t0
    assert len(t0.pus) == 32 and len(t2.pus) == 16
    views = agg.nodes()
    assert [(v.name, v.host, v.alloc) for v in views] == [
        ("node0000", "h0", "0-1"), ("node0001", "h1", "0-2"), ("node0002", "h2", "0-3")]
    assert [sorted(agg._nodes[i].alloc_cores) for i in range(3)] == [[0], [0], [0, 1]]
    assert all("topology" not in agg._nodes[i].head for i in range(3))


def test_all_reported_counts_each_node_once() -> None:
    """``all_reported`` (what `--batch` waits for, and when the stream reader freezes the
    long-lived objects for the collector) is a count kept as frames and ends arrive: a node
    that ends before its first frame counts once, a frame after it or a second end does not."""
    job = synthetic_job(3)
    agg = JobAggregator(["a", "b", "c"])
    for i in range(3):
        for line in job[i].topology_lines().splitlines(keepends=True):
            agg.feed(i, line)

    def frame(i: int, t: int) -> None:
        for line in job[i].frame_lines(t).splitlines(keepends=True):
            agg.feed(i, line)

    frame(0, 0)
    frame(0, 1)
    assert not agg.all_reported()
    agg.end(1, "its sampler died", LOST)
    agg.end(1, "again", LOST)
    frame(1, 0)                      # a node that ended sends no more (or is not counted)
    assert not agg.all_reported()
    agg.end(0, "done")               # had frames: already counted
    assert not agg.all_reported()
    frame(2, 0)
    assert agg.all_reported()
    assert [agg.frames_of(i) for i in range(3)] == [2, 1, 1]


def _crafted_job(nodes: int, shuffled: bool = False) -> JobAggregator:
    """NODES streams of two hardware shapes whose threads cover what the sums must handle:
    shared PUs, idle cores, threads not measured yet (NaN), threads of no rank, PUs the node
    does not have (-1, 999), ranks of several threads."""
    from snumap_tui.analysis.synth import synthetic_topology

    shapes = [synthetic_topology(2, 2, 4, 2), synthetic_topology(1, 1, 3, 1)]
    rng = np.random.default_rng(7)
    agg = JobAggregator()
    for i in range(nodes):
        topo = shapes[i % 2]
        pus = [p.os_index for p in topo.pus]
        head = {"node": f"n{i:03d}", "host": f"n{i:03d}", "alloc": "", "topology": topo.to_dict()}
        for line in wire.encode("T", 1, head).splitlines(keepends=True):
            agg.feed(i, line)
        threads = []
        for r in range(int(rng.integers(1, 6))):
            pid = 1000 + r
            for k in range(int(rng.integers(1, 4))):
                pu = int(rng.choice([*pus, -1, 999])) if i % 3 else pus[0]   # every third: PU 0
                cpu = float(rng.choice([np.nan, 0.0, 5.0, 12.5, 40.0, 90.0]))
                threads.append((pid, pid + 10 * k, r if i % 4 else -1, pu, cpu, ""))
        if i == 1:                                # one rank of 40 threads (long sums)
            threads += [(2000, 2000 + k, 9, pus[k % len(pus)], float(rng.uniform(0, 9)), "")
                        for k in range(40)]
        if shuffled and i % 5 == 0:               # not in the order a sampler writes them
            threads = [threads[j] for j in rng.permutation(len(threads))]
        head, arrays = wire.pack_frame(0, 0, 1.0, {"util_pct": np.zeros(len(topo))}, threads,
                                       [{"pid": 1000 + r, "rank": r} for r in range(5)])
        enc = wire.Encoder()
        for seq in (2, 3):                        # two frames: idle cores need a second
            for line in enc.frame(seq, head, arrays).splitlines(keepends=True):
                agg.feed(i, line)
    return agg


@pytest.mark.parametrize("shuffled", [False, True])
def test_joined_thread_sums_equal_each_nodes_own(monkeypatch, shuffled: bool) -> None:
    """threadstats.prime (every node in one numpy pass) gives each node the numbers of its
    own Python pass, and the findings and the imbalance are the same either way; threads in
    a sampler's order (summed by runs) or not (sorted first)."""
    from snumap_tui.jobview import threadstats
    from snumap_tui.jobview.aggregate import imbalance

    monkeypatch.setattr(threadstats, "PRIME_MIN", 10**9)       # nodes() primes none ...
    own = _crafted_job(40, shuffled).nodes()
    monkeypatch.setattr(threadstats, "PRIME_MIN", 16)
    joined = _crafted_job(40, shuffled).nodes()                 # ... and here all of them
    assert all(v._stats is not None for v in joined) and all(v._stats is None for v in own)
    for a, b in zip(joined, own):
        got, want = a._stats, threadstats._thread_stats(b)
        assert got.job_cpu == want.job_cpu              # the same additions, in row order
        assert sorted(got.rank_cpu) == sorted(want.rank_cpu)
        assert (got.shares, got.cores_used, got.multi) == (
            want.shares, want.cores_used, want.multi), a.name
        assert got.core_cpu == pytest.approx(want.core_cpu)
    assert sum(v._stats.shares for v in joined) >= 10          # the cases are there
    assert any(0 < v._stats.cores_used < len(v.alloc_cores) for v in joined)
    found = live_findings(_crafted_job(40, shuffled).nodes())
    imb = imbalance(_crafted_job(40, shuffled).nodes())
    monkeypatch.setattr(threadstats, "PRIME_MIN", 10**9)       # each node its own pass
    assert live_findings(_crafted_job(40, shuffled).nodes()) == found
    assert imbalance(_crafted_job(40, shuffled).nodes()) == imb
    assert {f["kind"] for f in found} >= {"oversubscribed", "idle_cores"}


@pytest.mark.parametrize("bad", [
    {"wall": "abc", "dt": [1], "t": {"a": 1}},
    {"wall": 2**70, "dt": float("nan"), "t": True},
    {"gpus": {"numa": 0}, "launch": 5, "m": "util_pct", "comm": 3, "affs": None},
    {"gpus": [{"numa": "0"}, 7], "numa": ["x", 1.5], "step": [None], "m": [1, None]},
])
def test_a_frame_header_of_the_wrong_types_never_raises(bad: dict) -> None:
    """A header that decodes but whose values are not what the sampler writes (another
    process's output): the views, the JSON, the findings and the node's frame still come."""
    from snumap_tui.analysis.synth import synthetic_topology

    topo = synthetic_topology(1, 1, 2, 1)
    agg = JobAggregator()
    agg.feed(0, wire.encode("T", 1, {"node": "n0", "topology": topo.to_dict()}))
    head, arrays = wire.pack_frame(
        5, 7, 1.0, {"util_pct": np.full(len(topo), 50.0)},
        [(10, 10, 0, 0, 60.0, "0"), (11, 11, 1, 0, 40.0, "0")],
        [{"pid": 10, "rank": 0, "comm": "a", "rss": 1, "numa": {0: 1}}])
    head.update(bad)
    agg.feed(0, wire.Encoder().frame(2, head, arrays))
    v = agg.nodes()[0]
    assert v.status == LIVE and v.frames == 1
    assert isinstance(v.wall_ns, int) and isinstance(v.dt_s, float)
    snap = agg.snapshot()
    assert snap["nodes"][0]["node"] == "n0"
    live_findings(agg.nodes())
    assert node_frame(agg, 0) is not None


def test_thread_arrays_the_sampler_does_not_write_are_not_threads() -> None:
    """A frame whose threads array is int64 or float (another process's output; the sampler
    writes int32) gives the node no threads, and the joined pass over the other nodes still
    runs: PU 2**40 would not fit its 32-bit keys."""
    from snumap_tui.analysis.synth import synthetic_topology

    topo = synthetic_topology(1, 1, 2, 1)
    agg = _crafted_job(20)
    for i, dt in ((20, np.int64), (21, np.float64)):
        agg.feed(i, wire.encode("T", 1, {"node": f"w{i}", "topology": topo.to_dict()}))
        t = np.array([[1, 1, 0, 2**40, 0], [1, 2, 0, 2**40, 0]], dtype=dt)
        agg.feed(i, wire.encode("F", 2, {"m": []}, {"t": t, "c": np.array([50.0, 50.0])}))
    # and an int32 row naming affinity 2**31 - 1 (the ranks' rows once padded a list to it)
    agg.feed(22, wire.encode("T", 1, {"node": "w22", "topology": topo.to_dict()}))
    agg.feed(22, wire.encode("F", 2, {"m": [], "affs": ["0"], "comm": ["a"]}, {
        "t": np.array([[1, 1, 0, 0, 2**31 - 1], [1, 2, 0, 1, 0]], np.int32),
        "c": np.array([50.0, 50.0], np.float32), "p": np.array([[1.0, 0.0, 1.0]])}))
    views = agg.nodes()
    odd = next(v for v in views if v.name == "w22")
    assert [(r.pid, r.affinity, len(r.threads)) for r in odd.ranks] == [(1, "0", 2)]
    wide = [v for v in views if v.name in ("w20", "w21")]
    assert len(wide) == 2 and all(v.threads is None and v.job_cpu_pct == 0.0 for v in wide)
    live_findings(views)
    from snumap_tui.jobview.aggregate import imbalance

    imbalance(views)
