"""Regions of parallel programs in a Perfetto trace: each instance a slice on its thread's track
(OpenMP regions, MPI calls, `--probe` functions, marker phases), each mark an instant.

Perfetto shows a track whose TrackDescriptor names a thread (``thread {pid, tid}``) under that
thread, beside its scheduling; slices of one thread nest as the calls did. Categories carry the
region's kind (``omp``, ``mpi``, ``user``, ``marker``) and ``wait`` for the calls a thread waits in
(barriers, MPI waits), so the UI's filters and trace_processor's ``slice.category`` find them.
A region without a thread (a marker line without ``@TID``) goes on one global track. An
instance still open at the recording's start or end is clipped to it, its slice annotated
``clipped`` = ``at_start`` or ``at_end`` (trace_processor: ``args`` key ``debug.clipped``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from snumap_tui.export.perfetto import Machines, PerfettoWriter

NO_THREAD_TRACK = "snumap regions (no thread)"


def write_regions(w: PerfettoWriter, rec: Any, machines: Machines | None
                  ) -> tuple[int, int, int]:
    """Every region instance and mark of ``rec``; (slices, instants, slices clipped to the
    recording) written."""
    if not hasattr(rec, "regions"):
        return 0, 0, 0
    from snumap_tui.analysis.regions import CUT_NAMES, instances
    from snumap_tui.trace.region_catalog import MARK

    reg = rec.regions()
    if not len(reg.rows):
        return 0, 0, 0
    tracks: dict[tuple[int, int], tuple[int, int | None]] = {}

    def track_of(pid: int, tid: int) -> tuple[int, int | None]:
        """(track uuid, machine id) of a thread, made at its first use."""
        got = tracks.get((pid, tid))
        if got is None:
            if tid <= 0:
                got = (w.track(NO_THREAD_TRACK), None)
            elif machines is None:
                got = (w.thread_track(pid, tid), None)
            else:           # a merged job: the node's own machine, pid and tid
                node, base = machines.split_tid(tid)
                m = node + 1
                got = (w.thread_track(pid - base if pid > 0 else pid, tid - base, m), m)
            tracks[(pid, tid)] = got
        return got

    names = reg.names
    cats = [(n.kind, "wait") if n.wait else (n.kind,) for n in names]
    # An instance open at the recording's start or end: clipped to it, and said so.
    inst, cut = instances(reg.rows, (int(rec.t_start), int(rec.t_end)))
    # Outer before inner at one start (the longer first), so begins and ends nest.
    order = np.lexsort((-(inst.end - inst.start), inst.start))
    for i in order.tolist():
        rid, tid, pid = int(inst.rid[i]), int(inst.tid[i]), int(inst.pid[i])
        track, m = track_of(pid, tid)
        c = int(cut[i])
        w.slice(track, int(inst.start[i]), int(inst.end[i]), names[rid].name, cats[rid], m,
                {"clipped": CUT_NAMES[c]} if c else None)
    marks = reg.rows[reg.rows["op"] == MARK]
    for r in marks:
        rid = int(r["rid"])
        track, m = track_of(int(r["pid"]), int(r["tid"]))
        w.instant(track, int(r["t_ns"]), names[rid].name, cats[rid], m)
    return len(order), len(marks), int(np.count_nonzero(cut))
