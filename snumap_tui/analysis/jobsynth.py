"""Synthetic node streams of a job, in the wire format of `top --stream` (jobview/wire.py).

Why: the aggregator's benchmark (1,000 nodes, no cluster), the job view's pilot tests and its
64-node screenshot need many nodes' streams. These are made from a regular topology
(analysis/synth.py) with ranks pinned one per core and a utilisation that follows a seeded
pattern; they never reach a finding of a real job (`top --job` reads srun's output only).
"""

from __future__ import annotations

import numpy as np

from snumap_tui.analysis.synth import synthetic_topology
from snumap_tui.jobview import wire
from snumap_tui.topology.model import Topology


class SyntheticNode:
    """One node's stream: ``topology_lines()`` once, then ``frame_lines(step)``."""

    def __init__(self, index: int, topo: Topology | None = None, ranks: int = 16,
                 threads: int = 1, seed: int = 0, slow: bool = False) -> None:
        self.index = index
        self.topo = topo or synthetic_topology(2, 2, 4, 2)
        self.name = f"node{index:04d}"
        self.ranks = ranks
        self.threads = threads
        self.rng = np.random.default_rng(seed * 100_003 + index)
        self.slow = slow
        pus = self.topo.pus
        self.pu_os = np.array([p.os_index for p in pus], dtype=np.int32)
        self.ranges = np.array([o.pu_range for o in self.topo], dtype=np.int64)
        self.numa = [o for o in self.topo if o.type == "NUMANode"]
        cores = self.topo.by_type("Core")
        # rank r's thread t on the first PU of core (r * threads + t) mod cores
        self.place = [[int(self.topo.children_of(cores[(r * threads + t) % len(cores)])[0]
                           .os_index or 0) for t in range(threads)] for r in range(ranks)]
        self.seq = 0
        self.encoder = wire.Encoder()

    def topology_lines(self) -> bytes:
        head = {"node": self.name, "job": "synthetic", "interval_s": 1.0, "pid": 0,
                "host": self.name, "kernel": "synthetic", "cpu_model": "synthetic",
                "alloc": f"0-{len(self.pu_os) - 1}", "topology": self.topo.to_dict(),
                "sources": {}}
        self.seq += 1
        return wire.encode("T", self.seq, head)

    def frame_lines(self, step: int) -> bytes:
        base = 35.0 if self.slow else 90.0
        pu_util = np.zeros(len(self.pu_os))
        threads = []
        procs = []
        for r, pus in enumerate(self.place):
            rank = self.index * self.ranks + r
            for t, pu in enumerate(pus):
                cpu = float(np.clip(base + self.rng.normal(0, 5), 0, 100))
                pu_util[int(np.flatnonzero(self.pu_os == pu)[0])] += cpu
                threads.append((100_000 + rank, 100_000 + rank + t * 7919, rank, pu, cpu,
                                str(pus[0]) if self.threads == 1 else ""))
            node = self.numa[(pus[0] * len(self.numa)) // max(1, len(self.pu_os))]
            procs.append({"pid": 100_000 + rank, "rank": rank, "comm": "app", "step": "0",
                          "rss": 1 << 30, "numa": {node.os_index or 0: 1 << 30}})
        pu_util = np.clip(pu_util + self.rng.uniform(0, 3, len(pu_util)), 0, 100)
        csum = np.concatenate([[0.0], np.cumsum(pu_util)])
        width = np.maximum(self.ranges[:, 1] - self.ranges[:, 0], 1)
        util = (csum[self.ranges[:, 1]] - csum[self.ranges[:, 0]]) / width
        total = np.full(len(self.topo), np.nan)
        used = np.full(len(self.topo), np.nan)
        for n in self.numa:
            total[n.id], used[n.id] = 64 * 2.0**30, (8 + step % 4) * 2.0**30
        head, arrays = wire.pack_frame(
            step * 1_000_000_000, 1_800_000_000_000_000_000 + step * 10**9, 1.0,
            {"util_pct": util, "mem_total_bytes": total, "mem_used_bytes": used},
            threads, procs)
        self.seq += 1
        return self.encoder.frame(self.seq, head, arrays)


def synthetic_job(nodes: int, ranks: int = 16, threads: int = 1, seed: int = 0,
                  slow: tuple[int, ...] = ()) -> list[SyntheticNode]:
    topo = synthetic_topology(2, 2, 4, 2)
    return [SyntheticNode(i, topo, ranks, threads, seed, slow=i in slow) for i in range(nodes)]
