"""The report's per-thread statistics, accumulated while a recording streams by, chunk by
chunk, instead of from every interval and event held at once (which cost `snumap report`
~110 bytes per event and 7.6 s on a 10 M-event recording; docs/benchmarks.md, "exports").

- ``TaskAccumulator`` takes the run intervals as ``IntervalBuilder`` makes them, one window at a
  time in time order (``IntervalBuilder.on_intervals``): run time and switch-ins per thread per
  PU, migrations between PUs and between NUMA nodes (a thread's consecutive intervals on two
  PUs), carrying each thread's last PU from window to window.
- ``LatencyAccumulator`` takes the events: each wakeup paired with the thread's next switch-in
  (the run-queue latency), carrying threads woken but not yet run from chunk to chunk.

Both give the numbers ``stats.task_stats`` and ``stats.runqueue_latency`` compute from whole
arrays (tests/test_report.py holds them equal), as long as chunks follow each other in time,
which is how the store writes them; a chunk a tracer delivered late is counted as it comes.
Threads are numbered densely (``TidIndex``) so every group-by is a radix sort on 16 bits or a
bincount, never a sort of 64-bit keys.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

import numpy as np

from snumap_tui.analysis.stats import TaskStats
from snumap_tui.trace.events import DENSE_TID_MAX, SWITCH, WAKEUP, WAKEUP_NEW


class TidIndex:
    """tid -> a dense index 0..n-1 in order of first sight (tids from -2, UNTRACED, up).

    Task ids below DENSE_TID_MAX go through a dense table; larger
    ones (a merged job's qualified ids, a crafted 2^31-1) through a sorted array of the ids
    seen, so one such id costs a few bytes, not a table of 8 GiB."""

    def __init__(self) -> None:
        self._lut = np.full(1 << 16, -1, dtype=np.int32)
        self._big_keys = np.zeros(0, dtype=np.int64)     # sorted
        self._big_ids = np.zeros(0, dtype=np.int32)
        self.tids = np.zeros(0, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.tids)

    def __call__(self, tids: np.ndarray) -> np.ndarray:
        k = np.maximum(tids.astype(np.int64) + 2, 0)
        if not len(k):
            return np.zeros(0, dtype=np.int32)
        small = k < DENSE_TID_MAX
        if small.all():
            return self._dense(k)
        out = np.empty(len(k), dtype=np.int32)
        out[small] = self._dense(k[small])
        out[~small] = self._sparse(k[~small])
        return out

    def _add(self, u: np.ndarray) -> np.ndarray:
        ids = np.arange(len(self.tids), len(self.tids) + len(u), dtype=np.int32)
        self.tids = np.concatenate([self.tids, u - 2])
        return ids

    def _dense(self, k: np.ndarray) -> np.ndarray:
        if not len(k):
            return np.zeros(0, dtype=np.int32)
        top = int(k.max())
        if top >= len(self._lut):
            grown = np.full(min(max(top + 1, 2 * len(self._lut)), DENSE_TID_MAX), -1,
                            dtype=np.int32)
            grown[:len(self._lut)] = self._lut
            self._lut = grown
        d = self._lut[k]
        new = d < 0
        if new.any():
            u = np.unique(k[new])
            self._lut[u] = self._add(u)
            d = self._lut[k]
        return d

    def _sparse(self, k: np.ndarray) -> np.ndarray:
        u = np.unique(k)
        pos = np.searchsorted(self._big_keys, u)
        seen = (pos < len(self._big_keys)) & \
            (self._big_keys[np.minimum(pos, max(len(self._big_keys) - 1, 0))] == u) \
            if len(self._big_keys) else np.zeros(len(u), dtype=bool)
        if not seen.all():
            fresh = u[~seen]
            keys = np.concatenate([self._big_keys, fresh])
            ids = np.concatenate([self._big_ids, self._add(fresh)])
            order = np.argsort(keys, kind="stable")
            self._big_keys, self._big_ids = keys[order], ids[order]
        return self._big_ids[np.searchsorted(self._big_keys, k)]


def group_order(d: np.ndarray, n: int) -> np.ndarray:
    """A stable order grouping dense ids ``d`` (< n): a radix sort when n fits 16 bits."""
    key = d.astype(np.uint16) if n <= 1 << 16 else d
    return np.argsort(key, kind="stable")


def _grow(a: np.ndarray, n: int, fill: int = 0) -> np.ndarray:
    if len(a) >= n:
        return a
    out = np.full(max(n, 2 * len(a)), fill, dtype=a.dtype)
    out[:len(a)] = a
    return out


class TaskAccumulator:
    """Run time, switch-ins and migrations per thread from time-ordered interval blocks."""

    def __init__(self, cpus: np.ndarray, node_of_row: np.ndarray, tids: TidIndex) -> None:
        self.cpus = cpus
        self.nrows = len(cpus)
        self.node_of_row = node_of_row
        self.ix = tids
        self.run = np.zeros(0, dtype=np.int64)       # [dense * nrows + row] ns
        self.ins = np.zeros(0, dtype=np.int64)       # switch-ins, same index
        self.last_row = np.zeros(0, dtype=np.int64)  # [dense] row of the last interval, -1
        self.mig = np.zeros(0, dtype=np.int64)       # [dense]
        self.numa_mig = np.zeros(0, dtype=np.int64)

    def feed(self, rows: np.ndarray, starts: np.ndarray, ends: np.ndarray,
             tids: np.ndarray) -> None:
        """A block of intervals in time order of their starts."""
        if not len(rows):
            return
        d = self.ix(tids)
        n = len(self.ix)
        rows = rows.astype(np.int64)
        key = d.astype(np.int64) * self.nrows + rows
        self.run = _grow(self.run, n * self.nrows)
        self.ins = _grow(self.ins, n * self.nrows)
        np.add.at(self.run, key, (ends - starts).astype(np.int64))
        np.add.at(self.ins, key, 1)
        self.last_row = _grow(self.last_row, n, -1)
        self.mig = _grow(self.mig, n)
        self.numa_mig = _grow(self.numa_mig, n)
        order = group_order(d, n)
        ds, rs = d[order], rows[order]
        first = np.ones(len(ds), dtype=bool)
        first[1:] = ds[1:] != ds[:-1]
        prev = np.empty(len(ds), dtype=np.int64)
        prev[1:] = rs[:-1]
        prev[first] = self.last_row[ds[first]]
        had = prev >= 0
        moved = had & (prev != rs)
        nodes = self.node_of_row
        moved_node = had & (nodes[np.where(had, prev, 0)] != nodes[rs])
        self.mig[:n] += np.bincount(ds[moved], minlength=n)
        self.numa_mig[:n] += np.bincount(ds[moved_node], minlength=n)
        last = np.append(first[1:], True)
        self.last_row[ds[last]] = rs[last]

    def stats(self, pid_of: Mapping[int, int]) -> dict[int, TaskStats]:
        n = len(self.ix)           # shared: may have grown since the last block
        out: dict[int, TaskStats] = {}
        self.run, self.ins = _grow(self.run, n * self.nrows), _grow(self.ins, n * self.nrows)
        self.mig, self.numa_mig = _grow(self.mig, n), _grow(self.numa_mig, n)
        run = self.run[:n * self.nrows].reshape(n, self.nrows)
        ins = self.ins[:n * self.nrows].reshape(n, self.nrows)
        cpus = self.cpus.tolist()
        # Run time per NUMA node: the per-PU matrix summed over each node's columns.
        node_ids, node_col = np.unique(self.node_of_row, return_inverse=True)
        onehot = np.zeros((self.nrows, len(node_ids)), dtype=np.int64)
        onehot[np.arange(self.nrows), node_col.reshape(-1)] = 1
        per_node = run @ onehot if n else np.zeros((0, len(node_ids)), np.int64)
        node_list = node_ids.tolist()
        totals, switch_ins = run.sum(axis=1).tolist(), ins.sum(axis=1).tolist()
        for d, tid in enumerate(self.ix.tids.tolist()):
            if not switch_ins[d]:
                continue
            rows = np.flatnonzero(ins[d]).tolist()
            ts = TaskStats(tid, pid_of.get(tid, -1), totals[d], {}, {},
                           migrations=int(self.mig[d]),
                           numa_migrations=int(self.numa_mig[d]),
                           switch_ins=switch_ins[d])
            ts.cpus = dict(zip([cpus[r] for r in rows], run[d, rows].tolist()))
            on = ins[d] @ onehot
            ts.numa = {nd: v for nd, v, k in zip(node_list, per_node[d].tolist(), on.tolist())
                       if k and nd >= 0}
            out[tid] = ts
        return out


class LatencyAccumulator:
    """Wakeup -> switch-in delays per thread, pairing across chunks (``runqueue_latency``'s
    rule: the last wakeup before a switch-in; switch-ins first at equal times)."""

    def __init__(self, tids: TidIndex, long_ns: int) -> None:
        self.ix = tids
        self.long_ns = long_ns
        self._pend_t = np.zeros(0, dtype=np.int64)     # woken, not yet switched in
        self._pend_d = np.zeros(0, dtype=np.int32)
        self._d: list[np.ndarray] = []
        self._lat: list[np.ndarray] = []
        self._long: list[np.ndarray] = []
        self._long_end: list[np.ndarray] = []
        self._long_d: list[np.ndarray] = []

    def feed(self, cols: Mapping[str, np.ndarray]) -> None:
        k = cols["kind"]
        wake = (k == WAKEUP) | (k == WAKEUP_NEW)
        sel = np.flatnonzero(wake | ((k == SWITCH) & (cols["tid2"] != 0)))
        # The pending wakeups, then this chunk's: filled in place (no concatenated copies).
        npend, n = len(self._pend_t), len(self._pend_t) + len(sel)
        is_wake = np.empty(n, dtype=bool)
        is_wake[:npend] = True
        is_wake[npend:] = wake[sel]
        t = np.empty(n, dtype=np.int64)
        t[:npend] = self._pend_t
        t[npend:] = cols["t_ns"][sel]
        d = np.empty(n, dtype=np.int32)
        d[:npend] = self._pend_d
        d[npend:] = self.ix(np.where(wake, cols["tid"], cols["tid2"])[sel])
        order = group_order(d, len(self.ix))
        d, t, is_wake = d[order], t[order], is_wake[order]
        same = d[1:] == d[:-1]
        if (same & (t[1:] == t[:-1]) & is_wake[:-1] & ~is_wake[1:]).any():
            order = np.lexsort((is_wake, t, d))           # a wakeup and a switch-in tied
            d, t, is_wake = d[order], t[order], is_wake[order]
            same = d[1:] == d[:-1]
        pair = np.flatnonzero(is_wake[:-1] & ~is_wake[1:] & same)
        lat = t[pair + 1] - t[pair]
        self._d.append(d[pair])
        self._lat.append(lat)
        long = lat >= self.long_ns
        self._long.append(lat[long])
        self._long_end.append(t[pair + 1][long])
        self._long_d.append(d[pair][long])
        last = np.append(~same, True) & is_wake
        self._pend_t, self._pend_d = t[last], d[last]

    def per_task(self) -> dict[int, np.ndarray]:
        """tid -> its latencies (ns), in time order."""
        if not self._d:
            return {}
        d = np.concatenate(self._d)
        lat = np.concatenate(self._lat)
        self._d, self._lat = [], []
        order = group_order(d, len(self.ix))
        d, lat = d[order], lat[order]
        cut = np.flatnonzero(d[1:] != d[:-1]) + 1
        bounds = np.concatenate([[0], cut, [len(d)]]).tolist()
        tids = self.ix.tids
        return {int(tids[d[a]]): lat[a:b] for a, b in itertools.pairwise(bounds) if b > a}

    def long_waits(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(latency, switch-in time, tid) of every wait of at least ``long_ns``."""
        cat = (lambda parts: np.concatenate(parts) if parts else np.zeros(0, np.int64))
        d = cat(self._long_d).astype(np.int64)
        return cat(self._long), cat(self._long_end), \
            np.asarray(self.ix.tids, dtype=np.int64)[d] if len(d) else d
