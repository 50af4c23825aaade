"""CPU time per frame of `snumap top`'s processes view, headless, with ~100 and ~1000 processes.

Why: the processes view was measured at 6.9 % of a core in tmux against ~1 % for the topology
view; this isolates the view's cost (filter, sort, table, details, Textual's compositing) from
the sampler's. Two loads: "all change", every process's CPU % moving each frame (the worst
case: rows re-sort and every visible row repaints), and "quiet", only 3 processes moving (what a
login or compute node mostly looks like: most processes at 0.0 %, in PID order). Each figure is
the median of 3 runs (the machine is shared; single runs vary by +-20 %).
Run: ``.venv/bin/python bench/process_view.py [--no-write]``.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._report import table, write_section
from snumap_tui.model.frame import Frame, TaskRow
from snumap_tui.ui.demo import demo_frame, synthetic_topology

FRAMES = 30


def fake_tasks(topo_pus: list[int], n: int, step: int, moving: int | None = None
               ) -> list[TaskRow]:
    """``n`` processes of a few users, CPU % moving every step (only the first ``moving``
    of them when given; the others idle at 0.0 % on a fixed PU)."""
    users = ("alice", "bob", "root", "carol", "slurm")
    rows = []
    for i in range(n):
        moves = moving is None or i < moving
        rows.append(TaskRow(
            pid=1000 + i, tid=1000 + i, comm=f"proc{i % 37}", user=users[i % len(users)],
            state="R" if i % 3 == 0 else "S",
            cpu_pct=((i * 7 + step * 13) % 1000) / 10 if moves else 0.0,
            last_cpu=topo_pus[(i + step * moves) % len(topo_pus)],
            affinity=frozenset(topo_pus) if i % 4 else frozenset(topo_pus[:8]),
            job=f"slurm:{800 + i % 6}" if i % 2 else None,
            cmdline=f"/usr/bin/proc{i % 37} --input data{i}.h5 --threads {1 + i % 16}",
            nthreads=1 + i % 16, rss_bytes=(i * 7919 % 5000) * 1024 * 1024))
    return rows


async def measure(n: int, moving: int | None = None, size: tuple[int, int] = (120, 40)
                  ) -> float:
    """Mean CPU ms per frame of the processes view with ``n`` processes (``moving``: how many
    of them change, None for all)."""
    from snumap_tui.ui.app import TopApp

    topo = synthetic_topology(2, 2, 2, 4, 2)
    app = TopApp(topo)
    pus = topo.pu_os_indexes

    def frame(step: int) -> Frame:
        f = demo_frame(topo, step)
        f.tasks = fake_tasks(pus, n, step, moving)
        return f

    async with app.run_test(size=size) as pilot:
        app.push_frame(frame(0))
        await pilot.press("3")
        await pilot.pause(0.1)
        frames = [frame(s) for s in range(1, FRAMES + 1)]
        cpu = 0.0
        for f in frames:
            t0 = time.process_time()
            app.push_frame(f)
            await pilot.pause(0.05)        # lets the screen repaint; sleeping costs no CPU
            cpu += time.process_time() - t0
    return cpu / FRAMES * 1000


def main() -> int:
    rows = []
    for n, moving, label in ((100, None, "all change"), (1000, None, "all change"),
                             (100, 3, "quiet: 3 change")):
        ms = statistics.median(asyncio.run(measure(n, moving)) for _ in range(3))
        print(f"{n:5d} processes, {label:16s}: {ms:6.2f} ms CPU per frame (120x40)")
        rows.append([n, label, f"{ms:.2f}", f"{ms / 10:.2f} %"])
    if "--no-write" not in sys.argv:
        write_section("process_view", "snumap top: processes view, CPU per frame",
                      "Headless (App.run_test, 120x40), 64-PU demo machine, median of 3 runs "
                      f"of the mean over {FRAMES} frames; 'all change': every process's CPU % "
                      "moves each frame, 'quiet': 3 do. The app shows at most 200 rows. "
                      "% of a core at a 1 s interval = ms / 10.\n\n"
                      + table(["processes", "load", "ms CPU per frame", "% of a core at 1 s"],
                              rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
