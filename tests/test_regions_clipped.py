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


def recording(tmp_path: Path, header: dict | None = None) -> Path:
    ev = np.zeros(4, dtype=EVENT_DTYPE)
    ev[0] = (T0, 0, SWITCH, 0, 101, 0, 100, 0)
    ev[1] = (T0, 1, SWITCH, 0, 102, 0, 100, 0)
    ev[2] = (T0 + 100 * MS, 0, SWITCH, 101, 0, 100, 0, 1)
    ev[3] = (T0 + 100 * MS, 1, SWITCH, 102, 0, 100, 0, 1)
    return write_recording(tmp_path / "r.rec", synthetic_topology(1, 1, 2, 1), ev,
                           tasks=[TaskInfo(101, 100, "prog", 1, T0),
                                  TaskInfo(102, 100, "prog", 1, T0)],
                           regions=(_rows(RECS), NAMES),
                           header={"regions": {"mode": "auto"}, **(header or {})})


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
