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
                          ) -> tuple[int, int]:
    """(counter values, tracks) written; a merged job's on each node's machine."""
    if not hasattr(rec, "thread_counters"):
        return 0, 0
    from snumap_tui.analysis.attribution import scaled
    from snumap_tui.trace.events import OUTSIDE

    s = scaled(rec.thread_counters())
    m = (s.tid > 0) & (s.pid != OUTSIDE)
    if not m.any():
        return 0, 0
    tid, pid, end, first, vals = s.tid[m], s.pid[m], s.end[m], s.start[m], s.values[m]
    n_values = n_tracks = 0
    for key, parent in (("tid", None), ("pid", None)):
        ids = tid if key == "tid" else pid
        for k in np.unique(ids).tolist():
            sel = np.flatnonzero(ids == k)
            sel = sel[np.argsort(end[sel], kind="stable")]
            m, local, node = node_local(machines, int(k))
            if key == "tid":
                _m, local_pid, _n = node_local(machines, int(pid[sel[0]]))
                parent = w.thread_track(local_pid, local, m)
                label = f"{node}thread {local}"
            else:
                parent = w.track(f"snumap counters of {node}process {local}", machine_id=m)
                label = f"{node}process {local}"
            cum = np.cumsum(vals[sel], axis=0)
            t = end[sel].tolist()
            for i, e in enumerate(s.events):
                u = w.track(f"{e} ({label})", parent=parent, unit="count", machine_id=m)
                n_tracks += 1
                w.counter(u, int(first[sel[0]]), 0.0, m)
                for t_ns, v in zip(t, cum[:, i].tolist()):
                    w.counter(u, int(t_ns), float(v), m)
                n_values += len(t) + 1
    return n_values, n_tracks
