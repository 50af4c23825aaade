"""The nodes of a merged recording (format version 2, docs/format.md) and how each node's
events map onto the job's time base, PUs and task ids.

A merge copies every node's events chunks unchanged (only their headers' times move), after a
node chunk naming the node; the header's ``nodes`` list says, per node, what a reader adds:
``shift_ns`` to times, ``cpu_base`` to PU numbers, ``tid_base`` to every task id and process
id above 0 (0 is the idle task; -1 and -2 are markers, events.py). So a task of node k is
``tid_base[k] + tid`` everywhere in the merged recording: unique across nodes, and the node and
local tid come back with ``split_tid``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from snumap_tui.store import chunks as C

TASK_FIELDS = ("tid", "tid2", "pid", "pid2")


@dataclass
class NodeTable:
    nodes: list[dict[str, Any]]
    chunk_node: dict[int, int] = field(default_factory=dict)   # chunk offset -> node
    spans: dict[int, tuple[int, int]] = field(default_factory=dict)  # node -> its first, last t

    @classmethod
    def of(cls, rec: Any) -> NodeTable:
        table = cls(list(rec.header.get("nodes") or []))
        cur: int | None = None
        for h in rec._chunks:
            if h.kind == C.K_NODE:
                v = rec._payload(h)
                cur = int(v["node"]) if isinstance(v, dict) and "node" in v else None
                if cur is not None and not 0 <= cur < len(table.nodes):
                    cur = None
            elif h.kind in (C.K_EVENTS, C.K_NODE_SAMPLES) and cur is not None:
                table.chunk_node[h.offset] = cur
                lo, hi = table.spans.get(cur, (h.t_min, h.t_max))
                table.spans[cur] = (min(lo, h.t_min), max(hi, h.t_max))
        return table

    @cached_property
    def names(self) -> list[str]:
        return [str(n.get("node") or n.get("host") or f"node{i}")
                for i, n in enumerate(self.nodes)]

    def transform(self, offset: int, cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        k = self.chunk_node.get(offset)
        if k is None:
            return cols
        n = self.nodes[k]
        out = dict(cols)
        shift = int(n.get("shift_ns", 0))
        if shift and "t_ns" in out:
            out["t_ns"] = (out["t_ns"].astype(np.int64) + shift).astype(np.uint64)
        base = int(n.get("cpu_base", 0))
        if base and "cpu" in out:
            out["cpu"] = out["cpu"] + np.uint32(base)
        tb = int(n.get("tid_base", 0))
        if tb:
            for f in TASK_FIELDS:
                if f in out:
                    a = out[f]
                    out[f] = np.where(a > 0, a + np.int32(tb), a).astype(a.dtype)
        if "kind" in out and "arg" in out and base:
            # MIGRATE's arg is the CPU it came from (events.py)
            mig = out["kind"] == 4
            if mig.any():
                arg = out["arg"].copy()
                arg[mig] += base
                out["arg"] = arg
        return out

    def event_chunks_of(self, rec: Any, nodes: set[int]) -> list[int]:
        """Indexes (in ``rec.event_chunks`` order) of the events chunks of these nodes."""
        return [i for i, h in enumerate(rec._ev_chunks) if self.chunk_node.get(h.offset) in nodes]

    def row_spans(self, cpus: np.ndarray, t0: int, t1: int) -> tuple[np.ndarray, np.ndarray]:
        """Each CPU's node's (start, end), the job's where a CPU's node has no span."""
        lo = np.full(len(cpus), int(t0), dtype=np.int64)
        hi = np.full(len(cpus), int(t1), dtype=np.int64)
        for r, cpu in enumerate(np.asarray(cpus).tolist()):
            k = self.node_of_cpu(int(cpu))
            if k is not None and k in self.spans:
                lo[r], hi[r] = self.spans[k]
        return lo, hi

    def clip(self, cpus: np.ndarray, start: list[np.ndarray], end: list[np.ndarray],
             tid: list[np.ndarray]) -> None:
        """Keep each CPU's run intervals within its own node's recording (in place): the job's
        start and end are the earliest and latest node's, and a node's first and last
        intervals (from the start to its first switch, from its last switch to the end) must
        end where that node's recording did, as in its own report."""
        for r, cpu in enumerate(np.asarray(cpus).tolist()):
            k = self.node_of_cpu(int(cpu))
            if k is None or k not in self.spans or not len(start[r]):
                continue
            lo, hi = self.spans[k]
            s = np.maximum(start[r], lo)
            e = np.minimum(end[r], hi)
            keep = e > s
            start[r], end[r], tid[r] = s[keep], e[keep], tid[r][keep]

    # Built once: node_of_* run per CPU row and per task label (the replay's rows).
    @cached_property
    def _tid_bases(self) -> np.ndarray:
        return _bases(self.nodes, "tid_base")

    @cached_property
    def _cpu_bases(self) -> np.ndarray:
        return _bases(self.nodes, "cpu_base")

    def tid_bases(self) -> np.ndarray:
        """Each node's first merged tid, in node order (read-only)."""
        return self._tid_bases

    def cpu_bases(self) -> np.ndarray:
        """Each node's first merged CPU, in node order (read-only)."""
        return self._cpu_bases

    @cached_property
    def _by_tid(self) -> tuple[np.ndarray, np.ndarray]:
        return _ordered(self._tid_bases)

    @cached_property
    def _by_cpu(self) -> tuple[np.ndarray, np.ndarray]:
        return _ordered(self._cpu_bases)

    def node_of_tid(self, tid: int) -> int | None:
        if tid <= 0 or not self.nodes:
            return None
        return _node_of(self._by_tid, tid)

    def node_of_cpu(self, cpu: int) -> int | None:
        if not self.nodes:
            return None
        return _node_of(self._by_cpu, cpu)

    def split_tid(self, tid: int) -> tuple[str | None, int]:
        """(node name, the tid on that node) of a merged tid."""
        k = self.node_of_tid(tid)
        if k is None:
            return None, tid
        return self.names[k], tid - int(self._tid_bases[k])

    def label(self, tid: int) -> str:
        node, local = self.split_tid(tid)
        return f"{node}:{local}" if node is not None else str(tid)


def _ordered(bases: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the bases sorted, each one's node): merge writes them in node order, but a header
    edited or written by another tool need not be, and a lookup that assumed it named the
    wrong node for every PU and task."""
    order = np.argsort(bases, kind="stable")
    return bases[order], order


def _node_of(by: tuple[np.ndarray, np.ndarray], value: int) -> int | None:
    """The node whose base is the largest at or below VALUE (None: below every base)."""
    i = int(np.searchsorted(by[0], value, side="right")) - 1
    return int(by[1][i]) if i >= 0 else None


def _bases(nodes: list[dict[str, Any]], key: str) -> np.ndarray:
    out = np.array([int(n.get(key, 0)) for n in nodes], dtype=np.int64)
    out.setflags(write=False)
    return out
