"""The floor under any Textual view: an app that collects no data and repaints LINES rows of
its screen once a second, with snumap's own quiet driver (ui/driver.py) and the cheapest way
Textual has to draw (Strips made in the tick, handed out by render_line, only the changed rows
refreshed). bench/top_cpu.py runs it beside snumap top and htop, so the CPU it costs shows
what is left for snumap's own work under a target set against htop.

    .venv/bin/python bench/textual_floor.py [--lines 1]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.segment import Segment
from rich.style import Style
from textual.app import App, ComposeResult
from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

from snumap_tui.ui.driver import QuietDriverMixin

STYLES = [Style(color=c) for c in ("red", "green", "yellow", "blue")]


class Rows(Widget):
    """Rows drawn from a list of Strips (blank below them)."""

    def __init__(self) -> None:
        super().__init__()
        self.strips: list[Strip] = []

    def render_line(self, y: int) -> Strip:
        return self.strips[y] if y < len(self.strips) else Strip.blank(self.size.width)


class Floor(QuietDriverMixin, App[None]):
    def __init__(self, lines: int) -> None:
        super().__init__()
        self.lines = lines
        self.tick_no = 0
        self.rows = Rows()

    def compose(self) -> ComposeResult:
        yield self.rows

    def on_mount(self) -> None:
        self.set_interval(1.0, self.tick)

    def tick(self) -> None:
        """LINES rows with new numbers in them (as a live view's values change)."""
        self.tick_no += 1
        width = self.size.width
        self.rows.strips = [
            Strip([Segment(f"row {y:3d} ", STYLES[y % 4]),
                   Segment(f"{(self.tick_no * 37 + y * 11) % 100:3d} % " * 8)]
                  ).adjust_cell_length(width)
            for y in range(self.lines)]
        for y in range(self.lines):
            self.rows.refresh(Region(0, y, width, 1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=1)
    Floor(max(1, ap.parse_args().lines)).run()


if __name__ == "__main__":
    main()
