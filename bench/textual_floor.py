"""The floor under any Textual view: an app that repaints LINES rows of its screen once a
second, with snumap's own quiet driver (ui/driver.py) and the cheapest way Textual has to draw
(Strips made in the tick, handed out by render_line, only the changed rows refreshed). With
--read-proc it also reads, every second, what htop reads for its default screen (/proc/stat,
/proc/meminfo, /proc/loadavg and every process's stat and statm) and shows a few numbers from
them: the least a live top written in Python on Textual does. bench/top_cpu.py runs it beside
snumap top and htop.

    .venv/bin/python bench/textual_floor.py [--lines 1] [--read-proc]
"""

from __future__ import annotations

import argparse
import os
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


def read_proc() -> list[str]:
    """One reading of what htop's default screen needs, boiled down to a few numbers."""
    with open("/proc/stat", "rb") as f:
        cpu = f.readline().split()
    with open("/proc/meminfo", "rb") as f:
        mem = f.read().split(b"\n", 2)[:2]
    with open("/proc/loadavg", "rb") as f:
        load = f.read().split()[:3]
    busiest, procs = (0, ""), 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            with open(f"/proc/{name}/statm", "rb") as f:
                f.read()
        except OSError:
            continue
        procs += 1
        fields = stat[stat.rindex(b")") + 2:].split()
        ticks = int(fields[11]) + int(fields[12])
        busiest = max(busiest, (ticks, name))
    return [f"cpu {int(cpu[1]) + int(cpu[3])} idle {int(cpu[4])}",
            f"{mem[0].decode()} {mem[1].decode()}",
            f"load {b' '.join(load).decode()}",
            f"{procs} processes, busiest {busiest[1]} ({busiest[0]} ticks)"]


class Floor(QuietDriverMixin, App[None]):
    def __init__(self, lines: int, proc: bool = False) -> None:
        super().__init__()
        self.lines = lines
        self.proc = proc
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
        facts = read_proc() if self.proc else []
        self.rows.strips = [
            Strip([Segment(f"row {y:3d} ", STYLES[y % 4]),
                   Segment(facts[y] if y < len(facts) else
                           f"{(self.tick_no * 37 + y * 11) % 100:3d} % " * 8)]
                  ).adjust_cell_length(width)
            for y in range(self.lines)]
        for y in range(self.lines):
            self.rows.refresh(Region(0, y, width, 1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=1)
    ap.add_argument("--read-proc", action="store_true")
    args = ap.parse_args()
    Floor(max(1, args.lines), args.read_proc).run()


if __name__ == "__main__":
    main()
