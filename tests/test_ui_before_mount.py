"""Both apps may be given a frame, a view or a cursor before they run (screenshots, --at):
that is stored and shown once they are mounted, never drawn into widgets that do not exist yet.

(The guard used to be ``if not self.is_mounted``: on an App that is a method, always true, so
every such call raised Textual's ScreenStackError.)
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from textual.widgets import ContentSwitcher, DataTable

from snumap_tui.analysis.synth import synthetic_events, write_recording
from snumap_tui.analysis.synth import synthetic_topology as synth_topology
from snumap_tui.store import open as open_recording
from snumap_tui.ui.app import TopApp
from snumap_tui.ui.demo import demo_frame, synthetic_topology
from snumap_tui.ui.hostinfo import HostInfo
from snumap_tui.ui.replay import ReplayApp
from snumap_tui.ui.replay_data import load_replay
from snumap_tui.ui.topology_view import TopologyTable

TOPO = synthetic_topology(1, 2, 1, 2, 2)
HOST = HostInfo("testhost", "6.1.0-test", "Test CPU", 60.0, (0.0, 0.0, 0.0))


def test_top_keeps_a_frame_and_a_view_given_before_it_runs() -> None:
    app = TopApp(TOPO, host=lambda: HOST)
    frame = demo_frame(TOPO, 0)
    app.push_frame(frame)
    app.view = "processes"
    assert app.frames_drawn == 0 and app.frame is frame

    async def go() -> None:
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.pause()
            assert app.query_one("#views", ContentSwitcher).current == "processes"
            assert app.focused is app.query_one("#proc-table", DataTable)
            assert app.frames_drawn >= 1 and app.frame is frame
    asyncio.run(go())


def test_top_starts_on_the_tree_with_its_focus() -> None:
    app = TopApp(TOPO, host=lambda: HOST)

    async def go() -> None:
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.pause()
            assert app.query_one("#views", ContentSwitcher).current == "topology"
            assert isinstance(app.focused, TopologyTable)
    asyncio.run(go())


@pytest.fixture(scope="module")
def replay_app_data(tmp_path_factory: pytest.TempPathFactory):
    topo = synth_topology(1, 1, 2, 1, host="h")
    cpus = list(topo.pu_os_indexes)
    ev = synthetic_events(400, cpus, n_threads=4, duration_ns=10**9, t0_ns=10**9, seed=3)
    path = write_recording(tmp_path_factory.mktemp("early") / "r.rec", topo, ev)
    with open_recording(Path(path)) as rec:
        return load_replay(rec)


def test_replay_keeps_a_cursor_and_a_view_set_before_it_runs(replay_app_data) -> None:
    data = replay_app_data
    app = ReplayApp(data)
    app.set_cursor(data.t1 + 10**9)             # clamped to the recording, nothing drawn
    assert app.cursor_t == data.t1 - 1
    app.view = "topology"

    async def go() -> None:
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.pause()
            assert app.query_one("#views", ContentSwitcher).current == "topology"
            assert isinstance(app.focused, TopologyTable)
            assert app.cursor_t == data.t1 - 1
    asyncio.run(go())
