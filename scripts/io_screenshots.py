"""SVG screenshots of `snumap top` with I/O: a fake two-package machine whose NIC, InfiniBand
HCA, NVMe disk and GPU counters advance between sweeps (the test suite's fake trees; this
machine has no InfiniBand, GPU or second package), sampled by the real sampler through
--fsroot. hwloc itself places the devices, from the fake sysfs.

    .venv/bin/python scripts/io_screenshots.py
    .venv/bin/python scripts/io_screenshots.py --history     # only top-io-history-120x40.svg

Writes screenshots/top-io-{topology,heatmap,processes}-{120x40,80x24}.svg: the topology view
with the I/O rows unfolded (key o), the heatmap with its I/O strip, and the processes view
with a process whose threads run on package 0 while it drives the HCA on package 1;
top-io-history-120x40.svg: the cursor on the NIC's row, whose traffic the history line under
the tree follows; and, when
../shared/corpus is beside the checkout, top-io-32em64t-topology-120x40.svg: the gathered tree
of a real 2-socket node (Ethernet, InfiniBand, NVMe, SATA, NVDIMMs) through --fsroot (its
counters are a snapshot: rates are 0).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from snumap_tui.model.frame import Frame
from snumap_tui.model.sampler import Sampler
from snumap_tui.topology.build import load_topology
from snumap_tui.topology.model import Topology
from snumap_tui.ui.app import TopApp
from snumap_tui.ui.hostinfo import HostInfo
from tests.fakeio import StillFeed, sampled_io_node

OUT = REPO / "screenshots"
PID = 4200   # tests.fakeio.PID_ON_PACKAGE_0


HOST = HostInfo("fake 2-socket node (test tree)", "6.1.0", "Fake Xeon", None, None)


def fake_node_app(topo: Topology, root: Path, tasks: dict[str, Any] | None) -> TopApp:
    return TopApp(topo, feed=StillFeed(topo, root, tasks), host=lambda: HOST,
                  origin=("fsroot", "fake-2pkg-io"))


async def shoot(topo: Topology, fs: list[Frame], root: Path, tasks: dict[str, Any] | None
                ) -> list[Path]:
    written = []
    for view, keys in (("topology", ("o",)), ("heatmap", ("2",)), ("processes", ("3",))):
        for w, h in ((120, 40), (80, 24)):
            app = fake_node_app(topo, root, tasks)
            async with app.run_test(size=(w, h)) as pilot:
                app.selected_pid = PID
                for f in fs:
                    app.push_frame(f)
                await pilot.pause()
                for k in keys:
                    await pilot.press(k)
                await pilot.pause()
                name = f"top-io-{view}-{w}x{h}.svg"
                app.save_screenshot(name, str(OUT))
                written.append(OUT / name)
    return written


async def shoot_history(topo: Topology, fs: list[Frame], root: Path,
                        tasks: dict[str, Any] | None) -> list[Path]:
    """The topology view, I/O rows unfolded, the cursor on the NIC's row: the history line
    under the tree follows that device's bytes in and out."""
    app = fake_node_app(topo, root, tasks)
    name = "top-io-history-120x40.svg"
    async with app.run_test(size=(120, 40)) as pilot:
        for f in fs:
            app.push_frame(f)
        await pilot.pause()
        await pilot.press("o")
        tree = app.query_one("TopologyTable")
        tree.cursor = [r.label for r in tree.rows].index("Net eth0")
        await pilot.pause()
        app.save_screenshot(name, str(OUT))
    return [OUT / name]


async def shoot_corpus(base: Path) -> list[Path]:
    import tarfile

    from snumap_tui.ui.hostinfo import HostReader

    tar = REPO.parent / "shared" / "corpus" / "fsroot" / "32em64t-2n8c+1mic.tar.bz2"
    if not tar.exists():
        print("note: ../shared/corpus not found: the 32em64t shot is skipped", file=sys.stderr)
        return []
    with tarfile.open(tar, "r:bz2") as tf:
        tf.extractall(base, filter="data")
    root = base / "32em64t-2n8c+1mic"
    topo = load_topology(fsroot=root)
    s = Sampler(topo, root, 1.0)
    try:
        s.sweep()
        f = s.frame()
    finally:
        s.close()
    info = HostReader(root, topo)()
    app = TopApp(topo, host=lambda: info, origin=("fsroot", root.name))
    name = "top-io-32em64t-topology-120x40.svg"
    async with app.run_test(size=(120, 40)) as pilot:
        if f is not None:
            app.push_frame(f)
        await pilot.pause()
        await pilot.press("o")
        await pilot.pause()
        app.save_screenshot(name, str(OUT))
    return [OUT / name]


def main() -> int:
    only_history = sys.argv[1:] == ["--history"]
    if sys.argv[1:] and not only_history:
        print("usage: io_screenshots.py [--history]", file=sys.stderr)
        return 2
    OUT.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="snumap-io-shots-") as d:
        topo, fs, root, tasks = sampled_io_node(Path(d) / "fake", steps=8)
        written = asyncio.run(shoot_history(topo, fs, root, tasks))
        if not only_history:
            written += asyncio.run(shoot(topo, fs, root, tasks))
            written += asyncio.run(shoot_corpus(Path(d)))
        for p in written:
            print(p.relative_to(REPO))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
