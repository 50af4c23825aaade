"""`snumap merge` keeps what recordings hold for attribution (issue 25) -- the regions, thread
counters and process memory chunks and the header's ``counters``/``regions``/``process_memory``
-- of every node, moved onto the job's numbering (times, tids and pids, PUs, NUMA nodes), and
refuses nodes that counted different events. Written through the store API with every value
known; tests/test_merge_attribution_live.py does the same with real recordings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from snumap_tui import store
from snumap_tui.analysis.jobreport import label_nodes
from snumap_tui.analysis.report import build_report, format_report
from snumap_tui.analysis.synth import synthetic_topology
from snumap_tui.errors import SnumapError
from snumap_tui.store.merge import merge
from snumap_tui.store.procmem import rows_at
from snumap_tui.trace.counters import counter_dtype
from snumap_tui.trace.events import EventBatch, TaskInfo
from snumap_tui.trace.region_catalog import BEGIN, END, REGION_DTYPE, RegionName

sys.path.insert(0, str(Path(__file__).parent))
from jobrecs import WALL, busy_events

MS = 1_000_000
BODY = RegionName("main._omp_fn.0", "omp", "body", False)
DESCR = {"task-clock": {"name": "task-clock", "kind": "software", "scale": 1.0, "unit": None},
         "page-faults": {"name": "page-faults", "kind": "software", "scale": 1.0, "unit": None}}


def attr_rec(path: Path, node: str, mono0: int, offset: int, events: list[str], *,
             pid: int = 500, faults: int = 1000, mem: int = 64 << 20) -> Path:
    """A node's recording with counters, regions and process memory: pid runs 10 ms on PU 1
    (tid pid, region body around it) and 20 ms on PU 3 (tid pid+1), faulting FAULTS times in
    the first; it holds MEM bytes on NUMA node 1 at the second of two samples."""
    topo = synthetic_topology(1, 2, 2, 1, host=node)
    clock = {"t_monotonic_ns": mono0, "wall_minus_monotonic_ns": offset, "uncertainty_ns": 50,
             "ntp": {"synced": True, "maxerror_ns": 2_000_000, "esterror_ns": 1000}}
    header = {"host": node, "node": node, "job": {"system": "slurm", "id": "7"},
              "clock_start": clock, "pid_max": 32768, "start_monotonic_ns": mono0,
              "start_wall_ns": mono0 + offset, "boot_id": f"boot-{node}",
              "topology": topo.to_dict(),
              "counters": {"events": [DESCR[e] for e in events], "dropped": [],
                           "source": "libbpf sched_switch: exact per run interval"},
              "regions": {"mode": "auto", "found": [f"{node}-prog"], "problems": [],
                          "markers": False},
              "process_memory": {"source": "statm", "nodes": [0, 1]}}
    ev = np.sort(np.concatenate([busy_events(mono0, 1, pid, [(0, 10 * MS)]),
                                 busy_events(mono0, 3, pid + 1, [(0, 20 * MS)])]),
                 order="t_ns")
    rows = np.zeros(2, counter_dtype(len(events)))
    for i, (tid, cpu, dur) in enumerate([(pid, 1, 10 * MS), (pid + 1, 3, 20 * MS)]):
        rows[i]["t_start"], rows[i]["t_end"] = mono0, mono0 + dur
        rows[i]["tid"], rows[i]["pid"], rows[i]["cpu"], rows[i]["n"] = tid, pid, cpu, 2
        vals = {"task-clock": dur, "page-faults": faults if tid == pid else 3}
        rows[i]["value"] = [vals[e] for e in events]
        rows[i]["enabled"] = rows[i]["running"] = [dur] * len(events)
    reg = np.zeros(2, REGION_DTYPE)
    reg[0] = (mono0 + 1 * MS, pid, pid, BEGIN, 0)
    reg[1] = (mono0 + 9 * MS, pid, pid, END, 0)
    tasks = [TaskInfo(tid=pid, pid=pid, comm="prog", t_ns=mono0),
             TaskInfo(tid=pid + 1, pid=pid, comm="prog", t_ns=mono0)]
    with store.Writer(path, header, force=True) as w:
        w.counter_events = list(events)
        w.add_events(EventBatch(events=ev, tasks=tasks, counters=rows if events else None))
        w.add_regions(reg, [BODY])
        w.add_process_memory(rows_at(mono0 + 2 * MS, [(pid, 1, mem // 2, True),
                                                      (pid, -1, mem // 2, True)]))
        w.add_process_memory(rows_at(mono0 + 5 * MS, [(pid, 1, mem, True),
                                                      (pid, -1, mem, True)]))
        w.add_info(mono0 + 10**9, "clock end", {"clock": {**clock,
                                                          "t_monotonic_ns": mono0 + 10**9}})
    return path


def process_view_text(rec: object, pid: int) -> list[str]:
    from snumap_tui.analysis.memory import timelines
    from snumap_tui.analysis.process_view import strips, thread_intervals
    from snumap_tui.ui.process_view import draw
    from snumap_tui.ui.replay_data import load_replay

    data = load_replay(rec)
    ps = strips(data.intervals, pid, data.t0, data.t1, 20,
                timelines(rec.process_memory()).get(pid),       # type: ignore[attr-defined]
                thread_intervals(data.intervals, pid))
    lines = draw(data, ps, data.t1, 100, 6, "prog")
    return ["".join(seg.text for seg in line) for line in lines]


def test_counters_regions_and_memory_of_every_node_on_the_job_numbering(tmp_path: Path
                                                                         ) -> None:
    shift = 3 * 10**9          # b's monotonic clock reads 3 s less at the same wall instant
    a = attr_rec(tmp_path / "a.rec", "a", 10 * 10**9, WALL, ["task-clock", "page-faults"])
    b = attr_rec(tmp_path / "b.rec", "b", 7 * 10**9, WALL + shift,
                 ["page-faults", "task-clock"], faults=2000, mem=96 << 20)
    res = merge([a, b], tmp_path / "job.rec")
    assert not res.damaged
    nb = res.nodes[1]
    assert (nb["shift_ns"], nb["cpu_base"], nb["tid_base"]) == (shift, 4, 32769)
    tb = nb["tid_base"]
    with store.open(tmp_path / "job.rec") as rec:
        h = rec.header
        assert [e["name"] for e in h["counters"]["events"]] == ["task-clock", "page-faults"]
        assert h["counters"]["source"].startswith("libbpf")
        assert h["regions"]["found"] == ["a-prog", "b-prog"]
        assert h["process_memory"] == {"source": "statm", "nodes": [0, 1, 2, 3]}
        assert nb["counters"]["events"][0]["name"] == "page-faults"   # the node's own
        tc = rec.thread_counters()
        assert tc.events == ["task-clock", "page-faults"]
        r = tc.rows[np.argsort(tc.rows["tid"])]
        assert r["tid"].tolist() == [500, 501, tb + 500, tb + 501]
        assert r["pid"].tolist() == [500, 500, tb + 500, tb + 500]
        assert r["cpu"].tolist() == [1, 3, 5, 7]
        assert r["t_start"].tolist() == [10 * 10**9] * 4     # both started at one wall instant
        # b's columns were in the other order: put in a's
        assert r["value"].tolist() == [[10 * MS, 1000], [20 * MS, 3], [10 * MS, 2000],
                                       [20 * MS, 3]]
        reg = rec.regions()
        assert [n.name for n in reg.names] == [BODY.name]
        assert reg.rows["tid"].tolist() == [500, tb + 500, 500, tb + 500]
        assert reg.rows["t_ns"].tolist() == [10 * 10**9 + MS] * 2 + [10 * 10**9 + 9 * MS] * 2
        mem = rec.process_memory()
        assert sorted({(int(p), int(n)) for p, n in zip(mem["pid"], mem["node"])}) == [
            (500, -1), (500, 1), (tb + 500, -1), (tb + 500, 3)]
        rep = build_report(rec)
        label_nodes(rec, rep)
        view = process_view_text(rec, tb + 500)
        assert not rec.damaged         # the merged header and chunks pass their schemas
    # replay's process view (key p) of node b's process: named by node, local tids, memory
    # on b's NUMA node as the job numbers it
    assert view[0].startswith("process b:500 prog") and "N3 DRAM 96.0" in view[0], view[0]
    assert [v.split()[0] for v in view[1:3]] == ["500", "N3"]
    c = rep["counters"]
    assert c["available"] and c["events"] == ["task-clock", "page-faults"]
    th = {t["tid"]: t["events"] for t in c["threads"]}
    assert th[500] == {"task-clock": 10 * MS, "page-faults": 1000}
    assert th[tb + 500] == {"task-clock": 10 * MS, "page-faults": 2000}
    assert sorted(t["label"] for t in c["threads"]) == ["a:500", "a:501", "b:500", "b:501"]
    text = format_report(rep)
    assert "  b:500 prog " in text and "  b:501 prog " in text     # counters per thread
    mem_row = next(ln for ln in text.splitlines()                   # memory per process
                   if ln.strip().startswith("b:500 prog") and "(DRAM)" in ln)
    assert mem_row.split()[3:6] == ["96.0", "N3", "(DRAM):"], mem_row    # sampled, node
    (body,) = c["regions"]
    assert body["events"]["page-faults"] == pytest.approx(0.8 * (1000 + 2000))
    procs = {p["pid"]: p for p in rep["processes"]}
    assert procs[500]["memory"]["nodes"] == {"1": 64 << 20}
    assert procs[tb + 500]["memory"]["nodes"] == {"3": 96 << 20}
    (g,) = [g for g in rep["regions"] if g["name"] == BODY.name]
    assert [t["tid"] for t in g["threads"]] == [500, tb + 500]
    assert g["memory"]["nodes"] == {"1": 64 << 20, "3": 96 << 20}


def test_nodes_that_counted_different_events_are_refused(tmp_path: Path) -> None:
    a = attr_rec(tmp_path / "a.rec", "a", 10 * 10**9, WALL, ["task-clock", "page-faults"])
    b = attr_rec(tmp_path / "b.rec", "b", 10 * 10**9, WALL, ["task-clock"])
    with pytest.raises(SnumapError, match="one set of counter events"):
        merge([a, b], tmp_path / "job.rec")
    p = subprocess.run([sys.executable, "-m", "snumap_tui.cli", "merge", str(a), str(b),
                        "-o", str(tmp_path / "job.rec")], capture_output=True, text=True,
                       check=False)
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert "a.rec counted task-clock,page-faults but b.rec counted task-clock" in p.stderr
    assert not (tmp_path / "job.rec").exists()


def test_a_node_without_counters_merges_with_one_that_has_them(tmp_path: Path) -> None:
    a = attr_rec(tmp_path / "a.rec", "a", 10 * 10**9, WALL, ["task-clock"])
    b = attr_rec(tmp_path / "b.rec", "b", 10 * 10**9, WALL, [])
    res = merge([a, b], tmp_path / "job.rec")
    assert not res.damaged
    with store.open(tmp_path / "job.rec") as rec:
        assert rec.thread_counters().events == ["task-clock"]
        assert rec.thread_counters().rows["tid"].tolist() == [500, 501]
        assert len(rec.regions().rows) == 4


def test_a_damaged_counters_chunk_is_named_and_the_rest_merged(tmp_path: Path) -> None:
    from snumap_tui.store import chunks as C
    from snumap_tui.store.kinds import K_THREAD_COUNTERS

    a = attr_rec(tmp_path / "a.rec", "a", 10 * 10**9, WALL, ["task-clock"])
    b = attr_rec(tmp_path / "b.rec", "b", 10 * 10**9, WALL, ["task-clock"])
    with store.open(b) as rec:
        (h,) = [h for h in rec._chunks if h.kind == K_THREAD_COUNTERS]
    data = bytearray(b.read_bytes())
    data[h.offset + C.CHUNK_HEADER_SIZE + 3] ^= 0xFF
    b.write_bytes(bytes(data))
    res = merge([a, b], tmp_path / "job.rec")
    assert len(res.damaged) == 1 and "b.rec: thread counters chunk at byte" in res.damaged[0]
    with store.open(tmp_path / "job.rec") as rec:
        assert rec.thread_counters().rows["tid"].tolist() == [500, 501]     # a's only
        assert len(rec.regions().rows) == 4 and len(rec.process_memory()) == 8


def test_calls_summed_in_the_kernel_move_with_their_node(tmp_path: Path) -> None:
    """A node's regions chunk with calls the kernel summed (regions.bpf.c: count, time inside,
    first entry, last return per thread): merged, the summaries keep their counts and move
    to the job's time base and numbering like the node's records."""
    from snumap_tui.trace.region_catalog import SUM_DTYPE

    crit = RegionName("GOMP_critical_start", "omp", "call", True)
    paths = []
    for node, mono0, off, pid in (("a", 10 * 10**9, WALL, 500), ("b", 7 * 10**9,
                                                                  WALL + 3 * 10**9, 600)):
        path = attr_rec(tmp_path / f"{node}.rec", node, mono0, off, ["task-clock"], pid=pid)
        s = np.zeros(1, SUM_DTYPE)
        s[0] = (mono0 + 2 * MS, mono0 + 8 * MS, 3 * MS, 4 * MS, pid, pid, 0, 5000)
        with store.open(path) as r:
            header = dict(r.header)
        with store.Writer(path, header, force=True) as w:     # again, with the summaries
            w.counter_events = ["task-clock"]
            w.add_events(EventBatch(events=busy_events(mono0, 1, pid, [(0, 10 * MS)]),
                                    tasks=[TaskInfo(tid=pid, pid=pid, comm="prog",
                                                    t_ns=mono0)]))
            w.add_regions(np.zeros(0, REGION_DTYPE), [crit], s)
            w.add_info(mono0 + 10**9, "clock end", {"clock": {
                **header["clock_start"], "t_monotonic_ns": mono0 + 10**9}})
        paths.append(path)
    res = merge(paths, tmp_path / "job.rec")
    tb = res.nodes[1]["tid_base"]
    with store.open(tmp_path / "job.rec") as rec:
        sums = rec.regions().sums
    got = sorted((int(r["tid"]), int(r["count"]), int(r["t_last"] - r["t_first"]))
                 for r in sums)
    assert got == [(500, 5000, 6 * MS), (600 + tb, 5000, 6 * MS)]
    # both nodes' summaries on the job's one time base: b's 3 s behind is shifted away
    assert abs(int(sums["t_first"].max()) - int(sums["t_first"].min())) < MS
