"""Regenerate every SVG screenshot of `snumap top` in screenshots/ (one command):

    .venv/bin/python scripts/screenshots.py            # all machines
    .venv/bin/python scripts/screenshots.py --only this-machine
    .venv/bin/python scripts/screenshots.py --only this-machine --view help
    .venv/bin/python scripts/screenshots.py --process-view   # top's p on a live child

Machines:
- ``this-machine``: live frames from the real sampler on / (a few sweeps 0.5 s apart);
- ``epyc7763`` and ``knl7210``: hwloc XML exports from ../shared/corpus/xml with a
  deterministic *demo load* (the XML has a topology but no counters to sample) — the header
  says "demo load";
- ``64amd64``: a gathered /sys + /proc tree from ../shared/corpus/fsroot, sampled for real by
  the sampler (static files: rates are n/a, NUMA memory is real);
- ``demo384``: a generated 2-socket, 384-PU machine (the heatmap's sizing case).
Corpus machines are skipped with a note when ../shared/corpus is not beside the checkout.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from snumap_tui.model.frame import Frame, TaskRow
from snumap_tui.topology.build import load_topology
from snumap_tui.topology.model import Topology
from snumap_tui.ui.app import TopApp
from snumap_tui.ui.demo import demo_frame, synthetic_topology
from snumap_tui.ui.hostinfo import HostInfo, HostReader

OUT = REPO / "screenshots"
CORPUS = REPO.parent / "shared" / "corpus"
VIEWS = {"topology": (), "heatmap": ("2",), "processes": ("3",), "sources": ("i",),
         "process-tree": ("t",), "metric-picker": ("f2",), "sort-picker": ("3", "f6"),
         "help": ("h",)}


async def shoot(topo: Topology, frames: list[Frame], host: Callable[[], HostInfo], name: str,
                views: list[str], sizes: list[tuple[int, int]],
                origin: tuple[str, str] | None = None) -> list[Path]:
    """One screenshot per view and size, each from a fresh app fed the same frames."""
    written = []
    for view in views:
        for w, h in sizes:
            app = TopApp(topo, host=host, origin=origin)
            async with app.run_test(size=(w, h)) as pilot:
                for f in frames:
                    app.push_frame(f)
                await pilot.pause()
                for k in VIEWS[view]:
                    await pilot.press(k)
                await pilot.pause()
                fn = f"top-{name}-{view}-{w}x{h}.svg"
                app.save_screenshot(fn, str(OUT))
                written.append(OUT / fn)
    return written


# The process view's subject: a real child with named threads that spin, fault pages and
# sleep-wake, and 64 MiB touched once (its memory per node); the tests' own.
WORKLOAD = REPO / "tests" / "thread_workload.py"


async def shoot_process_view(pid: int, size: tuple[int, int] = (120, 40)) -> Path:
    """top's process view (3, p) of the live process PID, from the real sampler (LiveFeed),
    once its threads' rows and memory are in."""
    from snumap_tui.commands.top import LiveFeed

    topo = load_topology()
    feed = LiveFeed(topo, Path("/"), 1.0)
    app = TopApp(topo, feed=feed, host=HostReader(Path("/"), topo), interval_s=1.0,
                 pids=frozenset({pid}))
    async with app.run_test(size=size) as pilot:
        await pilot.press("3", "p")
        t0 = time.monotonic()
        while time.monotonic() - t0 < 20:
            await pilot.pause(0.5)
            text = str(app.query_one("#proc-threads").render())
            if all(n in text for n in ("spin", "fault", "wake", "DRAM")):
                break
        await pilot.pause(2.5)        # a few intervals: the high-water mark has a past
        fn = "top_process_counters.svg"
        app.save_screenshot(fn, str(OUT))
    return OUT / fn


def process_view() -> Path:
    """The process view's screenshot of a WORKLOAD child, which is ended afterwards."""
    import subprocess

    child = subprocess.Popen([sys.executable, str(WORKLOAD)], stdout=subprocess.DEVNULL)
    try:
        return asyncio.run(shoot_process_view(child.pid))
    finally:
        child.kill()
        child.wait()


def live_frames(topo: Topology, root: Path, n: int = 4, gap: float = 0.5) -> list[Frame]:
    from snumap_tui.model.sampler import Sampler

    s = Sampler(topo, root, gap)
    try:
        s.sweep()
        frames = []
        for _ in range(n):
            time.sleep(gap)
            f = s.frame()
            if f is not None:
                f.tasks = [without_paths(t) for t in f.tasks]
                frames.append(f)
        return frames
    finally:
        s.close()


