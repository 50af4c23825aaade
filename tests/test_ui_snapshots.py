"""Snapshots of every view at 80x24 and 120x40, from deterministic frames (no clock, fixed
host): a 2-socket, 4-NUMA-node, 64-PU demo machine with a Slurm job on the first socket.
Update after a deliberate change with ``pytest tests/test_ui_snapshots.py --snapshot-update``
and look at the SVGs in tests/__snapshots__/ before committing them."""

from __future__ import annotations

import pytest

from snumap_tui.ui.app import TopApp
from snumap_tui.ui.demo import demo_frame, synthetic_topology
from snumap_tui.ui.hostinfo import HostInfo

HOST = HostInfo("node042", "6.1.0-27-amd64", "Demo CPU 9000 96-Core", 3 * 86400 + 3720,
                (31.2, 30.8, 29.9))
SIZES = [(80, 24), (120, 40)]


def make_app(pmu: bool = True) -> TopApp:
    topo = synthetic_topology(2, 2, 2, 4, 2)
    app = TopApp(topo, host=lambda: HOST)
    app.demo_pmu = pmu  # type: ignore[attr-defined]
    return app


async def _frames(pilot) -> None:  # type: ignore[no-untyped-def]
    app = pilot.app
    for s in range(30):
        app.push_frame(demo_frame(app.topology, s, pmu=app.demo_pmu))
    await pilot.pause()


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "120x40"])
@pytest.mark.parametrize("keys", [(), ("2",), ("3",)], ids=["topology", "heatmap", "processes"])
def test_view(snap_compare, size, keys) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(make_app(), press=keys, terminal_size=size, run_before=_frames)


def test_no_pmu_and_sources_screen(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(make_app(pmu=False), press=("i",), terminal_size=(80, 24),
                        run_before=_frames)


def test_help(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(make_app(), press=("question_mark",), terminal_size=(80, 24),
                        run_before=_frames)


def test_process_selected_highlights_heatmap(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(make_app(), press=("3", "down", "2"), terminal_size=(120, 40),
                        run_before=_frames)


@pytest.mark.parametrize("keys", [("t",), ("3", "f6"), ("f2",)],
                         ids=["process-tree", "sort-picker", "metric-picker"])
def test_htop_views(snap_compare, keys) -> None:  # type: ignore[no-untyped-def]
    """Issue 15's new views: the process tree, the sort picker, the metric picker (no PMU:
    the metrics without data are listed and marked)."""
    assert snap_compare(make_app(pmu=False), press=keys, terminal_size=(100, 30),
                        run_before=_frames)


def test_node_metric_heatmap(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """Memory used is a NUMA node's: drawn at the nodes, not n/a on every PU."""
    async def pick(pilot) -> None:  # type: ignore[no-untyped-def]
        await _frames(pilot)
        app = pilot.app
        keys = [m.key for m in app.metric_views()]
        await pilot.press("2", *("m",) * keys.index("mem_used_pct"))
    assert snap_compare(make_app(pmu=False), terminal_size=(100, 30), run_before=pick)
