"""The Writer's events and counters chunks are built and compressed on its flusher thread
(store/encoder.py): off the thread that adds batches, in order, bounded, and a failure there
stops the recording with one line like a failed write."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from snumap_tui import store
from snumap_tui.errors import SnumapError
from snumap_tui.store import writer as writer_mod
from snumap_tui.store.encoder import ChunkQueue
from snumap_tui.trace.events import EVENT_DTYPE, EventBatch


def _events(n: int, t0: int = 1000) -> np.ndarray:
    e = np.zeros(n, EVENT_DTYPE)
    e["t_ns"] = t0 + np.arange(n) * 10
    e["kind"] = 1
    e["tid"] = e["tid2"] = 7
    return e


def test_chunks_are_encoded_on_the_flusher_thread_and_in_the_file_after_flush(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    real = writer_mod.encode_columns

    def spy(col):  # type: ignore[no-untyped-def]
        seen.append(threading.current_thread().name)
        return real(col)

    monkeypatch.setattr(writer_mod, "encode_columns", spy)
    path = tmp_path / "r.rec"
    w = store.Writer(path, {}, max_chunk_events=1000)
    for i in range(5):
        w.add_events(EventBatch(_events(700, t0=1000 + i * 7000)))
    for _ in range(100):                       # the full chunks, queued for the flusher
        if not w._chunks.pending() and len(seen) == 3:
            break
        time.sleep(0.05)
    assert seen == ["snumap-store-flush"] * 3
    w.flush()                                  # the rest: here, the flusher may be syncing
    assert w.events_written == 3500            # all of it, once flush returned
    w.close()
    with store.open(path) as rec:
        assert len(rec.events()) == 3500
        assert [c[2] for c in rec.event_chunks] == [1000, 1000, 1000, 500]   # as before


def test_the_queue_is_bounded_and_runs_jobs_in_order() -> None:
    q = ChunkQueue()
    done: list[int] = []
    gate = threading.Event()
    stop = threading.Event()

    def worker() -> None:
        while not stop.is_set():
            if q.wait_jobs(0.05):
                q.run_pending()

    q.worker = threading.Thread(target=worker)
    q.worker.start()
    try:
        started = threading.Event()
        q.submit(lambda: (started.set(), gate.wait(5), done.append(0)))  # holds the worker
        assert started.wait(5)
        for i in range(1, q.MAX_PENDING + 1):
            q.submit(lambda i=i: done.append(i))
        extra = threading.Thread(target=q.submit, args=(lambda: done.append(99),))
        extra.start()
        extra.join(0.3)
        assert extra.is_alive()      # a full queue: the producer runs the jobs, after the one
        assert done == []            # the worker is running
        gate.set()
        extra.join(5)
        assert not extra.is_alive()
        q.wait_idle()
        assert done == [*range(q.MAX_PENDING + 1), 99]
    finally:
        stop.set()
        q.wake()
        q.worker.join()


def test_a_failing_chunk_job_stops_the_recording_with_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(col):  # type: ignore[no-untyped-def]
        raise ValueError("boom")

    monkeypatch.setattr(writer_mod, "encode_columns", broken)
    w = store.Writer(tmp_path / "r.rec", {}, max_chunk_events=100)
    w.add_events(EventBatch(_events(150)))
    with pytest.raises(SnumapError, match="cannot encode a chunk .*boom"):
        w.flush()
    w.close()


def test_a_chunk_whose_tids_span_more_than_the_dense_table_round_trips(tmp_path: Path) -> None:
    """Tids from -2 (untraced partners) to past _DENSE_SPAN (a merged job's qualified ids)
    take the sorted path of the pid table: its table was written unsorted (keys signed past
    2^63), and the reader refused the chunk."""
    from snumap_tui.store.columns import _DENSE_SPAN

    e = _events(6)
    e["tid"] = [-2, 0, 5, _DENSE_SPAN + 10, 5, -1]
    e["tid2"] = [0, 5, _DENSE_SPAN + 10, 0, -2, 0]
    e["pid"] = [-2, 0, 5, _DENSE_SPAN + 3, 5, -1]
    e["pid2"] = [0, 5, _DENSE_SPAN + 3, 0, -2, 0]
    path = tmp_path / "wide.rec"
    with store.Writer(path, {}) as w:
        w.add_events(EventBatch(e))
    with store.open(path) as rec:
        assert rec.damaged == []
        assert rec.events().tobytes() == e.tobytes()
