"""Writing a recording: append-only chunks, flushed at least twice a second, synced to disk.

Crash safety comes from three choices: (1) every chunk goes to the kernel with os.write as soon as
it is built (no user-space file buffer), so a SIGKILL loses only what is still buffered here,
which is at most ``flush_interval`` old; (2) fdatasync runs at most ``sync_interval`` after a chunk
is written, which bounds what a power loss can take; (3) chunks are self-delimiting and checked,
so whatever the last write left half-done is skipped by the reader, never misread.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import zstandard

from snumap_tui.errors import SnumapError
from snumap_tui.model.sample import Sample
from snumap_tui.store import chunks as C
from snumap_tui.store import codec
from snumap_tui.store.appendfile import AppendFile
from snumap_tui.store.columns import encode_columns
from snumap_tui.store.counters import K_THREAD_COUNTERS, CounterBuffer, encode_counters
from snumap_tui.store.encoder import ChunkQueue, rows_from, span_columns, time_ordered
from snumap_tui.store.procmem import K_PROCESS_MEMORY, MemoryBuffer
from snumap_tui.store.regions import K_REGIONS, RegionBuffer, encode_regions
from snumap_tui.trace.events import EVENT_DTYPE, EventBatch, TaskInfo

FORMAT_VERSION = 1
MERGED_VERSION = 2      # recordings of several nodes (docs/format.md, version 2)


# zstd level of the events' and counters' chunks: on a synthetic 16-ring storm dump the
# flusher took 304 ns an event at level 3 and 248 at level 1, for 2 % more bytes (13.62 and
# 13.90 bytes an event); its rate on one core went from 3.3 to 4.0 M events a second, where
# the 16-PU storm of issue 29 is 3 M (bench/observer_storm.py). Level -1 was faster still
# (217 ns) but 25 % larger.
BULK_LEVEL = 1


class Writer(AppendFile):
    """Append a recording to ``path``.

    ``header`` is stored as JSON in the first chunk (see docs/format.md for the keys snumap
    writes; any JSON-serialisable keys are kept). Thread-safe: a tracer thread may add events
    while the sampling loop adds samples. With ``autoflush`` (the default) a daemon thread calls
    ``flush_if_due()`` every ``flush_interval / 2`` seconds, so the one-second loss bound holds
    even when the caller stalls; without it the caller must call ``flush_if_due()`` (or any
    ``add_*``) that often. A failure in that thread (disk full) is raised by the next call.
    """

    def __init__(self, path: str | Path, header: dict[str, Any], *, force: bool = False,
                 flush_interval: float = 0.5, sync_interval: float = 0.5,
                 max_chunk_events: int = 65536, level: int = 3, autoflush: bool = True,
                 version: int = FORMAT_VERSION, fd: int | None = None) -> None:
        """``fd``: write there (a file snumap_tui.safeout opened; the Writer closes it)
        instead of opening ``path``, which then only names the file in messages."""
        self.path = Path(path)
        self.version = version
        self.flush_interval = flush_interval
        self.sync_interval = sync_interval
        self.max_chunk_events = max_chunk_events
        self.summary_notes: list[str] = []      # said after record's last line's figures
        self._cctx = zstandard.ZstdCompressor(level=level)
        # The events' and counters' chunks are built and compressed by the flusher thread
        # (store/encoder.py), with a compressor of its own (one is not for two threads); the
        # file's offset and index are kept under _io, which that thread takes alone. Its
        # level is BULK_LEVEL's (below LEVEL): that thread is the busiest stage of a switch
        # storm, and zstd was half of it.
        self._bulk_cctx = zstandard.ZstdCompressor(level=min(level, BULK_LEVEL))
        self._chunks = ChunkQueue()
        self._lock = threading.RLock()
        self._io = threading.Lock()
        self._events: list[np.ndarray] = []
        self._carry: list[np.ndarray] = []     # rows a chunk job left for the next one
        self._n_buffered = 0
        self._samples: list[Sample] = []
        self._tasks: list[TaskInfo] = []
        self._lost: dict[int, int] = {}
        self._markers: list[tuple[int, str]] = []
        self._regions = RegionBuffer()
        self._memory = MemoryBuffer()
        self.regions_written = 0
        self._counters = CounterBuffer()
        self.counter_events: list[str] = []    # the events of batches' counters (record)
        # A counter row is 32 + 24 bytes per event in memory, 3-6 times an event, and encoding
        # copies it twice: a quarter of the events' chunk bounds the recorder's peak under a
        # switch storm (65,536 rows took ~40 MB more than no counters; docs/benchmarks.md).
        self.max_chunk_counters = max(1, max_chunk_events // 4)
        self.counters_written = 0
        self._oldest: float | None = None      # monotonic seconds of the oldest buffered item
        self._last_t = 0                       # latest event/sample time seen (for lost chunks)
        self._index: list[tuple[int, int, int, int, int]] = []
        self._offset = 0
        self._last_sync = time.monotonic()
        self._failed: SnumapError | None = None
        self._closed = False
        self.events_written = 0
        self.lost_total = 0
        # CPU time spent encoding, compressing and writing chunks (every thread's: the
        # caller's and the flush thread's); the recorder's cost says it (recording/selfcost.py)
        self.write_cpu_ns = 0
        self._cpu_lock = threading.Lock()
        self._job_ns = threading.local()       # this thread's chunk jobs' CPU (see _timed)
        self.tid_max = 0                       # largest task id in any event (record --job)
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
        flags |= os.O_TRUNC if force else os.O_EXCL
        try:
            self._fd = fd if fd is not None else os.open(self.path, flags, 0o644)
        except FileExistsError:
            raise SnumapError(f"{self.path} already exists (use --force to overwrite it)") from None
        except OSError as e:
            raise SnumapError(f"cannot create {self.path}: {e.strerror}") from None
        hdr = dict(header)
        hdr.setdefault("format", "snumap-recording")
        hdr["format_version"] = version
        hdr.setdefault("start_monotonic_ns", time.monotonic_ns())
        hdr.setdefault("start_wall_ns", time.time_ns())
        self.header = hdr
        try:
            body = self._header_body = json.dumps(hdr, default=_json_default).encode("utf-8")
        except (TypeError, ValueError) as e:
            os.close(self._fd)
            raise SnumapError(f"recording header is not serialisable: {e}") from None
        t = int(hdr["start_monotonic_ns"])
        try:
            self._write(C.pack_preamble(version), kind=None)
            self._write_chunk(C.K_HEADER, body, count=1, t_min=t, t_max=t)
            # The same JSON again (docs/format.md, "header copy"): one flipped bit in the
            # header must not cost the topology; it is repeated at a clean close too.
            self._write_chunk(C.K_HEADER_COPY, body, count=1, t_min=t, t_max=t)
            self._sync()
        except SnumapError:
            self._closed = True
            os.close(self._fd)
            raise
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        if autoflush:
            self._flusher = threading.Thread(target=self._autoflush, name="snumap-store-flush",
                                             daemon=True)
            self._chunks.worker = self._flusher
            self._flusher.start()

    # ---- public API -------------------------------------------------------------------------

    def add_sample(self, sample: Sample) -> None:
        with self._lock:
            self._check()
            self._samples.append(sample)
            self._last_t = max(self._last_t, int(sample.t_ns))
            self._touch()
            self.flush_if_due()

    def add_events(self, batch: EventBatch) -> None:
        with self._lock:
            self._check()
            ev = batch.events
            if ev.size:
                if ev.dtype != EVENT_DTYPE:
                    ev = ev.astype(EVENT_DTYPE)
                self._events.append(ev)
                self._n_buffered += ev.size
                self.tid_max = max(self.tid_max, *(int(ev[f].max()) for f in
                                                   ("tid", "tid2", "pid", "pid2")))
                self._last_t = max(self._last_t, int(ev["t_ns"].max()))
            c = batch.counters
            if c is not None and len(c):
                self._counters.add(c, self.counter_events)
                if self._counters.n >= self.max_chunk_counters:
                    self._timed(self._write_counters)
            self._tasks.extend(batch.tasks)
            for t in batch.tasks:
                self.tid_max = max(self.tid_max, int(t.tid), int(t.pid), int(t.ppid))
            for cpu, n in batch.lost.items():
                if n:
                    self._lost[int(cpu)] = self._lost.get(int(cpu), 0) + int(n)
                    self.lost_total += int(n)
            if ev.size or batch.tasks or batch.lost or self._counters.n:
                self._touch()
            if self._n_buffered >= self.max_chunk_events:
                self._timed(self._flush_events, True)
            self.flush_if_due()

    def add_marker(self, t_ns: int, text: str) -> None:
        with self._lock:
            self._check()
            self._markers.append((int(t_ns), str(text)))
            self._touch()
            self.flush_if_due()

    def add_regions(self, rows: np.ndarray, table: list[Any],
                    sums: np.ndarray | None = None) -> None:
        """Region records (``REGION_DTYPE``) and summaries of calls summed in the kernel
        (``SUM_DTYPE``), whose ``rid`` index TABLE (the recorder's whole table so far:
        RegionName items), for the regions chunk (store/regions.py)."""
        with self._lock:
            self._check()
            if not len(rows) and (sums is None or not len(sums)):
                return
            self._regions.add(rows, table)
            if sums is not None:
                self._regions.add_sums(sums, table)
            self._touch()
            if self._regions.n >= self.max_chunk_events:
                self._timed(self._write_regions)
            self.flush_if_due()

    def add_region_loss(self, lost: dict[str, int], t_ns: int) -> None:
        """Region records the kernel lost, per region name, said at T_NS: written with the
        regions chunk (the report says which regions' figures are short)."""
        with self._lock:
            self._check()
            if lost:
                self._regions.add_lost(lost, t_ns)
                self._touch()

    def _write_regions(self) -> None:
        got = self._regions.take()
        if got is None:
            return
        value, t_min, t_max = encode_regions(*got)
        self._write_chunk(K_REGIONS, codec.encode(value), count=len(got[0]), t_min=t_min,
                          t_max=t_max)
        self.regions_written += len(got[0])

    def add_process_memory(self, rows: np.ndarray) -> None:
        """Memory rows (store/procmem.py MEMORY_DTYPE) for the process memory chunk."""
        with self._lock:
            self._check()
            if len(rows):
                self._memory.add(rows)
                self._touch()
            self.flush_if_due()

    def _write_memory(self) -> None:
        got = self._memory.take()
        if got is not None:
            value, n, t_min, t_max = got
            self._write_chunk(K_PROCESS_MEMORY, codec.encode(value), count=n, t_min=t_min,
                              t_max=t_max)

    def _write_counters(self) -> None:
        got = self._counters.take_parts()
        if got is None:
            return

        def job() -> None:
            parts, events = got
            rows = parts[0] if len(parts) == 1 else np.concatenate(parts)
            del parts[:]
            value, t_min, t_max = encode_counters(rows, events)
            self._write_chunk(K_THREAD_COUNTERS, codec.encode(value), count=len(rows),
                              t_min=t_min, t_max=t_max, bulk=True)
            self.counters_written += len(rows)

        self._chunks.submit(self._guarded(job))

    def add_info(self, t_ns: int, what: str, value: dict[str, Any]) -> None:
        """A node fact (docs/format.md, "Info chunk"), written as its own chunk at once: these
        are rare (a job's new processes, the closing clock reading)."""
        with self._lock:
            self._check()
            payload = codec.encode({"t_ns": int(t_ns), "what": str(what), **value})
            self._write_chunk(C.K_INFO, payload, count=1, t_min=int(t_ns), t_max=int(t_ns))

    def add_value_chunk(self, kind: int, value: Any, *, count: int, t_min: int,
                        t_max: int) -> None:
        """A chunk whose value was built elsewhere (a merge's regions, thread counters and
        process memory, moved onto the job's numbering), encoded and written as it is."""
        with self._lock:
            self._check()
            self._write_chunk(kind, codec.encode(value), count=count, t_min=t_min, t_max=t_max)

    def add_raw_chunk(self, kind: int, blob: bytes, *, count: int, t_min: int,
                      t_max: int, events: int = 0) -> None:
        """A complete chunk (header + payload) built elsewhere, e.g. copied by a merge, written
        after everything buffered."""
        with self._lock:
            self._check()
            self.flush()
            self._append(blob, kind, count, t_min, t_max)
            self.events_written += events

    def flush_if_due(self) -> None:
        """Flush when the oldest buffered item is ``flush_interval`` old (the events' and
        counters' chunks queued for the flusher thread, not waited for); sync when due."""
        with self._lock:
            now = time.monotonic()
            if self._oldest is not None and now - self._oldest >= self.flush_interval:
                self._flush(wait=False)
            elif self._flusher is None and self._sync_due():
                self._sync()        # with a flusher thread, it syncs (without the lock)

    def _timed(self, fn: Any, *args: Any) -> None:
        """FN(*ARGS), its CPU time (this thread's) added to ``write_cpu_ns``, less the chunk
        jobs it ran here (they add their own: ``_guarded``)."""
        c0 = time.thread_time_ns()
        j0 = getattr(self._job_ns, "ns", 0)
        try:
            fn(*args)
        finally:
            d = time.thread_time_ns() - c0 - (getattr(self._job_ns, "ns", 0) - j0)
            with self._cpu_lock:
                self.write_cpu_ns += d

    def flush(self) -> None:
        """Write everything buffered as chunks now (and sync if the last sync is old)."""
        self._flush(wait=True)

    def _flush(self, wait: bool) -> None:
        """Everything buffered made into chunks; with WAIT, in the file on return (the
        chunk jobs time themselves, see ``_guarded``)."""
        with self._lock:
            self._timed(self._flush_now)
            if wait:
                self._chunks.wait_idle()
                self._check()

    def _flush_now(self) -> None:
        with self._lock:
            self._check()
            if self._tasks:
                self._write_tasks()
            if self._lost:
                payload = codec.encode({"t_ns": self._last_t, "lost": self._lost})
                self._write_chunk(C.K_LOST, payload, count=len(self._lost),
                                  t_min=self._last_t, t_max=self._last_t)
                self._lost = {}
            if self._markers:
                ts = [t for t, _ in self._markers]
                payload = codec.encode([[t, s] for t, s in self._markers])
                self._write_chunk(C.K_MARKERS, payload, count=len(ts), t_min=min(ts),
                                  t_max=max(ts))
                self._markers = []
            if self._samples:
                self._write_samples()
            self._write_regions()
            self._write_memory()
            self._write_counters()
            self._flush_events(only_full=False)
            self._oldest = None
            if self._flusher is None and time.monotonic() - self._last_sync >= self.sync_interval:
                self._sync()

    def close(self) -> None:
        """Flush, write the time index and the clean-close trailer, sync and close. Idempotent;
        after a failure (disk full) it only closes the file."""
        self._stop.set()
        self._chunks.wake()
        if self._flusher is not None and self._flusher is not threading.current_thread():
            self._flusher.join()
        with self._lock:
            if self._closed:
                return
            try:
                if self._failed is None:
                    self.flush()
                    t = int(self.header["start_monotonic_ns"])
                    self._write_chunk(C.K_HEADER_COPY, self._header_body, count=1, t_min=t,
                                      t_max=t)
                    index_at = self._offset
                    idx = np.array(self._index, dtype=np.uint64).reshape(-1, 5)
                    payload = codec.encode({
                        "offset": idx[:, 0], "kind": idx[:, 1].astype(np.uint8),
                        "count": idx[:, 2].astype(np.uint32), "t_min": idx[:, 3],
                        "t_max": idx[:, 4]})
                    n_chunks = len(self._index)
                    self._write_chunk(C.K_INDEX, payload, count=n_chunks)
                    tail = C.TRAILER.pack(index_at, n_chunks, self.events_written)
                    self._write(C.pack_chunk(C.K_TRAILER, tail, count=0), kind=None)
                    self._sync()
            finally:
                self._closed = True
                os.close(self._fd)

    def __enter__(self) -> Writer:  # noqa: PYI034 - py3.10 has no typing.Self
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def span_ns(self) -> tuple[int, int] | None:
        """(first, last) time of what was written, as the reader's ``t_start``/``t_end``
        will give it (chunks.SPAN_KINDS): the duration `snumap record` prints is the one
        `snumap report` and `replay` show. Complete after ``close``."""
        with self._lock:
            rows = [(lo, hi) for _, kind, _, lo, hi in self._index if kind in C.SPAN_KINDS]
        if not rows:
            return None
        return int(min(r[0] for r in rows)), int(max(r[1] for r in rows))

    @property
    def bytes_written(self) -> int:
        return self._offset

    # ---- internals --------------------------------------------------------------------------

    _unsynced = False
    _gen = 0            # writes so far: a sync that ran while more were written leaves them due

    def _autoflush(self) -> None:
        period = max(self.flush_interval / 2, 0.01)
        while not self._stop.is_set():
            if self._chunks.wait_jobs(period):
                self._chunks.run_pending()      # the chunks queued by the adding threads
            # then the flush and sync that are due, even while chunks keep coming
            if self._stop.is_set():
                return
            # Not blocking on the lock: an adding thread may hold it while it waits for room
            # in the queue that only this thread empties.
            if not self._lock.acquire(timeout=0.05):
                continue
            try:
                if self._closed or self._failed is not None:
                    return
                try:
                    self.flush_if_due()
                except SnumapError:
                    return  # kept in self._failed: the next add_* or flush raises it
                gen = self._gen if self._sync_due() else None
            finally:
                self._lock.release()
            if gen is not None:
                self._sync_unlocked(gen)

    def _touch(self) -> None:
        if self._oldest is None:
            self._oldest = time.monotonic()

    def _check(self) -> None:
        if self._failed is not None:
            raise self._failed
        if self._closed:
            raise SnumapError(f"recording {self.path} is already closed")

    def _flush_events(self, only_full: bool) -> None:
        """The buffered events handed to the chunk queue: whole chunks of
        ``max_chunk_events`` (ONLY_FULL), or all. The job sorts them with the rows the last
        one left over and keeps what is left for the next, as this thread did before: chunks
        do not overlap in time. Here the list is only handed over."""
        if not self._n_buffered:
            return
        m = self.max_chunk_events
        total = self._n_buffered
        full = (total // m) * m if only_full else total
        if not full:
            return
        parts, self._events = self._events, []
        self._n_buffered = total - full
        self._chunks.submit(self._guarded(self._events_job(parts, full)))

    def _events_job(self, parts: list[np.ndarray], full: int) -> Callable[[], None]:
        """The rows the last job left and PARTS (arrays nothing writes to any more), in time
        order; their first FULL rows as chunks (encoded, compressed, written), the rest kept
        for the next job. Jobs run one at a time, in order."""
        def job() -> None:
            rows = time_ordered(self._carry + parts) if self._carry or parts else []
            self._carry = []
            m = self.max_chunk_events
            for start in range(0, full, m):
                stop = min(start + m, full)
                value, t_min, t_max = encode_columns(span_columns(rows, start, stop))
                self._write_chunk(C.K_EVENTS, codec.encode(value), count=stop - start,
                                  t_min=t_min, t_max=t_max, bulk=True)
                self.events_written += stop - start
            self._carry = [r for r in rows_from(rows, full) if r.size]

        return job

    def _guarded(self, job: Callable[[], None]) -> Callable[[], None]:
        """JOB, whose failure stops the recording as a failed write does: the next call
        raises it (the thread that ran it may be the flusher)."""
        def run() -> None:
            if self._failed is not None:
                return
            c0 = time.thread_time_ns()
            try:
                job()
            except SnumapError as exc:
                self._failed = self._failed or exc
            except Exception as exc:  # noqa: BLE001 - a bug must not pass silently
                self._failed = SnumapError(f"cannot encode a chunk of {self.path}: {exc!r}")
            finally:        # the recorder's cost counts it, on whichever thread it ran
                d = time.thread_time_ns() - c0
                self._job_ns.ns = getattr(self._job_ns, "ns", 0) + d
                with self._cpu_lock:
                    self.write_cpu_ns += d

        return run

    def _write_tasks(self) -> None:
        rows = self._tasks
        ts = [int(r.t_ns) for r in rows]
        payload = codec.encode({
            "tid": np.array([r.tid for r in rows], dtype=np.int32),
            "pid": np.array([r.pid for r in rows], dtype=np.int32),
            "ppid": np.array([r.ppid for r in rows], dtype=np.int32),
            "t_ns": np.array(ts, dtype=np.uint64),
            "comm": [str(r.comm) for r in rows],
        })
        self._write_chunk(C.K_TASKS, payload, count=len(rows), t_min=min(ts), t_max=max(ts))
        self._tasks = []

    def _write_samples(self) -> None:
        self._write_samples_of(self._samples)
        self._samples = []

    def _write_samples_of(self, ss: list[Sample]) -> None:
        """One samples chunk (and its times) for ``ss``, split in halves while it would hold
        more than a reader accepts (``MAX_RAW_LEN``: a huge machine's task tables)."""
        payload = codec.encode([[int(s.t_ns), int(s.wall_ns), s.readings] for s in ss])
        if len(payload) > C.MAX_RAW_LEN and len(ss) > 1:
            self._write_samples_of(ss[:len(ss) // 2])
            self._write_samples_of(ss[len(ss) // 2:])
            return
        times = np.array([int(s.t_ns) for s in ss], dtype=np.uint64)
        count, t_min, t_max = len(ss), int(times.min()), int(times.max())
        self._write_chunk(C.K_SAMPLES, payload, count=count, t_min=t_min, t_max=t_max)
        # Right after it, its times alone (docs/format.md, "sample times"): listing a
        # recording's sample times then decodes a few bytes per chunk, not every reading.
        self._write_chunk(C.K_SAMPLE_TIMES, codec.encode(times), count=count, t_min=t_min,
                          t_max=t_max)

    def _write_chunk(self, kind: int, payload: bytes, *, count: int, t_min: int = 0,
                     t_max: int = 0, bulk: bool = False) -> None:
        """BULK: from a ChunkQueue job (the flusher thread's compressor)."""
        blob = C.pack_chunk(kind, payload, count=count, t_min=t_min, t_max=t_max,
                            compress=self._bulk_cctx if bulk else self._cctx)
        self._append(blob, kind, count, t_min, t_max)

    def _append(self, blob: bytes, kind: int, count: int, t_min: int, t_max: int) -> None:
        """Chunk BLOB written at the file's end and entered in the time index."""
        with self._io:
            at = self._offset
            self._write(blob, kind=kind)
            self._index.append((at, kind, count, t_min, t_max))


def _json_default(o: Any) -> Any:
    """Header values from numpy or sets become plain JSON."""
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"{type(o).__name__} is not JSON serialisable")
