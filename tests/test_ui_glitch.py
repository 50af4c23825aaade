"""The processes view draws no stray scrollbar cells over its rows or the help screen.

The bug: the process table let Textual show its scrollbars. Its virtual width was the widget's
width *before* the vertical scrollbar took two columns, so a horizontal scrollbar appeared too
(stealing the last row); in a plain or 16-colour terminal the thumbs' ends (``▃▃``, ``▏``)
looked like sparkline cells drawn at the wrong place, and showed through the help overlay."""

from __future__ import annotations

import asyncio

from snumap_tui.ui.app import TopApp
from snumap_tui.ui.demo import demo_frame, synthetic_topology
from snumap_tui.ui.hostinfo import HostInfo
from snumap_tui.ui.process_table import ProcessTable

TOPO = synthetic_topology(2, 2, 2, 4, 2)
# Textual's scrollbar thumbs end in these partial blocks (vertical, then horizontal).
THUMB_ENDS = set("▁▂▃▄▅▆▇▉▊▋▌▍▎▏")


def _many_tasks_frame(step: int):  # type: ignore[no-untyped-def]
    from bench.process_view import fake_tasks

    f = demo_frame(TOPO, step)
    f.tasks = fake_tasks(TOPO.pu_os_indexes, 100, step)
    return f


def _screen_lines(app: TopApp) -> list[str]:
    return [s.text for s in app.screen._compositor.render_strips()]


def test_processes_view_has_no_scrollbar_cells() -> None:
    async def body(size: tuple[int, int]) -> None:
        app = TopApp(TOPO, host=lambda: HostInfo("h", "k", "cpu"))
        async with app.run_test(size=size) as pilot:
            app.push_frame(_many_tasks_frame(0))
            await pilot.press("3")
            app.push_frame(_many_tasks_frame(1))
            await pilot.pause()
            table = app.query_one("#proc-table", ProcessTable)
            assert table.row_count == 100 > table.size.height
            # the table's content spans the whole row: nothing is left for a scrollbar
            assert table.size.width == app.size.width
            assert table.virtual_size.width <= table.size.width
            for line in _screen_lines(app)[2:-3]:      # below the header, above the details
                assert len(line) == size[0]
                assert not set(line[-3:]) & THUMB_ENDS, repr(line)
            await pilot.press("end")                   # no scrollbar, yet the rows scroll
            await pilot.pause()
            assert table.row_cursor == 99, (table.row_cursor, app.focused)
            assert table.scroll_offset.y > 0, table.max_scroll_y
            last = str(table.lines[-1].pid)
            assert any(ln.lstrip().startswith(last + " ") for ln in _screen_lines(app))
            await pilot.press("question_mark")
            await pilot.pause()
            for line in _screen_lines(app)[2:-3]:
                assert not set(line[-3:]) & THUMB_ENDS, repr(line)

    for size in ((120, 40), (80, 24)):
        asyncio.run(body(size))
