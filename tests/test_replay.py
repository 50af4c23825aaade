"""`snumap replay`: pilots (keys move the cursor, zoom, pan, filter, switch colouring) and
snapshots of the app and the core-vs-time view at 80x24 and 120x40."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from snumap_tui.analysis.synth import synthetic_events, synthetic_topology, write_recording
from snumap_tui.model.sample import Sample
from snumap_tui.store import open as open_recording
from snumap_tui.trace.events import SWITCH, TaskInfo
from snumap_tui.ui.gantt import GanttState
from snumap_tui.ui.keymap import entries
from snumap_tui.ui.replay import GanttView, ReplayApp, parse_time
from snumap_tui.ui.replay_data import load_replay
from snumap_tui.ui.replay_help import KEYS, ReplayHelpScreen
from snumap_tui.ui.textfit import fit_pieces
from snumap_tui.ui.topology_view import TopologyTable

HERE = Path(__file__).resolve().parent


def _samples(topo, t0: int, n: int) -> list[Sample]:
    """RAPL and NUMA readings every 100 ms (power rises, memory grows) for the strips."""
    out = []
    for i in range(n):
        t = t0 + i * 100_000_000
        out.append(Sample(t, 1_700_000_000_000_000_000 + i * 100_000_000, {
            "rapl": {"domains": ["package-0", "package-1"],
                     "objects": [["Package", 0], ["Package", 1]],
                     "energy_uj": np.array([i * 5e6 + i * i * 1e5, i * 4e6]),
                     "max_uj": np.array([2**32, 2**32])},
            "numa": {"nodes": np.array([n.os_index for n in topo.numa_nodes]),
                     "mem_used": np.array([(0.2 + 0.6 * i / n) * 2**30
                                           for _ in topo.numa_nodes])}}))
    return out


def barrier(ev: np.ndarray, cpus: list[int], a: int, b: int) -> np.ndarray:
    """Every PU goes idle at a and picks a thread again at b: a synchronisation point."""
    keep = ev[(ev["t_ns"] < a) | (ev["t_ns"] >= b)]
    extra = np.zeros(2 * len(cpus), dtype=ev.dtype)
    for i, c in enumerate(cpus):
        tid = 1000 + c % 16
        extra[2 * i] = (a, c, SWITCH, 0, 0, 0, 0, 1)
        extra[2 * i + 1] = (b, c, SWITCH, 0, tid, 0, 1000 + (tid - 1000) // 4 * 4, 0)
    out = np.concatenate([keep, extra])
    return out[np.argsort(out["t_ns"], kind="stable")]


def make_recording(path: Path) -> Path:
    """A seeded 16-PU, 4-node recording of 2 s: 4 processes of 4 threads, with a gap where
    every thread stops at once (a barrier) between 0.9 and 1.1 s."""
    topo = synthetic_topology(2, 2, 2, 2, host="replayhost")
    t0 = 1_000_000_000
    ev = synthetic_events(6000, list(topo.pu_os_indexes), n_threads=16, duration_ns=2 * 10**9,
                          t0_ns=t0, seed=7, threads_per_process=4)
    ev = barrier(ev, list(topo.pu_os_indexes), t0 + 900_000_000, t0 + 1_100_000_000)
    tasks = [TaskInfo(1000 + i, 1000 + i // 4 * 4, f"app{i // 4}" if i % 4 == 0 else
                      f"app{i // 4}-w{i % 4}", ppid=1) for i in range(16)]
    return write_recording(path, topo, ev, tasks=tasks, samples=_samples(topo, t0, 21),
                           header={"backend": "bcc", "kernel": "6.1.0", "start_wall_ns":
                                   1_700_000_000_000_000_000, "start_monotonic_ns": t0},
                           markers=[(t0, "start"), (t0 + 2 * 10**9, "exit 0")])


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_recording(tmp_path_factory.mktemp("replay") / "r.rec")


def test_parse_time() -> None:
    assert parse_time("12.5") == 12.5 and parse_time("250ms") == 0.25
    assert parse_time("1:02.5") == 62.5
    for bad in ("soon", "abc", "nan", "inf", "-1", "1e300", "1:xx"):
        with pytest.raises(ValueError):
            parse_time(bad)


def test_pilot_cursor_zoom_pan_filter_and_colour(recording: Path) -> None:
    async def go() -> None:
        with open_recording(recording) as rec:
            data = load_replay(rec)
            app = ReplayApp(data)
            async with app.run_test(size=(100, 30)) as pilot:
                await pilot.pause()
                gv = app.query_one(GanttView)
                assert gv.rendered is not None
                assert app.state.t0 == data.t0 and app.state.t1 == data.t1
                await pilot.press("right", "right")
                assert app.cursor_t > data.t0 and app.state.sel_col == 2
                span = app.state.span
                await pilot.press("plus")
                assert app.state.span == span // 2
                t0 = app.state.t0
                await pilot.press("shift+right")
                assert app.state.t0 > t0
                await pilot.press("0")
                assert app.state.span == data.t1 - data.t0
                await pilot.press("c")
                assert app.state.mode == "thread"
                await pilot.press("c", "c")
                assert app.state.mode == "process"
                # Select a busy cell and filter to its process.
                for _ in range(20):
                    k = int(gv.rendered.bins.key[app.state.sel_row - app.state.row0,
                                                 app.state.sel_col])
                    if k >= 0:
                        break
                    await pilot.press("right")
                await pilot.press("enter")                # only this cell's process
                assert app.state.only_key == k
                await pilot.press("escape")
                assert app.state.only_key is None
                await pilot.press("down", "down")
                assert app.state.sel_row == 2
                # Go to a time.
                await pilot.press("colon", *"1.5", "enter")
                assert abs((app.cursor_t - data.t0) / 1e9 - 1.5) < 1e-6
                # Play advances the cursor; pause stops it. From 0.2 s: the recording is
                # 2 s long, and a slow pause(0.35) on a busy machine must not reach its end
                # (playback stops there by itself, and space would start it again).
                await pilot.press("colon", *"0.2", "enter")
                await pilot.press("space")
                assert app.playing
                await pilot.pause(0.35)
                await pilot.press("space")
                assert not app.playing and app.cursor_t > data.t0 + 0.2e9
                header = str(app.query_one("#header").render())
                assert "replayhost" in header and "paused" in header
                await pilot.press("tab")
                assert app.view == "topology"
                await pilot.press("tab")
                assert app.view == "heatmap"
                await pilot.press("tab")
                assert app.view == "gantt"
                await pilot.press("q")
    asyncio.run(go())


def _app(recording: Path, mode: str = "process") -> ReplayApp:
    rec = open_recording(recording)
    app = ReplayApp(load_replay(rec))
    app.state.mode = mode
    app.cursor_t = app.data.t0 + 700_000_000
    return app


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
def test_snapshot_replay(snap_compare, recording: Path, size: tuple[int, int]) -> None:
    assert snap_compare(_app(recording), terminal_size=size)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
def test_snapshot_core_vs_time_zoomed_by_thread(snap_compare, recording: Path,
                                               size: tuple[int, int]) -> None:
    async def zoom(pilot) -> None:
        await pilot.press("c", "plus", "plus", "plus", "down", "down", "down")
    assert snap_compare(_app(recording), terminal_size=size, run_before=zoom)


def test_gantt_state_span_never_zero() -> None:
    assert GanttState(5, 5).span == 1


def run_pilot(recording: Path, size: tuple[int, int], steps, at_ns: int | None = None) -> None:
    """Open the recording in a ReplayApp of ``size`` and await ``steps(app, pilot)``."""
    async def go() -> None:
        with open_recording(recording) as rec:
            app = ReplayApp(load_replay(rec))
            if at_ns is not None:
                app.cursor_t = app.data.t0 + at_ns
            async with app.run_test(size=size) as pilot:
                await pilot.pause()
                await steps(app, pilot)
    asyncio.run(go())


def test_no_color_draws_every_view_and_the_help(recording: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """NO_COLOR makes Textual filter every segment to monochrome, which read ``.color`` of a
    None style and crashed the core-vs-time and topology views."""
    monkeypatch.setenv("NO_COLOR", "1")

    async def steps(app: ReplayApp, pilot) -> None:
        assert app.no_color
        for _ in range(3):                       # gantt, topology, heatmap
            await pilot.press("tab")
            await pilot.pause()
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, ReplayHelpScreen)
        await pilot.press("escape")
    run_pilot(recording, (80, 24), steps)


def test_help_lists_every_key_and_the_footer_the_main_ones(recording: Path) -> None:
    # The app's bindings are the keymap's, and the help lists every one of them.
    assert [(b.key, b.action) for b in ReplayApp.BINDINGS] == [  # type: ignore[union-attr]
        (k.keys, k.replay) for k in entries("replay")]
    for k in entries("replay"):
        assert any(k.shown in keys for keys, what in KEYS if what == k.what), k

    async def steps(app: ReplayApp, pilot) -> None:
        shown = {b.binding.description for b in app.active_bindings.values() if b.binding.show}
        assert {"Help", "Quit", "Play", "Step", "Zoom", "Go to", "View"} <= shown
        await pilot.press("f1")
        assert isinstance(app.screen, ReplayHelpScreen)
        await pilot.press("escape")
        assert not isinstance(app.screen, ReplayHelpScreen)
    run_pilot(recording, (80, 24), steps)


def test_too_small_terminal_says_so(recording: Path) -> None:
    async def steps(app: ReplayApp, pilot) -> None:
        assert app.too_small and app.screen.has_class("-too-narrow")
        assert app.query_one("#too-small").display
        assert "too small" in str(app.query_one("#too-small").render())
        assert not app.query_one("#main").display
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        assert not app.too_small and app.query_one("#main").display
    run_pilot(recording, (40, 10), steps)


def test_go_to_with_bad_input_says_why_and_stays_open(recording: Path) -> None:
    async def steps(app: ReplayApp, pilot) -> None:
        before = app.cursor_t
        goto = app.query_one("#goto")
        for bad in ("abc", "nan"):
            await pilot.press("colon", *bad, "enter")
            assert goto.display and app.cursor_t == before
            assert "not a time" in str(goto.border_title)
        await pilot.press("escape")
        assert not goto.display
        await pilot.press("colon", *"0.5", "enter")
        assert not goto.display and app.cursor_t == app.data.t0 + 500_000_000
    run_pilot(recording, (80, 24), steps)


def test_topology_view_shows_the_samples_at_the_cursor(recording: Path) -> None:
    """`snumap top`'s tree, fed the Frame of the two recorded samples around the cursor."""
    async def steps(app: ReplayApp, pilot) -> None:
        await pilot.press("1")
        await pilot.pause()
        tree = app.query_one(TopologyTable)
        assert app.view == "topology" and tree.has_focus
        f = tree.frame
        assert f is not None and f.t_ns - f.dt_s * 1e9 <= app.cursor_t < f.t_ns
        assert "sample 200.00ms–300.00ms" in str(app.query_one("#header").render())
        await pilot.press(*"." * 5)            # 5 columns of 2 s / 84: past 300 ms
        assert app.cursor_t >= app.data.t0 + 300_000_000
        assert tree.frame is not None and tree.frame.t_ns > f.t_ns
        await pilot.press("down", "enter")     # the tree's own keys: fold Package 0
        assert tree.cursor == 1 and len(tree.rows) < 15
    run_pilot(recording, (100, 30), steps, at_ns=250_000_000)


