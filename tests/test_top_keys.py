"""Pilot tests of `snumap top`'s htop keys (keymap.py): F10, sorting by any column (< > s M P
T I F6), the process tree (t F5), signals (k F9, with confirmation, only where permitted),
the metric picker (F2) and m skipping metrics with no data; -p/-u/--sort; and the processes
view after a resize from 60x15 to 120x40 (cells under their own headers)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import sys

import pytest
from test_ui_app import sync

from snumap_tui.commands.top import SORT_COLUMNS
from snumap_tui.model.frame import Frame, TaskRow
from snumap_tui.ui.app import TopApp
from snumap_tui.ui.choices import ChoiceScreen, ConfirmScreen
from snumap_tui.ui.demo import demo_frame, synthetic_topology
from snumap_tui.ui.hostinfo import HostInfo
from snumap_tui.ui.process_table import ProcessTable
from snumap_tui.ui.processes import SORT_KEYS, parse_pids, sort_tasks, tree_order
from snumap_tui.ui.signals import why_not
from snumap_tui.ui.table_lines import task_columns, widths

TOPO = synthetic_topology(2, 2, 1, 4, 2)
HOST = HostInfo("testhost", "6.1.0-test", "Test CPU", 7200.0, (1.0, 0.5, 0.25))


def family_frame(step: int = 0, extra: list[TaskRow] | None = None) -> Frame:
    """The demo frame with a process tree: init (1) > sshd (5034) > bash (5085) > solver
    (4242), and times and memory to sort by."""
    f = demo_frame(TOPO, step)
    parents = {4242: 5085, 5085: 5034, 5034: 1}
    rows = [dataclasses.replace(t, ppid=parents.get(t.pid, 1), cpu_time_s=float(t.pid % 97),
                                rss_bytes=(t.pid % 13) * 2**20) for t in f.tasks]
    rows.append(TaskRow(1, 1, "init", "root", "S", 0.0, 0, frozenset({0}), ppid=0,
                        cpu_time_s=3.5, rss_bytes=2**20))
    f.tasks = rows + (extra or [])
    return f


def make_app(**kw: object) -> TopApp:
    return TopApp(TOPO, host=lambda: HOST, **kw)  # type: ignore[arg-type]


async def loaded(pilot, app: TopApp, extra: list[TaskRow] | None = None) -> None:
    for s in range(3):
        app.push_frame(family_frame(s, extra))
    await pilot.pause()


def shown_pids(app: TopApp) -> list[int]:
    table = app.query_one("#proc-table", ProcessTable)
    return [ln.pid for ln in table.lines if ln.pid is not None]


def test_sort_columns_of_the_cli_are_the_lists() -> None:
    assert SORT_COLUMNS == SORT_KEYS


@pytest.mark.parametrize("key", ["q", "f10"])
@sync
async def test_f10_and_q_quit(key: str) -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await loaded(pilot, app)
        await pilot.press(key)
        await pilot.pause()
        assert not app.is_running


@sync
async def test_sort_by_any_column_with_htop_keys() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot, app)
        await pilot.press("3")
        table = app.query_one("#proc-table", ProcessTable)
        await pilot.press("M")                              # memory, biggest first
        await pilot.pause()
        assert app.sort_key == "mem"
        rss = {t.pid: t.rss_bytes for t in app.frame.tasks}
        got = [rss[p] for p in shown_pids(app)]
        assert got == sorted(got, reverse=True)
        assert "MEM▼" in "".join(table.header_text(widths(table.cols, 120)).plain)
        await pilot.press("I")                              # inverted: smallest first
        await pilot.pause()
        got = [rss[p] for p in shown_pids(app)]
        assert got == sorted(got)
        assert "▲" in table.title.plain
        await pilot.press("T")                              # CPU time
        await pilot.pause()
        secs = {t.pid: t.cpu_time_s for t in app.frame.tasks}
        got = [secs[p] for p in shown_pids(app)]
        assert app.sort_key == "time" and got == sorted(got, reverse=True)
        assert "TIME+" in [c.label for c in table.cols]
        await pilot.press("P")
        assert app.sort_key == "cpu"
        await pilot.press("greater_than_sign")              # the column right of CPU%
        assert app.sort_key == "mem"
        await pilot.press("less_than_sign", "less_than_sign")
        assert app.sort_key == "job"
        await pilot.press("f6")                             # the picker
        await pilot.pause()
        assert isinstance(app.screen, ChoiceScreen)
        await pilot.press("home", "enter")                  # the first column: PID
        await pilot.pause()
        assert not isinstance(app.screen, ChoiceScreen)
        assert app.sort_key == "pid"
        assert shown_pids(app) == sorted(shown_pids(app))


@pytest.mark.parametrize("key", ["t", "f5"])
@sync
async def test_process_tree(key: str) -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot, app)
        await pilot.press(key)
        await pilot.pause()
        assert app.view == "processes" and app.tree_view
        table = app.query_one("#proc-table", ProcessTable)
        order = shown_pids(app)
        # parents before children: init, sshd, bash, solver in that order
        assert order.index(1) < order.index(5034) < order.index(5085) < order.index(4242)
        cmds = {ln.pid: ln.cells[-1] for ln in table.lines}
        assert cmds[4242].endswith("└─ solver --mesh big.h5")        # the last child of bash
        assert "tree" in table.title.plain
        await pilot.press(key)
        await pilot.pause()
        assert not app.tree_view
        assert not any("└─" in ln.cells[-1] for ln in table.lines)


def test_tree_order_handles_orphans_and_cycles() -> None:
    def row(pid: int, ppid: int) -> TaskRow:
        return TaskRow(pid, pid, f"p{pid}", "u", "S", 0.0, 0, frozenset(), ppid=ppid)
    rows = [row(10, 1), row(11, 10), row(12, 10), row(20, 21), row(21, 20)]
    got = tree_order(rows)
    assert [t.pid for t, _ in got][:3] == [10, 11, 12]
    prefix = {t.pid: p for t, p in got}
    assert prefix[11] == "├─ " and prefix[12] == "└─ "
    assert sorted(t.pid for t, _ in got) == [10, 11, 12, 20, 21]      # the cycle too


def test_sort_keeps_missing_values_last() -> None:
    a = TaskRow(1, 1, "a", "u", "S", 1.0, None, frozenset(), rss_bytes=None)
    b = TaskRow(2, 2, "b", "u", "S", 1.0, 0, frozenset(), rss_bytes=5)
    c = TaskRow(3, 3, "c", "u", "S", 1.0, 0, frozenset(), rss_bytes=9)
    assert [t.pid for t in sort_tasks([a, b, c], "mem")] == [3, 2, 1]
    assert [t.pid for t in sort_tasks([a, b, c], "mem", invert=True)] == [2, 3, 1]


def test_signal_asks_then_sends_to_a_process_we_may_signal() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])

    async def pilot_steps() -> None:
        me = TaskRow(child.pid, child.pid, "sleeper", "me", "S", 50.0, 0, frozenset({0}),
                     ppid=os.getpid())
        app = make_app()
        async with app.run_test(size=(120, 40)) as pilot:
            await loaded(pilot, app, [me])
            await pilot.press("3")
            app.selected_pid = child.pid
            await pilot.press("k")
            await pilot.pause()
            assert isinstance(app.screen, ChoiceScreen)     # which signal (TERM first)
            await pilot.press("enter")
            await pilot.pause()
            assert isinstance(app.screen, ConfirmScreen)
            assert "SIGTERM" in app.screen.question and str(child.pid) in app.screen.question
            await pilot.press("n")                          # no: nothing sent
            await pilot.pause()
            assert child.poll() is None
            await pilot.press("f9", "enter", "y")
            await pilot.pause()

    try:
        asyncio.run(pilot_steps())
        child.wait(timeout=10)
        assert child.returncode == -15
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()


@sync
async def test_signal_refused_for_another_machine_and_unknown_process() -> None:
    app = make_app(origin=("fsroot", "gathered"))
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot, app)
        await pilot.press("3", "k")
        await pilot.pause()
        assert not isinstance(app.screen, ChoiceScreen)     # no list: not this machine
    assert why_not(2**22 + 12345) is not None and "ended" in str(why_not(2**22 + 12345))


def test_why_not_says_when_the_process_is_another_users() -> None:
    """As an unprivileged user (nobody), PID 1 may not be signalled: the kernel's answer."""
    if os.geteuid() != 0:
        assert why_not(1) is not None
        return
    # Imported first: nobody cannot read this interpreter's files.
    code = ("from snumap_tui.ui.signals import why_not; import os; os.setgid(65534); "
            "os.setuid(65534); print(why_not(1))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert "another user" in out


@sync
async def test_minus_p_and_minus_u_narrow_the_list() -> None:
    app = make_app(pids=parse_pids("4242,5000"), sort_key="pid")
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot, app)
        await pilot.press("3")
        await pilot.pause()
        assert shown_pids(app) == [4242, 5000]
        assert "only PID 4242,5000" in app.query_one("#proc-table", ProcessTable).title.plain
    app = make_app(user="root")
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot, app)
        await pilot.press("3")
        await pilot.pause()
        users = {t.pid: t.user for t in app.frame.tasks}
        assert shown_pids(app) and {users[p] for p in shown_pids(app)} == {"root"}


