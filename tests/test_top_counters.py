"""The selected process's counters in the processes view, and the lazy top-N process list.

The pilot test runs the real sampler on this machine (software perf events work in a VM): a
process that sleeps and wakes in a loop shows context switches per second in the details, and
its counters are closed when the selection leaves it."""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from test_sources_thread_counters import _can_count_threads

from snumap_tui.model.frame import TaskRow
from snumap_tui.model.taskrows import TaskRows
from snumap_tui.ui.panels import counters_text
from snumap_tui.ui.processes import sort_tasks

MARK = "snumap-ctxprobe"
# Sleeps 2 ms at a time: each sleep is a voluntary context switch (hundreds per second).
SLEEPER = f"# {MARK}\nimport time\nwhile True:\n    time.sleep(0.002)\n"


def _row(rates: dict[str, float] | None, ipc: float | None = None) -> TaskRow:
    return TaskRow(7, 7, "app", "bob", "S", 1.0, 0, frozenset({0}), counter_rates=rates,
                   ctx_switches_s=(rates or {}).get("context-switches"), ipc=ipc)


def test_counters_text_says_what_is_measured() -> None:
    sw = {"context-switches": 512.0, "cpu-migrations": 3.0, "page-faults": 1500.0}
    plain = counters_text(_row(sw)).plain
    assert "ctx switches 512/s" in plain and "migrations 3/s" in plain
    assert "page faults 1.5k/s" in plain
    assert "IPC n/a (no hardware PMU)" in plain
    hw = dict(sw, cycles=2e9, instructions=3e9)
    assert "IPC 1.50" in counters_text(_row(hw, ipc=1.5)).plain
    assert counters_text(_row(None), counting=True).plain.endswith("from the next sample")
    assert "n/a" in counters_text(_row(None), counting=False).plain
    # `top --events`: the user's own events follow the built-in ones
    mine = counters_text(_row(dict(sw, **{"dTLB-load-misses": 2.5e5, "cycles": 1e9,
                                          "task-clock": 2.5e8}))).plain
    assert mine.endswith("dTLB-load-misses 250.0k/s") and "cycles " not in mine
    assert "task-clock" not in mine        # built in now: the process view (p) shows it


def _rows(n: int, seed: int) -> TaskRows:
    rng = random.Random(seed)
    pids = np.array(rng.sample(range(2, 100000), n), dtype=np.int64)
    # Values on the rounding edges (x.x5) and ties, where an order by raw CPU % would differ.
    cpu = np.array([rng.choice([0.0, 0.05, 0.15, 0.25, 1.05, 12.3, 12.34, 12.26, float("nan"),
                                rng.uniform(0, 100)]) for _ in range(n)])
    zeros = np.zeros(n, dtype=np.int64)
    th = {"pid": list(pids), "tid": list(pids), "comm": [f"c{p}" for p in pids],
          "state": ["S"] * n, "last_cpu": [0] * n, "uid": ["u"] * n}
    return TaskRows({"threads": th}, pids, cpu, np.arange(n), np.arange(n), zeros + 1,
                    np.zeros(n, dtype=bool))


@pytest.mark.parametrize("by", ["cpu", "pid"])
def test_top_orders_like_the_list_without_building_rows(by: str) -> None:
    for seed in range(5):
        rows = _rows(300, seed)
        top = rows.top(200, by)
        assert rows._made == {} and top._made == {}          # nothing built yet
        assert [int(p) for p in top.pids()] == [t.pid for t in sort_tasks(rows, by)[:200]]
        assert top[3].pid == int(top.pids()[3]) and len(top._made) == 1
        assert top[-1].pid == int(top.pids()[-1])
        assert list(top) == sort_tasks(rows, by)[:200]


@pytest.mark.skipif(sys.platform != "linux" or not _can_count_threads(),
                    reason="perf_event_open on threads not allowed here")
def test_selected_process_counters_live() -> None:
    from snumap_tui.commands.top import LiveFeed
    from snumap_tui.topology.build import load_topology
    from snumap_tui.ui.app import TopApp
    from snumap_tui.ui.hostinfo import HostInfo

    topo = load_topology()
    child = subprocess.Popen([sys.executable, "-c", SLEEPER])
    feed = LiveFeed(topo, Path("/"), 0.25)
    tasks_src = next(s for s in feed.sampler.sources if hasattr(s, "counter_pids"))
    app = TopApp(topo, feed=feed, host=lambda: HostInfo("h", "6.1", "cpu"), interval_s=0.25)

    async def run() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("3", "slash", *MARK, "enter")
            detail = ""
            t0 = time.monotonic()
            while time.monotonic() - t0 < 15:
                await pilot.pause(0.25)
                sel = app.frame.task(child.pid) if app.frame else None
                if (app.selected_pid == child.pid and sel is not None
                        and (sel.ctx_switches_s or 0) > 0):
                    detail = str(app.query_one("#proc-detail").render())
                    break
            assert app.selected_pid == child.pid and app.counted_pid == child.pid
            assert tasks_src.counter_pids == {child.pid}
            assert "ctx switches" in detail and "ctx switches 0/s" not in detail, detail
            assert "IPC" in detail
            await pilot.press("1")                  # the details are not shown: counters off
            await pilot.pause(0.1)
            assert app.counted_pid is None and tasks_src.counter_pids == set()

    try:
        asyncio.run(run())
    finally:
        child.kill()
        child.wait()
