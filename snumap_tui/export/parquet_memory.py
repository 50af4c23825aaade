"""The Parquet export's ``process_memory`` table: memory per traced process and NUMA node at
each sample (the recording's process memory chunk, store/procmem.py), with the node's memory
kind as hwloc names it.

Columns: ``t_ns`` u64, ``pid`` i32, ``comm`` str, ``node`` i32 (-1: the process's RSS),
``kind`` str (DRAM, HBM, ...; empty for the RSS row), ``bytes`` u64, ``exact`` bool (False:
the RSS split in the proportions of the last numa_maps walk).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from snumap_tui.analysis.memory import node_kinds


def write_process_memory(pa: Any, pq: Any, path: Path, rec: Any) -> int:
    rows = rec.process_memory()
    kinds = node_kinds(rec.topology)
    tasks = getattr(rec, "tasks", {}) or {}
    pids = rows["pid"].astype(np.int64)
    comm = {int(p): (tasks[int(p)].comm if int(p) in tasks else "")
            for p in np.unique(pids).tolist()}
    pq.write_table(pa.table({
        "t_ns": pa.array(rows["t_ns"], pa.uint64()),
        "pid": pa.array(rows["pid"], pa.int32()),
        "comm": pa.array([comm[p] for p in pids.tolist()], pa.string()).dictionary_encode(),
        "node": pa.array(rows["node"], pa.int32()),
        "kind": pa.array([kinds.get(n, "DRAM") if n >= 0 else ""
                          for n in rows["node"].tolist()], pa.string()).dictionary_encode(),
        "bytes": pa.array(rows["bytes"], pa.uint64()),
        "exact": pa.array(rows["exact"], pa.bool_()),
    }), path, compression="zstd")
    return len(rows)
