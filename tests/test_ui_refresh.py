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

            def spy(y: int):  # type: ignore[no-untyped-def]
                painted.append(y)
                return real(y)

            table.render_line = spy  # type: ignore[method-assign]
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
