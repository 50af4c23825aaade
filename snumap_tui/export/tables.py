"""A recording's run intervals, raw events, metrics and raw readings as CSV, for spreadsheets
and pandas.

``samples``: the metrics `snumap top` shows, per object per frame (``derive`` over consecutive
samples), the same rows as the Parquet export's ``samples`` table (``metric_rows``): ``t_ns,
wall_ns, dt_s, metric, object_type, os_index, value``, not-available values left out.

``readings``: what the sources read, as stored, in long form (one row per source, field and
index) because every source has its own fields and per-PU/per-node arrays: ``t_ns, wall_ns,
source, field, index, value, text`` needs no schema. ``value`` is only ever a number (empty
for NaN: unreadable is never 0); a device's, domain's or node's name is the row's ``index``
where the source lists names, and any other non-numeric field (a PCI bus id, how RAPL was
read) goes to ``text``.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Iterator, Mapping
from typing import IO, Any

import numpy as np

from snumap_tui.analysis.intervals import UNTRACED, Intervals
from snumap_tui.model.frame import Frame
from snumap_tui.model.sample import Sample
from snumap_tui.topology.model import Topology
from snumap_tui.trace.events import EVENT_DTYPE, KIND_NAMES, TaskInfo

INTERVAL_COLUMNS = ["cpu", "start_ns", "end_ns", "dur_ns", "tid", "pid", "comm"]
SAMPLE_COLUMNS = ["t_ns", "wall_ns", "dt_s", "metric", "object_type", "os_index", "value"]
READING_COLUMNS = ["t_ns", "wall_ns", "source", "field", "index", "value", "text"]
# The field naming each position of a source's arrays (its devices, RAPL domains, NUMA nodes).
_LABELS = ("names", "domains", "nodes", "cpus")
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


def metric_rows(frames: Iterable[Frame]) -> Iterator[tuple[Frame, str, np.ndarray,
                                                           np.ndarray]]:
    """Per frame and metric: (frame, metric, object ids, values) of the objects that have a
    value (NaN, not available, is left out). The ``samples`` table of CSV and Parquet."""
    for fr in frames:
        for metric, arr in fr.values.items():
            vals = np.asarray(arr, dtype=np.float64)
            obj = np.flatnonzero(~np.isnan(vals))
            if len(obj):
                yield fr, metric, obj, vals[obj]


def write_samples_csv(out: IO[str], frames: Iterable[Frame], topology: Topology) -> int:
    """The metrics per object per frame: the Parquet export's ``samples`` rows as CSV."""
    w = csv.writer(out, lineterminator="\n")
    w.writerow(SAMPLE_COLUMNS)
    objs = list(topology)
    n = 0
    for fr, metric, ids, vals in metric_rows(frames):
        for i, v in zip(ids.tolist(), vals.tolist()):
            o = objs[i]
            w.writerow([fr.t_ns, fr.wall_ns, repr(fr.dt_s), metric, o.type,
                        -1 if o.os_index is None else o.os_index, repr(v)])
            n += 1
    return n


def _flatten(value: Any, labels: list[str] | None,
             devices: bool = False) -> Iterator[tuple[str, Any]]:
    """(index, scalar) pairs of a reading's field: arrays by position ("3", "3.1" for 2-D);
    an array with one row per labelled position (``labels``: the source's device names, PU
    or node numbers) has its label as the first part of the index ("eth0", "12.3"), and so
    has a list of a source of named devices (``devices``: its PCI bus ids)."""
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            yield "", value.item()
            return
        rows = labels if labels is not None and value.shape[0] == len(labels) else None
        for idx in np.ndindex(value.shape):
            head = rows[idx[0]] if rows is not None else str(idx[0])
            yield ".".join([head, *map(str, idx[1:])]), value[idx].item()
    elif isinstance(value, (list, tuple)):
        items = labels if devices and labels is not None and len(value) == len(labels) \
            else None
        for i, v in enumerate(value):
            yield (items[i] if items is not None else str(i)), \
                repr(v) if isinstance(v, (list, tuple, dict)) else v
    elif isinstance(value, (int, float, str, bool)) or value is None:
        yield "", value


def _labels(fields: Mapping[str, Any]) -> tuple[str | None, list[str] | None]:
    for key in _LABELS:
        got = fields.get(key)
        if isinstance(got, (list, tuple, np.ndarray)) and len(got):
            return key, [str(x.item() if isinstance(x, np.generic) else x) for x in got]
    return None, None


def write_readings_csv(out: IO[str], samples: Iterable[Sample]) -> int:
    """The sources' raw readings in long form (see the module's docstring)."""
    w = csv.writer(out, lineterminator="\n")
    w.writerow(READING_COLUMNS)
    n = 0
    for s in samples:
        for source, fields in sorted(s.readings.items()):
            if not isinstance(fields, Mapping):
                continue
            label_field, labels = _labels(fields)
            for field_name, value in fields.items():
                if isinstance(value, Mapping) or field_name == label_field:
                    continue     # nested tables (tasks): not a time series; labels: the index
                for idx, v in _flatten(value, labels, label_field in ("names", "domains")):
                    num, text = _split(v)
                    w.writerow([s.t_ns, s.wall_ns, source, field_name, idx, num, text])
                    n += 1
    return n


def _split(v: Any) -> tuple[str, str]:
    """(value, text) columns of a scalar: numbers in value (NaN and None empty), the rest in
    text."""
    if isinstance(v, bool):
        return str(int(v)), ""
    if isinstance(v, int):
        return str(v), ""
    if isinstance(v, float):
        return ("" if math.isnan(v) else repr(v)), ""
    return "", "" if v is None else str(v)
