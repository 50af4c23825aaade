"""One pass over a recording's events, chunk by chunk, into what the analyses need.

The replay needs only the run intervals (20 bytes per interval), so by default nothing else is
kept; the report also asks for wakeups, switch-ins, preemptions and kernel migrations
(``details=True``), which it needs for latencies and findings.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from snumap_tui.analysis.intervals import (
    INTERVAL_FIELDS,
    INTERVAL_FIELDS_LEAN,
    IntervalBuilder,
    Intervals,
)
from snumap_tui.analysis.stats import TaskStats, numa_of_cpus
from snumap_tui.analysis.streamstats import LatencyAccumulator, TaskAccumulator, TidIndex
from snumap_tui.topology.model import Topology
from snumap_tui.trace.events import MIGRATE, OUTSIDE, SWITCH

LONG_WAIT_NS = 1_000_000        # a run-queue wait worth a finding (findings.py)
# The report's columns once every PU has had a switch: the prev task's pid is not needed.
DETAIL_FIELDS = tuple(f for f in INTERVAL_FIELDS if f != "pid")


@dataclass
class Loaded:
    """A recording's run intervals and, with ``details``, what the report needs, accumulated
    while the events streamed by (analysis/streamstats.py)."""

    topology: Topology
    intervals: Intervals
    events: int
    kinds: dict[int, int]                       # event kind -> count
    task_stats: dict[int, TaskStats] = field(default_factory=dict)
    latency: dict[int, np.ndarray] = field(default_factory=dict)   # tid -> wait ns
    long_wait: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    long_wait_end: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    long_wait_tid: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    preemptions: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # per row
    # ... of which by a task outside the traced tree (a recording of a command or --pid)
    preemptions_untraced: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    kernel_migrations: dict[int, int] = field(default_factory=dict)


def recording_cpus(topology: Topology) -> np.ndarray:
    return np.array(sorted(topology.pu_os_indexes), dtype=np.int64)


Window = tuple[Any, ...]      # (t0, t1) or, for a job of several nodes, (None, None, slice)
NODE_WINDOW_CHUNKS = 4


def _windows(rec: Any, nodes: set[int] | None = None) -> list[Window]:
    """Time windows that follow the recording's event chunks (one chunk each when chunks do
    not overlap in time), so the columns asked for can change from one window to the next.

    A job merged from several nodes has its nodes' chunks overlapping in time: there, windows
    are runs of chunks in file order, each decoded once. Intervals need each CPU's events in
    time order only, and every CPU's events are one node's, in order in the file."""
    chunks = getattr(rec, "event_chunks", None)
    if not chunks:
        return [(None, None)]
    table = getattr(rec, "nodes", None)
    if table is not None:
        k = NODE_WINDOW_CHUNKS
        if nodes is not None:           # only these nodes' chunks, still in file order
            mine = table.event_chunks_of(rec, nodes)
            return [(None, None, mine[i:i + k]) for i in range(0, len(mine), k)]
        return [(None, None, slice(i, i + k)) for i in range(0, len(chunks), k)]
    edges = sorted({int(c[0]) for c in chunks})
    return [(lo, hi) for lo, hi in zip([None, *edges[1:]], [*edges[1:], None])]


def _prefetched(rec: Any, windows: list[Window],
                fields_now: Callable[[], tuple[str, ...]],
                on_read: Callable[[int, list[dict[str, np.ndarray]]], None] | None = None
                ) -> Iterator[tuple[tuple[str, ...], list[dict[str, np.ndarray]]]]:
    """The decoded chunks of each window, the next window decoded in a worker thread while the
    caller consumes this one: decompression (zstd releases the GIL) and column decoding (numpy)
    then overlap with building intervals, on a second core when there is one.

    ``fields_now()`` says which columns the caller needs at this point; the next window is
    decoded with the answer given when it was requested, and decoded again if the answer has
    grown by the time it is consumed (it only shrinks in practice: see ``needs_prev``).

    ``on_read(i, chunks)`` runs in the worker too, once per window, in window order: work on
    the events that does not depend on the intervals (the report's latencies and counts)."""
    done: set[int] = set()

    def read(i: int, fields: tuple[str, ...]) -> list[dict[str, np.ndarray]]:
        window = windows[i]
        if len(window) > 2:
            got = list(rec.iter_event_columns(fields, chunks=window[2]))
        else:
            got = list(rec.iter_event_columns(fields, window[0], window[1]))
        if on_read is not None and i not in done:
            done.add(i)
            on_read(i, got)
        return got

    if len(windows) < 2:
        for i in range(len(windows)):
            f = fields_now()
            yield f, read(i, f)
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="snumap-decode") as pool:
        f = fields_now()
        pending: Future[list[dict[str, np.ndarray]]] = pool.submit(read, 0, f)
        for i in range(len(windows)):
            got, got_f = pending.result(), f
            if i + 1 < len(windows):
                f = fields_now()
                pending = pool.submit(read, i + 1, f)
            yield got_f, got
            # The consumer has fed this window: if it now needs more columns than were
            # decoded for the next one, decode that one again (rare: a CPU with no switch yet).
            if i + 1 < len(windows) and not set(fields_now()) <= set(f):
                pending.result()
                f = fields_now()
                pending = pool.submit(read, i + 1, f)


