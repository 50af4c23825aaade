"""`snumap replay` with the shared keymap: the typed filter (/), only the selected cell's
process (enter), go to a time or a wall-clock time (:), the wall-clock axis (w), F10, [ ];
the time axis on 1-2-5 ticks at several zooms; letters for processes without colour."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from test_replay import make_recording, run_pilot

from snumap_tui.analysis.binning import OTHER
from snumap_tui.store import open as open_recording
from snumap_tui.ui.gantt import GanttState, render_gantt
from snumap_tui.ui.replay import GanttView, ReplayApp
from snumap_tui.ui.replay_data import load_replay, matching_tids
from snumap_tui.ui.timeaxis import resolution_label, ticks


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_recording(tmp_path_factory.mktemp("replay_keys") / "r.rec")


def _tick_values(marks: list[tuple[int, str]]) -> list[float]:
    out = []
    for _, lab in marks:
        m = re.fullmatch(r"([0-9.]+)(s|ms|us|ns)", lab)
        assert m, lab
        out.append(float(m.group(1)) * {"s": 1e9, "ms": 1e6, "us": 1e3, "ns": 1}[m.group(2)])
    return out


@pytest.mark.parametrize(("t0", "span", "step", "first"), [
    (0, 3_302_000_000, 500_000_000, "0.0s"),             # the whole recording
    (1_200_000_000, 6_450_000, 1_000_000, "1.200s"),     # the 6.45 ms span at 1.2 s
    (444_470_000, 476_210_000, 50_000_000, "450ms"),     # the odd full-zoom ticks
    (5_000, 1_000, 100, "5.0us"),                        # 1 us across the screen
    (7_000_000_000, 40_000, 5_000, "7.000000s"),         # 40 us at 7 s
])
def test_ticks_on_round_steps_with_the_digits_the_span_needs(t0: int, span: int, step: int,
                                                              first: str) -> None:
    marks = ticks(t0, span, 105)
    assert marks[0][1] == first
    vals = _tick_values(marks)
    assert len({lab for _, lab in marks}) == len(marks)         # every label differs
    diffs = np.diff(vals)
    assert np.allclose(diffs, step, rtol=1e-6)                     # one round step apart
    assert all(abs(v / step - round(v / step)) < 1e-6 for v in vals)   # on its multiples
    assert 3 <= len(marks) <= 20
    cols = [c for c, _ in marks]
    for (c, lab), c2 in zip(marks, cols[1:], strict=False):        # labels never touch
        assert c + 1 + len(lab) < c2


def test_wall_clock_ticks_and_cell_times() -> None:
    wall0 = 1_700_000_000_000_000_000                 # 2023-11-14 22:13:20 UTC
    marks = ticks(0, 2_000_000_000, 105, wall0)
    assert [lab for _, lab in marks][:3] == ["22:13:20.0", "22:13:20.5", "22:13:21.0"]
    assert resolution_label(1_201_300_000, 100_000) == "1.2013s"
    assert resolution_label(1_200_000_000, 100_000, wall0) == "22:13:21.2000"


def test_cell_detail_at_a_small_span_says_distinct_times(recording: Path) -> None:
    with open_recording(recording) as rec:
        data = load_replay(rec)
        st = GanttState(data.t0 + 1_200_000_000, data.t0 + 1_206_450_000)
        st.sel_col = 10
        from snumap_tui.ui.gantt import cell_detail
        r = render_gantt(data, st, 120, 30)
        head = cell_detail(data, st, r.bins, 119).split(":")[0]
        a, b = head.split(" ")[-1].split("..")
        assert a != b and a.startswith("1.20") and len(a) >= len("1.2006s")


def test_typed_filter_keeps_the_matching_processes(recording: Path) -> None:
    async def steps(app: ReplayApp, pilot) -> None:
        await pilot.press("slash", *"app2", "enter")
        await pilot.pause()
        assert app.state.filter_text == "app2"
        assert set(app.state.only_tids.tolist()) == {1008, 1009, 1010, 1011}
        bins = app.query_one(GanttView).rendered.bins
        keys = set(np.unique(bins.key).tolist()) - {OTHER, -1}
        assert keys == {1008}                          # by process: app2 alone keeps colour
        assert (bins.key == OTHER).any()               # everyone else: grey
        assert "filter 'app2'" in str(app.query_one("#header").render())
        await pilot.press("escape")
        assert app.state.only_tids is None and app.state.filter_text == ""
        await pilot.press("slash", *"1004", "enter")   # a PID
        assert set(app.state.only_tids.tolist()) == {1004, 1005, 1006, 1007}
        await pilot.press("escape")
    run_pilot(recording, (100, 30), steps)


def test_matching_tids_words_and_pids(recording: Path) -> None:
    with open_recording(recording) as rec:
        data = load_replay(rec)
    assert matching_tids(data, "w3").tolist() == [1003, 1007, 1011, 1015]
    assert matching_tids(data, "app1 w2").tolist() == [1006]
    assert matching_tids(data, "pid:1012").tolist() == [1012, 1013, 1014, 1015]
    assert matching_tids(data, "user:root").tolist() == []


def test_w_and_colon_use_the_wall_clock_and_brackets_the_speed(recording: Path) -> None:
    # (enter: only the selected cell's process, is in test_replay's pilot test)
    async def steps(app: ReplayApp, pilot) -> None:
        gv = app.query_one(GanttView)
        await pilot.press("w")
        await pilot.pause()
        axis = gv.rendered.lines[0]
        assert "|22:13:2" in "".join(seg.text for seg in axis)
        await pilot.press("w")
        assert app.state.wall_ns is None
        await pilot.press("colon", *"22:13:21.5", "enter")      # wall clock: 1.5 s in
        assert app.cursor_t == app.data.t0 + 1_500_000_000
        speed = app.speed
        await pilot.press("right_square_bracket")
        assert app.speed > speed
        await pilot.press("left_square_bracket", "left_square_bracket")
        assert app.speed < speed
        await pilot.press("f10")
        await pilot.pause()
        assert not app.is_running
    run_pilot(recording, (100, 30), steps)


def test_without_colour_processes_get_letters(recording: Path) -> None:
    with open_recording(recording) as rec:
        data = load_replay(rec)
    st = GanttState(data.t0, data.t1)
    r = render_gantt(data, st, 100, 30, letters=True)
    legend = "".join(seg.text for seg in r.lines[-1])
    found = re.findall(r"([A-Z]) (app\d) (\d+)", legend)
    assert len(found) == 4                            # four processes, four letters
    letters = {a for a, _, _ in found}
    assert len(letters) == 4
    cells = "".join(seg.text for line in r.lines[1:17] for seg in line[2:])
    assert set(cells) - set(" ·") <= letters | {c.lower() for c in letters} | {"+"}
    assert letters <= set(cells)
    plain = render_gantt(data, st, 100, 30)          # with colours: the busy blocks
    assert "█" in "".join(seg.text for seg in plain.lines[1])


def test_no_color_app_draws_letters(recording: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")

    async def steps(app: ReplayApp, pilot) -> None:
        gv = app.query_one(GanttView)
        assert gv.letters()
        row = "".join(seg.text for seg in gv.rendered.lines[1][2:])
        assert re.search(r"[A-Z]", row) and "█" not in row
    run_pilot(recording, (100, 30), steps)


def test_snapshot_no_color_letters(snap_compare, recording: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    with open_recording(recording) as rec:
        app = ReplayApp(load_replay(rec))
        assert snap_compare(app, terminal_size=(100, 30))


@pytest.mark.parametrize("term", ["xterm", "xterm-256color"])
def test_screenshot_has_colours_whatever_term(recording: Path, tmp_path: Path,
                                              term: str) -> None:
    """An SVG holds every colour: under TERM=xterm (16 colours: ssh, scripts, CI) the
    screenshot draws the chart's coloured blocks, as under xterm-256color, never letters."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("COLORTERM", "NO_COLOR")}
    env["TERM"] = term
    out = tmp_path / "s.svg"
    p = subprocess.run([sys.executable, "-m", "snumap_tui.cli", "replay", str(recording),
                        "--screenshot", str(out), "--size", "100x30"], env=env,
                       capture_output=True, text=True, timeout=120, check=False)
    assert p.returncode == 0, p.stderr
    svg = out.read_text()
    assert svg.count("█") > 500, svg.count("█")        # the busy blocks, in colour
    rows = re.findall(r">([A-Z])\1{3,}<", svg.replace("&#160;", " "))
    assert not rows                                     # no AAAA/BBBB rows of letters
