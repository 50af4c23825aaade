"""The Writer's bulk chunks encoded and compressed off the thread that adds them.

Under a context-switch storm the recorder's main thread spent about two thirds of its time in
the Writer: encoding the events' and the run intervals' columns, byte-shuffling them and
compressing them with zstd (docs/benchmarks.md, "Observer: switch storm"). That work needs
nothing of the thread that decodes the next drain, and most of it runs in numpy and zstd with
the GIL released, so the Writer hands it to its flusher thread (no new thread): the events and
counters chunks are queued as jobs, each built and compressed there and appended to the file
in the order they were queued.

The queue is bounded (``MAX_PENDING`` jobs): a producer that would pass it runs the queued
jobs itself, so a main thread that outruns the encoder slows down, the drain thread's backlog fills and the kernel
counts what it drops -- an honest loss count instead of memory growing. Without a worker
(a Writer without its flusher thread) every job runs at once, as before.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

import numpy as np

from snumap_tui.store.columns import time_order
from snumap_tui.trace.rows import concat_rows, copy_rows, sort_rows

# A job builds its chunk (bytes ready to append) and hands it to the sink.
Job = Callable[[], None]


class ChunkQueue:
    """Jobs run in order, one at a time: by the worker thread (``run_pending``), or by a
    thread that needs them done (``wait_idle``, a producer facing a full queue), or at once
    without a worker. Whoever runs them holds the run lock, so a thread that waits for the
    queue waits for one job at most, never for what the worker does between jobs (the
    Writer's flusher syncs the file there: a busy disk's fdatasync took 100s of ms)."""

    MAX_PENDING = 6

    def __init__(self) -> None:
        self._jobs: deque[Job] = deque()
        self._cond = threading.Condition()
        self._run = threading.Lock()
        self.worker: threading.Thread | None = None

    def _here(self) -> bool:
        """Whether jobs are run by the calling thread at once (no live worker, or it is the
        worker itself)."""
        return self.worker is None or threading.current_thread() is self.worker \
            or not self.worker.is_alive()

    def submit(self, job: Job) -> None:
        """Queue JOB; with MAX_PENDING queued, run them here first (the producer slows down
        to the encoder's pace). Producers are one at a time (the Writer's lock)."""
        if self._here():
            self.run_pending()
            with self._run:
                job()
            return
        with self._cond:
            if len(self._jobs) < self.MAX_PENDING:
                self._jobs.append(job)
                self._cond.notify_all()
                return
        self.run_pending()
        with self._cond:
            self._jobs.append(job)
            self._cond.notify_all()

    def wait_jobs(self, timeout: float) -> bool:
        """The worker's sleep: until a job is queued or TIMEOUT passed (True: jobs wait)."""
        with self._cond:
            if not self._jobs:
                self._cond.wait(timeout)
            return bool(self._jobs)

    def run_pending(self) -> None:
        """Run the queued jobs in order, here (after the job another thread is running); an
        exception stops at the failing job (the rest stay queued) and goes on to the caller."""
        with self._run:
            while True:
                with self._cond:
                    if not self._jobs:
                        return
                    job = self._jobs.popleft()
                    self._cond.notify_all()
                job()

    def wait_idle(self) -> None:
        """Return once every job queued so far has run."""
        self.run_pending()

    def wake(self) -> None:
        """End the worker's ``wait_jobs`` now (the Writer is closing)."""
        with self._cond:
            self._cond.notify_all()

    def pending(self) -> int:
        with self._cond:
            return len(self._jobs)


# ---- the events' rows, as the chunk jobs take them ----------------------------------------------

def time_ordered(parts: list[np.ndarray]) -> list[np.ndarray]:
    """PARTS as rows in time order: as they are when they already are (tracers hand over
    time-sorted batches: one comparison pass, and each chunk's columns are gathered from the
    batches as they are), else in one copy sorted in place, moving only the rows out of
    place (batches overlap only near their seams: under a switch storm ~a fifth of them), so
    each chunk's columns are strided copies instead of gathers."""
    t = np.concatenate([p["t_ns"] for p in parts]) if len(parts) > 1 else parts[0]["t_ns"]
    order = time_order(t)
    del t
    if order is None:
        return parts
    ev = concat_rows(parts)
    sort_rows(ev, order)
    return [ev]


def span_columns(parts: list[np.ndarray], start: int, stop: int
                  ) -> Callable[[str], np.ndarray]:
    """``col(name)``: rows START:STOP of the concatenated PARTS, one contiguous column."""
    pieces = []
    at = 0
    for p in parts:
        lo, hi = max(start - at, 0), min(stop - at, p.size)
        if lo < hi:
            pieces.append(p[lo:hi])
        at += p.size
        if at >= stop:
            break

    def col(name: str) -> np.ndarray:
        if len(pieces) == 1:
            return np.ascontiguousarray(pieces[0][name])
        return np.concatenate([p[name] for p in pieces])

    return col


def rows_from(parts: list[np.ndarray], start: int) -> list[np.ndarray]:
    """The rows from START on of the concatenated PARTS, part by part: a part cut copies its
    rows (a batch is not kept whole for a few of them), a whole part stays as it is."""
    out = []
    at = 0
    for p in parts:
        if at >= start:
            out.append(p)
        elif at + p.size > start:
            out.append(copy_rows(p[start - at:]))
        at += p.size
    return out
