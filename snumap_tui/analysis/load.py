"""One pass over a recording's events, chunk by chunk, into what the analyses need.

The replay needs only the run intervals (20 bytes per interval), so by default nothing else is
kept; the report also asks for wakeups, switch-ins, preemptions and kernel migrations
(``details=True``), which it needs for latencies and findings.
"""

from __future__ import annotations

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
from snumap_tui.topology.model import Topology
from snumap_tui.trace.events import MIGRATE, SWITCH, WAKEUP, WAKEUP_NEW


@dataclass
class Loaded:
    """A recording's run intervals and, with ``details``, the events the report needs."""

    topology: Topology
    intervals: Intervals
    events: int
    kinds: dict[int, int]                       # event kind -> count
    wake_t: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    wake_tid: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    in_t: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    in_tid: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    preempt_cpu: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    kernel_migrations: dict[int, int] = field(default_factory=dict)


def recording_cpus(topology: Topology) -> np.ndarray:
    return np.array(sorted(topology.pu_os_indexes), dtype=np.int64)


Window = tuple[Any, ...]      # (t0, t1) or, for a job of several nodes, (None, None, slice)
NODE_WINDOW_CHUNKS = 4


def _windows(rec: Any) -> list[Window]:
    """Time windows that follow the recording's event chunks (one chunk each when chunks do
    not overlap in time), so the columns asked for can change from one window to the next.

    A job merged from several nodes has its nodes' chunks overlapping in time: there, windows
    are runs of chunks in file order, each decoded once. Intervals need each CPU's events in
    time order only, and every CPU's events are one node's, in order in the file."""
    chunks = getattr(rec, "event_chunks", None)
    if not chunks:
        return [(None, None)]
    if getattr(rec, "nodes", None) is not None:
        k = NODE_WINDOW_CHUNKS
        return [(None, None, slice(i, i + k)) for i in range(0, len(chunks), k)]
    edges = sorted({int(c[0]) for c in chunks})
    return [(lo, hi) for lo, hi in zip([None, *edges[1:]], [*edges[1:], None])]


def _prefetched(rec: Any, windows: list[Window],
                fields_now: Callable[[], tuple[str, ...]]
                ) -> Iterator[tuple[tuple[str, ...], list[dict[str, np.ndarray]]]]:
    """The decoded chunks of each window, the next window decoded in a worker thread while the
    caller consumes this one: decompression (zstd releases the GIL) and column decoding (numpy)
    then overlap with building intervals, on a second core when there is one.

    ``fields_now()`` says which columns the caller needs at this point; the next window is
    decoded with the answer given when it was requested, and decoded again if the answer has
    grown by the time it is consumed (it only shrinks in practice: see ``needs_prev``)."""
    def read(window: Window, fields: tuple[str, ...]) -> list[dict[str, np.ndarray]]:
        if len(window) > 2:
            return list(rec.iter_event_columns(fields, chunks=window[2]))
        return list(rec.iter_event_columns(fields, window[0], window[1]))

    if len(windows) < 2:
        for w in windows:
            f = fields_now()
            yield f, read(w, f)
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="snumap-decode") as pool:
        f = fields_now()
        pending: Future[list[dict[str, np.ndarray]]] = pool.submit(read, windows[0], f)
        for i in range(len(windows)):
            got, got_f = pending.result(), f
            if i + 1 < len(windows):
                f = fields_now()
                pending = pool.submit(read, windows[i + 1], f)
            yield got_f, got
            # The consumer has fed this window: if it now needs more columns than were
            # decoded for the next one, decode that one again (rare: a CPU with no switch yet).
            if i + 1 < len(windows) and not set(fields_now()) <= set(f):
                pending.result()
                f = fields_now()
                pending = pool.submit(read, windows[i + 1], f)


def load(rec: Any, *, details: bool = False) -> Loaded:
    """Stream ``rec`` (a ``snumap_tui.store`` Recording) once."""
    topology = rec.topology
    cpus = recording_cpus(topology)
    t0, t1 = int(rec.t_start), int(rec.t_end)
    b = IntervalBuilder(cpus, t0)
    kinds = np.zeros(256, dtype=np.int64)
    wt, wtid, it, itid, pc, mig = [], [], [], [], [], []
    # Decode the prev-task columns only while they are needed (see needs_prev): the store
    # rebuilds each column it is asked for, and most chunks need only five.
    lean = not details and "proc" not in str(getattr(rec, "header", {}).get("backend", ""))

    def fields_now() -> tuple[str, ...]:
        return INTERVAL_FIELDS_LEAN if lean and not b.needs_prev else INTERVAL_FIELDS

    for _fields, window in _prefetched(rec, _windows(rec), fields_now):
        for cols in window:
            b.feed(cols)
            k = cols["kind"]
            kinds += np.bincount(k, minlength=256)
            if not details:
                continue
            w = (k == WAKEUP) | (k == WAKEUP_NEW)
            wt.append(cols["t_ns"][w].astype(np.int64))
            wtid.append(cols["tid"][w].astype(np.int64))
            s = (k == SWITCH) & (cols["tid2"] != 0)
            it.append(cols["t_ns"][s].astype(np.int64))
            itid.append(cols["tid2"][s].astype(np.int64))
            # prev_state 0 (TASK_RUNNING) at switch-out: preempted while it still wanted to run.
            p = (k == SWITCH) & (cols["tid"] != 0) & (cols["arg"] == 0)
            pc.append(cols["cpu"][p].astype(np.int64))
            mig.append(cols["tid"][k == MIGRATE].astype(np.int64))
    iv = b.finish(t1)
    for tid, info in getattr(rec, "tasks", {}).items():
        if info.pid >= 0:
            iv.pid_of_tid.setdefault(int(tid), int(info.pid))
    out = Loaded(topology, iv, b.events, {int(k): int(n) for k, n in enumerate(kinds) if n})
    if details:
        cat = (lambda parts: np.concatenate(parts) if parts else np.zeros(0, np.int64))
        out.wake_t, out.wake_tid = cat(wt), cat(wtid)
        out.in_t, out.in_tid = cat(it), cat(itid)
        out.preempt_cpu = cat(pc)
        m = cat(mig)
        if len(m):
            u, n = np.unique(m, return_counts=True)
            out.kernel_migrations = dict(zip(u.tolist(), n.tolist()))
    return out
