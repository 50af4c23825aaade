"""Regions open at the recording's start or end are shown clipped to it and marked so
(issue 32 item 13): a parallel region still running when the recording ended had COUNT 0 and
WALL 0.000 next to thousands of calls inside it; `record --pid` during a parallel region
showed nothing and said nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from snumap_tui.analysis.regions import open_ends, pair
from snumap_tui.analysis.report import build_report, format_report
from snumap_tui.analysis.synth import synthetic_topology, write_recording
from snumap_tui.store import open as open_recording
from snumap_tui.trace.events import EVENT_DTYPE, SWITCH, TaskInfo
from snumap_tui.trace.region_catalog import BEGIN, END, REGION_DTYPE, RegionName

MS = 1_000_000
T0 = 10**9
NAMES = [RegionName("main._omp_fn.0", "omp", "span"), RegionName("main._omp_fn.0", "omp", "body"),
         RegionName("GOMP_barrier", "omp", "call", True)]


def _rows(recs: list[tuple[int, int, int, int]]) -> np.ndarray:
    """(ms, tid, op, rid) -> region rows of process 100."""
    return np.array([(T0 + t * MS, tid, 100, op, rid) for t, tid, op, rid in recs],
                    dtype=REGION_DTYPE)


# Thread 101 enters the region at 20 ms and is still in it at the end (100 ms); thread 102
# was in the body before the recording began and leaves it at 30 ms; between, barriers.
RECS = [(20, 101, BEGIN, 0), (20, 101, BEGIN, 1), (30, 102, END, 1),
        *[(40 + k, 101, op, 2) for k in range(0, 40, 2) for op in (BEGIN, END)][:-1]]


def recording(tmp_path: Path, header: dict | None = None, **kw: object) -> Path:
    ev = np.zeros(4, dtype=EVENT_DTYPE)
    ev[0] = (T0, 0, SWITCH, 0, 101, 0, 100, 0)
    ev[1] = (T0, 1, SWITCH, 0, 102, 0, 100, 0)
    ev[2] = (T0 + 100 * MS, 0, SWITCH, 101, 0, 100, 0, 1)
    ev[3] = (T0 + 100 * MS, 1, SWITCH, 102, 0, 100, 0, 1)
    return write_recording(tmp_path / "r.rec", synthetic_topology(1, 1, 2, 1), ev,
                           tasks=[TaskInfo(101, 100, "prog", 1, T0),
                                  TaskInfo(102, 100, "prog", 1, T0)],
                           regions=(_rows(RECS), NAMES),
                           header={"regions": {"mode": "auto"}, **(header or {})}, **kw)


def test_open_ends_are_clipped_to_the_recording() -> None:
    inst, cut = open_ends(_rows(RECS), T0, T0 + 100 * MS)
    got = sorted(zip(inst.rid.tolist(), inst.tid.tolist(), ((inst.start - T0) // MS).tolist(),
                     ((inst.end - T0) // MS).tolist(), cut.tolist()))
    assert got == [(0, 101, 20, 100, 1), (1, 101, 20, 100, 1), (1, 102, 0, 30, -1),
                   (2, 101, 78, 100, 1)]
    assert len(pair(_rows(RECS))) == 19            # the whole barrier calls only


def test_a_region_open_at_the_end_is_counted_clipped_and_marked(tmp_path: Path) -> None:
    with open_recording(recording(tmp_path)) as rec:
        r = build_report(rec)
    g = next(x for x in r["regions"] if x["name"] == "main._omp_fn.0")
    assert g["count"] == 1 and abs(g["wall_s"] - 0.080) < 1e-9
    assert g["clipped"] == {"at_start": 1, "at_end": 2}
    inside = {t["tid"]: t["inside_s"] for t in g["threads"]}
    assert abs(inside[101] - 0.080) < 1e-9 and abs(inside[102] - 0.030) < 1e-9
    text = format_report(r)
    row = next(ln for ln in text.splitlines() if ln.strip().startswith("main._omp_fn.0"))
    assert row.rstrip().endswith("<>"), row
    assert "still inside when it ended" in text


def test_attached_recording_says_what_it_cannot_see(tmp_path: Path) -> None:
    with open_recording(recording(tmp_path, {"attached": [{"pid": 100}]})) as rec:
        r = build_report(rec)
    assert "attached to running processes (--pid)" in " ".join(format_report(r).split())


# The same instances in every other view of the recording's regions: (name, tid, start ms,
# end ms, where clipped): thread 101 still inside the region and a barrier at the end, 102 in
# the region's body from before the recording began; the whole barriers unmarked.
CLIPPED = [("GOMP_barrier", 101, 78, 100, "at_end"), ("main._omp_fn.0", 101, 20, 100, "at_end"),
           ("main._omp_fn.0", 101, 20, 100, "at_end"), ("main._omp_fn.0", 102, 0, 30, "at_start")]
WHOLE = sorted(("GOMP_barrier", 101, 40 + k, 40 + k, None) for k in range(0, 38, 2))


def test_perfetto_has_the_clipped_slices_annotated(tmp_path: Path, capsys) -> None:
    from collections import defaultdict
    from typing import Any

    import pytest

    from snumap_tui.cli import main

    pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    out = tmp_path / "r.pftrace"
    assert main(["export", str(recording(tmp_path)), "--format", "perfetto", "-o", str(out)]) == 0
    said = " ".join(capsys.readouterr().err.split())
    assert "23 region slices, 0 region marks (4 slices of regions open at the recording's " \
        "start or end, clipped to it)" in said
    trace = pb.Trace()
    trace.ParseFromString(out.read_bytes())
    tid_of = {p.track_descriptor.uuid: p.track_descriptor.thread.tid for p in trace.packet
              if p.HasField("track_descriptor") and p.track_descriptor.HasField("thread")}
    # Slices rebuilt as trace_processor does: events of a track by time (stable), an end
    # closing the innermost open slice.
    events: dict[int, list[tuple[int, int, Any]]] = defaultdict(list)
    for i, p in enumerate(trace.packet):
        if p.HasField("track_event") and p.track_event.track_uuid in tid_of:
            events[tid_of[p.track_event.track_uuid]].append((p.timestamp, i, p.track_event))
    got = []
    for tid, evs in events.items():
        stack: list[tuple[int, Any]] = []
        for ts, _i, te in sorted(evs, key=lambda e: e[:2]):
            if te.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
                stack.append((ts, te))
            elif te.type == pb.TrackEvent.TYPE_SLICE_END:
                t0, b = stack.pop()
                args = {a.name: a.string_value for a in b.debug_annotations}
                got.append((b.name, tid, (t0 - T0) // MS, (ts - T0) // MS, args.get("clipped")))
                assert set(args) <= {"clipped"}
        assert not stack, "a slice left open"
    assert sorted(x for x in got if x[4]) == CLIPPED
    assert sorted(x for x in got if not x[4]) == WHOLE


def test_chrome_and_parquet_have_the_clipped_instances(tmp_path: Path) -> None:
    import json

    import pytest

    from snumap_tui.cli import main
    from snumap_tui.export.parquet import write_parquet

    path = recording(tmp_path)
    out = tmp_path / "r.json"
    assert main(["export", str(path), "--format", "chrome", "-o", str(out)]) == 0
    xs = [e for e in json.loads(out.read_text())["traceEvents"]
          if e["ph"] == "X" and e.get("cat", "").startswith("omp")]
    got = sorted((e["name"], e["tid"], round((e["ts"] * 1e3 - T0) / MS),
                  round(((e["ts"] + e["dur"]) * 1e3 - T0) / MS), e["args"].get("clipped"))
                 for e in xs)
    assert [x for x in got if x[4]] == CLIPPED and [x for x in got if not x[4]] == WHOLE
    pq = pytest.importorskip("pyarrow.parquet")
    (tmp_path / "pq").mkdir()
    with open_recording(path) as rec:
        write_parquet(tmp_path / "pq", rec)
    rows = pq.read_table(tmp_path / "pq" / "regions.parquet").to_pylist()
    got = sorted((r["name"], r["tid"], (r["start_ns"] - T0) // MS, (r["end_ns"] - T0) // MS,
                  r["clipped"]) for r in rows)
    assert [x for x in got if x[4]] == CLIPPED and [x for x in got if not x[4]] == WHOLE


def test_replay_draws_a_clipped_region_to_the_edge_and_marks_it(tmp_path: Path) -> None:
    from snumap_tui.ui.gantt import LABEL_W, GanttState, cell_detail, render_gantt
    from snumap_tui.ui.replay_data import load_replay

    data = load_replay(open_recording(recording(tmp_path)))
    # 20 columns of 5 ms; row 0 is PU 0 (thread 101), row 1 PU 1 (thread 102).
    st = GanttState(data.t0, data.t1, mode="region", sel_row=1, sel_col=0)
    r = render_gantt(data, st, LABEL_W + 1 + 20, 12)
    name = [[data.key_name("region", k) if k > 0 else k for k in row] for row in
            r.bins.key.tolist()]
    # 101 is inside the region from 20 ms to the end (not serial), in a barrier from 78 ms;
    # 102 is in the region's body from the start to 30 ms.
    assert name[0][4:15] == ["main._omp_fn.0"] * 11 and name[0][16:] == ["GOMP_barrier"] * 4
    assert name[1][:6] == ["main._omp_fn.0"] * 6
    cells = ["".join(seg.text for seg in line)[LABEL_W + 1:] for line in r.lines[1:3]]
    assert cells[0][-1] == ">" and cells[0][0] != "<"
    assert cells[1][0] == "<" and cells[1][-1] != ">"
    assert "(<> clipped to the recording)" in cell_detail(data, st, r.bins)
    # Zoomed away from the edges, no edge mark: the legend still says so.
    st = GanttState(data.t0 + 10 * MS, data.t1 - 10 * MS, mode="region")
    r = render_gantt(data, st, 100, 12)
    cells = ["".join(seg.text for seg in line)[LABEL_W + 1:] for line in r.lines[1:3]]
    assert "<" not in "".join(cells) and ">" not in "".join(cells)
    legend = "".join(seg.text for seg in r.lines[-1])
    assert "main._omp_fn.0 <>" in legend and "GOMP_barrier >" in legend
    assert "no region <" not in legend and "no region >" not in legend


def test_report_counters_and_windows_take_the_clipped_instances(tmp_path: Path) -> None:
    """The report's per-region counters (and memory and energy windows) count the same
    clipped instances as its region rows: 101 in the body from 20 ms to the end, 102 from the
    start to 30 ms."""
    from snumap_tui.analysis.memory import region_windows
    from tests.test_attribution import EVENTS, _rows

    ms = MS
    counters = _rows([(101, 100, 0, T0, T0 + 100 * ms, [100 * ms, 1000, 0, 0]),
                      (102, 100, 1, T0, T0 + 100 * ms, [100 * ms, 1000, 0, 0])])
    with open_recording(recording(tmp_path, counters=(counters, EVENTS))) as rec:
        r = build_report(rec)
        wins = region_windows(rec.regions(), (rec.t_start, rec.t_end))
    (body,) = [g for g in r["counters"]["regions"] if g["name"] == "main._omp_fn.0"]
    assert body["events"]["page-faults"] == 800 + 300
    assert abs(body["on_cpu_s"] - 0.110) < 1e-12 and body["threads"] == 2
    got = sorted((tid, (a - T0) // ms, (b - T0) // ms) for _, tid, a, b in
                 wins["main._omp_fn.0"])
    assert got == [(101, 20, 100), (101, 20, 100), (102, 0, 30)]