@sync
async def test_m_skips_metrics_without_data_and_f2_marks_them() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        for s in range(3):
            app.push_frame(demo_frame(TOPO, s, pmu=False))
        await pilot.pause()
        keys = [m.key for m in app.metric_views()]
        assert "ipc" not in keys and "power_pkg_w" not in keys    # no PMU, no RAPL here
        assert "mem_used_pct" in keys                             # a node's: kept
        await pilot.press("2")
        seen = set()
        for _ in range(len(keys)):
            seen.add(app.metric.key)
            await pilot.press("m")
        assert seen == set(keys)
        await pilot.press("f2")
        await pilot.pause()
        assert isinstance(app.screen, ChoiceScreen)
        opts = {oid: ok for oid, _, ok in app.screen.options}
        assert opts["ipc"] is False and opts["util_pct"] is True
        labels = {oid: str(lab) for oid, lab, _ in app.screen.options}
        assert "n/a here" in labels["ipc"]
        ids = [oid for oid, _, _ in app.screen.options]
        await pilot.press("home")
        for _ in range(ids.index("mem_used_pct")):
            await pilot.press("down")
        await pilot.press("enter")
        await pilot.pause()
        assert app.metric.key == "mem_used_pct" and app.view == "heatmap"


@sync
async def test_resize_60x15_to_120x40_redraws_every_row_for_the_new_columns() -> None:
    """Issue 15, item 1: rows that did not change kept the 60-column layout after the
    terminal grew (CPU % values under JOB) until the view was switched."""
    app = make_app()
    async with app.run_test(size=(60, 15)) as pilot:
        await loaded(pilot, app)
        await pilot.press("3")
        await pilot.pause()
        table = app.query_one("#proc-table", ProcessTable)
        assert "JOB" not in [c.label for c in table.cols]
        await pilot.resize_terminal(120, 40)
        await pilot.pause()
        await pilot.pause()
        assert [c.label for c in table.cols] == [c.label for c in task_columns(120)]
        assert "JOB" in [c.label for c in table.cols]
        # no new frame since: every row's cells fit the new columns
        by_pid = {t.pid: t for t in app.frame.tasks}
        labels = [c.label for c in table.cols]
        lines = [s.text for s in app.screen._compositor.render_strips()]
        head = next(ln for ln in lines if "CPU%" in ln and "PID" in ln)
        for ln in table.lines:
            t = by_pid[ln.pid]
            cells = dict(zip(labels, ln.cells, strict=True))
            assert cells["PID"] == str(t.pid)
            assert cells["JOB"] == (t.job or "")
            assert cells["CPU%"] == f"{t.cpu_pct:.1f}"
            # and on screen the CPU % stands under its header, not under JOB
            row = next(x for x in lines if x.lstrip().startswith(f"{t.pid} "))
            end = head.index("CPU%") + len("CPU%▼")
            assert row[:end].rstrip().endswith(f"{t.cpu_pct:.1f}"), (row, head)


