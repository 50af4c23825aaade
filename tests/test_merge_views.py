"""A merged job in replay (rows node > package > NUMA > core, nodes folded), in the Chrome
export (one machine per node) and in the report text."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

from snumap_tui import store
from snumap_tui.analysis.jobreport import format_job, job_section, label_nodes
from snumap_tui.analysis.load import load
from snumap_tui.analysis.report import build_report, format_report
from snumap_tui.export.chrome import CPU_PID, write_chrome
from snumap_tui.store.merge import merge
from snumap_tui.ui.gantt import GanttState, render_gantt
from snumap_tui.ui.replay_data import load_replay

sys.path.insert(0, str(Path(__file__).parent))
from jobrecs import WALL, node_rec


def merged(tmp_path: Path) -> Path:
    a = node_rec(tmp_path / "a.rec", "cn1", 10**9, WALL, rank_pids={0: 500, 1: 501})
    b = node_rec(tmp_path / "b.rec", "cn2", 3 * 10**9, WALL - 2 * 10**9,
                 rank_pids={2: 500, 3: 502}, runs={2: [(0, 10_000_000), (20_000_000,
                                                                     40_000_000)]})
    merge([a, b], tmp_path / "job.rec")
    return tmp_path / "job.rec"


def rank2_key(data: object) -> int:
    """The process key of rank 2 (pid 500 on cn2) in the merged ids."""
    table = data.recording.nodes                     # type: ignore[attr-defined]
    return int(table.nodes[1]["tid_base"]) + 500


def text(lines: list) -> list[str]:
    return ["".join(s.text for s in line) for line in lines]


def test_replay_rows_by_node_and_folding(tmp_path: Path) -> None:
    with store.open(merged(tmp_path)) as rec:
        data = load_replay(rec)
        assert [(lab.node, lab.package, lab.pu) for lab in data.labels] == [
            ("cn1", 0, 0), ("cn1", 0, 1), ("cn2", 0, 0), ("cn2", 0, 1)]
        st = GanttState(data.t0, data.t1)
        out = text(render_gantt(data, st, 80, 12).lines)
        assert out[0].startswith("Node Pk N")
        assert out[1].startswith("▾cn1 P0 N0    0") and out[3].startswith("▾cn2 P0 N0    0")
        assert "rank2 cn2:500" in out[-1] or "cn2:500" in " ".join(out)
        data.fold("cn1", fold=True)
        assert [lab.node for lab in data.labels] == ["cn1", "cn2", "cn2"]
        assert data.labels[0].members and data.row_iv[0] == -1
        r = render_gantt(data, st, 80, 12)
        lines = text(r.lines)
        assert lines[1].startswith("▸ cn1 (2 PUs)")
        # the folded row: both PUs of cn1 ran the first 10 ms of the 40 ms, then idle
        assert r.bins.busy[0, 0] == 1.0 and r.bins.busy[0, -1] == 0.0
        assert r.bins.key[0, 0] >= 0
        data.fold(None, fold=True)
        assert len(data.labels) == 2
        r = render_gantt(data, st, 80, 12)
        # cn2 from 20 to 40 ms: rank 2 on one of its two PUs -> half busy, rank 2's colour
        col = r.bins.busy.shape[1] * 3 // 4
        assert r.bins.busy[1, col] == 0.5 and r.bins.key[1, col] == rank2_key(data)
        data.fold(None, fold=False)
        assert len(data.labels) == 4 and (data.row_iv >= 0).all()


def test_chrome_export_keeps_one_machine_per_node(tmp_path: Path) -> None:
    with store.open(merged(tmp_path)) as rec:
        table = rec.nodes
        nodes = [(n, int(e["cpu_base"])) for n, e in zip(table.names, table.nodes)]
        buf = io.StringIO()
        write_chrome(buf, load(rec).intervals, rec.tasks, rec.markers, nodes=nodes,
                     label=table.label)
    ev = json.loads(buf.getvalue())["traceEvents"]
    # The PUs' processes (CPU_PID + node index; the threads' own tracks use their pids).
    procs = {e["pid"]: e["args"]["name"] for e in ev
             if e["name"] == "process_name" and e["pid"] >= CPU_PID}
    assert procs == {CPU_PID: "CPUs of cn1", CPU_PID + 1: "CPUs of cn2"}
    cpu_slices = [e for e in ev if e["ph"] == "X" and e["pid"] >= CPU_PID]
    tracks = {(e["pid"] - CPU_PID, e["tid"]) for e in cpu_slices}
    assert tracks == {(0, 1), (0, 2), (1, 1), (1, 2)}
    names = {e["name"] for e in cpu_slices}
    assert {"rank0 cn1:500", "rank2 cn2:500", "rank3 cn2:502"} <= names
    threads = {e["args"]["name"] for e in ev if e["name"] == "thread_name" and e["pid"] < CPU_PID}
    assert {"rank0 cn1:500", "rank3 cn2:502"} <= threads


def test_report_text_of_a_job(tmp_path: Path) -> None:
    with store.open(merged(tmp_path)) as rec:
        report = build_report(rec)
        job = job_section(rec, report)
        label_nodes(rec, report)
    assert job is not None
    procs = format_report(report).split("Processes (by run time):")[1].split("Threads")[0]
    assert procs.index("cn2:500") < procs.index("cn1:500")        # 30 ms before 10 ms
    assert "cn2:502" in procs and "cn1:501" in procs
    out = format_job(job)
    assert "Job 42: 2 node(s), 4 rank(s)" in out
    assert "imbalance across ranks: max/mean 2.00, 50%" in out   # 30 ms vs a mean of 15
    rows = [ln.split() for ln in out.splitlines() if ln.strip().startswith(("0 ", "1 ", "2 ",
                                                                               "3 "))]
    assert [(r[0], r[1], r[2]) for r in rows] == [("0", "cn1", "500"), ("1", "cn1", "501"),
                                                  ("2", "cn2", "500"), ("3", "cn2", "502")]


def test_a_rank_of_several_processes_is_one_row() -> None:
    """A rank's child inherits its PMI_RANK: one row per rank, its processes' time summed,
    the busiest one's pid shown."""
    from types import SimpleNamespace

    rows = [[10, "app", "1", "a", 0, "PMI_RANK"], [11, "app", "1", "a", 0, "PMI_RANK"],
            [12, "app", "1", "a", 1, "PMI_RANK"]]
    rec = SimpleNamespace(nodes=None, header={"node": "a", "job": {"id": "9"}}, infos=[
        {"what": "job processes", "columns": ["pid", "comm", "step", "node", "rank",
                                              "rank_var"], "rows": rows}])
    report = {"processes": [{"pid": 10, "runtime_s": 0.1, "pus": "0"},
                            {"pid": 11, "runtime_s": 0.3, "pus": "1"},
                            {"pid": 12, "runtime_s": 0.2, "pus": "0"}], "cpus": []}
    job = job_section(rec, report)
    assert job is not None
    got = [(r["rank"], r["local_pid"], round(r["runtime_s"], 6), r["processes"])
           for r in job["ranks"]]
    assert got == [(0, 11, 0.4, 2), (1, 12, 0.2, 1)]
    assert job["nodes"][0]["ranks"] == 2


