"""The job's threads on each node, summed: per rank, per core and for the whole job (pure).

The findings and the imbalance read these for every node of every tick. Two ways to the same
numbers:

- ``thread_stats(v)``: one node, a Python pass over its threads (a node has a few dozen; a
  recording's nodes, whose ranks carry their own CPU, always come this way);
- ``prime(nodes)``: every live stream node of a tick at once, a few numpy passes over all
  their thread arrays joined (at 1,000 nodes the per-node passes were a third of the
  aggregator's CPU). It fills the same ``ThreadStats``; the per-core sums, which only a node
  with idle cores needs, are then made by the node's own pass when first asked for.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from snumap_tui.jobview import wire

if TYPE_CHECKING:
    from snumap_tui.jobview.aggregate import NodeView

#: What a thread must get of a PU to count as busy on it (the oversubscription finding's).
SHARE_MIN = 10.0
#: What a core (its PUs' threads together) must get to count as running the job.
USED_MIN = 10.0
#: Below this many nodes to prime, the per-node passes cost less than the joined one.
PRIME_MIN = 16


@dataclass(slots=True)
class ThreadStats:
    """One node's job threads, summed (the findings and the imbalance all read it)."""
    job_cpu: float                      # % of one PU, every thread of the job
    rank_cpu: list[float]               # per rank process, its threads summed
    shares: bool                        # some PU holds two threads at SHARE_MIN % or more
    cores_used: int                     # cores whose threads together got USED_MIN % or more
    multi: bool = True                  # some process has two threads (or more) there
    _core_cpu: dict[int, float] | None = None
    # what makes _core_cpu when first asked for: the node's threads' PUs and CPU %, and its
    # PU -> core map (not the node itself: a cycle per node and tick for the collector)
    _src: tuple[np.ndarray, np.ndarray, dict[int, int]] | None = None      # (t, c, pu_core)

    @property
    def core_cpu(self) -> dict[int, float]:
        """Per core (logical index), its PUs' threads summed."""
        if self._core_cpu is None:
            self._core_cpu = {}
            if self._src is not None:
                t, cpu, pu_core = self._src
                core_of, get = pu_core.get, self._core_cpu.get
                for pu, c in zip(t[:, wire.T_PU].tolist(), cpu.tolist()):
                    k = core_of(pu)
                    if k is not None and not math.isnan(c):
                        self._core_cpu[k] = get(k, 0.0) + c
            self._src = None
        return self._core_cpu


def thread_stats(v: NodeView) -> ThreadStats:
    if v._stats is None:
        v._stats = _thread_stats(v)
    return v._stats


def rank_cpu(v: NodeView) -> list[float]:
    """Each rank's CPU % on node V (its threads summed)."""
    return thread_stats(v).rank_cpu


def _thread_stats(v: NodeView) -> ThreadStats:
    per: dict[int, float] = {}
    core: dict[int, float] = {}
    busy: list[int] = []
    total = 0.0
    pu_core = v.pu_core
    if v._ranks is None and v._tc is not None:
        # a node has a few dozen threads of the job: plain Python beats numpy's call costs
        t, cpu = v._tc
        rows = ((p, pu, c, r) for (p, _tid, r, pu, _aff), c in zip(t.tolist(), cpu.tolist()))
    else:
        rows = ((r.pid, t.pu, math.nan if t.cpu_pct is None else t.cpu_pct,
                 -1 if r.rank is None else r.rank) for r in v.ranks for t in r.threads)
    core_of, per_get, core_get = pu_core.get, per.get, core.get   # bound once: ~16 rows a node
    isnan = math.isnan
    for p, pu, c, r in rows:
        if isnan(c):                            # not measured yet
            continue
        total += c
        if r >= 0:
            per[p] = per_get(p, 0.0) + c
        k = core_of(pu)
        if k is not None:
            core[k] = core_get(k, 0.0) + c
        if c >= SHARE_MIN and pu >= 0:
            busy.append(pu)
    if v._ranks is not None:                    # a recording's ranks carry their own CPU
        per = {r.pid: r.cpu_pct for r in v.ranks if r.rank is not None
               and r.cpu_pct is not None}
        total = sum(r.cpu_pct or 0.0 for r in v.ranks)
    multi = True
    if v._ranks is None and v._tc is not None:
        pids = v._tc[0][:, wire.T_PID].tolist()
        multi = len(set(pids)) != len(pids)
    return ThreadStats(total, list(per.values()), len(busy) != len(set(busy)),
                       sum(c >= USED_MIN for c in core.values()), multi, core)


