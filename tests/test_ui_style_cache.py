"""The lines top keeps between frames (the header, the column heads, the containers' blank
lines, the footer's, the tree's) follow a change of styles: after a theme change the screen
is what an app started in that theme draws, cell for cell."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

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


def test_the_quiet_footer_draws_as_textuals_footer(monkeypatch: object) -> None:
    """QuietFooter keeps its own lines, but they are the ones Textual's Footer draws, with
    the app's line filters (NO_COLOR's monochrome) applied, cell for cell."""
    from textual.app import App
    from textual.binding import Binding, BindingType
    from textual.widgets import Footer

    def footer_row(cls: type, no_color: bool) -> list[tuple[str, str | None, str | None]]:
        class One(App[None]):
            BINDINGS: ClassVar[list[BindingType]] = [Binding("q", "quit", "Quit")]

            def compose(self):  # type: ignore[no-untyped-def]
                yield cls()

        async def go() -> list[tuple[str, str | None, str | None]]:
            app = One()
            async with app.run_test(size=(60, 5)) as pilot:
                await pilot.pause()
                return _cells(app)[-1]        # type: ignore[arg-type]

        mp: Any = monkeypatch
        if no_color:
            mp.setenv("NO_COLOR", "1")
        else:
            mp.delenv("NO_COLOR", raising=False)
        return asyncio.run(go())

    for no_color in (False, True):
        assert footer_row(QuietFooter, no_color) == footer_row(Footer, no_color)
