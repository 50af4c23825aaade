"""The replay's counters: the process view's counter rows under each thread (the cursor's
value in its first line) and the chart's region colouring by IPC (``x``, ``X``), on a
synthetic recording whose IPC is known per region: 2.5 in ``compute``, 0.4 in ``copy``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_replay import run_pilot

from snumap_tui.analysis.synth import synthetic_topology, write_recording
from snumap_tui.store import open as open_recording
from snumap_tui.trace.counters import counter_dtype
from snumap_tui.trace.events import SWITCH, TaskInfo
from snumap_tui.trace.region_catalog import BEGIN, END, REGION_DTYPE, RegionName
from snumap_tui.ui import counter_rows
from snumap_tui.ui.gantt import GanttState, render_gantt
from snumap_tui.ui.process_view import ProcessPanel
from snumap_tui.ui.replay import GanttView, ReplayApp
from snumap_tui.ui.replay_data import load_replay
from tests.test_analysis import make_events

T = 10**9
MS = 10**6
EVENTS = ["task-clock", "page-faults", "instructions", "cycles"]
IPC = {"compute": 2.5, "copy": 0.4}


def write_ipc_recording(path: Path, counters: bool = True, runs: int = 40) -> Path:
    """Process 100's threads 101 (PU 0) and 102 (PU 1) run 9 ms of every 10 for RUNS * 10 ms,
    inside ``compute`` the first half, ``copy`` the second; each run's counters at 2 GHz
    with its region's IPC, 50 page faults a run in ``copy``."""
    ev, rows = [], []
    half = runs // 2 * 10 * MS
    for tid, cpu in ((101, 0), (102, 1)):
        for k in range(runs):
            a, b = T + k * 10 * MS, T + k * 10 * MS + 9 * MS
            ev += [(a, SWITCH, cpu, 0, tid, 0, 100, 0), (b, SWITCH, cpu, tid, 0, 100, 0, 1)]
            region = "compute" if a - T < half else "copy"
            cyc = 2 * (b - a)
            rows.append((tid, cpu, a, b, [b - a, 50 if region == "copy" else 0,
                                          int(IPC[region] * cyc), cyc]))
    c = np.zeros(len(rows), counter_dtype(len(EVENTS)))
    for i, (tid, cpu, a, b, vals) in enumerate(rows):
        c[i]["tid"], c[i]["pid"], c[i]["cpu"], c[i]["t_start"], c[i]["t_end"] = tid, 100, cpu, a, b
        c[i]["value"] = vals
        c[i]["enabled"] = c[i]["running"] = [b - a] * len(EVENTS)
        c[i]["n"] = len(EVENTS)
    names = [RegionName("compute", "omp", "body"), RegionName("copy", "omp", "body")]
    reg = [(T + off, tid, 100, op, rid) for tid in (101, 102)
           for off, op, rid in ((0, BEGIN, 0), (half, END, 0), (half, BEGIN, 1),
                                (runs * 10 * MS, END, 1))]
    reg_rows = np.array(sorted(reg), dtype=REGION_DTYPE)
    return write_recording(
        path, synthetic_topology(1, 1, 2, 1, host="ipc"), make_events(ev),
        tasks=[TaskInfo(101, 100, "stencil"), TaskInfo(102, 100, "stencil")],
        regions=(reg_rows, names),
        counters=(c, EVENTS) if counters else None,
        header={"counters": {"source": "libbpf", "events": EVENTS}} if counters else None)


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_ipc_recording(tmp_path_factory.mktemp("ipc") / "ipc.rec")


def _text(line) -> str:
    return "".join(seg.text for seg in line)


