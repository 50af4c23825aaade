"""Run intervals and Gantt binning on hand-made events whose run times are known exactly."""

from __future__ import annotations

import numpy as np
import pytest

from snumap_tui.analysis.binning import IDLE, OTHER, KeyMap, bin_rows, utilisation
from snumap_tui.analysis.intervals import IntervalBuilder, build_intervals
from snumap_tui.analysis.synth import synthetic_events
from snumap_tui.trace.events import EVENT_DTYPE, MIGRATE, RUN, SWITCH, WAKEUP

T0, T1 = 1000, 10000


def make_events(rows: list[tuple]) -> np.ndarray:
    """rows: (t, kind, cpu, tid, tid2, pid, pid2, arg), sorted by t here."""
    ev = np.zeros(len(rows), dtype=EVENT_DTYPE)
    for i, (t, kind, cpu, tid, tid2, pid, pid2, arg) in enumerate(sorted(rows)):
        ev[i] = (t, cpu, kind, tid, tid2, pid, pid2, arg)
    return ev


# CPU 0: idle -> 101 at 2000, 101 -> 102 (preempted) at 5000, 102 -> idle at 7000.
# CPU 1: 201 ran from before the start until 3000, idle, then 101 (migrated) from 6000 to the end.
SCENARIO = [
    (1500, WAKEUP, 0, 101, -1, 100, -1, 0),
    (2000, SWITCH, 0, 0, 101, 0, 100, 0),
    (3000, SWITCH, 1, 201, 0, 200, 0, 1),
    (5000, SWITCH, 0, 101, 102, 100, 100, 0),
    (5500, WAKEUP, 1, 101, -1, 100, -1, 0),
    (5600, MIGRATE, 1, 101, -1, 100, -1, 0),
    (6000, SWITCH, 1, 0, 101, 0, 100, 0),
    (7000, SWITCH, 0, 102, 0, 100, 0, 1),
]
EXPECTED = {
    0: [(2000, 5000, 101), (5000, 7000, 102)],
    1: [(1000, 3000, 201), (6000, 10000, 101)],
}


def _as_list(iv, row: int) -> list[tuple[int, int, int]]:
    return list(zip(iv.start[row].tolist(), iv.end[row].tolist(), iv.tid[row].tolist()))


def test_intervals_from_switches_with_partial_edges() -> None:
    iv = build_intervals(make_events(SCENARIO), [0, 1], T0, T1)
    assert _as_list(iv, 0) == EXPECTED[0]
    assert _as_list(iv, 1) == EXPECTED[1]
    assert iv.busy_ns().tolist() == [5000, 6000]
    assert iv.pid_of_tid == {101: 100, 102: 100, 201: 200}
    assert not iv.approximate


@pytest.mark.parametrize("split", [1, 2, 3, 5, 7])
def test_intervals_are_the_same_when_fed_in_windows(split: int) -> None:
    ev = make_events(SCENARIO)
    b = IntervalBuilder([0, 1], T0)
    b.feed(ev[:split])
    b.feed(ev[split:])
    iv = b.finish(T1)
    assert _as_list(iv, 0) == EXPECTED[0]
    assert _as_list(iv, 1) == EXPECTED[1]


def test_intervals_of_proc_polled_run_events_do_not_overlap() -> None:
    # Two threads shared CPU 0 in the poll ending at 3000 (600 + 300 ns), one ran at 4000.
    ev = make_events([
        (3000, RUN, 0, 11, -1, 10, -1, 600),
        (3000, RUN, 0, 12, -1, 10, -1, 300),
        (4000, RUN, 0, 11, -1, 10, -1, 5000),   # more than the poll interval: clipped at 3000
    ])
    iv = build_intervals(ev, [0], T0, T1)
    assert iv.approximate
    got = _as_list(iv, 0)
    assert got == [(2100, 2400, 12), (2400, 3000, 11), (3000, 4000, 11)]


