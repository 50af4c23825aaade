"""The lines top keeps between frames (the header, the column heads, the containers' blank
lines, the footer's, the tree's) follow a change of styles: after a theme change the screen
is what an app started in that theme draws, cell for cell."""

from __future__ import annotations

import asyncio

from snumap_tui.ui.app import TopApp
from snumap_tui.ui.backdrop import QuietFooter
from snumap_tui.ui.demo import demo_frame, synthetic_topology
from snumap_tui.ui.hostinfo import HostInfo

TOPO = synthetic_topology(1, 1, 1, 2, 2)
HOST = HostInfo("testhost", "6.1.0-test", "Test CPU", 7200.0, (1.0, 0.5, 0.25))
SIZE = (100, 30)


def _cells(app: TopApp) -> list[list[tuple[str, str | None, str | None]]]:
    rows = []
    for strip in app.screen._compositor.render_strips():
        row = []
        for seg in strip:
            st = seg.style
            fg = str(st.color) if st is not None and st.color is not None else None
            bg = str(st.bgcolor) if st is not None and st.bgcolor is not None else None
            row += [(ch, fg if ch != " " else None, bg) for ch in seg.text]
        rows.append(row)
    return rows


async def _screen(theme_at_start: str, theme_later: str | None) -> list[list[tuple[
        str, str | None, str | None]]]:
    app = TopApp(TOPO, host=lambda: HOST)
    app.theme = theme_at_start
    async with app.run_test(size=SIZE) as pilot:
        for s in range(3):
            app.push_frame(demo_frame(TOPO, s))
        await pilot.pause()
        if theme_later is not None:
            app.theme = theme_later
            await pilot.pause()
            app.push_frame(demo_frame(TOPO, 3))
        else:
            app.push_frame(demo_frame(TOPO, 3))
        await pilot.pause()
        assert isinstance(app.query_one("Footer"), QuietFooter)
        return _cells(app)


def test_a_theme_change_repaints_the_kept_lines() -> None:
    changed = asyncio.run(_screen("textual-dark", "textual-light"))
    fresh = asyncio.run(_screen("textual-light", None))
    dark = asyncio.run(_screen("textual-dark", None))
    # The two themes differ where the kept lines are (the header, the footer, blank lines).
    assert changed[0] != dark[0] and changed[-1] != dark[-1]
    assert changed == fresh
