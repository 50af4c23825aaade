"""TextLines given its lines as Segments (``update_lines``, the history line's bars) draws
what the same lines given as a Rich Text draw, cell for cell, with and without NO_COLOR (the
line filters run on the segments there), and says the same text."""

from __future__ import annotations

import asyncio

import pytest
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.app import App, ComposeResult

from snumap_tui.ui.backdrop import TextLines
from snumap_tui.ui.palette import BAR_STYLES
from snumap_tui.ui.panels import spark_bars

GLYPHS = "  ▁▁▂▃███▅▁"


class Pair(App[None]):
    CSS = "TextLines { height: 2; }"       # as top's: fixed, not measured from the text

    def compose(self) -> ComposeResult:
        yield TextLines(id="text")
        yield TextLines(id="segs")


def _title() -> Text:
    t = Text(" Machine", style="bold")
    t.append(" · CPU % ")
    t.append("not available here", style=Style(color="grey50", dim=True))
    return t


def _cells(app: Pair, y: int) -> list[tuple[str, str | None, str | None, bool]]:
    out = []
    for seg in app.screen._compositor.render_strips()[y]:
        st = seg.style or Style()
        out += [(ch, str(st.color) if st.color else None,
                 str(st.bgcolor) if st.bgcolor else None, bool(st.bold)) for ch in seg.text]
    return out


async def _draw() -> tuple[list[list[tuple[str, str | None, str | None, bool]]], str, str]:
    app = Pair()
    async with app.run_test(size=(30, 4)) as pilot:
        # the title's own style as a span: a Text's base style would cover the bars too
        as_text = Text.assemble(_title(), "\n")
        for seg in spark_bars(GLYPHS):
            as_text.append(seg.text, style=seg.style)
        app.query_one("#text", TextLines).update(as_text)
        app.query_one("#segs", TextLines).update_lines([_title(), spark_bars(GLYPHS)])
        await pilot.pause()
        rows = [_cells(app, y) for y in range(4)]
        return (rows, app.query_one("#text", TextLines).text.plain,
                app.query_one("#segs", TextLines).text.plain)


@pytest.mark.parametrize("no_color", [False, True])
def test_segment_lines_draw_as_text_lines(no_color: bool, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    if no_color:
        monkeypatch.setenv("NO_COLOR", "1")
    rows, text_plain, segs_plain = asyncio.run(_draw())
    assert rows[0] == rows[2] and rows[1] == rows[3]
    assert "".join(c[0] for c in rows[3]).rstrip() == " " + GLYPHS.rstrip()
    colours = {c[1] for c in rows[3] if c[0] == "█"}
    if no_color:
        assert colours == {None} or len(colours) == 1 and str(BAR_STYLES["█"].color) not in colours
    else:
        assert colours == {str(BAR_STYLES["█"].color)}
    assert segs_plain == text_plain == _title().plain + "\n " + GLYPHS


def test_bars_are_one_segment_per_run() -> None:
    segs = spark_bars("▁▁▁██ ")
    assert [s.text for s in segs] == [" ", "▁▁▁", "██", " "]
    assert segs[1].style == BAR_STYLES["▁"] and segs[3].style is None
    assert spark_bars("") == [Segment(" ")]
