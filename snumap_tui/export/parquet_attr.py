"""The Parquet tables of attribution (docs/format.md, "Parquet export"): ``thread_counters``
(one row per run interval of a traced thread with its counter deltas: tid, pid, cpu,
start_ns, end_ns, then per event its count and its enabled and running nanoseconds, so a
multiplexed count can be scaled as perf does: count * enabled / running) and ``regions`` (one
row per region instance -- a thread inside a parallel region's body, a call, a marker pair --
and one per ``mark`` line; an instance open at the recording's start or end clipped to it,
``clipped`` saying where)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from snumap_tui.analysis.regions import CUT_NAMES, instances
from snumap_tui.trace.region_catalog import MARK


def write_thread_counters(pa: Any, pq: Any, path: Path, rec: Any) -> int:
    tc = rec.thread_counters()
    r = tc.rows
    n = len(tc.events)
    cols: dict[str, Any] = {
        "tid": pa.array(r["tid"].astype(np.int32)), "pid": pa.array(r["pid"].astype(np.int32)),
        "cpu": pa.array(r["cpu"].astype(np.int32)),
        "start_ns": pa.array(r["t_start"].astype(np.int64)),
        "end_ns": pa.array(r["t_end"].astype(np.int64))}
    for i, e in enumerate(tc.events):
        cols[e] = pa.array(r["value"].reshape(len(r), n)[:, i].astype(np.uint64))
        cols[f"{e}:enabled_ns"] = pa.array(r["enabled"].reshape(len(r), n)[:, i]
                                           .astype(np.uint64))
        cols[f"{e}:running_ns"] = pa.array(r["running"].reshape(len(r), n)[:, i]
                                           .astype(np.uint64))
    pq.write_table(pa.table(cols), path, compression="zstd")
    return len(r)


def write_regions(pa: Any, pq: Any, path: Path, rec: Any) -> int:
    reg = rec.regions()
    inst, cut = instances(reg.rows, (int(rec.t_start), int(rec.t_end)))
    marks = reg.rows[reg.rows["op"] == MARK]
    rid = np.concatenate([inst.rid, marks["rid"]]).astype(np.int64)
    start = np.concatenate([inst.start, marks["t_ns"]]).astype(np.int64)
    end = np.concatenate([inst.end, marks["t_ns"]]).astype(np.int64)
    names = reg.names

    def col(attr: str) -> list[Any]:
        return [getattr(names[i], attr) for i in rid.tolist()]

    pq.write_table(pa.table({
        "name": pa.array(col("name"), pa.string()).dictionary_encode(),
        "kind": pa.array(col("kind"), pa.string()).dictionary_encode(),
        "role": pa.array(col("role"), pa.string()).dictionary_encode(),
        "wait": pa.array(col("wait"), pa.bool_()),
        "op": pa.array(["instance"] * len(inst) + ["mark"] * len(marks),
                       pa.string()).dictionary_encode(),
        "tid": pa.array(np.concatenate([inst.tid, marks["tid"]]).astype(np.int32)),
        "pid": pa.array(np.concatenate([inst.pid, marks["pid"]]).astype(np.int32)),
        "start_ns": pa.array(start), "end_ns": pa.array(end),
        "dur_ns": pa.array(end - start),
        # An instance open at the recording's start or end: clipped to it (null: whole).
        "clipped": pa.array([CUT_NAMES.get(c) for c in cut.tolist()] + [None] * len(marks),
                            pa.string()).dictionary_encode()}), path, compression="zstd")
    return len(rid)
