"""The replay's counters: the figure the user chose (``X`` cycles it), the process view's
counter rows (one per thread, under its CPU row) and the chart's region colouring by that
figure (``x``). The figures are analysis/counter_figures.py's; this module only keeps what
was computed once per recording and turns values into glyphs and colours.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from rich.segment import Segment
from rich.style import Style

from snumap_tui.analysis.attribution import why_no_counters
from snumap_tui.analysis.counter_figures import (
    Figure,
    ThreadSeries,
    figures,
    levels,
    region_figures,
    scale_top,
)
from snumap_tui.analysis.intervals import Intervals
from snumap_tui.store.counters import ThreadCounters
from snumap_tui.ui.palette import level_glyph, rgb

if TYPE_CHECKING:
    from textual.app import App

    from snumap_tui.ui.gantt import GanttState
    from snumap_tui.ui.replay_data import ReplayData

STEPS = 8                       # colours of the region scale
NA_COLOUR = "#969696"          # a region interval without counts (grey, as "no region")
#: Without colours (NO_COLOR, 16 colours) a step is its digit; no counts is "?".
STEP_LETTERS = {0: "?", **{k: str(k) for k in range(1, STEPS + 1)}}
COUNTER_STYLE = Style(color="orange1")
NONE_STYLE = Style(color="grey35")


def series(data: ReplayData) -> ThreadSeries | None:
    """The recording's per-thread counters (read once; None: recorded without --events)."""
    kept = data.kept
    if "series" not in kept:
        rec = data.recording
        tc = rec.thread_counters() if rec is not None and hasattr(
            rec, "thread_counters") else ThreadCounters()
        kept["series"] = ThreadSeries(tc) if len(tc) else None
    got: ThreadSeries | None = kept["series"]
    return got


def why_none(data: ReplayData) -> str:
    """Why there are no counter rows, as report says it."""
    return why_no_counters(dict(data.header.get("counters") or {}))


def figure(data: ReplayData, st: GanttState, per: str = "ms") -> Figure | None:
    """The chosen figure (``st.figure`` cycles through what the events allow)."""
    s = series(data)
    if s is None:
        return None
    figs = figures(s.events, per)
    return figs[st.figure % len(figs)] if figs else None


def heat_row(values: np.ndarray, top: float, cursor: int) -> list[tuple[str, Style]]:
    """A figure over the columns as block heights over 0..top (``·``: n/a there)."""
    from snumap_tui.ui.gantt import CURSOR

    out = []
    for c, v in enumerate(values.tolist()):
        if not math.isfinite(v):
            glyph, st = "·", NONE_STYLE
        else:
            glyph = level_glyph(v / top) if top > 0 else level_glyph(0)
            st = COUNTER_STYLE
        out.append((glyph, st + CURSOR if c == cursor else st))
    return out


def fmt(v: float, fig: Figure) -> str:
    if not math.isfinite(v):
        return "n/a"
    if fig.share:
        return f"{v:.0%}"
    return f"{v:.2f}" if v < 100 else f"{v:.3g}" if v < 1000 else f"{v:.0f}"


# ---- the chart's region colouring --------------------------------------------------------------

def region_on(data: ReplayData, st: GanttState) -> bool:
    """The chart colours region intervals by the figure (``x``, by region, with counters)."""
    return st.by_figure and st.mode == "region" and data.regions is not None and \
        series(data) is not None


def region_levels(data: ReplayData, st: GanttState) -> tuple[Intervals, Figure, float] | None:
    """The region intervals with each piece's step on the figure's scale in the tid column
    (1..STEPS; 0: no counts; work outside the traced tree keeps its negative tid), the
    figure and the scale's top; computed once per figure."""
    fig = figure(data, st, "on-CPU ms")
    s = series(data)
    rt = data.regions
    if fig is None or s is None or rt is None:
        return None
    key = ("region levels", fig)
    got = data.kept.get(key)
    if got is None:
        vals = region_figures(rt, s, fig)
        top = scale_top(vals, fig)
        iv = rt.intervals
        keys = [np.where(t < 0, t, levels(v, top, STEPS)).astype(np.int32)
                for t, v in zip(rt.tids, vals)]
        got = data.kept[key] = (Intervals(iv.cpus, iv.start, iv.end, keys, iv.t0, iv.t1,
                                          iv.approximate), fig, top, vals)
    return got[0], got[1], got[2]