def _joined(todo: list[NodeView]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every node's threads array and CPU % joined, and each row's node (index in TODO)."""
    ts = [v._tc[0] for v in todo]                   # type: ignore[index]
    cs = [v._tc[1] for v in todo]                   # type: ignore[index]
    lens = np.fromiter((len(c) for c in cs), np.int64, len(cs))
    node = np.repeat(np.arange(len(todo), dtype=np.int64), lens)
    return np.concatenate(ts), np.concatenate(cs).astype(np.float64), node


def _ascending(keys: np.ndarray) -> bool:
    return len(keys) < 2 or bool(np.all(keys[1:] >= keys[:-1]))


def _per_key(keys: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct KEYS (sorted) and the WEIGHTS summed per key. Keys a node's sampler wrote
    in order (its processes by pid, each one's threads together) need no sort."""
    if not len(keys):
        return keys, weights
    if _ascending(keys):
        first = np.concatenate(([True], keys[1:] != keys[:-1]))
        # bincount adds in row order, as each node's own pass does (reduceat sums pairwise
        # past 8 rows: other last bits, and a sum exactly at a threshold could differ)
        return keys[first], np.bincount(np.cumsum(first) - 1, weights=weights)
    uk, inv = np.unique(keys, return_inverse=True)
    return uk, np.bincount(inv.reshape(-1), weights=weights, minlength=len(uk))


def _twice(keys: np.ndarray, n: int) -> np.ndarray:
    """Per node (the key's high 32 bits, < N): whether some key of it is there twice."""
    if not _ascending(keys):
        keys = np.sort(keys)
    out = np.zeros(n, bool)
    out[keys[1:][keys[1:] == keys[:-1]] >> 32] = True
    return out


def _cores(todo: list[NodeView], t: np.ndarray, node: np.ndarray) -> np.ndarray:
    """Each row's core (logical index; -1: its PU is not one of the node's), from the nodes'
    PU -> core tables (one per hardware shape, joined once each)."""
    offsets: list[int] = []
    sizes: list[int] = []
    tables: dict[int, tuple[int, np.ndarray]] = {}
    at = 0
    for v in todo:
        lut = v.pu_lut
        assert lut is not None                      # prime's choice of nodes
        got = tables.get(id(lut))
        if got is None:
            got = tables[id(lut)] = (at, lut)
            at += len(lut)
        offsets.append(got[0])
        sizes.append(len(lut))
    offset, size = np.array(offsets, np.int64), np.array(sizes, np.int64)
    joined = np.concatenate([lut for _, lut in tables.values()] or [np.empty(0, np.int64)])
    pu = t[:, wire.T_PU].astype(np.int64)
    inside = (pu >= 0) & (pu < size[node])
    core = np.full(len(t), -1, np.int64)
    core[inside] = joined[offset[node[inside]] + pu[inside]]
    return core


def prime(nodes: Sequence[NodeView]) -> None:
    """ThreadStats for every stream node of NODES that has none yet, in one joined pass (the
    same numbers as each node's own pass: the per-rank sums in PID order, not the frame's)."""
    todo = [v for v in nodes if v._stats is None and v._ranks is None
            and v._tc is not None and v.pu_lut is not None]
    if len(todo) < PRIME_MIN:
        return
    n = len(todo)
    t, c, node = _joined(todo)
    ok = ~np.isnan(c)
    job = np.bincount(node[ok], weights=c[ok], minlength=n)
    # per rank: (node, pid) keys, summed; the ranks of node i are rows bounds[i]:bounds[i+1]
    r = ok & (t[:, wire.T_RANK] >= 0)
    pid = t[r, wire.T_PID].astype(np.int64) & 0xFFFFFFFF
    rk, rsum = _per_key(node[r] << 32 | pid, c[r])
    bounds = np.searchsorted(rk >> 32, np.arange(n + 1)).tolist()
    rsums = rsum.tolist()
    # a PU with two busy threads: a (node, PU) key twice among the busy rows
    pu = t[:, wire.T_PU].astype(np.int64)
    busy = ok & (c >= SHARE_MIN) & (pu >= 0)
    shares = _twice(node[busy] << 32 | pu[busy], n)
    # a process with two threads: a (node, pid) key twice among all rows
    multi = _twice(node << 32 | (t[:, wire.T_PID].astype(np.int64) & 0xFFFFFFFF), n)
    # cores whose threads together got USED_MIN %
    core = _cores(todo, t, node)
    has = ok & (core >= 0)
    ck, csum = _per_key(node[has] << 32 | core[has], c[has])
    used = np.bincount(ck[csum >= USED_MIN] >> 32, minlength=n)
    for i, (v, j, s, u, m) in enumerate(zip(todo, job.tolist(), shares.tolist(),
                                            used.tolist(), multi.tolist())):
        v._stats = ThreadStats(j, rsums[bounds[i]:bounds[i + 1]], s, u, m, None,
                               (*v._tc, v.pu_core))               # type: ignore[misc]
