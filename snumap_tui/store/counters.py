"""The thread counters chunk (kind 16, docs/format.md "Thread counters"): counter deltas per run
interval, as the libbpf tracer reads them at each switch (trace/counters.py).

Encoding and decoding of that one chunk kind live here; the Writer buffers rows
(``CounterBuffer``) and the reader decodes each chunk with ``decode_counters`` after the
kind's schema (store/kinds.py) checked it. On disk a row is its interval end as a delta from
the previous row's (rows sorted by end), its duration, tid, pid, cpu, and per event the
counter delta, the enabled-time delta (left out when it is the duration, as it is whenever
the event is enabled with its thread) and the time it was enabled but not running (0 unless
the kernel multiplexed the event: zstd makes that column almost free).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from snumap_tui.store.columns import narrow, time_order
from snumap_tui.store.kinds import K_THREAD_COUNTERS
from snumap_tui.trace.counters import counter_dtype
from snumap_tui.trace.rows import take_rows

__all__ = ["K_THREAD_COUNTERS", "CounterBuffer", "ThreadCounters", "decode_counters",
           "encode_counters", "merge_counters"]


@dataclass
class ThreadCounters:
    """Every run interval with counters: ``rows`` of trace/counters.py's dtype for
    ``len(events)`` events (``value``, ``enabled``, ``running`` columns of that width)."""

    events: list[str] = field(default_factory=list)
    rows: np.ndarray = field(default_factory=lambda: np.zeros(0, counter_dtype(0)))

    def __len__(self) -> int:
        return len(self.rows)


def encode_counters(rows: np.ndarray, events: list[str]) -> tuple[dict[str, object], int, int]:
    """(chunk value, t_min, t_max) of ROWS (counter_dtype(len(EVENTS)))."""
    order = time_order(rows["t_end"])
    if order is not None:
        # Whole rows moved as opaque bytes: a structured array's fancy index copies field
        # by field and was most of this function's time under a switch storm.
        rows = take_rows(rows, order)
        del order
    end = rows["t_end"].astype(np.uint64)
    start = np.minimum(rows["t_start"].astype(np.uint64), end)
    n = len(events)
    running = np.minimum(rows["running"], rows["enabled"])
    enabled = rows["enabled"].reshape(len(rows), n).astype(np.uint64)
    dur = (end - start).astype(np.uint64)
    # Each column in the narrowest integer type that holds it (as the events' columns): a
    # software event's delta and most times fit 1-4 bytes, and zstd -- the flusher thread's
    # largest cost under a storm -- then reads a third of the bytes.
    value: dict[str, object] = {
        "n": len(rows), "events": list(events), "t0": int(end[0]) if len(end) else 0,
        "dt": narrow(np.diff(end, prepend=end[:1]).astype(np.uint64)),
        "dur": narrow(dur),
        "tid": narrow(rows["tid"].astype(np.int32)), "pid": narrow(rows["pid"].astype(np.int32)),
        "cpu": narrow(rows["cpu"].astype(np.uint32)),
        "value": narrow(rows["value"].reshape(len(rows), n).astype(np.uint64)),
        "unrun": narrow((rows["enabled"] - running).reshape(len(rows), n).astype(np.uint64)),
    }
    # An event is enabled while its thread runs: its enabled time is the interval's length,
    # to the nanosecond on the libbpf path (both read at the same two switches). Then the
    # column is left out and ``enabled_is_dur`` says so: it was a third of a storm's
    # counter bytes, and its copy of ``dur`` did not compress.
    if n and len(rows) and bool((enabled == dur[:, None]).all()):
        value["enabled_is_dur"] = True
    else:
        value["enabled"] = narrow(enabled)
    t_min = int(start.min()) if len(rows) else 0
    return value, t_min, int(end[-1]) if len(rows) else 0


def decode_counters(value: dict[str, Any]) -> ThreadCounters:
    """The rows of one chunk whose value passed its kind's schema."""
    events = [str(e) for e in value["events"]]
    n = int(value["n"])
    rows = np.zeros(n, counter_dtype(len(events)))
    dt = np.asarray(value["dt"], dtype=np.uint64)
    end = np.uint64(int(value["t0"])) + np.cumsum(dt, dtype=np.uint64)
    rows["t_end"] = end
    rows["t_start"] = end - np.asarray(value["dur"], dtype=np.uint64)
    rows["tid"] = value["tid"]
    rows["pid"] = value["pid"]
    rows["cpu"] = value["cpu"]
    rows["n"] = len(events)
    if n:
        rows["value"] = value["value"]
        if "enabled" in value:
            enabled = np.asarray(value["enabled"], dtype=np.uint64)
        else:       # enabled_is_dur (the schema lets no chunk have neither)
            enabled = np.repeat(np.asarray(value["dur"], dtype=np.uint64)[:, None],
                                len(events), axis=1)
        rows["enabled"] = enabled
        rows["running"] = enabled - np.asarray(value["unrun"], dtype=np.uint64)
    return ThreadCounters(events, rows)


def merge_counters(parts: list[ThreadCounters]) -> tuple[ThreadCounters, list[str]]:
    """One table of the chunks' rows, sorted by interval end; chunks naming other events than
    the first (a recording has one set) are left out, with a note each."""
    parts = [p for p in parts if len(p)]
    if not parts:
        return ThreadCounters(), []
    events = parts[0].events
    same = [p for p in parts if p.events == events]
    notes = [f"a thread counters chunk names other events ({', '.join(p.events)}) than the "
             f"first ({', '.join(events)}): skipped" for p in parts if p.events != events]
    rows = np.concatenate([p.rows for p in same])
    return ThreadCounters(list(events), rows[np.argsort(rows["t_end"], kind="stable")]), notes


class CounterBuffer:
    """Rows waiting for the next chunk (the Writer holds its lock around every call)."""

    def __init__(self) -> None:
        self.parts: list[np.ndarray] = []
        self.n = 0
        self.events: list[str] = []

    def add(self, rows: np.ndarray, events: list[str]) -> None:
        self.events = list(events)
        self.parts.append(rows)
        self.n += len(rows)

    def take_parts(self) -> tuple[list[np.ndarray], list[str]] | None:
        """The rows as they were added (joined by whoever encodes them)."""
        if not self.n:
            return None
        parts = self.parts
        self.parts, self.n = [], 0
        return parts, self.events
