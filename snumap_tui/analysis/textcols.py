"""Columns of the text reports (`report`, `scale report`): how wide a name column may be, how
a long name is shortened, and how an event's figure is written.

- The width: the terminal's when the output is one, else unbounded (piped into a file or a
  pager, nothing is cut).
- A name longer than its column is cut in the middle, keeping a ``(file:line)`` suffix whole
  (``phase_critical._omp_fn.0 (twophase.c:212)`` loses letters of its function name, never
  its line number).
- Figures: an event counted in nanoseconds (task-clock, cpu-clock, /proc's utime and stime)
  as a time with its unit (``991ms``, ``6.90s``); every other event as a
  count, an integer (page faults are whole), with k/M/G past 99,999.
"""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
from typing import TextIO

#: Events counted in nanoseconds (analysis/counter_figures.py's TIME_EVENTS).
TIME_EVENTS = ("task-clock", "cpu-clock", "proc:utime-ns", "proc:stime-ns")
WIDE = 10_000          # "unbounded": a pipe or a file


def output_width(stream: TextIO | None = None) -> int:
    """Columns to lay a text report out in: the terminal's (COLUMNS overrides it), WIDE when
    the output is not a terminal (a file, a pipe, a pager: nothing cut) unless COLUMNS says."""
    stream = stream or sys.stdout
    given = os.environ.get("COLUMNS", "")
    if given.isdigit() and int(given) > 0:      # asked for, terminal or not (as ls and ps do)
        return max(int(given), 40)
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    if not tty:
        return WIDE
    return max(shutil.get_terminal_size((80, 24)).columns, 40)


def wrapped(text: str, indent: str = "  ", width: int = 80) -> list[str]:
    """A note of a text report in lines of WIDTH, at INDENT, its later lines two further in;
    never broken at a hyphen (``--probe-budget`` stays whole)."""
    return textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=indent + "  ",
                         break_on_hyphens=False)


def fit_name(name: str, width: int) -> str:
    """NAME in at most WIDTH characters: whole if it fits, else cut in the middle (an
    ellipsis where letters went), a trailing ``(...)`` (file:line) kept whole if it leaves
    room for a few letters before it."""
    if len(name) <= width:
        return name
    if width <= 1:
        return name[:width]
    cut = name.rfind(" (")
    if cut > 0 and name.endswith(")") and len(name) - cut + 4 <= width:
        tail = name[cut:]
        return name[:width - len(tail) - 1] + "…" + tail
    head = (width - 1 + 1) // 2
    return name[:head] + "…" + name[len(name) - (width - 1 - head):]


def time_text(ns: float) -> str:
    """Nanoseconds in whole units below a second (``850us``, ``991ms``; top's thread table
    says ms throughout, replay's spans keep decimals: ui/gantt.fmt_time), ``6.90s``,
    ``412s``."""
    a = abs(ns)
    if a >= 100e9:
        return f"{ns / 1e9:.0f}s"
    if a >= 1e9:
        return f"{ns / 1e9:.2f}s"
    if a >= 1e6:
        return f"{ns / 1e6:.0f}ms"
    if a >= 1e3:
        return f"{ns / 1e3:.0f}us"
    return f"{ns:.0f}ns"


def count_text(v: float) -> str:
    """A count: an integer, with k/M/G/T past 99,999 (3 significant digits)."""
    a = abs(v)
    if a < 100_000:
        return f"{round(v):d}"
    # The unit the figure still reads under 1000 in once rounded (999,999: 1M, not 1e+03k).
    for div, suf in ((1e3, "k"), (1e6, "M"), (1e9, "G")):
        if a < 999.5 * div:
            return f"{v / div:.3g}{suf}"
    return f"{v / 1e12:.3g}T"


def event_text(event: str, v: float | None) -> str:
    """One event's figure: a time for a time event, else a count; n/a for None."""
    if v is None:
        return "n/a"
    return time_text(v) if event.lower() in TIME_EVENTS else count_text(v)


def event_head(event: str) -> str:
    """An event's column header: its name without /proc's prefix, never cut."""
    return event.removeprefix("proc:")
