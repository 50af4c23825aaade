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


async def _cursor_on_eth0(node: tuple[Topology, list[Frame], Path, Any], pilot: Any
                         ) -> tuple[TopologyTable, int]:
    """The frames in, the I/O rows unfolded (o), the cursor on eth0: (tree, eth0's index)."""
    await _pusher(node)(pilot)
    await pilot.press("o")
    tree = pilot.app.query_one(TopologyTable)
    at = [r.label for r in tree.rows].index("Net eth0")
    tree.cursor = at
    await pilot.pause()
    return tree, at


async def _io_history(node: tuple[Topology, list[Frame], Path, Any]) -> None:
    from snumap_tui.ui.io_rows import io_row_value, io_row_view, rows_for

    topo, frames = node[0], node[1]
    app = make_app(node)
    async with app.run_test(size=(120, 40)) as pilot:
        tree, at = await _cursor_on_eth0(node, pilot)
        eth0 = tree.rows[at]
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
        tree.cursor = at - 1
        await pilot.pause()
        line = app.query_one("#spark").render_line(0).text
        assert line.lstrip().startswith("I/O · bytes in + out/s"), line
        # The package row: the chosen metric (CPU %) of the object, as before.
        tree.cursor = at - 2
        await pilot.pause()
        line = app.query_one("#spark").render_line(0).text
        assert "CPU %" in line and "bytes" not in line, line


def test_io_history_follows_the_cursor_across_folds(
        node: tuple[Topology, list[Frame], Path, Any]) -> None:
    """Folding the I/O rows away under the cursor (o) moves it to the row that folds them,
    and the history line follows that row, not the device it no longer shows; unfolding
    keeps the cursor on its row."""
    asyncio.run(_io_refold(node))


async def _io_refold(node: tuple[Topology, list[Frame], Path, Any]) -> None:
    app = make_app(node)
    async with app.run_test(size=(120, 40)) as pilot:
        tree, at = await _cursor_on_eth0(node, pilot)
        summary_key = tree.rows[at - 1].key
        await pilot.press("o")                                 # fold every I/O row
        await pilot.pause()
        row = tree.rows[tree.cursor]
        assert row.key == summary_key and row.label == "I/O"
        assert app.selected_io == row.io and app.selected_label == "I/O"
        line = app.query_one("#spark").render_line(0).text
        assert line.lstrip().startswith("I/O · bytes in + out/s"), line
        await pilot.press("o")                                 # unfold: same row
        await pilot.pause()
        assert tree.rows[tree.cursor].key == summary_key
        assert app.selected_io == tree.rows[tree.cursor].io


def test_io_row_value_of_gpus_and_mixed_rows() -> None:
    """A row of GPUs only follows their mean use (GPU %); a row with GPUs and a NIC follows
    the NIC's bytes; no numbers: None."""
    from types import SimpleNamespace

    from snumap_tui.model.iorates import IoRow
    from snumap_tui.ui.io_rows import io_row_value, io_row_view

    topo: Any = SimpleNamespace(io=[SimpleNamespace(osdev_type="GPU", io_parent=None),
                                    SimpleNamespace(osdev_type="GPU", io_parent=None),
                                    SimpleNamespace(osdev_type="Network", io_parent=None)])
    frame: Any = SimpleNamespace(io=[
        IoRow("gpu", "nvml0", 0, 0, io=0, util_pct=30.0),
        IoRow("gpu", "nvml1", 0, 0, io=1, util_pct=50.0),
        IoRow("net", "eth0", 0, 0, io=2, rx_bps=10.0, tx_bps=5.0)])
    assert io_row_value(frame, topo, (0, 1)) == pytest.approx(40.0)
    assert io_row_view(topo, (0, 1)).key == "gpu_util_pct"
    assert io_row_value(frame, topo, (0, 1, 2)) == pytest.approx(15.0)
    assert io_row_view(topo, (0, 1, 2)).label == "bytes in + out/s"
    assert io_row_value(SimpleNamespace(io=[]), topo, (0, 2)) is None
    assert io_row_value(None, topo, (2,)) is None
