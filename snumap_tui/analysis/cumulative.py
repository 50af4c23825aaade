"""Counts of a thread's (or a PU's) run intervals up to any time, each interval's counts
spread evenly over its time: what attribution cuts at region edges (analysis/attribution.py)
and what the replay's counter rows sum per column (analysis/counter_figures.py)."""

from __future__ import annotations

import numpy as np


class Cumulative:
    """F(t): the counts of a set of non-overlapping intervals up to time t, counts spread
    evenly over each interval. F(b) - F(a) is what [a, b) holds."""

    def __init__(self, start: np.ndarray, end: np.ndarray, values: np.ndarray) -> None:
        o = np.argsort(end, kind="stable")
        self.start, self.end, self.v = start[o], end[o], values[o]
        self.cum = np.vstack([np.zeros((1, values.shape[1])), np.cumsum(self.v, axis=0)])
        self.dur_cum = np.concatenate([[0], np.cumsum((self.end - self.start).clip(min=0))])

    def at(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(counts, on-CPU ns) up to each of T."""
        k = np.searchsorted(self.end, t, side="right")
        full = self.cum[k]
        ns = self.dur_cum[k].astype(np.float64)
        inside = k < len(self.end)
        kk = np.minimum(k, max(len(self.end) - 1, 0))
        if len(self.end):
            s, e = self.start[kk], self.end[kk]
            part = np.where(inside & (t > s), (t - s) / np.maximum(e - s, 1), 0.0)
            full = full + part[:, None] * self.v[kk]
            ns = ns + part * (e - s)
        return full, ns
