"""A recording's events gathered into whole columns, and its tables handed on: the parts of
``Recording`` (store/reader.py) that work on decoded chunks, not on the file.

``gather`` fills preallocated columns chunk by chunk in time order (chunks overlap in time only
when a tracer delivered events late), so peak memory is the output plus one chunk;
``dataframes`` gives the events, tasks, sample times, markers and lost counts as pandas
DataFrames when pandas is installed, else as numpy arrays.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from snumap_tui.trace.events import TaskInfo


def gather(out: dict[str, np.ndarray], it: Iterator[dict[str, np.ndarray]],
           damaged: list[str]) -> int:
    """Copy chunks from ``it`` into the preallocated ``out`` columns, keeping time order;
    returns how many rows were filled. A chunk that starts before the end of what is already
    there is merged with just the overlapping tail, so memory stays at the output size. More
    rows than ``out`` holds (an index that under-counted) is said in ``damaged``."""
    n = 0
    t_out = out["t_ns"]
    cap = t_out.size
    for cols in it:
        t = cols["t_ns"]
        k = int(t.size)
        if k == 0:
            continue
        if n + k > cap:  # headers under-counted (cannot happen with a valid file): stop
            damaged.append("more events than the index announced; rest not read")
            break
        if n and t[0] < t_out[n - 1]:
            p = int(np.searchsorted(t_out[:n], t[0], side="right"))
            merged_t = np.concatenate([t_out[p:n], t])
            order = np.argsort(merged_t, kind="stable")
            for f, dst in out.items():
                dst[p:n + k] = np.concatenate([dst[p:n], cols[f]])[order]
        else:
            for f, dst in out.items():
                dst[n:n + k] = cols[f]
        n += k
    return n


def trimmed(a: np.ndarray, n: int) -> np.ndarray:
    """The first ``n`` items; copied when most of the allocation would be wasted."""
    if n == a.size:
        return a
    return a[:n].copy() if n < a.size * 0.9 else a[:n]


def dataframes(ev: np.ndarray, tasks_by_tid: dict[int, TaskInfo], sample_times: np.ndarray,
               markers_list: list[tuple[int, str]], lost_by_cpu: dict[int, int]
               ) -> dict[str, Any]:
    """``events``, ``tasks``, ``samples`` (times), ``markers`` and ``lost`` as pandas
    DataFrames when pandas is installed, else as numpy structured arrays / dicts of arrays."""
    infos = list(tasks_by_tid.values())
    tasks = {
        "tid": np.array([t.tid for t in infos], dtype=np.int32),
        "pid": np.array([t.pid for t in infos], dtype=np.int32),
        "ppid": np.array([t.ppid for t in infos], dtype=np.int32),
        "comm": np.array([t.comm for t in infos], dtype=object),
        "t_ns": np.array([t.t_ns for t in infos], dtype=np.uint64),
    }
    samples = {"t_ns": sample_times}
    markers = {"t_ns": np.array([m[0] for m in markers_list], dtype=np.uint64),
               "text": np.array([m[1] for m in markers_list], dtype=object)}
    cpus = sorted(lost_by_cpu)
    lost = {"cpu": np.array(cpus, dtype=np.int64),
            "lost": np.array([lost_by_cpu[c] for c in cpus], dtype=np.int64)}
    try:
        import pandas as pd
    except ImportError:
        return {"events": ev, "tasks": tasks, "samples": samples, "markers": markers,
                "lost": lost}
    return {"events": pd.DataFrame(ev), "tasks": pd.DataFrame(tasks),
            "samples": pd.DataFrame(samples), "markers": pd.DataFrame(markers),
            "lost": pd.DataFrame(lost)}


__all__ = ["dataframes", "gather", "trimmed"]
