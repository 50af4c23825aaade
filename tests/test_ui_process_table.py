"""The line-based process table: columns, the title, empty results, groups, and that a frame
repaints only the rows whose cells changed."""

from __future__ import annotations

import asyncio
from typing import Any

from snumap_tui.sources.tasks import parse_stat
from snumap_tui.ui.app import TopApp
from snumap_tui.ui.demo import demo_frame, synthetic_topology
from snumap_tui.ui.hostinfo import HostInfo
from snumap_tui.ui.process_table import ProcessTable, task_columns, widths

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
        app = TopApp(TOPO, host=lambda: HostInfo("h", "k", "cpu"))
        async with app.run_test(size=(120, 30)) as pilot:
            await pilot.press("3")
            await pilot.pause()
            table = app.query_one("#proc-table", ProcessTable)
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