def test_a_node_ends_where_its_recording_ended(tmp_path: Path) -> None:
    """A task still running when its node's recording ended runs until then in the merged
    job too, not until the end of the longest node's recording."""
    import numpy as np

    from snumap_tui.analysis.synth import synthetic_topology
    from snumap_tui.trace.events import EVENT_DTYPE, SWITCH, EventBatch

    def rec(path: Path, node: str, events: list[tuple[int, int, int, int]]) -> Path:
        topo = synthetic_topology(1, 1, 2, 1, host=node)
        ev = np.zeros(len(events), dtype=EVENT_DTYPE)
        for i, (t, cpu, prev, nxt) in enumerate(events):
            ev[i] = (10**9 + t, cpu, SWITCH, prev, nxt, prev, nxt, 1)
        header = {"host": node, "node": node, "job": {"system": "slurm", "id": "1"},
                  "start_monotonic_ns": 10**9, "start_wall_ns": WALL, "boot_id": "one",
                  "topology": topo.to_dict()}
        with store.Writer(path, header) as w:
            w.add_events(EventBatch(events=ev))
        return path

    ms = 1_000_000
    a = rec(tmp_path / "a.rec", "a", [(0, 0, 0, 500), (50 * ms, 1, 0, 600), (60 * ms, 1, 600, 0)])
    b = rec(tmp_path / "b.rec", "b", [(0, 0, 0, 700), (200 * ms, 0, 700, 0)])
    merge([a, b], tmp_path / "m.rec")
    with store.open(a) as r:
        own = {p["pid"]: p["runtime_s"] for p in build_report(r)["processes"]}
    with store.open(tmp_path / "m.rec") as r:
        merged_rt = {r.nodes.label(p["pid"]): p["runtime_s"] for p in build_report(r)["processes"]}
    assert own[500] == 0.06 and merged_rt["a:500"] == 0.06 and merged_rt["b:700"] == 0.2


def test_long_node_names_are_not_cut_to_node(tmp_path: Path) -> None:
    """node-a and node-b were both drawn as `▾node` (issue 30 item 19): a long name takes its
    node's first row, its package and NUMA node the next."""
    a = node_rec(tmp_path / "a.rec", "node-a", 10**9, WALL, rank_pids={0: 500})
    b = node_rec(tmp_path / "b.rec", "node-b", 3 * 10**9, WALL - 2 * 10**9,
                 rank_pids={2: 500})
    merge([a, b], tmp_path / "job.rec")
    with store.open(tmp_path / "job.rec") as rec:
        data = load_replay(rec)
        out = text(render_gantt(data, GanttState(data.t0, data.t1), 80, 12).lines)
    assert out[1].startswith(f"{'▾node-a':<11}   0") and out[2].startswith("     P0 N0    1")
    assert out[3].startswith(f"{'▾node-b':<11}   0") and out[4].startswith("     P0 N0    1")
