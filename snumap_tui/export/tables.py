"""A recording's run intervals, raw events and samples as CSV, for spreadsheets and pandas.

Samples are written in long form (one row per source, field, index and value) because every
source has its own fields and per-PU/per-node arrays: ``t_ns, wall_ns, source, field, index,
value`` needs no schema and keeps NaN (unreadable) apart from 0.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Iterator, Mapping
from typing import IO, Any

import numpy as np

from snumap_tui.analysis.intervals import UNTRACED, Intervals
from snumap_tui.model.sample import Sample
from snumap_tui.trace.events import EVENT_DTYPE, KIND_NAMES, TaskInfo

INTERVAL_COLUMNS = ["cpu", "start_ns", "end_ns", "dur_ns", "tid", "pid", "comm"]
SAMPLE_COLUMNS = ["t_ns", "wall_ns", "source", "field", "index", "value"]
# A structured dtype always has names; numpy's stubs type them Optional (plain dtypes have none).
EVENT_COLUMNS = ["t_ns", "kind",
                 *[n for n in EVENT_DTYPE.names or () if n not in ("t_ns", "kind")]]


# The name of the one pseudo-task that stands for every task outside the traced tree (tid
# UNTRACED, analysis/intervals.py): the same words as the report and the Gantt legend.
UNTRACED_COMM = "other (not traced)"


def comm_of(tid: int, tasks: Mapping[int, TaskInfo], unknown: str = "") -> str:
    """The name an interval of TID is shown with: its comm, the untraced pseudo-task's name,
    or UNKNOWN."""
    if tid == UNTRACED:
        return UNTRACED_COMM
    info = tasks.get(tid)
    return info.comm if info else unknown


def write_intervals_csv(out: IO[str], iv: Intervals, tasks: Mapping[int, TaskInfo]) -> int:
    w = csv.writer(out, lineterminator="\n")
    w.writerow(INTERVAL_COLUMNS)
    n = 0
    for r, cpu in enumerate(iv.cpus.tolist()):
        tids = iv.tid[r]
        pids = iv.pids(tids).tolist()
        for s, e, tid, pid in zip(iv.start[r].tolist(), iv.end[r].tolist(), tids.tolist(), pids):
            w.writerow([cpu, s, e, e - s, tid, pid, comm_of(tid, tasks)])
            n += 1
    return n


def write_events_csv(out: IO[str], chunks: Iterable[Mapping[str, np.ndarray]]) -> int:
    """Raw events, one row each, kind by name (``switch``, ``wakeup``...)."""
    w = csv.writer(out, lineterminator="\n")
    w.writerow(EVENT_COLUMNS)
    n = 0
    for cols in chunks:
        kinds = [KIND_NAMES.get(k, str(k)) for k in cols["kind"].tolist()]
        rest = [cols[c].tolist() for c in EVENT_COLUMNS[2:]]
        for t, k, *vals in zip(cols["t_ns"].tolist(), kinds, *rest):
            w.writerow([t, k, *vals])
            n += 1
    return n


def _flatten(value: Any) -> Iterator[tuple[str, Any]]:
    """(index, scalar) pairs of a reading's field: arrays by position ("3", "3.1" for 2-D)."""
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            yield "", value.item()
        else:
            for idx in np.ndindex(value.shape):
                yield ".".join(map(str, idx)), value[idx].item()
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            if isinstance(v, (list, tuple, dict)):
                yield str(i), repr(v)
            else:
                yield str(i), v
    elif isinstance(value, (int, float, str, bool)) or value is None:
        yield "", value


def write_samples_csv(out: IO[str], samples: Iterable[Sample]) -> int:
    w = csv.writer(out, lineterminator="\n")
    w.writerow(SAMPLE_COLUMNS)
    n = 0
    for s in samples:
        for source, fields in sorted(s.readings.items()):
            if not isinstance(fields, Mapping):
                continue
            for name, value in fields.items():
                if isinstance(value, Mapping):     # nested tables (tasks): not a time series
                    continue
                for idx, v in _flatten(value):
                    if isinstance(v, float) and math.isnan(v):
                        v = ""
                    w.writerow([s.t_ns, s.wall_ns, source, name, idx, v])
                    n += 1
    return n
