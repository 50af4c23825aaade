"""Carrying per-PU and per-object arrays up the topology tree, vectorised.

Two facts of the topology model make every aggregation one prefix sum:

- every object covers a contiguous run of PUs in logical order (``TopoObject.pu_range``), so the
  sum of a per-PU array over an object is ``cs[hi] - cs[lo]`` of its cumulative sum;
- object ids are a depth-first order, so the objects below an object (its subtree, memory
  children included) are the id run ``[id, end)``: a value attached to NUMA nodes or packages is
  summed over any object the same way.

A ``Plan`` holds these index arrays for one topology; it is built once and reused by every
``derive`` (a 384-PU machine has ~1000 objects, so a sweep costs a handful of numpy calls).
"""

from __future__ import annotations

import functools
import threading
import weakref

import numpy as np

from snumap_tui.topology.model import Topology


class Plan:
    """Index arrays of one topology, for aligning source arrays and aggregating them."""

    def __init__(self, topology: Topology) -> None:
        # A weak reference: plan_for's cache drops a Plan when its topology dies, which a
        # strong one here would prevent (the cache would keep every topology ever derived).
        self._topology = weakref.ref(topology)
        objs = topology.objects
        self.nobj = len(objs)
        pus = topology.pus
        self.npu = len(pus)
        pu_os = np.array([p.os_index for p in pus], dtype=np.int64)
        self.pu_os = pu_os
        size = int(pu_os.max()) + 1 if self.npu else 0
        # OS index -> logical position (-1 = not a PU of this topology).
        self.pos_of_os = np.full(size, -1, dtype=np.int64)
        self.pos_of_os[pu_os] = np.arange(self.npu)
        self.pu_ids = np.array([p.id for p in pus], dtype=np.int64)
        self.lo = np.array([o.pu_range[0] for o in objs], dtype=np.int64)
        self.hi = np.array([o.pu_range[1] for o in objs], dtype=np.int64)
        # Subtree end of each object in DFS id order (children have larger ids).
        end = np.arange(1, self.nobj + 1, dtype=np.int64)
        for o in reversed(objs):
            if o.children:
                end[o.id] = end[o.children[-1]]
        self.end = end
        self.ids = np.arange(self.nobj, dtype=np.int64)
        self.types = [o.type for o in objs]
        self._type_masks: dict[frozenset[str], np.ndarray] = {}
        self._scratch = threading.local()
        self._positions: dict[bytes, np.ndarray] = {}
        self._attached: dict[bytes, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        # Many objects cover the same PUs (a core, its L1 and L2): aggregate each distinct
        # range once and spread the result back.
        ranges = np.stack([self.lo, self.hi], axis=1)
        uniq, self.range_of_obj = np.unique(ranges, axis=0, return_inverse=True)
        self.range_of_obj = self.range_of_obj.reshape(-1)
        self.ulo, self.uhi = uniq[:, 0].copy(), uniq[:, 1].copy()
        self.numa_id_of_os = {o.os_index: o.id for o in topology.numa_nodes
                              if o.os_index is not None}

    @property
    def topology(self) -> Topology:
        topo = self._topology()
        if topo is None:  # pragma: no cover - callers hold the topology they derive for
            raise RuntimeError("the topology of this Plan no longer exists")
        return topo

    # ---- aligning a source's arrays (keyed by OS index) onto logical PU positions -------
    def positions(self, cpus: np.ndarray) -> np.ndarray:
        """Logical PU position of each OS index, -1 for CPUs this topology does not have.
        (Cached: a source reports the same CPU list sweep after sweep.)"""
        cpus = np.asarray(cpus, dtype=np.int64)
        key = cpus.tobytes()
        hit = self._positions.get(key)
        if hit is not None:
            return hit
        ok = (cpus >= 0) & (cpus < self.pos_of_os.size)
        out = np.full(cpus.shape, -1, dtype=np.int64)
        out[ok] = self.pos_of_os[cpus[ok]]
        if len(self._positions) > 64:     # hotplug churn: keep the cache small
            self._positions.clear()
        self._positions[key] = out
        return out

    def align(self, cpus: np.ndarray, values: np.ndarray) -> np.ndarray:
        """``values`` (rows per entry of ``cpus``) as float64 rows per logical PU; PUs the
        source did not report are NaN."""
        values = np.asarray(values)
        out = np.full((self.npu, *values.shape[1:]), np.nan)
        pos = self.positions(cpus)
        ok = pos >= 0
        out[pos[ok]] = values[ok]
        return out

    # ---- aggregation ---------------------------------------------------------------------
    def sum_pus(self, matrix: np.ndarray) -> np.ndarray:
        """Rows of per-PU values [k, npu] -> per-object sums [k, nobj]; an object none of
        whose PUs has a value gets NaN (not 0)."""
        return _range_sum(matrix, self.ulo, self.uhi, mean=False)[:, self.range_of_obj]

    def sum_pu_columns(self, cols: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """``sum_pus`` of counters laid out a column each ([npu, k], as derive stacks them),
        into ``out`` [k, nobj] (derive's frame matrix: no temporary of that size). ``cols`` is
        used as scratch (its NaNs become 0)."""
        per_range = _range_sum_cols(cols, self.ulo, self.uhi, mean=False)
        return self._spread(per_range, out)

    def mean_pus(self, matrix: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Rows of per-PU values [k, npu] -> per-object means over the PUs with a value."""
        cols = np.array(np.atleast_2d(matrix).T, order="C")
        return self._spread(_range_sum_cols(cols, self.ulo, self.uhi, mean=True), out)

    def _spread(self, per_range: np.ndarray, out: np.ndarray | None) -> np.ndarray:
        """[nranges, k] -> [k, nobj]: each object gets its PU range's row."""
        if out is None:
            return np.ascontiguousarray(per_range[self.range_of_obj].T)
        out[...] = per_range[self.range_of_obj].T
        return out

    def sum_subtrees(self, matrix: np.ndarray) -> np.ndarray:
        """Rows of values attached to objects [k, nobj] (NaN where none) -> the sum over each
        object's subtree (NUMA node memory to its package and the machine; package power to
        the machine). NaN where the subtree holds no value."""
        matrix = np.atleast_2d(matrix)
        # Values sit on a few objects (NUMA nodes, packages, the machine): sum over those
        # only, for the objects whose subtree holds one of them, and leave the rest NaN.
        att = np.flatnonzero(~np.isnan(matrix).all(axis=0))
        key = att.tobytes()
        hit = self._attached.get(key)
        if hit is None:
            a_lo = np.searchsorted(att, self.ids)
            a_hi = np.searchsorted(att, self.end)
            targets = np.flatnonzero(a_hi > a_lo)
            hit = (targets, a_lo[targets], a_hi[targets])
            if len(self._attached) > 64:
                self._attached.clear()
            self._attached[key] = hit
        targets, lo, hi = hit
        out = np.full(matrix.shape, np.nan)
        if targets.size:
            out[:, targets] = _range_sum(matrix[:, att], lo, hi, mean=False)
        return out

    def scratch(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """A work array of this shape kept from frame to frame (per thread: a sampler
        thread and a replay may derive at once). Why: a few hundred kB allocated and freed
        per frame made glibc trim and regrow the heap, ~100 page faults per derive."""
        bufs = self._scratch.__dict__
        arr = bufs.get(name)
        if arr is None or arr.shape != shape:
            arr = bufs[name] = np.empty(shape)
        return arr

    def type_mask(self, types: frozenset[str]) -> np.ndarray:
        """Boolean mask of the objects whose type is in ``types``."""
        m = self._type_masks.get(types)
        if m is None:
            m = np.array([t in types for t in self.types], dtype=bool)
            self._type_masks[types] = m
        return m


def _range_sum(matrix: np.ndarray, lo: np.ndarray, hi: np.ndarray, mean: bool) -> np.ndarray:
    """Sum (or mean) of each row of ``matrix`` over the index ranges [lo, hi), NaN values
    skipped, NaN where a range holds no value: [k, len(lo)]."""
    cols = np.array(np.atleast_2d(matrix).T, order="C")
    return np.ascontiguousarray(_range_sum_cols(cols, lo, hi, mean).T)


def _range_sum_cols(cols: np.ndarray, lo: np.ndarray, hi: np.ndarray, mean: bool
                    ) -> np.ndarray:
    """``_range_sum`` on the transpose: ``cols`` is [n, k] (scratch: NaNs are zeroed in
    place), the result [len(lo), k].

    One row per PU, so that the gathers ``cs[hi] - cs[lo]`` copy contiguous rows of k
    counters: all counters of all objects in a handful of numpy calls. Counts of valid values
    are only computed for counters that have NaNs.
    """
    n, k = cols.shape
    nan = np.isnan(cols)
    gappy = np.flatnonzero(nan.any(axis=0))                 # counters with missing PUs
    if gappy.size:
        cols[nan] = 0.0
    cs = np.empty((n + 1, k))
    cs[0] = 0.0
    np.cumsum(cols, axis=0, out=cs[1:])
    out = cs[hi]
    out -= cs[lo]                                           # [nranges, k]
    width = hi - lo
    empty = width == 0
    if gappy.size:
        valid = ~nan[:, gappy]
        cc = np.empty((n + 1, gappy.size))
        cc[0] = 0.0
        np.cumsum(valid, axis=0, out=cc[1:])
        cnt = cc[hi] - cc[lo]
        sub = out[:, gappy]
        if mean:
            sub /= np.where(cnt > 0, cnt, 1.0)
        sub[cnt == 0] = np.nan
    if mean:
        out /= np.where(empty, 1.0, width.astype(np.float64))[:, None]
    if gappy.size:
        out[:, gappy] = sub
    if empty.any():
        out[empty] = np.nan
    return out


_PLANS: dict[int, tuple[weakref.ref[Topology], Plan]] = {}


def plan_for(topology: Topology) -> Plan:
    """The Plan of a topology, built on first use and kept while the topology lives."""
    key = id(topology)
    hit = _PLANS.get(key)
    if hit is not None and hit[0]() is topology:
        return hit[1]
    plan = Plan(topology)
    _PLANS[key] = (weakref.ref(topology, functools.partial(_forget, _PLANS, key)), plan)
    return plan


def _forget(plans: dict[int, tuple[weakref.ref[Topology], Plan]], key: int,
            ref: weakref.ref[Topology]) -> None:
    """Drop a dead topology's Plan. The dict is bound at creation because module globals may
    already be None when the callback runs at interpreter exit, and only the entry of *this*
    ref is dropped: a new topology may have been given the dead one's id meanwhile."""
    hit = plans.get(key)
    if hit is not None and hit[0] is ref:
        del plans[key]
