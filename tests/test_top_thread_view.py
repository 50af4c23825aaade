"""`top`'s process view (p) and `top --batch -p PID`: each thread of the selected process over
the last interval (task-clock, on-CPU share, faults, migrations, every counted event, IPC /
GHz / MPKI by the report's own formula or "n/a (why)"), and its memory per NUMA node with the
high-water mark since the view opened.

The pure parts run on readings made here; the live ones on a real child process (software
perf events count in a VM): a spinning thread's task-clock rises, a page-faulting thread shows
its faults, and 64 MiB the child touched show in its memory per node."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_sources_thread_counters import _can_count_threads

from snumap_tui.analysis.attribution import derived
from snumap_tui.analysis.live_threads import (
    MemoryWatch,
    detail_lines,
    process_detail,
    thread_figures,
    thread_lines,
)
from snumap_tui.model.frame import TaskRow
from snumap_tui.model.threadcounts import ThreadDeltas, thread_deltas

WORKLOAD = Path(__file__).with_name("thread_workload.py")   # spin, fault, wake; 64 MiB

live = pytest.mark.skipif(sys.platform != "linux" or not _can_count_threads(),
                          reason="perf_event_open on threads not allowed here")


def _reading(pid: int, events: list[str], per: dict[int, list[float]],
             ticks: dict[int, int]) -> dict[str, Any]:
    tids = sorted(per)
    return {"threads": {"pid": [pid] * len(tids), "tid": tids,
                        "comm": [f"t{t}" for t in tids], "last_cpu": [t % 2 for t in tids],
                        "utime": [ticks[t] for t in tids], "stime": [0] * len(tids)},
            "processes": {pid: {"counters": {
                "events": events, "value": np.array(per[tids[0]], dtype=float),
                "multiplexed": np.zeros(len(events), bool), "threads": len(tids),
                "tids": np.array(tids), "per_thread": np.array([per[t] for t in tids],
                                                               dtype=float)}}}}


def test_thread_deltas_pair_threads_and_take_new_ones_whole() -> None:
    ev = ["task-clock", "page-faults"]
    prev = _reading(10, ev, {10: [1e9, 100], 11: [5e8, 7], 12: [9e8, 50]}, {10: 1, 11: 1, 12: 1})
    # 11 went on; 12 is gone and its tid now a new thread with smaller counts (recycled:
    # not known); 13 is new (its counters opened inside the interval: all its counts are).
    cur = _reading(10, ev, {10: [1e9, 100], 11: [9e8, 4007], 12: [1e6, 1], 13: [2e8, 30]},
                   {10: 1, 11: 41, 12: 1, 13: 20})
    d = thread_deltas(prev, cur, 0.5, np.array([0.0, 40.0, 0.0, 20.0]), 100.0)[10]
    assert list(d.tids) == [10, 11, 12, 13] and d.events == tuple(ev)
    assert d.delta[0].tolist() == [0, 0]
    assert d.delta[1].tolist() == [4e8, 4000]
    assert np.isnan(d.delta[2]).all()
    assert d.delta[3].tolist() == [2e8, 30]
    assert d.comm == ("t10", "t11", "t12", "t13") and d.last_cpu == (0, 1, 0, 1)
    assert thread_deltas(None, cur, 0.5, np.zeros(4), 100.0) == {}      # no interval yet


def _deltas(events: list[str], rows: list[list[float]], dt: float = 0.5) -> ThreadDeltas:
    n = len(rows)
    return ThreadDeltas(dt, tuple(events), np.arange(100, 100 + n), tuple(f"w{i}" for i in
                        range(n)), (0,) * n, np.array(rows, dtype=float),
                        np.full(n, np.nan), 100.0)


def test_figures_are_the_reports_formula_on_a_pmu() -> None:
    ev = ["task-clock", "cycles", "instructions", "LLC-load-misses", "page-faults",
          "cpu-migrations", "dTLB-load-misses"]
    a = [3e8, 6e8, 9e8, 1.8e6, 40, 2, 500]           # 300 ms on-CPU, 2 GHz, IPC 1.5
    b = [1e8, 3e8, 1.5e8, 3e5, 4000, 0, 50]
    fig = thread_figures(_deltas(ev, [b, a]))
    top, second = fig["threads"]
    assert top["tid"] == 101 and second["tid"] == 100       # busiest first
    want, _ = derived(ev, np.array(a), int(3e8), 2)
    for k in ("ipc", "ghz", "mpki", "faults", "migrations"):
        assert top[k] == pytest.approx(want[k]), k
    assert top["ipc"] == pytest.approx(1.5) and top["ghz"] == pytest.approx(2.0)
    assert top["mpki"] == pytest.approx(2.0)
    assert top["share"] == pytest.approx(0.75) and top["cpu_pct"] == pytest.approx(60.0)
    assert second["rates"]["page-faults"] == pytest.approx(8000)
    # The process: ratios of the sums, never a mean of the threads' ratios.
    p = fig["process"]
    assert p["ipc"] == pytest.approx((9e8 + 1.5e8) / (6e8 + 3e8))
    lines = thread_lines(fig, 80)
    assert all(len(x) <= 80 for x in lines)
    assert "IPC" in lines[0] and " 1.50 " in lines[1] and "n/a:" not in "\n".join(lines)
    wide = thread_lines(fig, 200)
    assert "dTLB-l/s" in wide[0] and " 1000" in wide[1]     # every --events event, per second (counts below 100,000 whole)


def test_without_a_pmu_each_figure_says_why() -> None:
    fig = thread_figures(_deltas(["task-clock", "page-faults"], [[2e8, 10], [1e8, 0]]))
    row = fig["threads"][0]
    assert row["ipc"] is None and "instructions and cycles" in row["na"]["ipc"]
    assert row["migrations"] is None and "cpu-migrations" in row["na"]["migrations"]
    text = "\n".join(thread_lines(fig, 80))
    assert "IPC n/a: needs instructions and cycles" in text
    assert "migrations n/a: cpu-migrations not counted" in text
    # No task-clock for a thread: its /proc ticks, and the view says so.
    d = ThreadDeltas(1.0, ("page-faults",), np.array([5]), ("x",), (0,), np.array([[3.0]]),
                     np.array([25.0]), 100.0)
    f2 = thread_figures(d)
    assert f2["threads"][0]["on_cpu_s"] == pytest.approx(0.25)
    assert "on-CPU time from /proc utime+stime" in "\n".join(thread_lines(f2))


def test_memory_watch_keeps_the_high_water_mark_until_it_starts_again() -> None:
    w = MemoryWatch({0: "DRAM", 1: "HBM"})
    w.update(7, {0: 100 << 20, 1: 10 << 20})
    m = w.update(7, {0: 20 << 20, 1: 30 << 20})
    assert m is not None
    assert [(n["node"], n["kind"], n["bytes"] >> 20, n["peak"] >> 20) for n in m["nodes"]] == \
        [(0, "DRAM", 20, 100), (1, "HBM", 30, 30)]
    assert m["total"] >> 20 == 50 and m["peak_total"] >> 20 == 110
    m = w.update(8, {0: 1 << 20})               # another process: from its own start
    assert m is not None and m["peak_total"] == 1 << 20 and m["samples"] == 1
    row = TaskRow(8, 8, "a", "u", "S", 1.0, 0, frozenset({0}), memory_nodes={1: 5 << 20})
    text = "\n".join(detail_lines(process_detail(row, w), lambda b: f"{b >> 20}M"))
    assert "n/a (from the next sample" in text and "N1 HBM 5M (max 5M)" in text


def _start_child() -> tuple[subprocess.Popen[str], int, int]:
    child = subprocess.Popen([sys.executable, str(WORKLOAD)], stdout=subprocess.PIPE,
                             text=True)
    assert child.stdout is not None
    tids = dict(child.stdout.readline().split() for _ in range(3))
    return child, int(tids["spin"]), int(tids["fault"])


@live
def test_live_thread_figures_of_a_real_process() -> None:
    from snumap_tui.model.sampler import Sampler
    from snumap_tui.topology.build import load_topology

    child, spin, fault = _start_child()
    s = Sampler(load_topology(), Path("/"), 0.3)
    try:
        s.watch_pids([child.pid], counters=True)
        s.sweep()
        clocks, figs = [], []
        for _ in range(4):
            time.sleep(0.3)
            frame = s.frame()
            assert frame is not None
            t = frame.task(child.pid)
            assert t is not None and t.threads is not None, t
            assert s.last is not None
            c = s.last.readings["tasks"]["processes"][child.pid]["counters"]
            clocks.append(c["per_thread"][list(c["tids"]).index(spin),
                                          c["events"].index("task-clock")])
            figs.append(thread_figures(t.threads))
        by = {r["tid"]: r for r in figs[-1]["threads"]}
        assert set(by) >= {child.pid, spin, fault}
        assert clocks == sorted(clocks) and clocks[-1] > clocks[0] + 0.1e9   # it rises
        assert by[spin]["on_cpu_from"] == "task-clock"
        # The figures are the cumulative counts' increases: the spinner's on-CPU seconds of
        # frames 2-4 add up to what its task-clock rose by (both threads share the GIL and a
        # busy shared machine, so no share of a PU is promised).
        spun = sum(next(r["on_cpu_s"] for r in f["threads"] if r["tid"] == spin)
                   for f in figs[1:])
        assert spun == pytest.approx((clocks[-1] - clocks[0]) / 1e9, rel=1e-6)
        assert by[spin]["cpu_pct"] == pytest.approx(by[spin]["rates"]["task-clock"] / 1e7)
        assert sum(f["process"]["on_cpu_s"] for f in figs) > 0.1
        assert by[fault]["faults"] > 100 and by[fault]["faults"] > 10 * (by[spin]["faults"] + 1)
        assert by[spin]["migrations"] is not None
        assert sum(r["share"] or 0 for r in figs[-1]["threads"]) == pytest.approx(1.0)
        mem = frame.task(child.pid).memory_nodes                       # type: ignore[union-attr]
        assert mem and sum(mem.values()) >= 64 << 20, mem
    finally:
        child.kill()
        child.wait()
        s.close()


@live
def test_batch_json_with_one_pid_has_the_process_view() -> None:
    child, spin, fault = _start_child()
    try:
        out = subprocess.run(
            [sys.executable, "-m", "snumap_tui.cli", "top", "--batch", "--json", "-p",
             str(child.pid), "--count", "3", "--interval", "0.3"],
            check=False, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        last = json.loads(out.stdout.splitlines()[-1])
        (d,) = last["process_detail"]
        assert d["pid"] == child.pid
        rows = {r["tid"]: r for r in d["threads"]["threads"]}
        assert "task-clock" in d["threads"]["events"] and spin in rows and fault in rows
        for k in ("on_cpu_s", "share", "cpu_pct", "ipc", "ghz", "mpki", "faults",
                  "migrations", "rates"):
            assert k in rows[spin], k
        assert rows[spin]["on_cpu_s"] > 0 and rows[fault]["faults"] > 0
        assert rows[spin]["ipc"] is None or rows[spin]["ipc"] > 0
        if rows[spin]["ipc"] is None:
            assert rows[spin]["na"]["ipc"]
        mem = d["memory"]
        assert mem["total"] >= 64 << 20 and mem["peak_total"] >= mem["total"]
        assert all(n["kind"] for n in mem["nodes"])
        text = subprocess.run(
            [sys.executable, "-m", "snumap_tui.cli", "top", "--batch", "-p", str(child.pid),
             "--count", "2", "--interval", "0.3"], check=False, capture_output=True, text=True,
            timeout=120)
        assert f"process {child.pid} " in text.stdout and "task-clk" in text.stdout
        assert "memory per NUMA node: N0 " in text.stdout
        assert all(len(x) <= 80 for x in text.stdout.splitlines()[-12:])
    finally:
        child.kill()
        child.wait()


@live
def test_process_view_in_the_live_app_shows_the_childs_threads() -> None:
    from snumap_tui.commands.top import LiveFeed
    from snumap_tui.topology.build import load_topology
    from snumap_tui.ui.app import TopApp
    from snumap_tui.ui.hostinfo import HostInfo

    topo = load_topology()
    child, spin, fault = _start_child()
    feed = LiveFeed(topo, Path("/"), 0.3)
    app = TopApp(topo, feed=feed, host=lambda: HostInfo("h", "6.1", "cpu"), interval_s=0.3,
                 pids=frozenset({child.pid}))

    async def run() -> None:
        async with app.run_test(size=(100, 40)) as pilot:
            await pilot.press("3", "p")
            text = ""
            t0 = time.monotonic()
            while time.monotonic() - t0 < 20:
                await pilot.pause(0.3)
                text = str(app.query_one("#proc-threads").render())
                if str(spin) in text and str(fault) in text and "DRAM" in text:
                    break
            assert app.selected_pid == child.pid and app.thread_view
            assert app.query_one("#proc-threads").display
            assert f"process {child.pid}" in text, text
            assert str(spin) in text and str(fault) in text and "task-clk" in text, text
            assert f"{spin} spin " in text and f"{fault} fault " in text, text   # their names
            assert "memory per NUMA node: N0 DRAM" in text and "(max " in text, text
            await pilot.press("p")                  # closed again
            await pilot.pause(0.1)
            assert not app.query_one("#proc-threads").display

    try:
        asyncio.run(run())
    finally:
        child.kill()
        child.wait()


def test_process_view_of_another_machine_says_why_it_has_no_threads() -> None:
    """A gathered tree (--fsroot) or another machine's topology: no perf counters, said so;
    the memory per node comes from the rows as the tree gives them."""
    from snumap_tui.ui.app import TopApp
    from snumap_tui.ui.demo import demo_frame, synthetic_topology
    from snumap_tui.ui.hostinfo import HostInfo

    topo = synthetic_topology(1, 2, 1, 2, 1)
    app = TopApp(topo, host=lambda: HostInfo("h", "6.1", "cpu"), origin=("fsroot", "tree"))

    async def run() -> None:
        async with app.run_test(size=(100, 40)) as pilot:
            for s in range(3):
                app.push_frame(demo_frame(topo, s))
            await pilot.press("3", "p")
            await pilot.pause()
            text = str(app.query_one("#proc-threads").render())
            assert app.selected_pid is not None and f"process {app.selected_pid}" in text
            assert "n/a (perf counts this machine's running threads: not those of tree)" \
                in text, text

    asyncio.run(run())


def test_a_thread_that_never_ran_counted_nothing() -> None:
    """A thread's counter is enabled only while it runs: enabled = running = 0 is 0 counts
    (a sleeping thread's row), not "never measured" (which hid it from the table)."""
    from snumap_tui.sources.perf import _scaled

    class Slept:
        events = ("task-clock", "page-faults")

        def read(self) -> tuple[list[int], int, int]:
            return [0, 0], 0, 0

    class Multiplexed(Slept):
        def read(self) -> tuple[list[int], int, int]:
            return [0, 0], 1000, 0           # enabled but never on the PMU: unknown

    assert _scaled(Slept()) == {"task-clock": 0.0, "page-faults": 0.0}   # type: ignore[arg-type]
    assert _scaled(Multiplexed()) == {}                                   # type: ignore[arg-type]


def test_memory_that_cannot_be_read_says_why() -> None:
    row = TaskRow(9, 9, "a", "u", "S", 1.0, 0, frozenset({0}),
                  memory_error="Permission denied")
    d = process_detail(row, MemoryWatch())
    assert d["memory"] is None
    assert "memory per NUMA node: n/a (Permission denied)" in detail_lines(d, str)
