"""The replay's process view: per-thread CPU and memory per node over the chart's columns
(analysis/process_view.py), drawn under the core-vs-time chart (ui/process_view.py, key p)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from snumap_tui.analysis.memory import RSS_NODE, timelines
from snumap_tui.analysis.process_view import at_cursor, busiest_process, strips
from snumap_tui.analysis.synth import synthetic_topology
from snumap_tui.store import Writer
from snumap_tui.store.procmem import rows_at
from snumap_tui.trace.events import SWITCH, EventBatch, TaskInfo
from tests.test_analysis import make_events

T = 10**9
MS = 10**6
MIB = 1 << 20


def _events() -> np.ndarray:
    # PU 0: thread 101 (process 100) runs 0-40 ms, PU 1: thread 102 runs 50-100 ms;
    # process 200 runs 40-50 ms on PU 0.
    rows = [(T, SWITCH, 0, 0, 101, 0, 100, 0), (T + 40 * MS, SWITCH, 0, 101, 201, 100, 200, 1),
            (T + 50 * MS, SWITCH, 0, 201, 0, 200, 0, 1),
            (T + 50 * MS, SWITCH, 1, 0, 102, 0, 100, 0),
            (T + 100 * MS, SWITCH, 1, 102, 0, 100, 0, 1)]
    return make_events(rows)


def _memory() -> np.ndarray:
    return np.concatenate([rows_at(T + k * 25 * MS, [(100, RSS_NODE, (k + 1) * 10 * MIB, True),
                                                     (100, 0, (k + 1) * 10 * MIB, True)])
                           for k in range(5)])


@pytest.fixture()
def recording(tmp_path: Path) -> Path:
    topo = synthetic_topology(1, 1, 2, 1)
    path = tmp_path / "pv.rec"
    with Writer(path, {"topology": topo.to_dict(), "backend": "test",
                       "start_monotonic_ns": T}) as w:
        w.add_events(EventBatch(events=_events(), tasks=[
            TaskInfo(101, 100, "solver"), TaskInfo(102, 100, "solver-w"),
            TaskInfo(201, 200, "other")]))
        w.add_process_memory(_memory())
    return path


def test_strips_follow_the_threads_and_the_memory(recording: Path) -> None:
    from snumap_tui.analysis.load import load
    from snumap_tui.store import open as open_recording

    with open_recording(recording) as rec:
        iv = load(rec).intervals
    assert busiest_process(iv) == 100
    ps = strips(iv, 100, T, T + 100 * MS, 10, timelines(_memory())[100])
    assert ps.threads[101].tolist() == pytest.approx([1, 1, 1, 1, 0, 0, 0, 0, 0, 0])
    assert ps.threads[102].tolist() == pytest.approx([0, 0, 0, 0, 0, 1, 1, 1, 1, 1])
    # Memory at each column's end: the last sample at or before it (every 25 ms, +10 MiB).
    assert (ps.memory[0][:3] / MIB).tolist() == [10, 10, 20]
    assert ps.peak[0] == 50 * MIB
    cpu, mem = at_cursor(ps, T + 15 * MS)
    assert cpu == pytest.approx(1.0) and mem[0] == 10 * MIB
    cpu, mem = at_cursor(ps, T + 75 * MS)          # the cursor moves: the figures follow
    assert cpu == pytest.approx(1.0) and mem[0] == 40 * MIB
    assert at_cursor(ps, T + 45 * MS)[0] == 0.0   # process 200's turn


def test_key_p_shows_the_process_view_under_the_chart(recording: Path, tmp_path: Path) -> None:
    from snumap_tui.cli import main

    out = tmp_path / "pv.svg"
    assert main(["replay", str(recording), "--screenshot", str(out), "--size", "100x30",
                 "--keys", "p"]) == 0
    svg = out.read_text().replace("&#160;", " ")
    assert "process 100 solver" in svg and "N0 DRAM" in svg and "101 solver" in svg
    out2 = tmp_path / "none.svg"
    assert main(["replay", str(recording), "--screenshot", str(out2), "--size", "100x30"]) == 0
    assert "process 100 solver" not in out2.read_text().replace("&#160;", " ")
