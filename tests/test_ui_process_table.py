"""The line-based process table: columns, the title, empty results, groups, and that a frame
repaints only the rows whose cells changed."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from snumap_tui.sources.tasks import parse_stat
from snumap_tui.ui.app import TopApp
from snumap_tui.ui.demo import demo_frame, synthetic_topology
from snumap_tui.ui.hostinfo import HostInfo
from snumap_tui.ui.process_table import ProcessTable
from snumap_tui.ui.table_lines import task_columns, widths

TOPO = synthetic_topology(2, 2, 2, 4, 2)


def test_command_takes_the_remaining_width() -> None:
    for w in (80, 120, 200):
        cols = task_columns(w)
        ws = widths(cols, w)
        assert cols[-1].label == "COMMAND"
        assert sum(ws) + len(ws) == w                 # the row fills the terminal exactly
    assert widths(task_columns(200), 200)[-1] > 80    # no 40-column cut on a wide terminal
    assert "JOB" in [c.label for c in task_columns(120)]
    assert "JOB" not in [c.label for c in task_columns(80)]


def test_stat_rss_is_field_24() -> None:
    # proc(5): field 24 is rss in pages; the comm holds a ') ' to check counting from the end.
    line = ("77 (a) b) S 1 77 77 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 2 0 1234 "
            "104857600 2560 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0")
    st = parse_stat(line)
    assert st["comm"] == "a) b" and st["rss_pages"] == 2560 and st["last_cpu"] == 1


def _run(coro_fn) -> None:  # type: ignore[no-untyped-def]
    asyncio.run(coro_fn())


def test_filter_title_empty_message_and_groups() -> None:
    async def body() -> None:
        app = TopApp(TOPO, host=lambda: HostInfo("h", "k", "cpu"))
        async with app.run_test(size=(120, 30)) as pilot:
            for s in range(2):
                app.push_frame(demo_frame(TOPO, s))
            await pilot.press("3")
            await pilot.pause()
            table = app.query_one("#proc-table", ProcessTable)
            assert table.title.plain.startswith(" 9 processes · sorted by CPU% ▼")
            head = table.header_text(widths(table.cols, 120)).plain
            assert "CPU%▼" in head and "MEM" in head
            app.filter_text = "user:nobody"
            app.push_frame(demo_frame(TOPO, 2))
            await pilot.pause()
            assert table.row_count == 0
            assert "filter 'user:nobody'" in table.title.plain
            assert table.empty_note == "no process matches 'user:nobody'"
            detail = app.query_one("#proc-detail").render()
            assert "solver" not in str(detail) and "no process matches" in str(detail)
            app.filter_text = ""
            await pilot.press("g")                       # by user: alice, bob, root, _chrony
            await pilot.pause()
            assert table.get_row_at(0)[0] == "alice"
            n = table.row_count
            await pilot.press("enter")                   # unfold alice: her 3 processes
            await pilot.pause()
            assert table.row_count == n + 3
            assert table.lines[1].pid == 4242
            await pilot.press("down")
            await pilot.pause()
            assert app.selected_pid == 4242

    _run(body)


def test_a_frame_repaints_only_changed_rows() -> None:
    async def body() -> None:
        app = TopApp(TOPO, host=lambda: HostInfo("h", "k", "cpu"))
        async with app.run_test(size=(120, 30)) as pilot:
            f = demo_frame(TOPO, 0)
            app.push_frame(f)
            await pilot.press("3")
            await pilot.pause()
            table = app.query_one("#proc-table", ProcessTable)
            painted: list[int] = []
            orig = table.refresh

            def spy(*regions, **kw):  # type: ignore[no-untyped-def]
                painted.extend(y for r in regions for y in range(r.y, r.bottom))
                if not regions:
                    painted.append(-1)                   # the whole table
                return orig(*regions, **kw)

            table.refresh = spy  # type: ignore[method-assign]
            app.push_frame(demo_frame(TOPO, 0))          # identical numbers
            await pilot.pause()
            assert painted == []
            g = demo_frame(TOPO, 0)
            g.tasks[0] = g.tasks[0].__class__(**{**g.tasks[0].__dict__, "cpu_pct": 1.0e4})
            app.push_frame(g)
            await pilot.pause()
            assert painted == [2]                        # the first row, under the 2 head lines

    _run(body)


def test_rows_the_table_shows_as_equal_keep_pid_order() -> None:
    from snumap_tui.model.frame import TaskRow
    from snumap_tui.ui.processes import sort_tasks

    def row(pid: int, cpu: float | None, user: str = "u") -> TaskRow:
        return TaskRow(pid, pid, "p", user, "S", cpu, 0, frozenset({0}))

    # 0.97 and 1.03 both show "1.0": they sort as equal, by PID, whatever the noise says.
    ts = [row(9, 1.03), row(3, 0.97), row(5, 50.0), row(7, None), row(4, 0.0)]
    assert [t.pid for t in sort_tasks(ts, "cpu")] == [5, 3, 9, 4, 7]
    assert [t.pid for t in sort_tasks(ts[::-1], "cpu")] == [5, 3, 9, 4, 7]
    ts2 = [row(9, 1.0, "b"), row(3, 1.0, "b"), row(2, 8.0, "b"), row(1, 0.0, "a")]
    assert [t.pid for t in sort_tasks(ts2, "user")] == [1, 2, 3, 9]


@contextlib.asynccontextmanager
async def _process_list(width: int) -> AsyncIterator[ProcessTable]:
    """A TopApp on its process list (view 3), without frames: the table to feed by hand."""
    app = TopApp(TOPO, host=lambda: HostInfo("h", "k", "cpu"))
    async with app.run_test(size=(width, 30)) as pilot:
        await pilot.press("3")
        await pilot.pause()
        yield app.query_one("#proc-table", ProcessTable)


def _lazy_rows(rss: dict[int, int], aff: dict[int, list[int]]) -> Any:
    """A TaskRows of the processes in RSS (one thread each, 2 % CPU), as a frame has them."""
    import numpy as np

    from snumap_tui.model.taskrows import TaskRows

    pids = np.array(sorted(rss), dtype=np.int64)
    n = len(pids)
    th = {"pid": list(pids), "tid": list(pids), "comm": [f"c{p}" for p in pids],
          "state": ["S"] * n, "last_cpu": [1] * n, "uid": [0] * n}
    procs = {int(p): {"user": "root", "rss_bytes": rss[int(p)], "affinity": aff[int(p)],
                      "cmdline": f"prog{p} --x"} for p in pids}
    return TaskRows({"threads": th, "processes": procs}, pids, np.full(n, 2.0), np.arange(n),
                    np.arange(n), np.ones(n, dtype=np.int64), np.zeros(n, dtype=bool))


def test_unchanged_processes_build_no_row() -> None:
    """A list of a frame's lazy rows builds a row (TaskRow) only for the processes whose
    shown values changed since a frame before; the others' cells come from their raw values."""
    async def body() -> None:
        async with _process_list(120) as table:
            title = table.title
            rss = {p: 2**20 * p for p in range(10, 16)}
            aff = {p: [0, 1] for p in rss}
            first = _lazy_rows(rss, aff)
            table.set_tasks(TOPO, first, None, "cpu", title, "none")
            shown = {ln.pid: ln.cells for ln in table.lines}
            assert len(first._made) == 6
            rss[12] = 2**30                                   # one process grew
            aff[14] = [0]                                     # one was pinned
            second = _lazy_rows(rss, aff)
            table.set_tasks(TOPO, second, None, "cpu", title, "none")
            now = {ln.pid: ln.cells for ln in table.lines}
            built = {second[i].pid for i in second._made}
            assert built == {12, 14}
            assert {p for p in now if now[p] != shown[p]} == {12, 14}
            assert "1.0G" in now[12] and "1.0G" not in shown[12]
            assert all(now[p] == shown[p] for p in (10, 11, 13, 15))

    _run(body)


