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


def test_io_row_history_follows_its_devices(
        node: tuple[Topology, list[Frame], Path, Any]) -> None:
    """The history line under the tree follows an I/O row's own traffic (bytes a second in
    and out), not the CPU % of the NUMA node it sits under; back on an object's row, the
    metric again."""
    asyncio.run(_io_history(node))


async def _io_history(node: tuple[Topology, list[Frame], Path, Any]) -> None:
    from snumap_tui.ui.io_rows import io_row_value, io_row_view, rows_for

    topo, frames = node[0], node[1]
    app = make_app(node)
    async with app.run_test(size=(120, 40)) as pilot:
        await _pusher(node)(pilot)
        await pilot.press("o")
        tree = app.query_one(TopologyTable)
        labels = [r.label for r in tree.rows]
        eth0 = tree.rows[labels.index("Net eth0")]
        tree.cursor = labels.index("Net eth0")
        await pilot.pause()
        line = app.query_one("#spark").render_line(0).text
        assert "Net eth0 · bytes in + out/s over the last" in line, line
        dev = rows_for(frames[-1], topo, eth0.io)
        assert len(dev) == 1 and dev[0].rx_bps is not None and dev[0].tx_bps is not None
        want = dev[0].rx_bps + dev[0].tx_bps
        assert io_row_value(frames[-1], topo, eth0.io) == pytest.approx(want)
        assert want > 0
        shown = line.split("now ", 1)[1].split()[0]
        assert shown == io_row_view(topo, eth0.io).fmt(want, 0).strip()
        # The summary row above it: the place's devices together, under its own label.
        tree.cursor = labels.index("Net eth0") - 1
        await pilot.pause()
        line = app.query_one("#spark").render_line(0).text
        assert line.lstrip().startswith("I/O · bytes in + out/s"), line
        # The package row: the chosen metric (CPU %) of the object, as before.
        tree.cursor = labels.index("Net eth0") - 2
        await pilot.pause()
        line = app.query_one("#spark").render_line(0).text
        assert "CPU %" in line and "bytes" not in line, line
