"""Counters per run interval in a Perfetto trace: a counter track per event under each traced
thread, and one per event for each process (its threads together), valued with the count so
far (scaled for multiplexing) at the end of each run interval, from 0 at its first. Perfetto's
UI shows a counter's rate as well as its value, so the count over any selection is a read-off.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from snumap_tui.export.perfetto import Machines, PerfettoWriter


def node_local(machines: Machines | None, ident: int) -> tuple[int | None, int, str]:
    """(machine id, the node's own id, label prefix) of a merged recording's tid or pid;
    (None, IDENT, "") for one machine's."""
    if machines is None:
        return None, ident, ""
    node, base = machines.split_tid(ident)
    return node + 1, ident - base, f"node {node + 1} "


def write_thread_counters(w: PerfettoWriter, rec: Any, machines: Machines | None = None
                          ) -> tuple[int, int, int]:
    """(counter values, tracks, threads and processes left out) written; a merged job's on
    each node's machine. Tracks for the MAX_ROWS threads and processes with the most on-CPU
    time, as the report ranks them (analysis/caps.py; a crafted chunk may name 200,000
    tids): the rest are counted."""
    if not hasattr(rec, "thread_counters"):
        return 0, 0, 0
    from snumap_tui.analysis.attribution import counted_on_cpu, rows_are_runs, scaled
    from snumap_tui.analysis.caps import MAX_ROWS, ranked
    from snumap_tui.trace.events import OUTSIDE

    s = scaled(rec.thread_counters())
    m = (s.tid > 0) & (s.pid != OUTSIDE)
    if not m.any():
        return 0, 0, 0
    tid, pid, end, first, vals = s.tid[m], s.pid[m], s.end[m], s.start[m], s.values[m]
    dur = (end - first).clip(min=0)
    runs = rows_are_runs(rec)
    n_values = n_tracks = left_out = 0
    for key in ("tid", "pid"):
        ids = tid if key == "tid" else pid
        order = np.lexsort((end, ids))              # each key's rows, in time order
        keys, at = np.unique(ids[order], return_index=True)
        bounds = np.append(at, len(order))
        # on-CPU time as the report takes it: the runs' lengths, or counted (perf, /proc)
        busy = np.add.reduceat(dur[order], at) if runs else \
            counted_on_cpu(s.events, np.add.reduceat(vals[order], at, axis=0))
        if busy is None:
            busy = np.zeros(len(keys))
        chosen = np.sort(ranked(keys, busy)[:MAX_ROWS])
        left_out += len(keys) - len(chosen)
        for j in chosen.tolist():
            k = int(keys[j])
            sel = order[bounds[j]:bounds[j + 1]]
            mid, local, node = node_local(machines, k)
            if key == "tid":
                _m, local_pid, _n = node_local(machines, int(pid[sel[0]]))
                parent = w.thread_track(local_pid, local, mid)
                label = f"{node}thread {local}"
            else:
                parent = w.track(f"snumap counters of {node}process {local}", machine_id=mid)
                label = f"{node}process {local}"
            cum = np.cumsum(vals[sel], axis=0)
            t = end[sel].tolist()
            for i, e in enumerate(s.events):
                u = w.track(f"{e} ({label})", parent=parent, unit="count", machine_id=mid)
                n_tracks += 1
                w.counter(u, int(first[sel[0]]), 0.0, mid)
                for t_ns, v in zip(t, cum[:, i].tolist()):
                    w.counter(u, int(t_ns), float(v), mid)
                n_values += len(t) + 1
    return n_values, n_tracks, left_out
