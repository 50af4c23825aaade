"""A recording as a directory of Parquet tables, for DuckDB, pandas, Polars or Spark
(``snumap export FILE --format parquet -o DIR``; needs pyarrow, the ``parquet`` extra).

Tables (the schema is in docs/format.md, "Parquet export"):
- ``events.parquet``: every scheduling event, one row each, ``kind`` by name;
- ``intervals.parquet``: run intervals (who ran on which PU from when to when) with the PU's
  NUMA node and package, the same intervals `snumap report` and the replay use;
- ``samples.parquet``: every metric at every object per frame, long form, the numbers `snumap
  top` shows (``derive`` over consecutive samples; not-available values left out);
- ``tasks.parquet``: every task name the tracer saw, with when (a comm changes at exec);
- ``process_memory.parquet``: memory per traced process and NUMA node at each sample
  (export/parquet_memory.py);
- ``topology.parquet``: one row per topology object, with the package, NUMA node and core
  each belongs to (a PU's row maps a ``cpu`` column to its place in the machine);
- ``thread_counters.parquet``, ``regions.parquet``: counters per run interval and region
  instances (export/parquet_attr.py).

Times are the recording's CLOCK_MONOTONIC nanoseconds, as in every export. Events and samples
are written a store chunk / a batch of frames at a time (one row group each), so memory stays
bounded by a chunk; intervals are built once, as the report builds them (20 bytes each).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from snumap_tui.analysis.intervals import UNTRACED
from snumap_tui.analysis.load import load
from snumap_tui.errors import SnumapError
from snumap_tui.export.counters import frames
from snumap_tui.export.parquet_attr import write_regions, write_thread_counters
from snumap_tui.export.parquet_memory import write_process_memory
from snumap_tui.export.tables import UNTRACED_COMM, metric_rows
from snumap_tui.extras import install_extra
from snumap_tui.store.columns import EVENT_FIELDS
from snumap_tui.topology.model import Topology
from snumap_tui.trace.events import KIND_NAMES

SAMPLE_ROWS_PER_GROUP = 1 << 20
TABLES = ("events", "intervals", "samples", "tasks", "topology",
          "process_memory", "thread_counters", "regions")     # NAME.parquet each


def _pa() -> Any:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise SnumapError(f"--format parquet needs pyarrow: {install_extra('parquet')}") \
            from None
    return pa, pq


def _dictionary(pa: Any, codes: np.ndarray, names: list[str]) -> Any:
    return pa.DictionaryArray.from_arrays(pa.array(codes, type=pa.int32()),
                                          pa.array(names, type=pa.string()))


def _place(topology: Topology) -> dict[str, np.ndarray]:
    """Per topology object id: the OS index of its package, NUMA node and core (-1: none or
    more than one)."""
    n = len(topology)
    out = {k: np.full(n, -1, dtype=np.int32) for k in ("package", "numa_node", "core")}
    for obj in topology:
        pus = sorted(obj.cpuset)
        if not pus:
            continue
        for key, fn in (("package", topology.package_of), ("numa_node", topology.numa_of)):
            owners = {getattr(fn(p), "os_index", None) for p in pus}
            one = owners.pop() if len(owners) == 1 else None
            if one is not None:
                out[key][obj.id] = int(one)
        cores = [a.os_index for a in [obj, *topology.ancestors(obj)] if a.type == "Core"]
        if len(cores) == 1 and cores[0] is not None:
            out["core"][obj.id] = cores[0]
    return out


def topology_table(pa: Any, topology: Topology) -> Any:
    place = _place(topology)
    objs = list(topology)
    return pa.table({
        "id": pa.array([o.id for o in objs], pa.int32()),
        "type": pa.array([o.type for o in objs], pa.string()),
        "os_index": pa.array([o.os_index for o in objs], pa.int32()),
        "logical_index": pa.array([o.logical_index for o in objs], pa.int32()),
        "depth": pa.array([o.depth for o in objs], pa.int32()),
        "parent_id": pa.array([o.parent for o in objs], pa.int32()),
        "name": pa.array([o.name for o in objs], pa.string()),
        "package": pa.array(place["package"]),
        "numa_node": pa.array(place["numa_node"]),
        "core": pa.array(place["core"]),
        "cpus": pa.array([sorted(o.cpuset) for o in objs], pa.list_(pa.int32())),
        "cache_size": pa.array([o.cache_size for o in objs], pa.int64()),
        "local_memory": pa.array([o.local_memory for o in objs], pa.int64()),
    })


def _write_events(pa: Any, pq: Any, path: Path, rec: Any) -> int:
    names = [KIND_NAMES.get(k, str(k)) for k in range(256)]
    schema = pa.schema([("t_ns", pa.uint64()), ("cpu", pa.uint32()),
                        ("kind", pa.dictionary(pa.int32(), pa.string())),
                        ("tid", pa.int32()), ("tid2", pa.int32()), ("pid", pa.int32()),
                        ("pid2", pa.int32()), ("arg", pa.int64())])
    n = 0
    with pq.ParquetWriter(path, schema, compression="zstd") as w:
        for cols in rec.iter_event_columns(EVENT_FIELDS):
            arrays = [pa.array(cols[f]) for f in ("t_ns", "cpu")]
            arrays.append(_dictionary(pa, cols["kind"].astype(np.int32), names))
            arrays += [pa.array(cols[f]) for f in ("tid", "tid2", "pid", "pid2", "arg")]
            w.write_table(pa.Table.from_arrays(arrays, schema=schema))
            n += len(cols["t_ns"])
    return n


def _write_intervals(pa: Any, pq: Any, path: Path, rec: Any) -> int:
    """One row group per PU (or per million intervals of one PU): the intervals are held
    once (as the report holds them), their table a row group at a time."""
    iv = load(rec).intervals
    topo = rec.topology
    place = _place(topo)
    pu_ids = {o.os_index: o.id for o in topo.pus}
    tasks = getattr(rec, "tasks", {}) or {}
    comms = sorted({t.comm for t in tasks.values()} | {UNTRACED_COMM, ""})
    code = {c: i for i, c in enumerate(comms)}
    comm_of = {tid: code[info.comm] for tid, info in tasks.items()}
    comm_of[UNTRACED] = code[UNTRACED_COMM]
    schema = pa.schema([("cpu", pa.int32()), ("start_ns", pa.int64()), ("end_ns", pa.int64()),
                        ("dur_ns", pa.int64()), ("tid", pa.int32()), ("pid", pa.int32()),
                        ("comm", pa.dictionary(pa.int32(), pa.string())),
                        ("numa_node", pa.int32()), ("package", pa.int32())])
    n = 0
    with pq.ParquetWriter(path, schema, compression="zstd") as w:
        for r, cpu in enumerate(iv.cpus.tolist()):
            oid = pu_ids.get(cpu)
            node = int(place["numa_node"][oid]) if oid is not None else -1
            pkg = int(place["package"][oid]) if oid is not None else -1
            for a in range(0, len(iv.start[r]), 1 << 20):
                st, en = iv.start[r][a:a + (1 << 20)], iv.end[r][a:a + (1 << 20)]
                tid = iv.tid[r][a:a + (1 << 20)]
                utid, inv = np.unique(tid, return_inverse=True)
                codes = np.array([comm_of.get(t, code[""]) for t in utid.tolist()], np.int32)
                k = len(st)
                w.write_table(pa.Table.from_arrays([
                    pa.array(np.full(k, cpu, np.int32)), pa.array(st), pa.array(en),
                    pa.array(en - st), pa.array(tid), pa.array(iv.pids(tid).astype(np.int32)),
                    _dictionary(pa, codes[inv.reshape(-1)], comms),
                    pa.array(np.full(k, node, np.int32)), pa.array(np.full(k, pkg, np.int32)),
                ], schema=schema))
                n += k
    return n


def _write_samples(pa: Any, pq: Any, path: Path, rec: Any) -> int:
    topo = rec.topology
    types = sorted({o.type for o in topo})
    type_code = np.array([types.index(o.type) for o in topo], dtype=np.int32)
    os_idx = np.array([-1 if o.os_index is None else o.os_index for o in topo], dtype=np.int32)
    metrics: list[str] = []
    schema = pa.schema([("t_ns", pa.uint64()), ("wall_ns", pa.uint64()),
                        ("dt_s", pa.float64()),
                        ("metric", pa.dictionary(pa.int32(), pa.string())),
                        ("object_type", pa.dictionary(pa.int32(), pa.string())),
                        ("os_index", pa.int32()), ("value", pa.float64())])
    buf: dict[str, list[np.ndarray]] = {k: [] for k in ("t", "w", "dt", "m", "o", "v")}
    n = pending = 0

    def flush(w: Any) -> None:
        nonlocal pending
        if not pending:
            return
        cat = {k: np.concatenate(v) for k, v in buf.items()}
        for v in buf.values():
            v.clear()
        o = cat["o"]
        w.write_table(pa.Table.from_arrays([
            pa.array(cat["t"]), pa.array(cat["w"]), pa.array(cat["dt"]),
            _dictionary(pa, cat["m"], list(metrics)), _dictionary(pa, type_code[o], types),
            pa.array(os_idx[o]), pa.array(cat["v"])], schema=schema))
        pending = 0

    with pq.ParquetWriter(path, schema, compression="zstd") as w:
        for fr, metric, obj, vals in metric_rows(frames(rec)):
            if metric not in metrics:
                metrics.append(metric)
            k = len(obj)
            buf["t"].append(np.full(k, fr.t_ns, np.uint64))
            buf["w"].append(np.full(k, fr.wall_ns, np.uint64))
            buf["dt"].append(np.full(k, fr.dt_s))
            buf["m"].append(np.full(k, metrics.index(metric), np.int32))
            buf["o"].append(obj)
            buf["v"].append(vals)
            pending += k
            n += k
            if pending >= SAMPLE_ROWS_PER_GROUP:
                flush(w)
        flush(w)
    return n


def _write_tasks(pa: Any, pq: Any, path: Path, rec: Any) -> int:
    hist = list(getattr(rec, "task_history", []) or [])
    pq.write_table(pa.table({
        "tid": pa.array([t.tid for t in hist], pa.int32()),
        "pid": pa.array([t.pid for t in hist], pa.int32()),
        "ppid": pa.array([t.ppid for t in hist], pa.int32()),
        "comm": pa.array([t.comm for t in hist], pa.string()),
        "t_ns": pa.array([t.t_ns for t in hist], pa.uint64()),
    }), path, compression="zstd")
    return len(hist)


def write_parquet(out_dir: Path, rec: Any) -> dict[str, int]:
    """Write the eight tables into the directory ``out_dir``, which exists (`snumap export`
    gives it a temporary directory beside the output, renamed when complete: safeout)."""
    pa, pq = _pa()
    counts = {"events": _write_events(pa, pq, out_dir / "events.parquet", rec),
              "intervals": _write_intervals(pa, pq, out_dir / "intervals.parquet", rec),
              "samples": _write_samples(pa, pq, out_dir / "samples.parquet", rec),
              "tasks": _write_tasks(pa, pq, out_dir / "tasks.parquet", rec),
              "thread_counters": write_thread_counters(pa, pq, out_dir
                                                       / "thread_counters.parquet", rec),
              "regions": write_regions(pa, pq, out_dir / "regions.parquet", rec)}
    counts["process_memory"] = write_process_memory(pa, pq, out_dir / "process_memory.parquet",
                                                    rec)
    pq.write_table(topology_table(pa, rec.topology), out_dir / "topology.parquet",
                   compression="zstd")
    counts["topology objects"] = len(rec.topology)
    return counts