def test_binning_at_several_zoom_levels() -> None:
    iv = build_intervals(make_events(SCENARIO), [0, 1], T0, T1)
    # 9 columns of 1000 ns: every interval boundary is a column boundary.
    g = bin_rows(iv, [0, 1], T0, T1, 9)
    assert g.key[0].tolist() == [IDLE, 101, 101, 101, 102, 102, IDLE, IDLE, IDLE]
    assert g.key[1].tolist() == [201, 201, IDLE, IDLE, IDLE, 101, 101, 101, 101]
    assert g.busy[0].tolist() == [0, 1, 1, 1, 1, 1, 0, 0, 0]
    # 3 columns of 3000 ns: 101 ran 2000 of [1000,4000); 102 beats 101 in [4000,7000).
    g = bin_rows(iv, [0, 1], T0, T1, 3)
    assert g.key[0].tolist() == [101, 102, IDLE]
    assert np.allclose(g.busy[0], [2 / 3, 1, 0])
    assert np.allclose(g.share[0], [2 / 3, 2 / 3, 0])
    assert g.key[1].tolist() == [201, 101, 101]
    assert np.allclose(g.busy[1], [2 / 3, 1 / 3, 1])
    # Zoomed in to [4500, 5500) in 4 columns of 250 ns: the switch at 5000 splits the row.
    g = bin_rows(iv, [0], 4500, 5500, 4)
    assert g.key[0].tolist() == [101, 101, 102, 102]
    # One column over everything: 101 (3000 ns) beats 102 (2000 ns) on CPU 0.
    g = bin_rows(iv, [0, 1], T0, T1, 1)
    assert g.key[:, 0].tolist() == [101, 101]
    assert np.allclose(g.busy[:, 0], [5 / 9, 6 / 9])


def test_binning_by_process_and_filter() -> None:
    iv = build_intervals(make_events(SCENARIO), [0, 1], T0, T1)
    by_pid = KeyMap.from_dict(iv.pid_of_tid)
    g = bin_rows(iv, [0, 1], T0, T1, 3, keymap=by_pid)
    assert g.key[0].tolist() == [100, 100, IDLE]
    assert np.allclose(g.share[0], [2 / 3, 1, 0])
    # Filter to process 200: the other work is OTHER, still busy.
    g = bin_rows(iv, [0, 1], T0, T1, 3, keymap=by_pid, only_key=200)
    assert g.key[0].tolist() == [OTHER, OTHER, IDLE]
    assert g.key[1].tolist() == [200, OTHER, OTHER]
    assert np.allclose(g.busy[0], [2 / 3, 1, 0])


def test_binning_matches_a_brute_force_reference_on_random_events() -> None:
    cpus = [0, 1, 2, 3]
    ev = synthetic_events(4000, cpus, n_threads=6, duration_ns=1_000_000, t0_ns=0, seed=3)
    iv = build_intervals(ev, cpus, 0, 1_000_000)
    for ncols in (7, 50, 333):
        g = bin_rows(iv, range(4), 100_000, 900_000, ncols)
        for r in range(4):
            for c in range(ncols):
                a, b = int(g.edges[c]), int(g.edges[c + 1])
                s = np.clip(iv.start[r], a, b)
                e = np.clip(iv.end[r], a, b)
                per: dict[int, int] = {}
                for tid, d in zip(iv.tid[r].tolist(), (e - s).tolist()):
                    if d > 0:
                        per[tid] = per.get(tid, 0) + d
                busy = sum(per.values()) / (b - a)
                assert g.busy[r, c] == pytest.approx(busy)
                if per:
                    best = max(per.values())
                    assert per[int(g.key[r, c])] == best
                else:
                    assert g.key[r, c] == IDLE


def test_utilisation_equals_busy_over_all_cpus() -> None:
    iv = build_intervals(make_events(SCENARIO), [0, 1], T0, T1)
    u = utilisation(iv, T0, T1, 3)
    assert np.allclose(u, [(2000 + 2000) / 6000, (3000 + 1000) / 6000, 3000 / 6000])
    assert np.allclose(utilisation(iv, T0, T1, 1), [11000 / 18000])