def test_header_leaves_out_whole_pieces_at_80_columns(recording: Path) -> None:
    t = fit_pieces([("abc", ""), (" │ 3.79s", ""), (" │ Linux 6.1.0-28-amd64", "")], 15)
    assert t.plain == "abc │ 3.79s"

    async def steps(app: ReplayApp, pilot) -> None:
        app.data.header["kernel"] = "6.1.0-28-cloud-amd64-with-a-long-name"
        await pilot.press("0")                  # a redraw with the long kernel name
        one, two = str(app.query_one("#header").render()).splitlines()[:2]
        assert "│ 2.00s │" in one and "Linux" not in one and len(one) <= 80
        assert "t=0" in two
    run_pilot(recording, (80, 24), steps)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "snumap_tui.cli", *args], cwd=HERE.parent,
                          check=False,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_replay_without_a_terminal_refuses_in_one_line(recording: Path) -> None:
    p = _cli("replay", str(recording))            # stdout is a pipe, not a tty
    assert p.returncode == 2 and p.stdout == ""
    err = p.stderr.strip().splitlines()
    assert len(err) == 1 and "needs a terminal" in err[0]


def test_a_crash_inside_the_app_exits_non_zero(recording: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from snumap_tui.cli import main

    def boom(self: ReplayApp) -> None:
        raise RuntimeError("boom")
    monkeypatch.setattr(ReplayApp, "_header", boom)
    rc = main(["replay", str(recording), "--screenshot", str(tmp_path / "s.svg"),
               "--size", "80x24"])
    assert rc == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == ("snumap: the replay view stopped on an internal error "
                       "(RuntimeError: boom); the traceback is above")


def test_memory_strip_is_used_without_page_cache_as_the_tree(tmp_path: Path) -> None:
    """The core-vs-time strip and the topology tree agree on a node's used memory at the same
    moment: MemUsed less FilePages (the page cache), not MemUsed."""
    from snumap_tui.ui.gantt import GanttState, render_gantt
    from snumap_tui.ui.replay_data import used_without_cache
    from snumap_tui.ui.replay_help import NOTES

    topo = synthetic_topology(1, 1, 1, 1, host="memhost")
    t0 = 1_000_000_000
    gib = 2.0**30
    samples = [Sample(t0 + i * 100_000_000, 1_700_000_000_000_000_000 + i * 100_000_000, {
        "numa": {"nodes": np.array([0]), "mem_total": np.array([7.6 * gib]),
                 "mem_free": np.array([4.9 * gib]), "mem_used": np.array([2.7 * gib]),
                 "file_pages": np.array([1.3 * gib])}}) for i in range(5)]
    ev = synthetic_events(200, list(topo.pu_os_indexes), n_threads=2, duration_ns=5 * 10**8,
                          t0_ns=t0, seed=1)
    data = load_replay(open_recording(write_recording(tmp_path / "m.rec", topo, ev,
                                                      samples=samples)))
    mem = next(s for s in data.series if s.name == "mem N0")
    assert np.allclose(mem.v, 1.4 * gib)
    r = render_gantt(data, GanttState(data.t0, data.t1), 80, 24)
    strip = next("".join(g.text for g in line) for line in r.lines
                 if "".join(g.text for g in line).startswith("mem N0"))
    assert strip.split()[2] == "1.4G"                    # the tree's 1.4G/7.6G, not 2.7G
    assert "without the page cache" in NOTES
    # MemUsed missing: MemTotal - MemFree, less the cache; neither: no series value.
    got = used_without_cache({"mem_total": np.array([8.0]), "mem_free": np.array([5.0]),
                              "file_pages": np.array([1.0])})
    assert got is not None and got.tolist() == [2.0]
    assert used_without_cache({"file_pages": np.array([1.0])}) is None


def test_space_at_the_end_plays_again_from_the_start(recording: Path) -> None:
    async def steps(app: ReplayApp, pilot) -> None:
        await pilot.press("end")
        assert app.cursor_t == app.data.t1 - 1
        await pilot.press("space")
        assert app.playing and app.cursor_t < (app.data.t0 + app.data.t1) // 2
        await pilot.press("space")
        assert not app.playing
    run_pilot(recording, (100, 30), steps)


def test_detail_line_and_header_agree_after_switching_views(recording: Path) -> None:
    """Back in the chart from another view, the selected cell (the detail line's time) is
    the cursor's column at the chart's real width, not at a width guessed while hidden."""
    async def steps(app: ReplayApp, pilot) -> None:
        gv = app.query_one(GanttView)
        await pilot.press("right", "right", "right")
        before = (app.cursor_t, app.state.sel_col)
        await pilot.press("tab", "tab", "tab")
        await pilot.pause()
        assert app.view == "gantt"
        assert (app.cursor_t, app.state.sel_col) == before
        edges = gv.rendered.bins.edges
        assert edges[app.state.sel_col] <= app.cursor_t < edges[app.state.sel_col + 1]
    run_pilot(recording, (120, 30), steps)


def test_help_at_80x24_says_it_scrolls_and_does(recording: Path) -> None:
    """At 80x24 the help is longer than the screen: it says so (as top's does) and the
    arrows scroll it (issue 30 item 19)."""
    from textual.containers import VerticalScroll
    from textual.widgets import Static

    async def steps(app: ReplayApp, pilot) -> None:
        await pilot.press("question_mark")
        await pilot.pause()
        scroll = app.screen.query_one(VerticalScroll)
        text = str(app.screen.query_one(Static).render())
        assert "↑ ↓ scroll" in text.splitlines()[0]
        assert scroll.max_scroll_y > 0                     # cut: more than one screen
        await pilot.press("down", "down", "down")
        await pilot.pause()
        assert scroll.scroll_y > 0
    run_pilot(recording, (80, 24), steps)


def test_snapshot_help_at_80x24(snap_compare, recording: Path) -> None:
    """The help at 80x24, its first line saying it scrolls (issue 30 item 19)."""
    assert snap_compare(_app(recording), terminal_size=(80, 24), press=["question_mark"])
