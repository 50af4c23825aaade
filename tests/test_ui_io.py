"""I/O in `snumap top`: rows under each NUMA node in the topology view (folded, ``o`` unfolds,
enter on a summary row folds it again), the heatmap's I/O strip, the selected process's
devices and finding; snapshots of the topology and heatmap views with I/O."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from snumap_tui.model.frame import Frame
from snumap_tui.topology.model import Topology
from snumap_tui.ui.app import TopApp
from snumap_tui.ui.hostinfo import HostInfo
from snumap_tui.ui.topology_view import TopologyTable
from tests.fakeio import PID_ON_PACKAGE_0, StillFeed, sampled_io_node

HOST = HostInfo("node007", "6.1.0-27-amd64", "Fake Xeon", 86400, (1.0, 1.0, 1.0))


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> tuple[Topology, list[Frame], Path, Any]:
    return sampled_io_node(tmp_path_factory.mktemp("ionode"))


def make_app(node: tuple[Topology, list[Frame], Path, Any]) -> TopApp:
    topo, _, root, tasks = node
    return TopApp(topo, feed=StillFeed(topo, root, tasks), host=lambda: HOST,
                  origin=("fsroot", "ionode"))


def _pusher(node: tuple[Topology, list[Frame], Path, Any]) -> Any:
    async def run(pilot: Any) -> None:
        for f in node[1]:
            pilot.app.push_frame(f)
        await pilot.pause()
    return run


def test_io_rows_fold_and_unfold(node: tuple[Topology, list[Frame], Path, Any]) -> None:
    asyncio.run(_fold_and_unfold(node))


async def _fold_and_unfold(node: tuple[Topology, list[Frame], Path, Any]) -> None:
    app = make_app(node)
    async with app.run_test(size=(100, 30)) as pilot:
        await _pusher(node)(pilot)
        tree = app.query_one(TopologyTable)
        labels = [r.label for r in tree.rows]
        assert labels.count("I/O") == 2 and "Net eth0" not in labels   # folded at first
        await pilot.press("o")
        labels = [r.label for r in tree.rows]
        assert "Net eth0" in labels and "OpenFabrics mlx5_0" in labels
        eth0 = labels.index("Net eth0")
        assert tree.rows[eth0 - 1].label == "I/O"
        assert "Package 0" in labels[eth0 - 2]           # under package 0's NUMA node
        # enter on the summary row of package 1 folds that place only
        tree.cursor = labels.index("OpenFabrics mlx5_0") - 1
        await pilot.press("enter")
        labels = [r.label for r in tree.rows]
        assert "OpenFabrics mlx5_0" not in labels and "Net eth0" in labels
        await pilot.press("o")                         # one folded: o unfolds all
        assert "OpenFabrics mlx5_0" in [r.label for r in tree.rows]
        await pilot.press("o")                         # none folded: o folds all
        assert "Net eth0" not in [r.label for r in tree.rows]


def test_processes_details_show_the_far_hca(
        node: tuple[Topology, list[Frame], Path, Any]) -> None:
    asyncio.run(_far_hca(node))


async def _far_hca(node: tuple[Topology, list[Frame], Path, Any]) -> None:
    app = make_app(node)
    async with app.run_test(size=(130, 30)) as pilot:
        app.selected_pid = PID_ON_PACKAGE_0
        await _pusher(node)(pilot)
        await pilot.press("3")
        await pilot.pause()
        detail = str(app.query_one("#proc-detail").render())
        assert "devices: mlx5_0 pkg 1 NUMA 1 remote" in detail
        assert "⚠ mlx5_0 is on package 1 (NUMA 1), threads run on package 0" in detail


def test_snapshot_topology_with_io_rows(snap_compare: Any,
                                        node: tuple[Topology, list[Frame], Path, Any]) -> None:
    assert snap_compare(make_app(node), press=("o",), terminal_size=(80, 24),
                        run_before=_pusher(node))


def test_snapshot_heatmap_io_strip(snap_compare: Any,
                                   node: tuple[Topology, list[Frame], Path, Any]) -> None:
    assert snap_compare(make_app(node), press=("2",), terminal_size=(80, 24),
                        run_before=_pusher(node))
