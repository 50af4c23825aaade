"""The core-vs-time view by region, on a seeded recording (snapshot): the recording of
test_replay with OpenMP-like regions added -- per process a parallel region every 200 ms in
which thread w0 works 150 ms and the others 50 ms then wait in a barrier -- and two marks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_replay import make_recording

from snumap_tui.store import open as open_recording
from snumap_tui.trace.region_catalog import BEGIN, END, MARK, REGION_DTYPE, RegionNames
from snumap_tui.ui.replay import ReplayApp
from snumap_tui.ui.replay_data import load_replay

T0 = 1_000_000_000


def region_rows() -> tuple[np.ndarray, list]:
    names = RegionNames()
    span = names.intern("main._omp_fn.1 (solver.c:42)", "omp", "span")
    body = names.intern("main._omp_fn.1 (solver.c:42)", "omp", "body")
    bar = names.intern("GOMP_barrier", "omp", "call", wait=True)
    mark = names.intern("checkpoint", "marker", "marker")
    rows = []
    for p in range(4):
        master = 1000 + 4 * p
        for k in range(10):
            a = T0 + k * 200_000_000
            rows += [(a, master, master, BEGIN, span), (a + 160_000_000, master, master, END, span)]
            for w in range(4):
                tid = master + w
                work = 150_000_000 if w == 0 else 50_000_000
                rows += [(a + 1, tid, master, BEGIN, body), (a + 1 + work, tid, master, END, body)]
                if w:
                    rows += [(a + 2 + work, tid, master, BEGIN, bar),
                             (a + 150_000_002, tid, master, END, bar)]
    rows += [(T0 + 500_000_000, 0, 0, MARK, mark), (T0 + 1_500_000_000, 0, 0, MARK, mark)]
    out = np.array(rows, dtype=[("t_ns", "<u8"), ("tid", "<i4"), ("pid", "<i4"), ("op", "u1"),
                                ("rid", "<u4")]).astype(REGION_DTYPE)
    return out, names.items


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import test_replay

    from snumap_tui.analysis import synth

    path = tmp_path_factory.mktemp("regions") / "r.rec"
    real = synth.write_recording

    def with_regions(*a, **kw):                        # make_recording's writer, plus regions
        return real(*a, **kw, regions=region_rows())

    test_replay.write_recording = with_regions       # type: ignore[attr-defined]
    try:
        return make_recording(path)
    finally:
        test_replay.write_recording = real           # type: ignore[attr-defined]


def test_snapshot_by_region(snap_compare, recording: Path) -> None:
    rec = open_recording(recording)
    app = ReplayApp(load_replay(rec))
    app.state.mode = "region"
    app.cursor_t = app.data.t0 + 700_000_000
    assert snap_compare(app, terminal_size=(120, 40))


def test_region_report_of_the_seeded_recording(recording: Path) -> None:
    from snumap_tui.analysis.report import build_report

    with open_recording(recording) as rec:
        r = build_report(rec)
    regs = {g["name"]: g for g in r["regions"]}
    g = regs["main._omp_fn.1 (solver.c:42)"]
    assert g["count"] == 40 and len(g["threads"]) == 16
    assert g["imbalance"] == pytest.approx(150 / ((150 + 3 * 50) / 4))
    assert regs["GOMP_barrier"]["wait"] and regs["GOMP_barrier"]["count"] == 10
    assert regs["checkpoint"]["count"] == 2
    assert r["findings"][0]["kind"] == "imbalanced_region"


def test_typed_filter_by_region_keeps_the_matching_threads(recording: Path) -> None:
    """In region mode the interval's tid column holds region keys: the filter matched those
    against thread ids and blanked every row."""
    from snumap_tui.analysis.binning import OTHER
    from snumap_tui.ui.gantt import GanttState, render_gantt
    from snumap_tui.ui.replay_data import matching_tids

    with open_recording(recording) as rec:
        data = load_replay(rec)
    st = GanttState(data.t0, data.t1, mode="region")
    st.only_tids = matching_tids(data, "app1")
    assert set(st.only_tids.tolist()) == {1004, 1005, 1006, 1007}
    keys = render_gantt(data, st, 120, 40).bins.key
    assert (keys >= 0).sum() > keys.size // 8      # app1's threads drawn by region
    assert (keys == OTHER).any()                   # the other processes greyed
    st.only_tids = matching_tids(data, "nosuchname")
    assert not (render_gantt(data, st, 120, 40).bins.key >= 0).any()


def test_a_filter_that_matches_nothing_says_so(recording: Path) -> None:
    import asyncio

    async def go() -> None:
        with open_recording(recording) as rec:
            app = ReplayApp(load_replay(rec))
            app.state.mode = "region"
            async with app.run_test(size=(120, 30)) as pilot:
                await pilot.pause()
                app.apply_filter("nosuchname")
                await pilot.pause()
                assert "no match" in str(app.query_one("#header").render())
                app.apply_filter("app1")
                await pilot.pause()
                assert "no match" not in str(app.query_one("#header").render())
    asyncio.run(go())