def test_process_view_counter_rows_follow_the_cursor(recording: Path) -> None:
    async def steps(app: ReplayApp, pilot) -> None:
        await pilot.press("p")
        await pilot.pause()
        panel = app.query_one(ProcessPanel)
        lines = [_text(line) for line in panel.lines]
        assert "IPC at cursor 2.50" in lines[0], lines[0]
        # Under each thread's row its IPC row, labelled with the value at the cursor.
        assert lines[1].startswith("101 stencil") and "IPC 2.50" in lines[2]
        assert lines[3].startswith("102 stencil") and "IPC 2.50" in lines[4]
        row = lines[2][16:]
        assert len(set(row[: len(row) // 2 - 2])) == 1        # compute: one height ...
        assert row[-3] != row[0]                             # ... copy: lower
        await pilot.press("end")                             # the cursor into copy
        await pilot.pause()
        lines = [_text(line) for line in panel.lines]
        assert "IPC at cursor 0.40" in lines[0] and "IPC 0.40" in lines[2]
        await pilot.press("X")                               # next figure: task-clock share
        await pilot.pause()
        lines = [_text(line) for line in panel.lines]
        # In PUs, as the process's CPU figure (a share passed 100 % over two threads), and no
        # thread row repeating its CPU row (issue 30 item 19).
        assert "task-clock at cursor" in lines[0] and " PUs (the CPU rows" in lines[0]
        assert "%" not in lines[0].split("task-clock at cursor")[1]
        assert lines[1].startswith("101 stencil") and lines[2].startswith("102 stencil")
        await pilot.press("X")                               # page-faults per ms: 50 / 10 ms
        await pilot.press("home")
        await pilot.pause()
        assert "page-faults/ms at cursor 0.00" in _text(panel.lines[0])
        await pilot.press("end")
        await pilot.pause()
        head = _text(panel.lines[0])
        assert "page-faults/ms at cursor" in head and "at cursor 0.00" not in head
    run_pilot(recording, (120, 40), steps, at_ns=50 * MS)


def test_x_colours_region_intervals_by_ipc_with_a_legend(recording: Path) -> None:
    async def steps(app: ReplayApp, pilot) -> None:
        gv = app.query_one(GanttView)
        await pilot.press("x")
        await pilot.pause()
        assert app.state.mode == "region" and app.state.by_figure
        assert gv.rendered is not None
        legend = _text(gv.rendered.lines[-1])
        assert "IPC per region interval  0 " in legend and "2.50" in legend, legend
        assert "n/a (no counts)" in legend
        # compute (2.5) is the top step, copy (0.4) the second of eight.
        keys = gv.rendered.bins.key[0]
        left, right = keys[: len(keys) // 4], keys[-len(keys) // 4:]
        assert set(left[left >= 0].tolist()) == {8} and set(right[right >= 0].tolist()) == {2}
        assert counter_rows.level_colour(8) != counter_rows.level_colour(2)
        detail = _text(gv._lines[-1])
        assert "compute" in detail and "IPC 2.50" in detail
        assert "by region IPC" in str(app.query_one("#header").render())
        await pilot.press("x")                                # back to names
        await pilot.pause()
        assert not app.state.by_figure
        assert "compute" in _text(gv.rendered.lines[-1])
    run_pilot(recording, (120, 40), steps, at_ns=50 * MS)


def test_without_counters_the_rows_say_why(tmp_path: Path) -> None:
    path = write_ipc_recording(tmp_path / "none.rec", counters=False)

    async def steps(app: ReplayApp, pilot) -> None:
        await pilot.press("p")
        await pilot.pause()
        head = _text(app.query_one(ProcessPanel).lines[0])
        assert "counters: n/a (recorded without --events (snumap record --events" in head
        await pilot.press("x")
        await pilot.pause()
        # x without counters: a warning, the colouring as it was.
        assert not app.state.by_figure and app.state.mode == "process"
        assert any("counters: n/a (recorded without --events" in n.message
                   for n in app._notifications)
    run_pilot(path, (120, 40), steps)
    with open_recording(path) as rec:
        data = load_replay(rec)
        st = GanttState(data.t0, data.t1, mode="region", by_figure=True)
        legend = _text(render_gantt(data, st, 100, 20).lines[-1])
    assert "IPC" not in legend and "compute" in legend        # names, not a scale


def test_process_view_follows_a_resize(recording: Path) -> None:
    """The process view's columns are the chart's after the terminal shrinks (its rows kept
    the old width, cut at the edge, until the next key)."""
    async def steps(app: ReplayApp, pilot) -> None:
        await pilot.press("p")
        await pilot.pause()
        panel = app.query_one(ProcessPanel)
        assert len(_text(panel.lines[1])) == 120
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        await pilot.pause()
        assert len(_text(panel.lines[1])) == 80 == 16 + app.span_cols()
        assert len(_text(panel.lines[2])) == 80
    run_pilot(recording, (120, 40), steps, at_ns=50 * MS)


def test_without_colours_the_steps_are_digits(recording: Path) -> None:
    with open_recording(recording) as rec:
        data = load_replay(rec)
        st = GanttState(data.t0, data.t1, mode="region", by_figure=True)
        r = render_gantt(data, st, 100, 20, letters=True)
    row = _text(r.lines[1])[16:]
    assert row[:30].strip("8") == "" and row[-20:].strip("2") == ""     # compute 8, copy 2
    assert "0 12345678 2.50" in _text(r.lines[-1])


def test_enter_keeps_one_step_of_the_scale(recording: Path) -> None:
    async def steps(app: ReplayApp, pilot) -> None:
        await pilot.press("x", "enter")        # the cursor's cell: compute, the top step
        await pilot.pause()
        assert app.state.only_key == 8
        assert "only IPC 2.19-2.50" in str(app.query_one("#header").render())
        gv = app.query_one(GanttView)
        assert gv.rendered is not None
        keys = gv.rendered.bins.key[0]
        assert 2 not in keys.tolist()          # copy's step hidden (grey "other")
        await pilot.press("X")                 # another figure: the step means nothing
        assert app.state.only_key is None
    run_pilot(recording, (120, 40), steps, at_ns=50 * MS)
