"""Time binning for the core-vs-time (Gantt) view.

For a time range [t0, t1), N columns and a set of CPU rows, each cell gets the busy fraction and
the key (thread, process or process group) that ran longest in it. Only the rows asked for are
touched, and within a row only the intervals overlapping the range (two ``searchsorted`` calls
on the row's sorted arrays), so the cost follows what is on screen, not the recording's size.

Every interval contributes to the bins it overlaps: a partial amount to its first and last bin,
the full bin width to the bins in between (such a bin has that one task only). The dominant key
of a cell is found by sorting the (cell, key) pairs once and summing runs of equal pairs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from snumap_tui.analysis.intervals import Intervals, busy_before

IDLE = -1
OTHER = -2          # busy with work that the filter hides, or outside the traced tree
_OTHER_KEY = (1 << 31) - 1


@dataclass(frozen=True)
class KeyMap:
    """tid -> colouring key (pid, process group...), as sorted lookup arrays. Unknown tids map
    to themselves, so a thread with no known process still gets a colour of its own."""

    tids: np.ndarray
    keys: np.ndarray

    @classmethod
    def from_dict(cls, mapping: dict[int, int]) -> KeyMap:
        t = np.fromiter(mapping.keys(), dtype=np.int64, count=len(mapping))
        k = np.fromiter(mapping.values(), dtype=np.int64, count=len(mapping))
        o = np.argsort(t)
        return cls(t[o], k[o])

    def __call__(self, tids: np.ndarray) -> np.ndarray:
        tids = tids.astype(np.int64)
        if not len(self.tids) or not len(tids):
            return tids
        lut = self._lut()
        if lut is not None and int(tids.min()) >= 0 and int(tids.max()) < len(lut):
            return lut[tids].astype(np.int64)
        pos = np.clip(np.searchsorted(self.tids, tids), 0, len(self.tids) - 1)
        return np.where(self.tids[pos] == tids, self.keys[pos], tids)

    def _lut(self) -> np.ndarray | None:
        """A dense table tid -> key (identity where unknown), built on first use when tids are
        small (below pid_max they are): one gather per redraw instead of a binary search per
        interval on screen, which was half the cost of the zoomed-out view."""
        lut = self.__dict__.get("_table")
        if lut is None and "_table" not in self.__dict__:
            lo, hi = int(self.tids[0]), int(self.tids[-1])
            if lo >= 0 and hi < _LUT_MAX and int(np.abs(self.keys).max()) < 2**31:
                lut = np.arange(hi + 1, dtype=np.int32)
                lut[self.tids] = self.keys
            object.__setattr__(self, "_table", lut)   # frozen: a cache, not state
        return lut


_LUT_MAX = 1 << 22


@dataclass
class GanttBins:
    """The cells of one screen: ``key[r, c]`` (IDLE, OTHER or a tid/pid/group) and
    ``busy[r, c]`` (0..1) for rows ``rows`` (Intervals rows) and columns of ``edges``."""

    t0: int
    t1: int
    edges: np.ndarray
    rows: np.ndarray
    key: np.ndarray
    busy: np.ndarray
    share: np.ndarray          # fraction of the bin the dominant key ran


def bin_edges(t0: int, t1: int, ncols: int) -> np.ndarray:
    """Integer edges so that columns tile [t0, t1) exactly."""
    span = max(int(t1) - int(t0), ncols)
    return int(t0) + (np.arange(ncols + 1, dtype=np.int64) * span) // ncols


def _row_contributions(s: np.ndarray, e: np.ndarray, k: np.ndarray, edges: np.ndarray,
                       base: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(cell, key, ns) for clipped intervals s..e with keys k on one row."""
    ncols = len(edges) - 1
    bs = np.searchsorted(edges, s, "right") - 1
    be = np.searchsorted(edges, e - 1, "right") - 1
    single = bs == be
    multi = ~single
    cells = [bs[single]]
    keys = [k[single]]
    amts = [e[single] - s[single]]
    if multi.any():
        ms, me, mk, mbs, mbe = s[multi], e[multi], k[multi], bs[multi], be[multi]
        cells += [mbs, mbe]
        keys += [mk, mk]
        amts += [edges[mbs + 1] - ms, me - edges[mbe]]
        nfull = mbe - mbs - 1
        tot = int(nfull.sum())
        if tot:
            idx = np.repeat(np.arange(len(nfull)), nfull)
            off = np.arange(tot) - np.repeat(np.cumsum(nfull) - nfull, nfull)
            fb = mbs[idx] + 1 + off
            cells.append(fb)
            keys.append(mk[idx])
            amts.append(edges[fb + 1] - edges[fb])
    cell = np.concatenate(cells)
    np.clip(cell, 0, ncols - 1, out=cell)
    return cell + base, np.concatenate(keys), np.concatenate(amts)


