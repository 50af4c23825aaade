"""The report's streamed statistics (analysis/streamstats.py) against the whole-array ones
(analysis/stats.py) on a recording read in many small chunks."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from snumap_tui.analysis.load import load
from snumap_tui.analysis.stats import runqueue_latency, task_stats
from snumap_tui.analysis.streamstats import LatencyAccumulator, TaskAccumulator, TidIndex
from snumap_tui.analysis.synth import synthetic_events, synthetic_topology, write_recording
from snumap_tui.store import open as open_recording
from snumap_tui.trace.events import SWITCH, WAKEUP, WAKEUP_NEW


def test_streamed_run_times_and_latencies_equal_the_whole_array_ones(tmp_path: Path) -> None:
    topo = synthetic_topology(2, 2, 2, 2, host="s")
    ev = synthetic_events(40000, list(topo.pu_os_indexes), n_threads=50, duration_ns=10**9,
                          t0_ns=10**9, seed=11)
    rec_path = write_recording(tmp_path / "s.rec", topo, ev, chunk=1500)
    with open_recording(rec_path) as rec:
        ld = load(rec, details=True)
        whole = task_stats(ld.intervals, topo)
        events = rec.events()
    streamed = ld.task_stats
    assert set(streamed) == set(whole) and len(whole) > 40
    for tid, w in whole.items():
        s = streamed[tid]
        assert (s.runtime_ns, s.cpus, s.numa, s.switch_ins) == \
            (w.runtime_ns, w.cpus, w.numa, w.switch_ins), tid
    k = events["kind"]
    wk = (k == WAKEUP) | (k == WAKEUP_NEW)
    sw = (k == SWITCH) & (events["tid2"] != 0)
    tid, lat, end = runqueue_latency(events["t_ns"][wk], events["tid"][wk],
                                     events["t_ns"][sw], events["tid2"][sw])
    assert sum(len(v) for v in ld.latency.values()) == len(lat) > 1000
    for t, waits in ld.latency.items():
        assert sorted(waits.tolist()) == sorted(lat[tid == t].tolist()), t
    long = lat >= 1_000_000
    assert sorted(ld.long_wait.tolist()) == sorted(lat[long].tolist())
    assert sorted(ld.long_wait_end.tolist()) == sorted(end[long].tolist())


def test_migrations_carry_across_blocks() -> None:
    """A thread's last PU is remembered from one block to the next."""
    cpus = np.array([0, 1, 2, 3])
    acc = TaskAccumulator(cpus, np.array([0, 0, 1, 1]), TidIndex())
    acc.feed(np.array([0, 1]), np.array([0, 10]), np.array([5, 15]), np.array([7, 7]))
    acc.feed(np.array([1, 3, 0]), np.array([20, 30, 40]), np.array([25, 35, 45]),
             np.array([7, 7, 8]))
    st = acc.stats({7: 70})
    assert (st[7].migrations, st[7].numa_migrations, st[7].switch_ins) == (2, 1, 4)
    assert st[7].cpus == {0: 5, 1: 10, 3: 5} and st[7].numa == {0: 15, 1: 5}
    assert st[7].pid == 70 and st[8].migrations == 0


def test_a_wakeup_carried_to_the_next_chunk_pairs_with_its_switch_in() -> None:
    lat = LatencyAccumulator(TidIndex(), long_ns=100)

    def chunk(rows: list[tuple[int, int, int, int]]) -> dict[str, np.ndarray]:
        t, kind, tid, tid2 = (np.array(c) for c in zip(*rows))
        return {"t_ns": t, "kind": kind, "tid": tid, "tid2": tid2}

    lat.feed(chunk([(10, WAKEUP, 5, -1), (20, WAKEUP, 6, -1), (30, SWITCH, 9, 6)]))
    lat.feed(chunk([(400, SWITCH, 6, 5), (500, WAKEUP, 5, -1)]))
    assert {t: v.tolist() for t, v in lat.per_task().items()} == {5: [390], 6: [10]}
    assert lat.long_waits()[0].tolist() == [390]
