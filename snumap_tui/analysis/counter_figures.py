"""The replay's counter figures over time: per thread and chart column (the process view's
counter rows) and per region interval (the chart's region colouring by IPC).

A figure is IPC (instructions / cycles, when both were counted) or one counted event's rate:
a time event (task-clock, /proc's utime) as a share of the time it is taken over, any other
event per millisecond. Counts come from the thread counters table scaled for multiplexing as
the report scales them (``attribution.scaled``), spread evenly over each run interval's time
(``Cumulative``), so a column or a region interval holds the part of each interval inside it
and a ratio is the ratio of those sums, never an average of ratios.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from snumap_tui.analysis.attribution import CYCLES, INSTRUCTIONS, Scaled, event_index, scaled
from snumap_tui.analysis.cumulative import Cumulative
from snumap_tui.analysis.region_timeline import RegionTimeline
from snumap_tui.analysis.textcols import TIME_EVENTS  # ns: shown as a share of the time
from snumap_tui.store.counters import ThreadCounters
from snumap_tui.trace.events import OUTSIDE


@dataclass(frozen=True)
class Figure:
    """``name`` as shown; ``num`` the event's column; ``den`` the divisor's column (a ratio)
    or None (a rate over time); ``share``: the event counts ns, shown per ns of time."""

    name: str
    num: int
    den: int | None = None
    share: bool = False

    def of(self, sums: np.ndarray, time_ns: np.ndarray) -> np.ndarray:
        """The figure of rows of summed counts (n, events) over ``time_ns`` each (n,); NaN
        where the divisor is 0 (no cycles, no time)."""
        sums = np.atleast_2d(sums)
        time_ns = np.asarray(time_ns, dtype=np.float64)
        num = sums[:, self.num].astype(np.float64)
        if self.den is not None:
            den = sums[:, self.den].astype(np.float64)
        else:
            den = time_ns if self.share else time_ns / 1e6
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def figures(events: list[str], per: str = "ms") -> list[Figure]:
    """The figures these events allow: IPC first when instructions and cycles were both
    counted, then each event's rate (PER names the time a rate is over: "ms" of the chart's
    column, "on-CPU ms" of a region interval)."""
    out = []
    cyc, ins = event_index(events, CYCLES), event_index(events, INSTRUCTIONS)
    if cyc is not None and ins is not None:
        out.append(Figure("IPC", ins, cyc))
    for i, e in enumerate(events):
        if e.lower() in TIME_EVENTS:
            out.append(Figure(f"{e} share", i, share=True))
        else:
            out.append(Figure(f"{e}/{per}", i))
    return out


class ThreadSeries:
    """Per traced thread, the cumulative counts of its run intervals (built once a thread)."""

    def __init__(self, tc: ThreadCounters) -> None:
        s: Scaled = scaled(tc)
        self.events = s.events
        keep = (s.tid > 0) & (s.pid != OUTSIDE)
        self._tid, self._start, self._end = s.tid[keep], s.start[keep], s.end[keep]
        self._values = s.values[keep]
        self._order = np.argsort(self._tid, kind="stable")
        self._tids, self._first_row = np.unique(self._tid[self._order], return_index=True)
        self._cum: dict[int, Cumulative] = {}

    def __len__(self) -> int:
        return len(self._tid)

    def tids(self) -> list[int]:
        return [int(t) for t in self._tids.tolist()]

    def cumulative(self, tid: int) -> Cumulative | None:
        """The thread's counts up to any time (None: no counter rows for it)."""
        got = self._cum.get(tid)
        if got is not None:
            return got
        j = int(np.searchsorted(self._tids, tid))
        if j >= len(self._tids) or int(self._tids[j]) != tid:
            return None
        a = int(self._first_row[j])
        b = int(self._first_row[j + 1]) if j + 1 < len(self._tids) else len(self._order)
        rows = self._order[a:b]
        got = self._cum[tid] = Cumulative(self._start[rows], self._end[rows],
                                          self._values[rows])
        return got

    def spans(self, tid: int, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(counts (n, events), on-CPU ns (n,)) of the thread inside each [a[i], b[i])."""
        cum = self.cumulative(tid)
        if cum is None:
            return np.zeros((len(a), len(self.events))), np.zeros(len(a))
        fa, na = cum.at(np.asarray(a, dtype=np.int64))
        fb, nb = cum.at(np.asarray(b, dtype=np.int64))
        return fb - fa, nb - na


def columns(series: ThreadSeries, tid: int, edges: np.ndarray, fig: Figure) -> np.ndarray:
    """The thread's figure in each column between EDGES (cols + 1 times): IPC of the counts
    in the column, a rate per ms of the column, a time event's share of it. NaN: nothing to
    divide by (the thread did not run there, or no cycles)."""
    edges = np.asarray(edges, dtype=np.int64)
    sums, _ns = series.spans(tid, edges[:-1], edges[1:])
    return fig.of(sums, np.diff(edges).astype(np.float64))


def total_columns(series: ThreadSeries, tids: list[int], edges: np.ndarray,
                  fig: Figure) -> np.ndarray:
    """The figure of the threads' summed counts per column (a process's)."""
    edges = np.asarray(edges, dtype=np.int64)
    tot = np.zeros((len(edges) - 1, len(series.events)))
    for t in tids:
        tot += series.spans(t, edges[:-1], edges[1:])[0]
    return fig.of(tot, np.diff(edges).astype(np.float64))


def region_figures(rt: RegionTimeline, series: ThreadSeries, fig: Figure) -> list[np.ndarray]:
    """Per PU row of ``rt.intervals``, each piece's figure: that of the region interval it
    lies in (its thread's innermost-region segment, or the stretch between two of them for
    serial work), over the thread's on-CPU time there (rates per on-CPU ms). NaN for work
    outside the traced tree and where the thread has no counts there."""
    segs = rt.segments
    iv = rt.intervals
    rows = [np.full(len(s), np.nan) for s in iv.start]
    if not len(series):
        return rows
    row_of = np.concatenate([np.full(len(s), r, np.int64) for r, s in enumerate(iv.start)]
                            or [np.zeros(0, np.int64)])
    index = np.concatenate([np.arange(len(s)) for s in iv.start] or [np.zeros(0, np.int64)])
    start = np.concatenate(iv.start or [np.zeros(0, np.int64)])
    end = np.concatenate(iv.end or [np.zeros(0, np.int64)])
    owner = np.concatenate(rt.tids or [np.zeros(0, np.int64)]).astype(np.int64)
    by_owner = np.argsort(owner, kind="stable")          # each thread's pieces: one slice
    cuts = np.flatnonzero(np.diff(owner[by_owner])) + 1
    for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), len(owner)]):
        tid = int(owner[by_owner[lo]]) if hi > lo else 0
        if tid <= 0:
            continue
        m = by_owner[lo:hi]
        mid = (start[m] + end[m]) // 2
        a, b = start[m].copy(), end[m].copy()
        seg = segs.get(int(tid))
        if seg is not None and len(seg[0]):
            gs, ge, _gk = seg
            g = np.searchsorted(gs, mid, "right") - 1
            gc = np.clip(g, 0, len(gs) - 1)
            inside = (g >= 0) & (ge[gc] > mid)
            # Inside a segment: the segment; else the gap between the one before and after.
            lo = np.where(g >= 0, ge[gc], np.iinfo(np.int64).min // 2)
            nxt = np.clip(g + 1, 0, len(gs) - 1)
            hi = np.where(g + 1 < len(gs), gs[nxt], np.iinfo(np.int64).max // 2)
            a = np.where(inside, gs[gc], lo)
            b = np.where(inside, ge[gc], hi)
        else:                   # never in a region: its whole recorded time is one stretch
            a = np.full(len(m), np.iinfo(np.int64).min // 2)
            b = np.full(len(m), np.iinfo(np.int64).max // 2)
        sums, ns = series.spans(int(tid), a, b)
        vals = fig.of(sums, ns)
        rm, im = row_of[m], index[m]
        for r in np.unique(rm).tolist():
            k = rm == r
            rows[r][im[k]] = vals[k]
    return rows


def scale_top(rows: list[np.ndarray], fig: Figure) -> float:
    """The top of the colour scale: 1 for a share, else the largest finite value (0: none)."""
    if fig.share:
        return 1.0
    finite = [v[np.isfinite(v)] for v in rows]
    vals = np.concatenate(finite) if finite else np.zeros(0)
    return float(vals.max()) if len(vals) else 0.0


def levels(values: np.ndarray, top: float, n: int) -> np.ndarray:
    """Each value's step on a scale of N steps over [0, top]: 1..n, 0 for NaN."""
    if top <= 0:
        return np.where(np.isfinite(values), 1, 0).astype(np.int64)
    step = np.floor(np.nan_to_num(values, nan=0.0) / top * n).astype(np.int64) + 1
    return np.where(np.isfinite(values), np.clip(step, 1, n), 0)


__all__ = ["TIME_EVENTS", "Figure", "ThreadSeries", "columns", "figures", "levels",
           "region_figures", "scale_top", "total_columns"]
