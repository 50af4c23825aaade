"""Figures that agree with themselves (issue 32 items 9 and 10): one meaning of a count
(CALLS: every thread's calls) in `report`, `scale export` and merged reports; no part larger
than its whole in `scale report`; each finding's figures a named row of the table; SERIAL
the same in the report and the view."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from snumap_tui.analysis.regions import format_regions
from snumap_tui.study import load
from snumap_tui.study.aggregate import serial_text
from snumap_tui.study.report import _most_lost, _row, format_report
from snumap_tui.study.synth import make_study
from snumap_tui.ui.scale_view import table


def test_report_counts_every_threads_calls() -> None:
    # 2 threads x 8 M critical sections: "count" (the most one thread made) is 8 M, the
    # calls 16 M -- the text gives the calls, and says so
    regs = [{"name": "GOMP_critical_start", "kind": "omp", "count": 8_000_000,
             "calls": 16_000_000, "wall_s": 1.0, "imbalance": None, "wait_s": 0.5,
             "threads": []}]
    text = "\n".join(format_regions({"regions": regs}))
    assert "CALLS" in text and "COUNT" not in text
    assert "16000000" in text and "8000000" not in text
    assert "CALLS = by all threads" in text
    assert all(len(ln) <= 80 for ln in text.splitlines())


def test_scale_export_names_the_calls(tmp_path: Path) -> None:
    make_study(tmp_path / "s", threads=[1, 2], serial={"a": 0.1})
    data = load(tmp_path / "s")
    assert "calls" in data.column_names() and "count" not in data.column_names()
    assert {r["calls"] for r in data.rows()} == {1}


def _agg(region: str, parent: str | None, t: float, lost: float | None, wait: bool,
         threads: int) -> dict:
    return {"region": region, "parent": parent, "wait": wait, "threads": threads,
            "ranks": None, "places": "cores", "input": None, "freq": None,
            "time_median_s": t, "lost_s": lost, "efficiency": 0.47}


def test_waiting_is_a_part_of_the_regions_time() -> None:
    # the figures: 0.917 s above perfect scaling, 1.612 s of waiting (the union over
    # threads of the wait calls, longer than the region's own 1.2 s median in one repeat)
    agg = [_agg("omp_fn.0", "(program)", 0.6, 0.0, False, 1),
           _agg("omp_fn.0", "(program)", 1.2, 0.917, False, 2),
           _agg("GOMP_critical_start", "omp_fn.0", 1.612, 1.0, True, 2)]
    ml = _most_lost(agg)
    assert ml["wait_inside"]["time_s"] <= ml["time_median_s"]
    rep = {"study": {}, "runs": {"planned": 0}, "configurations": [], "failed": [],
           "unit": "threads", "regions": [], "energy": {"available": True},
           "first_below_half": [], "most_lost": ml, "findings": [],
           "models": {"available": False, "why": "-"}}
    text = format_report(rep)
    assert "of which" not in text
    assert "of its 1.200 s, some thread was waiting in GOMP_critical_start during 1.200 s" \
        in text


def test_a_finding_names_its_row(tmp_path: Path) -> None:
    st = make_study(tmp_path / "s", threads=[1, 2, 4], serial={"a": 0.3},
                    places=["compact", "spread"])
    (f,) = (st.dir / "runs").glob("t4-spread-rep1.json")    # spread 1.5x slower at 4
    s = json.loads(f.read_text())
    for r in s["measurements"]["regions"]:
        r["time_s"] *= 1.5
    f.write_text(json.dumps(s))
    data = load(st.dir)
    rep = data.report()
    fa = next(f for f in rep["findings"] if f["region"] == "a" and f["kind"] != "placement")
    assert "[compact, its fastest placement]" in fa["text"]
    assert any(f["kind"] == "placement" for f in rep["findings"])
    row = next(a for a in data.aggregated() if a["region"] == "a" and a["threads"] == 4
               and a["places"] == "compact")
    assert fa["efficiency"] == pytest.approx(row["efficiency"])
    assert f"{row['efficiency']:.2f} at 4" in fa["text"]
    assert fa["speedup"] == pytest.approx(row["speedup"])


def test_serial_is_the_same_in_report_and_view() -> None:
    rows = [{"region": "w", "threads": t, "ranks": None, "places": "cores", "input": None,
             "freq": None, "time_median_s": 1.0, "time_min_s": 1.0, "time_max_s": 1.0,
             "n": 1, "speedup": s, "efficiency": e, "karp_flatt": kf, "energy_j": None}
            for t, s, e, kf in ((1, 1.0, 1.0, None), (2, 0.92, 0.46, 1.17),
                                (4, 1.5, 0.375, 0.56))]
    view = table(rows, "w").plain.splitlines()
    cols = {"keys": ["places"], "head": []}
    report = [_row(a, cols, False) for a in rows]
    assert serial_text(1.17) == ">1" and serial_text(None) == "-"
    for v, r, a in zip(view[1:], report, rows):
        assert v.split()[-2] == r.split()[-1] == serial_text(a["karp_flatt"])


def test_a_region_seen_by_its_bodies_only_counts_its_runs(tmp_path: Path) -> None:
    """`record --pid` attached while a parallel region ran: its threads' bodies are there,
    its master's span is not; CALLS is still its runs (it was 0)."""
    from snumap_tui.analysis.report import build_report, format_report
    from snumap_tui.analysis.synth import synthetic_topology, write_recording
    from snumap_tui.store import open as open_recording
    from snumap_tui.trace.events import EVENT_DTYPE, SWITCH, TaskInfo
    from snumap_tui.trace.region_catalog import BEGIN, END, REGION_DTYPE, RegionName

    t0, ms = 10**9, 1_000_000
    names = [RegionName("main._omp_fn.0", "omp", "body")]
    recs = [(t, tid, op) for k in range(3) for tid in (101, 102)
            for t, op in ((10 + 30 * k, BEGIN), (30 + 30 * k, END))]
    rows = np.array(sorted((t0 + t * ms, tid, 100, op, 0) for t, tid, op in recs),
                    dtype=REGION_DTYPE)
    ev = np.zeros(4, dtype=EVENT_DTYPE)
    ev[0] = (t0, 0, SWITCH, 0, 101, 0, 100, 0)
    ev[1] = (t0, 1, SWITCH, 0, 102, 0, 100, 0)
    ev[2] = (t0 + 100 * ms, 0, SWITCH, 101, 0, 100, 0, 1)
    ev[3] = (t0 + 100 * ms, 1, SWITCH, 102, 0, 100, 0, 1)
    path = write_recording(tmp_path / "r.rec", synthetic_topology(1, 1, 2, 1), ev,
                           tasks=[TaskInfo(101, 100, "prog", 1, t0),
                                  TaskInfo(102, 100, "prog", 1, t0)],
                           regions=(rows, names), header={"regions": {"mode": "auto"}})
    with open_recording(path) as rec:
        r = build_report(rec)
    g = next(x for x in r["regions"] if x["name"] == "main._omp_fn.0")
    assert g["count"] == 3 and g["calls"] == 3
    row = next(ln for ln in format_report(r).splitlines()
               if ln.strip().startswith("main._omp_fn.0"))
    assert row.split()[2] == "3", row