def _in_thread(fn: Callable[[], Any]) -> Callable[[], Any]:
    """Start ``fn()`` in a thread of its own; the returned function waits for its result."""
    fut: Future[Any] = Future()

    def run() -> None:
        try:
            fut.set_result(fn())
        except BaseException as e:  # noqa: BLE001 - handed to the thread that waits
            fut.set_exception(e)

    threading.Thread(target=run, name="snumap-latency", daemon=True).start()
    return fut.result


def load(rec: Any, *, details: bool = False, nodes: set[int] | None = None) -> Loaded:
    """Stream ``rec`` (a ``snumap_tui.store`` Recording) once. ``nodes``: of a merged job,
    only these nodes' events (the other nodes' PUs keep their rows, without intervals)."""
    topology = rec.topology
    cpus = recording_cpus(topology)
    t0, t1 = int(rec.t_start), int(rec.t_end)
    b = IntervalBuilder(cpus, t0)
    kinds = np.zeros(256, dtype=np.int64)
    # The decode thread's accumulators number threads apart from the main thread's.
    tids, mig_ix = TidIndex(), TidIndex()
    acc = TaskAccumulator(b.cpus, numa_of_cpus(topology, b.cpus), tids)
    lat = LatencyAccumulator(mig_ix, LONG_WAIT_NS)
    preempt = np.zeros(len(b.cpus) + 1, dtype=np.int64)
    preempt_other = np.zeros(len(b.cpus) + 1, dtype=np.int64)
    mig = np.zeros(0, dtype=np.int64)
    table = getattr(rec, "nodes", None)
    if table is not None:           # a merged job: each node's CPUs within that node's span
        b.set_row_spans(*table.row_spans(b.cpus, t0, t1))
    if details:
        b.on_intervals = acc.feed
    # Decode the prev-task columns only while they are needed (see needs_prev): the store
    # rebuilds each column it is asked for, and most chunks need only five.
    lean = not details and "proc" not in str(getattr(rec, "header", {}).get("backend", ""))

    def fields_now() -> tuple[str, ...]:
        if b.needs_prev:
            return INTERVAL_FIELDS
        return INTERVAL_FIELDS_LEAN if lean else DETAIL_FIELDS

    windows = _windows(rec, nodes)
    # The latencies grouped per thread once the decode thread has fed the last window: in a
    # thread of their own, while the main thread still builds intervals.
    latencies: list[Callable[[], Any]] = []

    def side(i: int, window: list[dict[str, np.ndarray]]) -> None:
        """In the decode thread: what the report needs besides the intervals."""
        nonlocal mig
        for cols in window:
            k = cols["kind"]
            lat.feed(cols)
            m = k == MIGRATE
            if m.any():
                d = mig_ix(cols["tid"][m])
                mig = np.pad(mig, (0, max(0, len(mig_ix) - len(mig))))
                mig += np.bincount(d, minlength=len(mig))
        if i == len(windows) - 1:
            latencies.append(_in_thread(lambda: (lat.per_task(), lat.long_waits())))

    for _fields, window in _prefetched(rec, windows, fields_now,
                                       side if details else None):
        for cols in window:
            b.feed(cols)
            kinds += np.bincount(cols["kind"], minlength=256)
            if details:     # here, not in side(): the decode thread is the busier one
                # prev_state 0 (TASK_RUNNING) at switch-out: preempted while still runnable;
                # by a traced task, or by one outside the traced tree (pid2 OUTSIDE: load
                # the recording did not trace, never the traced threads' oversubscription).
                p = (cols["kind"] == SWITCH) & (cols["tid"] != 0) & (cols["arg"] == 0)
                if p.any():
                    rows = b.rows(cols["cpu"][p])
                    rows[rows < 0] = len(b.cpus)    # a CPU not in the topology: not counted
                    by_other = cols["pid2"][p] == OUTSIDE
                    preempt[:] += np.bincount(rows[~by_other], minlength=len(preempt))
                    preempt_other[:] += np.bincount(rows[by_other], minlength=len(preempt))
    iv = b.finish(t1)
    if table is not None:           # events outside their node's span (clock-synced edges)
        table.clip(iv.cpus, iv.start, iv.end, iv.tid)
    for tid, info in getattr(rec, "tasks", {}).items():
        if info.pid >= 0:
            iv.pid_of_tid.setdefault(int(tid), int(info.pid))
    out = Loaded(topology, iv, b.events, {int(k): int(n) for k, n in enumerate(kinds) if n})
    if details:
        out.task_stats = acc.stats(iv.pid_of_tid)
        grouped = latencies[0]() if latencies else (lat.per_task(), lat.long_waits())
        out.latency, (out.long_wait, out.long_wait_end, out.long_wait_tid) = grouped
        out.preemptions = preempt[:len(b.cpus)]
        out.preemptions_untraced = preempt_other[:len(b.cpus)]
        out.kernel_migrations = {int(mig_ix.tids[d]): int(n) for d, n in
                                 enumerate(mig.tolist()) if n}
    return out
