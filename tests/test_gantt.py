"""The core-vs-time view as a pure renderable: cells, labels, legend, strips, cell detail."""

from __future__ import annotations

from pathlib import Path

import pytest

from snumap_tui.analysis.synth import synthetic_topology, write_recording
from snumap_tui.store import open as open_recording
from snumap_tui.ui.gantt import LABEL_W, GanttState, cell_detail, render_gantt
from snumap_tui.ui.replay_data import ReplayData, load_replay
from tests.test_analysis import SCENARIO, T0, T1, make_events
from tests.test_report import TASKS


@pytest.fixture()
def data(tmp_path: Path) -> ReplayData:
    path = write_recording(tmp_path / "known.rec", synthetic_topology(2, 1, 1, 1, host="h"),
                           make_events(SCENARIO), tasks=TASKS,
                           markers=[(T0, "start"), (T1, "exit 0")])
    rec = open_recording(path)
    return load_replay(rec)


def text(lines: list) -> list[str]:
    return ["".join(seg.text for seg in line) for line in lines]


def test_rows_are_labelled_by_package_numa_core_and_pu(data: ReplayData) -> None:
    r = render_gantt(data, GanttState(data.t0, data.t1), LABEL_W + 1 + 9, 12)
    lines = text(r.lines)
    assert lines[0].startswith("Pk NUMA core")
    assert lines[1][:LABEL_W].split() == ["P0", "N0", "c0", "0"]
    assert lines[2][:LABEL_W].split() == ["P1", "N1", "c1", "1"]


def test_cells_show_who_ran_and_how_busy(data: ReplayData) -> None:
    # 9 columns of 1000 ns over [1000, 10000): see tests/test_analysis.py for the intervals.
    st = GanttState(data.t0, data.t1, mode="thread")
    r = render_gantt(data, st, LABEL_W + 1 + 9, 12)
    rows = [line[LABEL_W + 1:] for line in text(r.lines)[1:3]]
    assert rows[0] == "·█████   "     # selected cell (0, 0) is idle: shown as a reversed dot
    assert rows[1] == "██   ████"
    assert r.bins.key[0].tolist()[:6] == [-1, 101, 101, 101, 102, 102]
    # The same cells coloured by process: one colour for 101 and 102 (pid 100).
    st.mode = "process"
    r = render_gantt(data, st, LABEL_W + 1 + 9, 12)
    assert set(r.bins.key[0].tolist()) == {-1, 100}
    names = [data.key_name("process", k) for k, _ in r.legend]
    assert names == ["solver 100", "io 200"]
    assert text(r.lines)[-1].startswith(" █ solver 100")


def test_zoom_to_single_events_and_filter(data: ReplayData) -> None:
    st = GanttState(4500, 5500, mode="thread")
    r = render_gantt(data, st, LABEL_W + 1 + 4, 12)
    assert r.bins.key[0].tolist() == [101, 101, 102, 102]
    st = GanttState(data.t0, data.t1, mode="process", only_key=200, sel_row=1)
    r = render_gantt(data, st, LABEL_W + 1 + 9, 12)
    row1 = text(r.lines)[2][LABEL_W + 1:]
    assert row1[:2] == "██" and set(row1[5:]) == {"·"}   # 101 (pid 100) is "other" work


def test_utilisation_strip_and_cell_detail(data: ReplayData) -> None:
    st = GanttState(data.t0, data.t1, mode="thread", sel_row=0, sel_col=4)
    r = render_gantt(data, st, LABEL_W + 1 + 9, 12)
    util = [line for line in text(r.lines) if line.startswith("util")]
    assert util and len(util[0]) == LABEL_W + 1 + 9
    d = cell_detail(data, st, r.bins)
    assert d.startswith("PU 0 ") and "solver-w 102" in d and "(1 in)" in d
    st.sel_row, st.sel_col = 1, 5          # 101 switched in on PU 1 after running on PU 0
    r = render_gantt(data, st, LABEL_W + 1 + 9, 12)
    d = cell_detail(data, st, r.bins)
    assert "solver 101" in d and "1 migr in" in d
    st.sel_col = 3
    assert cell_detail(data, st, render_gantt(data, st, LABEL_W + 1 + 9, 12).bins).endswith(
        "idle")


def test_cell_detail_fits_80_columns_at_whole_entries(tmp_path: Path) -> None:
    """A cell where a dozen threads ran: at 80 columns the line keeps whole entries, ends the
    list with an ellipsis and says how many were left out (never cut mid-word)."""
    import re

    from snumap_tui.analysis.synth import synthetic_events
    from snumap_tui.trace.events import TaskInfo
    from snumap_tui.ui.gantt import fit_detail

    topo = synthetic_topology(1, 1, 1, 1, host="h")
    ev = synthetic_events(4000, list(topo.pu_os_indexes), n_threads=12, duration_ns=10**8,
                          seed=3, threads_per_process=12)
    tasks = [TaskInfo(1000 + i, 1000, "bash", ppid=1) for i in range(12)]
    data = load_replay(open_recording(write_recording(tmp_path / "many.rec", topo, ev,
                                                      tasks=tasks)))
    st = GanttState(data.t0, data.t1, mode="thread", sel_row=0, sel_col=0)
    r = render_gantt(data, st, 80, 24)
    d = cell_detail(data, st, r.bins, 79)
    assert len(d) <= 79 and d.endswith("migr in")
    listed = d.split(": ", 1)[1].split("; busy")[0]
    m = re.fullmatch(r"(.*), \u2026 \+(\d+) more", listed)
    assert m, d
    entries = m.group(1).split(", ")
    assert all(re.fullmatch(r"bash \d+ [\d.]+[mun]?s \(\d+ in\)", x) for x in entries), d
    wide = cell_detail(data, st, r.bins, 1000)          # room for everyone: no "more"
    assert "more" not in wide and wide.count("bash") == len(entries) + int(m.group(2))
    # Not even one entry fits: cut, with an ellipsis, within the width.
    tiny = fit_detail("PU 0 0..1ms: ", ["bash 1 1ms (1 in)"], 3, "; busy 9%", 20)
    assert len(tiny) == 20 and tiny.endswith("\u2026")
    # One entry fits only with the short tail: who ran is kept, the migrations dropped.
    one = fit_detail("PU 0 0..1ms: ", ["bash 1 1ms (1 in)"], 2, "; busy 9%, 0 migr in", 50,
                     "; busy 9%")
    assert one == "PU 0 0..1ms: bash 1 1ms (1 in), \u2026 +1 more; busy 9%"
