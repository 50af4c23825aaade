"""The topology view repaints only the rows a new frame changed (Textual's cost per frame is
per line refreshed), and still shows every change."""

from __future__ import annotations

import asyncio
import copy

import numpy as np

from snumap_tui.ui.app import TopApp
from snumap_tui.ui.demo import demo_frame, synthetic_topology
from snumap_tui.ui.topology_view import TopologyTable

TOPO = synthetic_topology(1, 1, 1, 4, 2)


def test_only_changed_rows_are_repainted() -> None:
    frame = demo_frame(TOPO, 0)
    changed = copy.copy(frame)
    changed.values = dict(frame.values)
    util = np.array(frame.values["util_pct"], dtype=float)
    pu = TOPO.pus[-1]
    util[pu.id] = 1.0 if util[pu.id] > 50 else 99.0       # one PU's utilisation moves
    want = f"{util[pu.id]:.0f}%"
    changed.values["util_pct"] = util

    async def go() -> tuple[int, int, int, str]:
        app = TopApp(TOPO)
        async with app.run_test(size=(120, 40)) as pilot:
            table = app.query_one(TopologyTable)
            table.collapsed.clear()                          # unfold everything
            table._rebuild()
            await pilot.pause()
            painted: list[int] = []
            real = table.render_line
            paint = table._line_for             # each line painted (cached_lines.py)

            def spy(y: int, *facts: object):  # type: ignore[no-untyped-def]
                painted.append(y)
                return paint(y, *facts)  # type: ignore[arg-type]

            table._line_for = spy  # type: ignore[method-assign]
            app.push_frame(frame)
            await pilot.pause()
            first = len(painted)
            painted.clear()
            app.push_frame(frame)                            # nothing changed
            await pilot.pause()
            same = len(painted)
            painted.clear()
            app.push_frame(changed)
            await pilot.pause()
            pu_row = next(i for i, r in enumerate(table.rows)
                          if r.pu_range == (len(TOPO.pus) - 1, len(TOPO.pus)))
            line = "".join(seg.text for seg in real(pu_row - table.scroll_offset.y))
            return first, same, len(painted), line

    first, same, after, line = asyncio.run(go())
    assert first >= 10                 # the whole visible tree with the first frame
    assert same == 0
    assert 0 < after < first           # the PU's row and the rows above it that average it
    assert want in line and f"PU {pu.os_index}" in line


def test_a_tree_longer_than_its_view_says_which_rows_show() -> None:
    """No scrollbar (Textual paints one on every line of every frame): the column heads say
    which rows show, and follow the cursor down the tree."""
    big = synthetic_topology(2, 2, 1, 16, 2)
    from snumap_tui.ui.topology_view import header_text

    assert "rows" not in header_text(120, (0, 10, 10)).plain          # all of it shows
    assert "▼ rows 1–10 of 40" in header_text(160, (0, 10, 40)).plain
    assert "▲  rows 31–40 of 40" in header_text(160, (30, 40, 40)).plain
    at120 = header_text(120, (0, 10, 40)).plain
    assert len(at120) == 120 and at120.endswith("memory      ▼ 1–10/40"), at120
    narrow = header_text(80, (5, 15, 40)).plain
    assert len(narrow) == 80 and narrow.endswith("▲▼"), narrow

    async def go() -> tuple[str, str, int]:
        app = TopApp(big)
        async with app.run_test(size=(120, 24)) as pilot:
            app.push_frame(demo_frame(big, 0))
            table = app.query_one(TopologyTable)
            table.collapsed.clear()
            table._rebuild()
            await pilot.pause()
            head = str(app.query_one("#topo-head").render())
            table.focus()
            await pilot.press("end")
            await pilot.pause()
            end = str(app.query_one("#topo-head").render())
            bars = sum(1 for w in app.screen.walk_children() if type(w).__name__ == "ScrollBar"
                       and w.display and w.size.width)
            return head, end, bars

    head, end, bars = asyncio.run(go())
    n = len(visible_rows_of(big))
    assert "▼ 1–" in head and f"/{n}" in head, head
    assert "▲ " in end and end.endswith(f"–{n}/{n}"), end
    assert bars == 0


def visible_rows_of(topo):  # type: ignore[no-untyped-def]
    from snumap_tui.ui.tree_rows import visible_rows

    return visible_rows(topo, set())
