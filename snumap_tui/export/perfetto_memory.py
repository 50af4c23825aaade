"""Memory per traced process and NUMA node in a Perfetto trace: one counter track per process
and node (and one for its RSS), under the process, in bytes, a value at each recorded sample
where it changed (the process memory chunk, store/procmem.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from snumap_tui.analysis.memory import (
    RSS_NODE,
    bounded,
    bounded_timelines,
    node_kinds,
    topology_nodes,
)

if TYPE_CHECKING:
    from snumap_tui.export.perfetto import Machines, PerfettoWriter


def write_memory(w: PerfettoWriter, rec: Any, machines: Machines | None = None
                 ) -> tuple[int, int]:
    """(counter values written, processes left out past the cap: analysis/memory.py
    ``bounded``); (0, 0) for a recording without process memory. A merged job's on each
    node's machine, with the node's own pids."""
    from snumap_tui.export.perfetto_counters import node_local

    if not hasattr(rec, "process_memory"):
        return 0, 0
    kept = bounded(rec.process_memory(), topology_nodes(rec.topology))
    tls = bounded_timelines(kept.rows)
    if not tls:
        return 0, kept.processes_left_out
    kinds = node_kinds(rec.topology)
    n = 0
    for pid, tl in sorted(tls.items()):
        m, local, host = node_local(machines, pid)
        parent = w.process_track(local, m)
        for node, v in sorted(tl.nodes.items()):
            name = (f"snumap memory RSS ({host}pid {local})" if node == RSS_NODE else
                    f"snumap memory N{node} {kinds.get(node, 'DRAM')} ({host}pid {local})")
            track = w.track(name, parent=parent, unit="bytes", machine_id=m)
            keep = np.ones(len(v), dtype=bool)
            keep[1:] = v[1:] != v[:-1]          # only changes (and the first value)
            keep[-1] = True                     # and the last, so the track ends there
            for t, b in zip(tl.t_ns[keep].tolist(), v[keep].tolist()):
                w.counter(track, int(t), float(b), m)
                n += 1
    return n, kept.processes_left_out
