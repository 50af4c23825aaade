"""Pilot tests: every key of `snumap top`, frames from a feed thread, resize, too small."""

from __future__ import annotations

import asyncio
import functools
import io
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from textual.widgets import DataTable, Input, Static

from snumap_tui.model.frame import Frame
from snumap_tui.sources.base import SourceStatus
from snumap_tui.ui.app import FrameReady, TopApp
from snumap_tui.ui.demo import demo_frame, synthetic_topology
from snumap_tui.ui.hostinfo import HostInfo
from snumap_tui.ui.screens import HelpScreen, SourcesScreen
from snumap_tui.ui.topology_view import TopologyTable
from snumap_tui.ui.tree_rows import visible_rows


def sync(fn: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    """Run an async pilot test without a pytest asyncio plugin."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kw: Any) -> None:
        asyncio.run(fn(*args, **kw))  # type: ignore[arg-type]

    return wrapper


TOPO = synthetic_topology(2, 2, 1, 4, 2)
HOST = HostInfo("testhost", "6.1.0-test", "Test CPU", 7200.0, (1.0, 0.5, 0.25))


class FakeFeed:
    """Records what the app asks of the sampler; frames are sent by the test."""

    def __init__(self) -> None:
        self.interval_s = 1.0
        self.callback: Callable[[Frame], None] | None = None
        self.intervals: list[float] = []
        self.watched: list[int | None] = []
        self.cadences: list[float] = []
        self.stopped = False

    def start(self, callback: Callable[[Frame], None]) -> None:
        self.callback = callback

    def stop(self) -> None:
        self.stopped = True

    def set_interval(self, seconds: float) -> None:
        self.intervals.append(seconds)

    def watch_pid(self, pid: int | None) -> None:
        self.watched.append(pid)

    def tasks_cadence(self, every_s: float) -> None:
        self.cadences.append(every_s)


def make_app(feed: FakeFeed | None = None) -> TopApp:
    return TopApp(TOPO, feed=feed, host=lambda: HOST)


def text_of(w: Static) -> str:
    """What a Static shows, as plain text (it may hold Text, a Table or a Heatmap)."""
    console = Console(width=120, record=True, file=io.StringIO())
    console.print(w.content)
    return console.export_text()


def header(app: TopApp) -> str:
    return text_of(app.query_one("#header", Static))


async def _loaded(pilot, app: TopApp, n: int = 3) -> None:
    for s in range(n):
        app.push_frame(demo_frame(TOPO, s))
    await pilot.pause()


@pytest.mark.parametrize("key", ["q", "ctrl+c"])
@sync
async def test_quit_keys(key: str) -> None:
    feed = FakeFeed()
    app = make_app(feed)
    async with app.run_test(size=(80, 24)) as pilot:
        await _loaded(pilot, app)
        await pilot.press(key)
        await pilot.pause()
        assert not app.is_running
    assert feed.stopped


@sync
async def test_view_keys_and_tab() -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await _loaded(pilot, app)
        assert app.view == "topology"
        for key, view in (("2", "heatmap"), ("3", "processes"), ("1", "topology"),
                          ("tab", "heatmap"), ("tab", "processes"), ("tab", "topology")):
            await pilot.press(key)
            await pilot.pause()
            assert app.view == view
            assert view in header(app)


@sync
async def test_metric_keys_cycle_heatmap_metric() -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await _loaded(pilot, app)
        await pilot.press("2")
        assert app.metric.key == "util_pct"
        await pilot.press("m")
        await pilot.pause()
        assert app.metric.key == "ipc"
        body = text_of(app.query_one("#heatmap-body", Static))
        assert body.startswith("IPC")
        n = len(app.metric_views())
        for _ in range(n - 1):
            await pilot.press("m")
        assert app.metric.key == "util_pct"          # round the cycle, back at the first


@sync
async def test_pause_freezes_the_display_but_keeps_history() -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await _loaded(pilot, app)
        shown = app.frame
        await pilot.press("space")
        assert app.paused and "PAUSED" in header(app)
        app.push_frame(demo_frame(TOPO, 9))
        await pilot.pause()
        assert app.frame is shown and len(app.history) == 4
        await pilot.press("space")
        assert not app.paused and app.frame is app.history[-1]


@sync
async def test_the_feed_reads_the_process_list_in_full_only_while_it_is_shown() -> None:
    feed = FakeFeed()
    app = make_app(feed)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert feed.cadences and feed.cadences[-1] > 0        # topology view: slow cadence
        await pilot.press("3")
        await pilot.pause()
        assert feed.cadences[-1] == 0.0                       # processes: every frame
        await pilot.press("2")
        await pilot.pause()
        assert feed.cadences[-1] > 0


@sync
async def test_interval_keys_reach_the_feed() -> None:
    feed = FakeFeed()
    app = make_app(feed)
    async with app.run_test(size=(80, 24)) as pilot:
        # [ slower (a longer interval), ] faster: replay's speed keys, the same meaning
        await pilot.press("left_square_bracket")
        await pilot.press("left_square_bracket")
        await pilot.press("right_square_bracket")
        await pilot.pause()
        assert feed.intervals == [2.0, 5.0, 2.0]
        assert "2s" in header(app)
        for _ in range(10):
            await pilot.press("right_square_bracket")
        assert app.interval_s == 0.1       # the smallest step, as the help says


@sync
async def test_sort_group_filter_keys() -> None:
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await _loaded(pilot, app)
        await pilot.press("3")
        table = app.query_one("#proc-table", DataTable)
        assert table.get_row_at(0)[0] == "4242"          # busiest first
        await pilot.press("s")                           # the next column: MEM
        assert app.sort_key == "mem"
        for _ in range(4):                               # < back: CPU%, JOB, USER, PID
            await pilot.press("less_than_sign")
        assert app.sort_key == "pid"
        await pilot.pause()
        pids = [int(table.get_row_at(i)[0]) for i in range(table.row_count)]
        assert pids == sorted(pids)
        await pilot.press("g")                           # -> by user
        await pilot.pause()
        assert app.group_mode == "user"
        assert str(table.columns[next(iter(table.columns))].label) == "USER"
        await pilot.press("g")                           # -> by job
        await pilot.pause()
        keys = [table.get_row_at(i)[0] for i in range(table.row_count)]
        assert "slurm:81723" in keys and "(no job)" in keys
        await pilot.press("g")                           # -> none
        await pilot.press("slash")
        await pilot.pause()
        assert isinstance(app.focused, Input)
        await pilot.press(*"user:bob", "enter")
        await pilot.pause()
        assert app.filter_text == "user:bob"
        users = {table.get_row_at(i)[1] for i in range(table.row_count)}
        assert users == {"bob"}
        await pilot.press("escape")
        await pilot.pause()
        assert app.filter_text == "" and table.row_count == 9


@sync
async def test_help_and_sources_screens() -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        app.push_frame(demo_frame(TOPO, 0, pmu=False))
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        await pilot.press("f1")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("q")                           # q closes help, does not quit
        assert app.is_running and not isinstance(app.screen, HelpScreen)
        await pilot.press("i")
        await pilot.pause()
        assert isinstance(app.screen, SourcesScreen)
        text = " ".join(text_of(w) for w in app.screen.query(Static))
        assert "no hardware PMU (virtual machine)" in text
        await pilot.press("escape")
        assert not isinstance(app.screen, SourcesScreen)


@sync
async def test_tree_keys_fold_and_select() -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await _loaded(pilot, app)
        tree = app.query_one(TopologyTable)
        n = len(tree.rows)
        await pilot.press("enter")                       # fold the Machine row
        assert len(tree.rows) == 1
        await pilot.press("right")
        assert len(tree.rows) == n
        await pilot.press("down", "down", "down", "down")
        core = tree.rows[tree.cursor]
        assert core.label.startswith("Core") and not core.expanded
        await pilot.press("right")                       # show its two PUs
        assert len(tree.rows) == n + 2
        await pilot.press("left")
        assert len(tree.rows) == n
        await pilot.press("left")                        # leaf folded: go to the parent
        assert tree.rows[tree.cursor].indent < core.indent
        await pilot.pause()
        assert app.selected_obj == tree.rows[tree.cursor].obj_id
        spark = text_of(app.query_one("#spark", Static))
        assert "over the last 3 samples" in spark


@sync
async def test_selecting_a_process_marks_its_pus() -> None:
    feed = FakeFeed()
    app = make_app(feed)
    async with app.run_test(size=(80, 24)) as pilot:
        await _loaded(pilot, app)
        await pilot.press("3", "down", "up")
        await pilot.pause()
        assert app.selected_pid == 4242 and feed.watched[-1] == 4242
        detail = text_of(app.query_one("#proc-detail", Static))
        assert " on Package 0" in detail and "N0" in detail   # 80 columns: short labels
        await pilot.press("1")
        tree = app.query_one(TopologyTable)
        assert tree.marked_pus == frozenset(range(16))
        assert 0 in tree.marked_nodes


@sync
async def test_too_small_shows_a_message_and_survives_resize() -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await _loaded(pilot, app)
        await pilot.resize_terminal(40, 10)
        await pilot.pause()
        msg = app.query_one("#too-small", Static)
        assert msg.display and "too small" in text_of(msg)
        assert not app.query_one("#main").display
        await pilot.resize_terminal(120, 40)
        await pilot.pause()
        assert not msg.display and app.query_one("#main").display


@sync
async def test_frames_from_a_thread_newest_wins() -> None:
    feed = FakeFeed()
    app = make_app(feed)
    async with app.run_test(size=(80, 24)) as pilot:
        assert feed.callback is not None
        frames = [demo_frame(TOPO, s) for s in range(40)]

        def burst() -> None:
            for f in frames:
                feed.callback(f)   # type: ignore[misc]

        t = threading.Thread(target=burst)
        t.start()
        t.join()
        await pilot.pause()
        await pilot.pause()
        assert app.frame is frames[-1]
        assert len(app.history) == 40                    # history complete even if frames drop


def test_frame_message_replaces_only_frames() -> None:
    a, b = FrameReady(demo_frame(TOPO, 0)), FrameReady(demo_frame(TOPO, 1))
    assert a.can_replace(b)
    assert not a.can_replace(TopologyTable.Selected(visible_rows(TOPO)[0]))


def _sources() -> dict[str, SourceStatus]:
    hw = {"cycles": "no hardware PMU (virtual machine)", "instructions": "no hardware PMU"}
    return {"procstat": SourceStatus("procstat", True),
            "perf": SourceStatus("perf", True, detail={"missing": hw}),
            "freq": SourceStatus("freq", False, "no cpufreq"),
            "rapl": SourceStatus("rapl", False, "no RAPL"),
            "numa": SourceStatus("numa", True), "tasks": SourceStatus("tasks", True)}


@sync
async def test_status_line_fits_80_columns_and_names_the_pmu() -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        fr = demo_frame(TOPO, 0)
        fr.sources = _sources()
        app.push_frame(fr)
        await pilot.pause()
        line2 = header(app).splitlines()[1]
        assert "●perf" in line2 and "○PMU" in line2      # perf live, hardware counters not
        assert line2.rstrip().endswith("i:why")         # nothing cut at 80 columns


@sync
async def test_another_machines_topology_says_so() -> None:
    app = TopApp(TOPO, host=lambda: HOST, origin=("topology", "Skylake.xml"))
    async with app.run_test(size=(80, 24)) as pilot:
        await _loaded(pilot, app)
        assert "topology of Skylake.xml — no live data: not this machine" in header(app)
        assert "live" not in header(app).split("no live")[0]


@sync
async def test_no_color_draws_the_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    """NO_COLOR's monochrome filter reads .color of every segment: none may be unstyled."""
    monkeypatch.setenv("NO_COLOR", "1")
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await _loaded(pilot, app)
        await pilot.press("down")
        await pilot.pause()
        assert app.return_code is None and app.crash is None
        assert "Machine" in app.export_screenshot()


@sync
async def test_no_color_draws_every_view(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same under NO_COLOR for the heatmap and the process table (which draws its own
    lines and applies the app's line filters itself)."""
    monkeypatch.setenv("NO_COLOR", "1")
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await _loaded(pilot, app)
        for key in ("2", "3", "down", "1"):
            await pilot.press(key)
            await pilot.pause()
            assert app.return_code is None and app.crash is None, key
        await pilot.press("3")
        await pilot.pause()
        assert "PID" in app.export_screenshot()


@sync
async def test_a_crash_inside_the_app_is_one_line_and_not_zero(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))   # the traceback's file, not /tmp's
    app = make_app()
    with pytest.raises(ZeroDivisionError):
        async with app.run_test(size=(80, 24)) as pilot:
            app.call_later(lambda: 1 / 0)
            await pilot.pause()
    assert app.return_code == 1
    assert app.crash is not None and app.crash.startswith("ZeroDivisionError: division by zero")
    assert "\n" not in app.crash
    (kept,) = tmp_path.glob("snumap-top-crash-*.txt")
    assert kept.name in app.crash and "ZeroDivisionError" in kept.read_text()