def test_kernel_threads_hidden_until_K() -> None:
    """The live source leaves kernel threads out (htop's default) and reads a known one only
    every refresh_s; K puts them back. PID 2 is kthreadd on every Linux."""
    from pathlib import Path

    from snumap_tui.sources.tasks import TasksSource

    src = TasksSource(Path("/"))
    every = {int(p) for p in src.read()["processes"]}
    assert 2 in every
    src.kthreads = False
    src.read()                              # reads each once, to know it is a kernel thread
    hidden = {int(p) for p in src.read()["processes"]}
    assert 2 not in hidden and 2 in src._kthread_pids and 1 in hidden
    assert len(hidden) < len(every)
    src.kthreads = True
    assert 2 in {int(p) for p in src.read()["processes"]}


@sync
async def test_K_key_tells_the_feed() -> None:
    class Feed:
        interval_s = 1.0

        def __init__(self) -> None:
            self.shown: list[bool] = []

        def start(self, cb: object) -> None: ...

        def stop(self) -> None: ...

        def set_interval(self, s: float) -> None: ...

        def watch_pid(self, pid: int | None) -> None: ...

        def show_kthreads(self, show: bool) -> None:
            self.shown.append(show)

    feed = Feed()
    app = TopApp(TOPO, feed=feed, host=lambda: HOST)  # type: ignore[arg-type]
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot, app)
        assert feed.shown == [False]
        await pilot.press("3")
        await pilot.pause()
        assert "no kernel threads (K)" in app.query_one("#proc-table", ProcessTable).title.plain
        await pilot.press("K")
        assert feed.shown == [False, True] and app.view == "processes"


def test_heatmap_draws_a_node_metric_at_its_nodes() -> None:
    """Memory used (a NUMA node's number) is drawn at each node, not n/a on every PU."""
    from snumap_tui.ui.heatmap import heatmap_lines
    from snumap_tui.ui.metricspec import view_for

    f = demo_frame(TOPO, 2, pmu=False)
    view = view_for("mem_used_pct")
    lines = [ln.plain for ln in heatmap_lines(TOPO, f.values["mem_used_pct"], view, 100, 30)]
    assert "measured per NUMA node" in lines[0]
    for n in TOPO.numa_nodes:
        row = next(ln for ln in lines if n.label() in ln)
        assert view.fmt(float(f.values["mem_used_pct"][n.id]), 0).strip() in row
    assert not any("PU" in ln for ln in lines[1:])
    # a per-PU metric still gets the PU grid
    util = [ln.plain for ln in heatmap_lines(TOPO, f.values["util_pct"], view_for("util"),
                                             100, 30)]
    assert "measured per" not in util[0]


@sync
async def test_Z_pauses_and_f4_filters_as_in_htop() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot, app)
        await pilot.press("Z")
        assert app.paused
        await pilot.press("Z")
        assert not app.paused
        await pilot.press("f4")
        await pilot.pause()
        assert app.view == "processes"
        await pilot.press(*"solver", "enter")
        await pilot.pause()
        assert app.filter_text == "solver" and shown_pids(app) == [4242]