def level_colour(k: int) -> str:
    if k <= 0:
        return NA_COLOUR
    r, g, b = rgb((k - 0.5) / STEPS)
    return f"#{r:02x}{g:02x}{b:02x}"


def level_name(data: ReplayData, st: GanttState, k: int) -> str:
    got = region_levels(data, st)
    if got is None or k <= 0:
        return "n/a (no counts)"
    _iv, fig, top = got
    lo, hi = (k - 1) * top / STEPS, k * top / STEPS
    return f"{fig.name} {fmt(lo, fig)}-{fmt(hi, fig)}"


def legend(data: ReplayData, st: GanttState, width: int, letters: bool = False
           ) -> list[Segment]:
    """The scale: the figure's name, its steps in colour (LETTERS: their digits) from 0 to
    the top, and n/a."""
    got = region_levels(data, st)
    if got is None:
        return [Segment(" counters: n/a")]
    _iv, fig, top = got
    segs = [Segment(f" {fig.name} per region interval  0 ")]
    segs += [Segment(STEP_LETTERS[k] if letters else "██", Style(color=level_colour(k)))
             for k in range(1, STEPS + 1)]
    segs.append(Segment(f" {fmt(top, fig)}   "))
    segs += [Segment(f"{STEP_LETTERS[0] if letters else '█'} ", Style(color=NA_COLOUR)),
             Segment("n/a (no counts)   "),
             Segment("x: by name, X: next figure")]
    out, used = [], 0
    for seg in segs:
        if used + len(seg.text) > width:
            break
        out.append(seg)
        used += len(seg.text)
    return out


def cell_figure(data: ReplayData, st: GanttState, r: int, a: int, b: int) -> str:
    """The figure of the region interval that ran longest in [a, b) on row r (detail)."""
    got = region_levels(data, st)
    if got is None:
        return ""
    vals = data.kept[("region levels", got[1])][3][r]
    iv = got[0]
    lo = int(np.searchsorted(iv.end[r], a, "right"))
    hi = int(np.searchsorted(iv.start[r], b, "left"))
    if hi <= lo:
        return ""
    ns = np.minimum(iv.end[r][lo:hi], b) - np.maximum(iv.start[r][lo:hi], a)
    j = lo + int(np.argmax(ns))
    return f"; {got[1].name} {fmt(float(vals[j]), got[1])}"


class CounterKeysMixin:
    """``x`` (region colouring by the figure / by name) and ``X`` (next figure) for
    ReplayApp."""

    if TYPE_CHECKING:
        data: ReplayData
        state: GanttState
        view: str

        def _redraw(self) -> None: ...

    def _warn(self, text: str, timeout: float | None = None) -> None:
        cast("App[Any]", self).notify(text, severity="information" if timeout else "warning",
                                      timeout=timeout, markup=False)

    def action_figure_colour(self) -> None:
        d, st = self.data, self.state
        if series(d) is None:
            self._warn(f"counters: n/a ({why_none(d)})")
            return
        if d.regions is None:
            self._warn("no regions in this recording: nothing to colour by a counter")
            return
        st.by_figure = not (st.by_figure and st.mode == "region")
        st.mode = "region"
        st.only_key = None
        self.view = "gantt"
        self._redraw()

    def action_next_figure(self) -> None:
        d, st = self.data, self.state
        s = series(d)
        if s is None:
            self._warn(f"counters: n/a ({why_none(d)})")
            return
        st.figure = (st.figure + 1) % max(1, len(figures(s.events)))
        if region_on(d, st):
            st.only_key = None           # a step of the old figure's scale
        fig = figure(d, st)
        self._warn(f"counter figure: {fig.name if fig else 'n/a'}", timeout=2)
        self._redraw()
