"""The process table's lines: its columns (which show at which width, and their widths),
the formatting of its cells, and ``Line``, a row whose cells are made when first read."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.style import Style
from rich.text import Text

from snumap_tui.textsafe import safe_text
from snumap_tui.ui.metricspec import fmt_bytes


@dataclass(frozen=True)
class Col:
    label: str
    width: int                   # 0: takes the remaining width
    right: bool = False


# Columns left out below each width (narrowest last), so that COMMAND keeps at least
# MIN_COMMAND columns down to the smallest terminal the views accept (50).
DROPPED_BELOW = ((100, "JOB"), (90, "TIME+"), (75, "THR"), (70, "PU"), (64, "MEM"),
                 (58, "AFFINITY"))
MIN_COMMAND = 16


def task_columns(width: int) -> list[Col]:
    """The process columns for a terminal width: fixed numbers, COMMAND takes the rest (JOB
    only when there is room for it and a command of useful length); a narrower terminal
    loses the other columns (``DROPPED_BELOW``) before the command."""
    cols = [Col("PID", 7, True), Col("USER", 9), Col("JOB", 14), Col("CPU%", 6, True),
            Col("MEM", 6, True), Col("THR", 4, True), Col("TIME+", 8, True), Col("PU", 4, True),
            Col("AFFINITY", 18 if width >= 110 else 14 if width >= 80 else 10),
            Col("COMMAND", 0)]
    gone = {label for below, label in DROPPED_BELOW if width < below}
    return [c for c in cols if c.label not in gone]


#: Every column a process row can show, in order; ``task_columns`` picks those that fit.
TASK_LABELS = ("PID", "USER", "JOB", "CPU%", "MEM", "THR", "TIME+", "PU", "AFFINITY", "COMMAND")


def fmt_cpu_time(secs: float | None) -> str:
    """htop's TIME+: ``m:ss.cc`` below an hour, ``h:mm:ss`` above; empty when unknown."""
    if secs is None:
        return ""
    if secs >= 3600:
        h, rest = divmod(int(secs), 3600)
        return f"{h}h{rest // 60:02d}:{rest % 60:02d}"
    m, sec = divmod(secs, 60)
    return f"{int(m)}:{sec:05.2f}"


def group_columns(mode: str) -> list[Col]:
    return [Col(mode.upper(), 22), Col("PROCS", 6, True), Col("THR", 6, True),
            Col("CPU%", 7, True), Col("MEM", 7, True), Col("RUNS ON", 18),
            Col("BUSIEST / COMMAND", 0)]


def widths(cols: Sequence[Col], width: int) -> list[int]:
    """Each column's width, the last fixed-width-0 column taking what remains (one space
    between columns)."""
    fixed = sum(c.width for c in cols) + len(cols)     # a leading space and separators
    return [c.width or max(8, width - fixed) for c in cols]


def line_str(cells: Sequence[str], cols: Sequence[Col], ws: Sequence[int]) -> str:
    """One row as a string: cells cut or padded to their columns. A cell's terminal
    controls are escaped first (a process names itself: ``textsafe``); rows are cached as
    strips, so this runs when a row changes, not at every repaint."""
    parts = []
    for cell, c, w in zip(cells, cols, ws):
        cell = safe_text(cell)
        s = cell if len(cell) <= w else cell[:w - 1] + "…"
        parts.append(s.rjust(w) if c.right else s.ljust(w))
    return " " + " ".join(parts)


def line_text(cells: Sequence[str], cols: Sequence[Col], ws: Sequence[int],
              style: Style | str = "") -> Text:
    """One row as Text (the header; rows go straight to Segments, see ``_row_strip``)."""
    return Text(line_str(cells, cols, ws), style=style)


def _cpu(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1f}"


def _mem(v: int | None) -> str:
    """Resident memory; ``-`` for none at all (a kernel thread has no user pages), empty when
    it was not read."""
    if v is None:
        return ""
    return fmt_bytes(v) if v else "-"


class Line:
    """A row of the table: its key (PID, ``g:KEY`` or ``m:PID`` in a group), cells, look.

    A process row's cells are made when first read (``cells``): a frame formats only the rows
    on screen (and those a reader asks for), not the up to 200 the list holds."""

    __slots__ = ("_cells", "_make", "key", "kind", "pid", "unfolded")

    def __init__(self, key: str, cells: tuple[str, ...] | None, kind: str = "task",
                 pid: int | None = None, unfolded: bool = False,
                 make: Callable[[], tuple[str, ...]] | None = None) -> None:
        self.key, self.kind, self.pid, self.unfolded = key, kind, pid, unfolded   # task|group|member
        self._cells, self._make = cells, make

    @property
    def cells(self) -> tuple[str, ...]:
        if self._cells is None:
            self._cells = self._make() if self._make is not None else ()
        return self._cells

    def remake(self) -> None:
        """Forget the cells (the columns changed: a resize); made again when next read."""
        if self._make is not None:
            self._cells = None

    def looks_like(self, other: Line) -> bool:
        """Draws the same (what decides a repaint)."""
        return (self.kind == other.kind and self.unfolded == other.unfolded
                and self.cells == other.cells)

    def __repr__(self) -> str:
        return f"Line({self.key!r}, {self.kind}, pid={self.pid})"
