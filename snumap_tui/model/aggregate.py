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

import weakref

import numpy as np

from snumap_tui.topology.model import Topology


class Plan:
    """Index arrays of one topology, for aligning source arrays and aggregating them."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
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
        self.numa_id_of_os = {o.os_index: o.id for o in topology.numa_nodes
                              if o.os_index is not None}

    # ---- aligning a source's arrays (keyed by OS index) onto logical PU positions -------
    def positions(self, cpus: np.ndarray) -> np.ndarray:
        """Logical PU position of each OS index, -1 for CPUs this topology does not have."""
        cpus = np.asarray(cpus, dtype=np.int64)
        ok = (cpus >= 0) & (cpus < self.pos_of_os.size)
        out = np.full(cpus.shape, -1, dtype=np.int64)
        out[ok] = self.pos_of_os[cpus[ok]]
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
        return _range_sum(matrix, self.lo, self.hi)

    def mean_pus(self, matrix: np.ndarray) -> np.ndarray:
        """Rows of per-PU values [k, npu] -> per-object means over the PUs with a value."""
        valid = ~np.isnan(matrix)
        sums = _cumsum0(np.where(valid, matrix, 0.0))
        counts = _cumsum0(valid.astype(np.float64))
        n = counts[:, self.hi] - counts[:, self.lo]
        with np.errstate(invalid="ignore", divide="ignore"):
            out = (sums[:, self.hi] - sums[:, self.lo]) / n
        out[n == 0] = np.nan
        return out

    def sum_subtrees(self, matrix: np.ndarray) -> np.ndarray:
        """Rows of values attached to objects [k, nobj] (NaN where none) -> the sum over each
        object's subtree (NUMA node memory to its package and the machine; package power to
        the machine). NaN where the subtree holds no value."""
        return _range_sum(matrix, self.ids, self.end)

    def type_mask(self, types: frozenset[str]) -> np.ndarray:
        """Boolean mask of the objects whose type is in ``types``."""
        m = self._type_masks.get(types)
        if m is None:
            m = np.array([t in types for t in self.types], dtype=bool)
            self._type_masks[types] = m
        return m


def _cumsum0(matrix: np.ndarray) -> np.ndarray:
    out = np.zeros((matrix.shape[0], matrix.shape[1] + 1))
    np.cumsum(matrix, axis=1, out=out[:, 1:])
    return out


def _range_sum(matrix: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    matrix = np.atleast_2d(matrix)
    valid = ~np.isnan(matrix)
    sums = _cumsum0(np.where(valid, matrix, 0.0))
    counts = _cumsum0(valid.astype(np.float64))
    out = sums[:, hi] - sums[:, lo]
    out[(counts[:, hi] - counts[:, lo]) == 0] = np.nan
    return out


_PLANS: dict[int, tuple[weakref.ref[Topology], Plan]] = {}


def plan_for(topology: Topology) -> Plan:
    """The Plan of a topology, built on first use and kept while the topology lives."""
    key = id(topology)
    hit = _PLANS.get(key)
    if hit is not None and hit[0]() is topology:
        return hit[1]
    plan = Plan(topology)
    _PLANS[key] = (weakref.ref(topology, lambda _r, k=key: _PLANS.pop(k, None)), plan)
    return plan
