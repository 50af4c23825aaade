"""The replay's counter figures (analysis/counter_figures.py): per thread and chart column,
per process, and per region interval, on counter rows whose every count is known."""

from __future__ import annotations

import numpy as np
import pytest

from snumap_tui.analysis.counter_figures import (
    ThreadSeries,
    columns,
    figures,
    levels,
    region_figures,
    scale_top,
    total_columns,
)
from snumap_tui.analysis.intervals import Intervals
from snumap_tui.analysis.region_timeline import RegionTimeline, region_timeline
from snumap_tui.store.counters import ThreadCounters
from snumap_tui.store.regions import Regions
from snumap_tui.trace.region_catalog import BEGIN, END, REGION_DTYPE, RegionName
from tests.test_attribution import EVENTS, _rows

# EVENTS: task-clock, page-faults, instructions, cycles
ROWS = [
    (11, 10, 0, 0, 100, [100, 10, 400, 200]),      # IPC 2
    (12, 10, 0, 100, 200, [100, 50, 100, 100]),    # IPC 1
    (11, 10, 1, 200, 300, [100, 20, 50, 100]),     # IPC 0.5
    (-2, -2, 1, 0, 200, [200, 7, 0, 0]),           # untraced tasks on PU 1
]


def _series(running: dict[int, list[int]] | None = None) -> ThreadSeries:
    return ThreadSeries(ThreadCounters(EVENTS, _rows(ROWS, running)))


def test_figures_named_from_the_events() -> None:
    names = [f.name for f in figures(EVENTS)]
    assert names == ["IPC", "task-clock share", "page-faults/ms", "instructions/ms",
                     "cycles/ms"]
    assert [f.name for f in figures(["page-faults"], "on-CPU ms")] == ["page-faults/on-CPU ms"]
    assert "IPC" not in [f.name for f in figures(["instructions", "page-faults"])]


def test_columns_are_ratios_of_the_counts_spread_over_each_interval() -> None:
    s = _series()
    ipc, share, faults = figures(EVENTS)[:3]
    assert s.tids() == [11, 12]                       # the untraced row is not a thread
    edges = np.array([0, 50, 100, 150, 250, 300])
    got = columns(s, 11, edges, ipc)
    assert got[:2].tolist() == [2.0, 2.0] and np.isnan(got[2])    # not running: n/a
    assert got[3] == pytest.approx(0.5) and got[4] == pytest.approx(0.5)
    # One column over both of 11's intervals: the ratio of the sums (400 + 25) / (200 + 50),
    # not the mean of 2 and 0.5.
    assert columns(s, 11, np.array([0, 250]), ipc)[0] == pytest.approx(425 / 250)
    # task-clock as a share of the column; page-faults per ms of the column (10 + 10 in 250 ns).
    assert columns(s, 11, np.array([0, 250]), share)[0] == pytest.approx(150 / 250)
    assert columns(s, 11, np.array([0, 250]), faults)[0] == pytest.approx(20 / 250e-6)
    # The process: its threads' counts summed before the ratio.
    assert total_columns(s, [11, 12], np.array([0, 250]), ipc)[0] == pytest.approx(
        (400 + 100 + 25) / (200 + 100 + 50))
    assert np.isnan(columns(s, 99, np.array([0, 250]), ipc)[0])    # no rows for the tid


def test_multiplexed_counts_are_scaled_as_the_report_scales_them() -> None:
    # cycles ran half its enabled time in 11's first interval: 200 counted -> 400.
    s = _series({0: [100, 100, 100, 50]})
    assert columns(s, 11, np.array([0, 100]), figures(EVENTS)[0])[0] == pytest.approx(1.0)


def _timeline() -> tuple[Regions, RegionTimeline]:
    names = [RegionName("loop", "omp", "body")]
    rows = np.array([(50, 11, 10, BEGIN, 0), (250, 11, 10, END, 0)], dtype=REGION_DTYPE)
    reg = Regions(rows=rows, names=names)
    i64 = np.int64
    iv = Intervals(np.array([0, 1]),
                   [np.array([0, 100], i64), np.array([0, 200], i64)],
                   [np.array([100, 200], i64), np.array([200, 300], i64)],
                   [np.array([11, 12], np.int32), np.array([-2, 11], np.int32)], 0, 300)
    rt = region_timeline(iv, reg)
    assert rt is not None
    return reg, rt


def test_region_intervals_take_the_ipc_of_their_region_interval() -> None:
    _reg, rt = _timeline()
    ipc = figures(EVENTS, "on-CPU ms")[0]
    rows = region_figures(rt, _series(), ipc)
    pieces = [list(zip(rt.intervals.start[r].tolist(), rt.intervals.end[r].tolist()))
              for r in range(2)]
    assert pieces == [[(0, 50), (50, 100), (100, 200)], [(0, 200), (200, 250), (250, 300)]]
    # loop of 11 is [50, 250): half of its first interval (200 ins, 100 cyc) and half of
    # its second (25, 50) -> 225 / 150, on both PUs; serial before it: 2, after: 0.5;
    # thread 12 never in a region: its own 1.0; untraced work: n/a.
    assert rows[0].tolist() == pytest.approx([2.0, 225 / 150, 1.0])
    assert np.isnan(rows[1][0])
    assert rows[1][1:].tolist() == pytest.approx([225 / 150, 0.5])
    top = scale_top(rows, ipc)
    assert top == 2.0
    assert levels(rows[1], top, 4).tolist() == [0, 4, 2]      # 1.5 -> step 4 of 4, 0.5 -> 2
    # A rate per on-CPU ms: page-faults in loop (5 + 10) over 100 ns of running.
    faults = figures(EVENTS, "on-CPU ms")[2]
    assert region_figures(rt, _series(), faults)[0][1] == pytest.approx(15 / 100e-6)


def test_no_counters_gives_no_figures() -> None:
    _reg, rt = _timeline()
    empty = ThreadSeries(ThreadCounters(EVENTS, _rows([])))
    assert len(empty) == 0
    assert all(np.isnan(v).all() for v in region_figures(rt, empty, figures(EVENTS)[0]))