# Cells x distinct keys up to which the dominant key is found with one bincount over a dense
# (cell, key) grid (8 bytes per slot: 32 MB at most), above which by sorting (cell, key) pairs.
_DENSE_GRID = 1 << 22


def _dense_ids(kk: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(id per item, key per id) with ids in key order, through a lookup table when the keys
    are small non-negative numbers (tids, pids: below pid_max) or ``_OTHER_KEY`` (given the
    last id); None otherwise."""
    other = kk == _OTHER_KEY
    has_other = bool(other.any())
    rest = kk[~other] if has_other else kk
    lo, hi = (int(rest.min()), int(rest.max())) if len(rest) else (0, 0)
    if lo < 0 or hi >= _DENSE_GRID:
        return None
    seen = np.zeros(hi + 2, dtype=bool)
    seen[rest] = True
    seen[hi + 1] = has_other
    uniq = np.flatnonzero(seen)
    lut = np.zeros(hi + 2, dtype=np.int64)
    lut[uniq] = np.arange(len(uniq))
    ids = lut[np.where(other, hi + 1, kk)] if has_other else lut[kk]
    if has_other:
        uniq[-1] = _OTHER_KEY
    return ids, uniq


def _dominant(cell: np.ndarray, kk: np.ndarray, weight: np.ndarray, amt: np.ndarray,
              ncell: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each cell with contributions: (cell, key with the largest summed weight, that key's
    summed ``amt``). Ties go to the largest key, whichever way it is computed.

    A screen is a few thousand cells and a handful to a few thousand keys, so the sums usually
    fit a dense (cell, key) grid filled by one bincount, with no sort at all; the zoomed-out
    view (every interval of the recording on screen) then costs a few passes over the
    intervals. Otherwise (huge key counts) the (cell, key) pairs are sorted once."""
    dense = _dense_ids(kk)
    if dense is not None and ncell * len(dense[1]) <= _DENSE_GRID:
        ids, uniq = dense
        nk = len(uniq)
        flat = cell * nk + ids
        grid = np.bincount(flat, weights=weight, minlength=ncell * nk).reshape(ncell, nk)
        has = np.bincount(cell, minlength=ncell) > 0
        gcell = np.flatnonzero(has)
        g = grid[gcell]
        win = nk - 1 - np.argmax(g[:, ::-1], axis=1)      # last of equal maxima: largest key
        if weight is amt:
            graw = g[np.arange(len(gcell)), win]
        else:
            graw = np.bincount(flat, weights=amt, minlength=ncell * nk)[gcell * nk + win]
        return gcell, uniq[win], graw
    combo = (cell << 32) | (kk & 0xFFFFFFFF)
    order = np.argsort(combo, kind="stable")
    combo = combo[order]
    starts = np.flatnonzero(np.concatenate([[True], combo[1:] != combo[:-1]]))
    sums = np.add.reduceat(weight[order], starts)
    raw = np.add.reduceat(amt[order], starts)
    gcell = combo[starts] >> 32
    gkey = combo[starts] & 0xFFFFFFFF
    # Per cell the largest sum: sort groups by (cell, sum) and take each cell's last.
    o2 = np.lexsort((sums, gcell))
    last = np.concatenate([gcell[o2][1:] != gcell[o2][:-1], [True]])
    win = o2[last]
    return gcell[win], gkey[win], raw[win]


def bin_rows(iv: Intervals, rows: Sequence[int] | np.ndarray, t0: int, t1: int, ncols: int,
             keymap: KeyMap | None = None, only_key: int | None = None,
             only_tids: np.ndarray | None = None, prefer_traced: bool = False,
             owners: list[np.ndarray] | None = None) -> GanttBins:
    """Bin the intervals of ``rows`` into ``ncols`` columns over [t0, t1).

    ``keymap`` turns tids into colouring keys (None: by thread). Work outside the traced tree
    (tid ``UNTRACED``) is OTHER. ``only_key``: keep that key; other work shows as OTHER (still
    counted as busy) and never wins a cell that key ran in. ``only_tids``: the same for a
    set of threads (a typed filter: every thread whose name or PID matched). ``prefer_traced``:
    work outside the traced tree never wins a cell the tree ran in (the region view).
    ``owners``: per row, the thread of each interval when ``iv``'s tid column holds other
    keys (the region view's region keys); ``only_tids`` is matched against it.
    """
    hide = only_key is not None or only_tids is not None
    rows = np.asarray(rows, dtype=np.int64)
    edges = bin_edges(t0, t1, ncols)
    t0, t1 = int(edges[0]), int(edges[-1])
    ncell = len(rows) * ncols
    all_c, all_k, all_a = [], [], []
    for i, r in enumerate(rows.tolist()):
        st, en = iv.start[r], iv.end[r]
        lo = int(np.searchsorted(en, t0, "right"))
        hi = int(np.searchsorted(st, t1, "left"))
        if hi <= lo:
            continue
        s = np.maximum(st[lo:hi], t0)
        e = np.minimum(en[lo:hi], t1)
        tids = iv.tid[r][lo:hi]
        who = owners[r][lo:hi] if owners is not None else tids
        k = keymap(tids) if keymap is not None else tids.astype(np.int64)
        if len(tids) and int(tids.min()) < 0:     # UNTRACED: work outside the traced tree
            k = np.where(tids < 0, _OTHER_KEY, k)
        if only_key is not None:
            k = np.where(k == only_key, k, _OTHER_KEY)
        if only_tids is not None:
            k = np.where(np.isin(who, only_tids), k, _OTHER_KEY)
        c, kk, a = _row_contributions(s, e, k, edges, i * ncols)
        all_c.append(c)
        all_k.append(kk)
        all_a.append(a)
    key = np.full(ncell, IDLE, dtype=np.int64)
    busy = np.zeros(ncell, dtype=np.float64)
    share = np.zeros(ncell, dtype=np.float64)
    width = np.tile(np.diff(edges).astype(np.float64), len(rows))
    if all_c:
        cell = np.concatenate(all_c)
        kk = np.concatenate(all_k)
        amt = np.concatenate(all_a).astype(np.float64)
        busy = np.bincount(cell, weights=amt, minlength=ncell) / width
        weight = np.where(kk == _OTHER_KEY, amt * 1e-9, amt) if hide or prefer_traced else amt
        gcell, gkey, graw = _dominant(cell, kk, weight, amt, ncell)
        key[gcell] = np.where(gkey == _OTHER_KEY, OTHER, gkey)
        share[gcell] = graw / width[gcell]
    shape = (len(rows), ncols)
    return GanttBins(t0, t1, edges, rows, key.reshape(shape),
                     np.clip(busy, 0.0, 1.0).reshape(shape), np.clip(share, 0, 1).reshape(shape))


def utilisation(iv: Intervals, t0: int, t1: int, ncols: int) -> np.ndarray:
    """Busy fraction of all CPUs together per column (the utilisation strip)."""
    edges = bin_edges(t0, t1, ncols)
    total = np.zeros(ncols, dtype=np.float64)
    for r, st in enumerate(iv.start):
        if len(st):
            total += np.diff(busy_before(st, iv.end[r], edges, iv.cum(r)))
    return total / (np.diff(edges) * max(len(iv.cpus), 1))