def without_paths(t: TaskRow) -> TaskRow:
    """The row with each path in its command line cut to the file's name: a screenshot goes
    into the repository, and this machine's directories have no business there."""
    if not t.cmdline:
        return t
    words = [w.rsplit("/", 1)[-1] if "/" in w else w for w in t.cmdline.split(" ")]
    return dataclasses.replace(t, cmdline=" ".join(words))


def demo_host(topo: Topology, label: str) -> Callable[[], HostInfo]:
    model = next((p.info("CPUModel") for p in topo.by_type("Package") if p.info("CPUModel")),
                 "unknown CPU")
    info = HostInfo(f"{label} (demo load)", topo.meta.get("OSRelease", "n/a"), model,
                    None, None)
    return lambda: info


def machines(only: str | None) -> list[tuple[str, Callable[[], tuple[Topology, list[Frame],
                                                                    Callable[[], HostInfo]]]]]:
    def this() -> tuple[Topology, list[Frame], Callable[[], HostInfo]]:
        topo = load_topology()
        return topo, live_frames(topo, Path("/")), HostReader(Path("/"), topo)

    def xml(file: str, label: str) -> Callable[[], tuple[Topology, list[Frame],
                                                         Callable[[], HostInfo]]]:
        def make() -> tuple[Topology, list[Frame], Callable[[], HostInfo]]:
            topo = load_topology(xml=str(CORPUS / "xml" / file))
            return topo, [demo_frame(topo, s) for s in range(30)], demo_host(topo, label)
        return make

    def fsroot() -> tuple[Topology, list[Frame], Callable[[], HostInfo]]:
        with tempfile.TemporaryDirectory(prefix="snumap-shots-") as d:
            tmp = Path(d)
            with tarfile.open(CORPUS / "fsroot" / "64amd64-4s2n4ca2co.tar.bz2") as tf:
                tf.extractall(tmp, filter="data")
            root = next(p.parent for p in tmp.rglob("sys") if p.is_dir())
            topo = load_topology(fsroot=str(root))
            reader = HostReader(root, topo)
            info = reader()
            return topo, live_frames(topo, root, n=2, gap=0.2), lambda: info

    def demo384() -> tuple[Topology, list[Frame], Callable[[], HostInfo]]:
        topo = synthetic_topology(2, 4, 3, 8, 2)
        return topo, [demo_frame(topo, s) for s in range(30)], demo_host(topo, "demo384")

    all_ = [("this-machine", this), ("demo384", demo384)]
    if CORPUS.is_dir():
        all_ += [("epyc7763", xml("AMD-19h-Zen3-2xEpyc-7763.xml", "2x EPYC 7763")),
                 ("knl7210", xml("Intel-KnightsLanding-XeonPhi-7210.xml", "Xeon Phi 7210")),
                 ("64amd64", fsroot)]
    else:
        print("note: ../shared/corpus not found: corpus machines skipped", file=sys.stderr)
    return [m for m in all_ if only is None or m[0] == only]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="one machine: this-machine, demo384, epyc7763, knl7210, 64amd64")
    ap.add_argument("--process-view", action="store_true",
                    help="only top's process view (p) of a live child: "
                    "screenshots/top_process_counters.svg")
    ap.add_argument("--view", action="append", choices=list(VIEWS),
                    help="only this view (again for more); default: all of them")
    args = ap.parse_args()
    OUT.mkdir(exist_ok=True)
    if args.process_view:
        print(process_view().relative_to(REPO))
        return 0
    for name, make in machines(args.only):
        topo, frames, host = make()
        views = list(VIEWS) if name == "this-machine" else ["topology", "heatmap", "processes"]
        views = [v for v in views if not args.view or v in args.view]
        sizes = [(120, 40), (80, 24)]
        # Generated load on a corpus machine's tree must not look live: the status line says
        # "demo load" (the 64amd64 tree is read through --fsroot and says so itself).
        origin = (None if name == "this-machine" else ("fsroot", name) if name == "64amd64"
                  else ("demo", name))
        for p in asyncio.run(shoot(topo, frames, host, name, views, sizes, origin)):
            print(p.relative_to(REPO))
    return 0


if __name__ == "__main__":
    sys.exit(main())