def test_each_shown_value_is_in_the_row_key() -> None:
    """Whatever a row shows changes its raw key: changing any one of them (command, user,
    job, comm, PU, CPU time, CPU and system %, RSS, threads, affinity) gives the cells
    task_cells gives for the row, also on a top() subset; NaN CPU shows as not measured.
    A value a crafted recording made unhashable (a list as user) draws, as before."""
    import numpy as np

    from snumap_tui.model.taskrows import TaskRows

    def rows(**change: Any) -> TaskRows:
        n = 3
        pids = np.array([10, 11, 12], dtype=np.int64)
        th = {"pid": list(pids), "tid": list(pids), "comm": ["a", "b", change.get("comm", "c")],
              "state": ["S"] * n, "last_cpu": [0, 0, change.get("pu", 1)], "uid": [0] * n}
        p12 = {"user": change.get("user", "root"), "rss_bytes": change.get("rss", 2**20),
               "affinity": change.get("aff", [0, 1]), "cmdline": change.get("cmd", "prog"),
               "job": change.get("job")}
        procs = {10: {"user": "root"}, 11: {"user": "root"}, 12: p12}
        cpu = np.array([1.0, 2.0, change.get("cpu", 3.0)])
        return TaskRows({"threads": th, "processes": procs}, pids, cpu, np.arange(n),
                        np.arange(n), np.array([1, 1, change.get("thr", 1)]),
                        np.zeros(n, dtype=bool),
                        time_s=np.array([1.0, 1.0, change.get("time", 5.0)]),
                        sys_pct=np.array([0.0, 0.0, change.get("sys", 1.0)]))

    async def body() -> None:
        async with _process_list(160) as table:
            changes: list[dict[str, Any]] = [
                {}, {"cmd": "other --x"}, {"user": "alice"}, {"job": "4242"},
                {"cmd": None, "comm": "zz"}, {"pu": 0}, {"time": 99.0}, {"cpu": 55.5},
                {"rss": 2**31}, {"thr": 8}, {"aff": [1]}, {"cpu": float("nan")},
                {"user": ["alice"]}]
            for kind in ("cpu", "system"):
                table.cpu_col = table.cpu_col.__class__(**{**table.cpu_col.__dict__,
                                                          "kind": kind})
                for change in changes:
                    for tasks in (rows(**change), rows(**change).top(3)):
                        table.set_tasks(TOPO, tasks, None, "cpu", table.title, "none")
                        i = next(k for k, p in enumerate(tasks.pids()) if p == 12)
                        got = table._cells_at(TOPO, tasks, i)
                        assert got == table.task_cells(TOPO, tasks[i]), (kind, change)
            nan = rows(cpu=float("nan"))
            i = next(k for k, p in enumerate(nan.pids()) if p == 12)
            assert nan[i].cpu_pct is None and table._cells_at(TOPO, nan, i)[3] == "n/a"

    _run(body)
