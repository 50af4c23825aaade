"""Crafted recordings of the thread counters (16) and process memory (17) chunk kinds, as a
hostile writer makes them within each kind's schema: one process spread over every NUMA node
number the schema allows (-1..65535), a flood of distinct pids, a flood of distinct tids, a
flood of distinct PU numbers. The readers must stay linear in rows and bounded by distinct
keys (issue 30 items 10 and 11): tests/test_chunk_bounds.py, the fuzzer (tests/fuzz_inputs.py,
family "chunks") and bench/chunk_bounds.py use them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from snumap_tui.analysis.synth import synthetic_topology, write_recording
from snumap_tui.store.procmem import MEMORY_DTYPE
from snumap_tui.trace.counters import counter_dtype
from snumap_tui.trace.events import EVENT_DTYPE, SWITCH, TaskInfo

T0 = 10**9
EVENTS = ["task-clock", "page-faults"]
TOPOLOGY = synthetic_topology(1, 2, 1, 1, host="crafted")      # NUMA nodes 0 and 1, 2 PUs


def _base_events(pids: list[int]) -> tuple[np.ndarray, list[TaskInfo]]:
    """A few switches so the recording has a time span and traced tasks."""
    ev = np.zeros(2 * len(pids), dtype=EVENT_DTYPE)
    for i, p in enumerate(pids):
        ev[2 * i] = (T0 + 10 * i, i % 2, SWITCH, 0, p, 0, p, 0)
        ev[2 * i + 1] = (T0 + 10 * i + 5 * 10**8, i % 2, SWITCH, p, 0, p, 0, 1)
    ev = np.sort(ev, order="t_ns")
    return ev, [TaskInfo(tid=p, pid=p, comm=f"p{p}", t_ns=T0) for p in pids]


def memory_nodes(path: Path, nodes: int = 65537) -> Path:
    """One pid whose memory rows name every node -1..nodes-2, one row per sample time: a
    per-node timeline of every sample time would be nodes x times."""
    rows = np.zeros(nodes, dtype=MEMORY_DTYPE)
    rows["t_ns"] = T0 + np.arange(nodes, dtype=np.uint64) * 1000
    rows["pid"] = 100
    rows["node"] = np.arange(-1, nodes - 1, dtype=np.int32)
    rows["bytes"] = 1 << 20
    rows["exact"] = True
    return _with_memory(path, rows, [100])


def memory_pids(path: Path, pids: int = 300_000) -> Path:
    """PIDS distinct processes, two rows each (RSS and node 0) at one sample."""
    p = np.arange(1, pids + 1, dtype=np.int32)
    rows = np.zeros(2 * pids, dtype=MEMORY_DTYPE)
    rows["t_ns"] = T0 + 1000
    rows["pid"] = np.repeat(p, 2)
    rows["node"] = np.tile(np.array([-1, 0], np.int32), pids)
    rows["bytes"] = np.repeat(p.astype(np.uint64) << 12, 2)
    rows["exact"] = True
    return _with_memory(path, rows, [1, 2])


def _with_memory(path: Path, rows: np.ndarray, pids: list[int]) -> Path:
    from snumap_tui.store import Writer
    from snumap_tui.trace.events import EventBatch

    ev, tasks = _base_events(pids)
    hdr = {"host": "crafted", "backend": "synthetic", "topology": TOPOLOGY.to_dict(),
           "start_monotonic_ns": T0, "process_memory": {"source": "crafted"}}
    with Writer(path, hdr, force=True) as w:
        w.add_events(EventBatch(events=ev, tasks=tasks))
        w.add_process_memory(rows)
    return path


def counter_tids(path: Path, tids: int = 200_000, cpus: int = 2) -> Path:
    """TIDS distinct threads (in TIDS // 4 processes), one run interval each, on CPUS
    distinct PU numbers (a crafted chunk may name up to 2^32)."""
    n = tids
    rows = np.zeros(n, counter_dtype(len(EVENTS)))
    t = np.arange(n, dtype=np.uint64)
    rows["tid"] = np.arange(1000, 1000 + n, dtype=np.int32)
    rows["pid"] = 1000 + (np.arange(n, dtype=np.int32) // 4) * 4
    rows["cpu"] = (np.arange(n) % cpus).astype(np.uint32)
    rows["t_start"] = T0 + t * 1000
    rows["t_end"] = T0 + t * 1000 + 900
    rows["value"][:, 0] = 900
    rows["value"][:, 1] = 3
    rows["enabled"] = 900
    rows["running"] = 900
    rows["n"] = len(EVENTS)
    ev, tasks = _base_events([1000, 1001])
    return write_recording(path, TOPOLOGY, ev, tasks=tasks, counters=(rows, EVENTS),
                           header={"counters": {"source": "libbpf: crafted",
                                                "events": EVENTS}})


CRAFTED = {"memory over nodes -1..65535": memory_nodes, "memory of 300k pids": memory_pids,
           "counters of 200k tids": counter_tids,
           "counters on 200k PU numbers": lambda p: counter_tids(p, 200_000, cpus=200_000)}
