"""Time-axis ticks for the core-vs-time view: round steps, the digits the span needs.

Ticks fall on multiples of a 1-2-5 step (1, 2, 5, 10, 20, 50 ... nanoseconds), the finest
whose labels still fit between two ticks. Labels count from the recording's start
(``1.201s``; the unit is the one the largest visible time reads best in) with as many
decimals as the step needs and no more, so at a 6.45 ms span they read ``1.201s 1.202s``
instead of ``1.20s`` eight times; on a key (``w``) they are the wall clock instead
(``10:42:07.250``). Integer nanoseconds throughout: a tick is exactly on its step.

Pure functions of numbers: the gantt draws their output, tests check it without an App.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import math

STEPS = (1, 2, 5)
GAP = 2                      # columns at least between one label's end and the next tick


def nice_steps(start_ns: int) -> list[int]:
    """The 1-2-5 steps from the first at or above ``start_ns``, up to 10^13 ns (3 hours)."""
    out = []
    e = 0
    while 10 ** e <= 10 ** 13:
        for m in STEPS:
            s = m * 10 ** e
            if s >= start_ns:
                out.append(s)
        e += 1
    return out


def unit_for(max_ns: float) -> tuple[str, int]:
    """(unit, ns per unit) the largest time shown reads best in: s from 1 s, ms, us, ns."""
    a = abs(max_ns)
    if a >= 1e9:
        return "s", 10 ** 9
    if a >= 1e6:
        return "ms", 10 ** 6
    if a >= 1e3:
        return "us", 10 ** 3
    return "ns", 1


def decimals_for(step_ns: int, per_unit: int) -> int:
    """Decimals that show a multiple of ``step_ns`` exactly in a unit of ``per_unit`` ns."""
    if step_ns >= per_unit:
        return 0
    return max(0, math.ceil(-math.log10(step_ns / per_unit) - 1e-9))


def fmt_rel(ns: int, unit: str, per_unit: int, decimals: int) -> str:
    v = ns / per_unit
    return f"{v:.{decimals}f}{unit}"


def fmt_wall(wall_ns: int, decimals: int) -> str:
    """``10:42:07`` (UTC) with ``decimals`` (at most 9) digits of the second."""
    t = _dt.datetime.fromtimestamp(wall_ns // 10 ** 9, _dt.timezone.utc)
    out = t.strftime("%H:%M:%S")
    if decimals:      # cut, not rounded (rounded, .9996 s showed as .000 of the same second)
        out += f".{(wall_ns % 10 ** 9) // 10 ** (9 - decimals):0{decimals}d}"
    return out


def ticks(t0_ns: int, span_ns: int, cols: int, wall_offset_ns: int | None = None
          ) -> list[tuple[int, str]]:
    """(column, label) of each tick over ``cols`` columns that show ``span_ns`` from
    ``t0_ns`` (ns from the recording's start). With ``wall_offset_ns`` (wall-clock ns of the
    recording's start) the ticks are round wall-clock times, labelled as such."""
    span_ns = max(1, int(span_ns))
    cols = max(1, cols)
    base = wall_offset_ns or 0
    lo = t0_ns + base                    # the first visible time, on the labelled clock
    unit, per_unit = unit_for(t0_ns + span_ns)
    # Start at a step giving at most one tick per 4 columns; widen until labels fit.
    for step in nice_steps(max(1, span_ns * 4 // cols)):
        if wall_offset_ns is not None:
            dec = decimals_for(step, 10 ** 9)
        else:
            dec = decimals_for(step, per_unit)
        first = -(-lo // step) * step       # ceil to a multiple of step
        out: list[tuple[int, str]] = []
        t = first
        while t < lo + span_ns:
            col = (t - lo) * cols // span_ns
            rel = t - base
            label = fmt_wall(t, dec) if wall_offset_ns is not None else fmt_rel(
                rel, unit, per_unit, dec)
            out.append((int(col), label))
            t += step
        if fits(out, cols):
            return out
    return []


def fits(marks: list[tuple[int, str]], cols: int) -> bool:
    """Each label (after its ``|``) ends GAP columns before the next tick (the last one may
    run past the axis: the drawing cuts it)."""
    return all(c + 1 + len(lab) + GAP <= c2
               for (c, lab), (c2, _) in itertools.pairwise(marks))


def resolution_label(ns: int, res_ns: int, wall_offset_ns: int | None = None) -> str:
    """One time with the digits a resolution of ``res_ns`` needs (the cursor, a cell's
    edges): ``1.2013s`` for a 0.1 ms column at 1.2 s."""
    step = 10 ** math.floor(math.log10(max(1, res_ns)))
    if wall_offset_ns is not None:
        return fmt_wall(ns + wall_offset_ns, decimals_for(step, 10 ** 9))
    unit, per_unit = unit_for(ns if ns else res_ns)
    return fmt_rel(ns, unit, per_unit, decimals_for(step, per_unit))
