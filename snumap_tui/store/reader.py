"""Reading a recording: index from the trailer (or a header-only scan), lazy decoding by time.

The file is memory-mapped, so opening a large recording costs one page per chunk header (or
just the trailing index), and asking for a time range decompresses only the chunks whose
[t_min, t_max] overlap it. Damage never raises once the file is recognised: damaged chunks are
skipped and described in ``Recording.damaged``.
"""

from __future__ import annotations

import mmap
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import zstandard

from snumap_tui.errors import SnumapError
from snumap_tui.model.sample import Sample
from snumap_tui.store import chunks as C
from snumap_tui.store import codec, kinds
from snumap_tui.store.columns import EVENT_FIELDS, decode_event_columns
from snumap_tui.store.counters import (
    K_THREAD_COUNTERS,
    ThreadCounters,
    decode_counters,
    merge_counters,
)
from snumap_tui.store.event_tables import dataframes, gather, trimmed
from snumap_tui.store.jobsamples import JobSamples
from snumap_tui.store.nodes import NodeTable
from snumap_tui.store.regions import Regions, decode_regions, merge_chunks
from snumap_tui.store.text import clean_text, clean_value
from snumap_tui.store.writer import MERGED_VERSION
from snumap_tui.topology import jsonlimits
from snumap_tui.topology.model import Topology
from snumap_tui.trace.events import EVENT_DTYPE, TaskInfo

# Versions this reader understands: each maps to the decoders of that version's chunk
# payloads. Format 1 is the first; a new version adds an entry and keeps the old ones.
# Format 2 is format 1 plus node chunks (recordings merged from several nodes).
SUPPORTED_VERSIONS = (1, 2)
MAX_CPUS = 1 << 16     # of a machine made up from the events when the topology is lost


def open_recording(path: str | Path, *, verify: bool | None = None) -> Recording:
    """Open a recording. ``verify`` checks every chunk's CRC up front (default: only when the
    file has no clean-close trailer, i.e. after a crash, where damage is expected)."""
    p = Path(path)
    if p.is_dir():
        raise SnumapError(f"{p} is a directory, not a recording")
    try:
        fd = os.open(p, os.O_RDONLY)
    except FileNotFoundError:
        raise SnumapError(f"{p}: no such file") from None
    except OSError as e:
        raise SnumapError(f"cannot open {p}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SnumapError(f"{p} is not a regular file")
        size = st.st_size
        if size == 0:
            raise SnumapError(f"{p}: empty file (nothing was recorded)")
        data = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as e:
        raise SnumapError(f"cannot read {p}: {e}") from None
    finally:
        os.close(fd)
    try:
        return Recording(data, name=str(p), verify=verify)
    except SnumapError as e:
        data.close()
        raise SnumapError(f"{p}: {e}") from None


class Recording:
    """A recording read back. Build with ``snumap_tui.store.open(path)``."""

    def __init__(self, data: bytes | mmap.mmap, *, name: str = "<bytes>",
                 verify: bool | None = None) -> None:
        self.name = name
        self._data = data
        self._tls = threading.local()
        self.version = C.parse_preamble(data, len(data))
        if self.version not in SUPPORTED_VERSIONS:
            if self.version > MERGED_VERSION:
                raise SnumapError(f"written by a newer snumap (format {self.version}); this one "
                                  f"reads formats up to {MERGED_VERSION}")
            raise SnumapError(f"unknown recording format {self.version}")
        self.damaged: list[str] = []
        self.complete = False
        self._chunks = self._plausible(self._load_index())
        if verify or (verify is None and not self.complete):
            self.verify()
        kinds = np.array([h.kind for h in self._chunks], dtype=np.uint8)
        self._kinds = kinds
        ev = [h for h in self._chunks if h.kind == C.K_EVENTS]
        self._ev_chunks = ev
        self._ev_tmin = np.array([h.t_min for h in ev], dtype=np.uint64)
        self._ev_tmax = np.array([h.t_max for h in ev], dtype=np.uint64)
        self.header: dict[str, Any] = {}
        self.tasks: dict[int, TaskInfo] = {}
        self.task_history: list[TaskInfo] = []
        self.lost: dict[int, int] = {}
        self.markers: list[tuple[int, str]] = []
        self.infos: list[dict[str, Any]] = []     # info chunks (docs/format.md), file order
        self._sample_times: np.ndarray | None = None
        self._job: JobSamples | None = None
        self._read_small_chunks()
        # Version 2: which node each events chunk belongs to, and how its events map onto
        # the merged time base, PUs and task ids (store/nodes.py).
        self.nodes = NodeTable.of(self) if self.version >= 2 else None

    @property
    def _dctx(self) -> zstandard.ZstdDecompressor:
        """This thread's decompressor: one is reused for every chunk (its context is allocated
        once), but a zstd context must not be used by two threads at once, and readers may
        decode chunks in a worker thread (``snumap_tui.analysis.load``)."""
        d = getattr(self._tls, "dctx", None)
        if d is None:
            d = self._tls.dctx = zstandard.ZstdDecompressor()
        return d

    # ---- the index ---------------------------------------------------------------------------

    def _load_index(self) -> list[C.ChunkHeader]:
        """Chunk headers in file order: from the trailing index if the recording was closed
        cleanly (no scan), else by walking headers."""
        data, size = self._data, len(self._data)
        tail = C.parse_chunk_header(data, size - C.TRAILER_CHUNK_SIZE) \
            if size >= C.PREAMBLE_SIZE + C.TRAILER_CHUNK_SIZE else None
        if tail is not None and tail.kind == C.K_TRAILER and tail.end == size:
            try:
                index_at, n_chunks, _n_events = C.TRAILER.unpack(
                    bytes(C.payload_of(data, tail, self._dctx)))
                chunks = self._chunks_from_index(index_at, n_chunks, tail.offset)
            except (C.PayloadError, codec.DecodeError, kinds.SchemaError, KeyError, ValueError,
                    TypeError, AttributeError):
                chunks = None
            if chunks is not None:
                self.complete = True
                return chunks
        res = C.scan(data)
        self.damaged.extend(res.damaged)
        if res.chunks and res.chunks[-1].kind == C.K_TRAILER:
            self.complete = True
        return res.chunks

    def _plausible(self, chunks: list[C.ChunkHeader]) -> list[C.ChunkHeader]:
        """The chunks whose header numbers can be true: a ``count`` its ``raw_len`` can hold, a
        ``raw_len`` within the limit. Readers size buffers from these numbers before decoding
        anything (``events()`` preallocates from the counts), so a crafted count must go here,
        not when its payload is read."""
        out = []
        for h in chunks:
            why = kinds.check_count(h.kind, h.count, h.raw_len)
            if h.raw_len > C.MAX_RAW_LEN:
                why = f"declares {h.raw_len} bytes decompressed (at most {C.MAX_RAW_LEN})"
            elif h.t_max > kinds.MAX_TIME or h.t_min > h.t_max:
                why = f"times {h.t_min}..{h.t_max} are not a time range below 2^63 ns"
            if why:
                self._note(f"damaged {h.name} chunk at byte {h.offset} skipped ({why})")
            else:
                out.append(h)
        return out

    def _chunks_from_index(self, index_at: int, n_chunks: int,
                           trailer_at: int) -> list[C.ChunkHeader] | None:
        """The chunks the index lists, if they tile the file from the preamble to the index
        and the index ends where the trailer starts (a writer's file always does): then no
        byte is unaccounted for, so nothing else (a second recording) hides between them.
        Anything else falls back to the scan."""
        h = C.parse_chunk_header(self._data, index_at)
        if h is None or h.kind != C.K_INDEX or h.end != trailer_at:
            return None
        idx, _ = kinds.validate(h.kind, codec.decode(C.payload_of(self._data, h, self._dctx)),
                                h.count)
        offsets = idx["offset"]
        if offsets.size != n_chunks:
            return None
        out = []
        pos = C.PREAMBLE_SIZE
        for off in offsets.tolist():
            ch = C.parse_chunk_header(self._data, off) if off == pos else None
            if ch is None:  # a damaged header, or a gap: fall back to a scan
                return None
            out.append(ch)
            pos = ch.end
        if pos != index_at:
            return None
        out.append(h)
        return out

    # ---- small chunks, read eagerly -----------------------------------------------------------

    def _payload(self, h: C.ChunkHeader) -> Any:
        """The decoded payload of chunk ``h``, checked against its kind's schema
        (store/kinds.py), or None (and a line in ``damaged``) if damaged."""
        try:
            raw = C.payload_of(self._data, h, self._dctx)
            value = _decode(h.kind, raw)
            value, notes = kinds.validate(h.kind, value, h.count)
        except (C.PayloadError, codec.DecodeError, ValueError, RecursionError) as e:
            what = "damaged" if isinstance(e, (C.PayloadError, codec.DecodeError)) \
                else "malformed"
            self._note(f"{what} {h.name} chunk at byte {h.offset} skipped ({e})")
            return None
        for n in notes:
            self._note(f"{h.name} chunk at byte {h.offset}: {n}")
        return value

    def _note(self, note: str) -> None:
        if note not in self.damaged:
            self.damaged.append(note)

    def _read_header(self) -> None:
        """The header chunk, else its first readable copy (kind "header copy", written right
        after it and again at a clean close): one damaged chunk must not cost the topology."""
        for kind in (C.K_HEADER, C.K_HEADER_COPY):
            for h in self._chunks:
                if h.kind != kind:
                    continue
                v = self._payload(h)
                if v:
                    self.header = clean_value(v)
                    if kind == C.K_HEADER_COPY and any("header chunk" in d
                                                       for d in self.damaged):
                        self._note(f"header read from its copy at byte {h.offset}")
                    return

    def _read_small_chunks(self) -> None:
        self._read_header()
        for h in self._chunks:
            if h.kind == C.K_TASKS:
                v = self._payload(h)
                if v is None:
                    continue
                for tid, pid, ppid, t, comm in zip(v["tid"].tolist(), v["pid"].tolist(),
                                                   v["ppid"].tolist(), v["t_ns"].tolist(),
                                                   v["comm"]):
                    info = TaskInfo(tid=tid, pid=pid, comm=clean_text(comm), ppid=ppid, t_ns=t)
                    self.task_history.append(info)
                    old = self.tasks.get(tid)
                    if old is None or t >= old.t_ns:
                        self.tasks[tid] = info
            elif h.kind == C.K_LOST:
                v = self._payload(h)
                for cpu, n in (v or {}).get("lost", {}).items():
                    self.lost[cpu] = self.lost.get(cpu, 0) + n
            elif h.kind == C.K_MARKERS:
                for t, text in self._payload(h) or []:
                    self.markers.append((int(t), clean_text(str(text))))
            elif h.kind == C.K_INFO:
                v = self._payload(h)
                if isinstance(v, dict):
                    self.infos.append(v)
        if not self.header:
            self.damaged.append("the recording header chunk is missing or damaged: "
                                "no topology or host information")
        self.markers.sort(key=lambda m: m[0])

    def verify(self) -> list[str]:
        """Check every chunk's CRC (reads the whole file); adds what fails to ``damaged``."""
        for h in self._chunks:
            try:
                _check_crc(self._data, h)
            except C.PayloadError as e:
                self._note(f"damaged {h.name} chunk at byte {h.offset} skipped ({e})")
        return self.damaged

    # ---- metadata ----------------------------------------------------------------------------

    @property
    def topology(self) -> Topology:
        topo = self.header.get("topology")
        if topo is None:
            if self.event_count:
                return self._topology_from_events()
            raise SnumapError(f"{self.name}: the recording has no topology")
        try:
            t = Topology.from_json(topo) if isinstance(topo, str) else Topology.from_dict(topo)
            _check_topology(t)
            return t
        except (ValueError, KeyError, TypeError, AttributeError, IndexError,
                RecursionError, OverflowError) as e:
            if self.event_count:
                self._note(f"the recorded topology is unreadable ({str(e)[:200]})")
                return self._topology_from_events()
            raise SnumapError(f"{self.name}: the recorded topology is unreadable: "
                              f"{str(e)[:200]}") from None

    def _topology_from_events(self) -> Topology:
        """A flat machine of the PUs the events name: what is left to read a recording whose
        header (and every copy of it) is lost, so that its events are still reported,
        exported and replayed -- without caches, cores, packages or NUMA nodes."""
        seen: set[int] = set()
        for cols in self.iter_event_columns(("cpu",)):
            seen.update(np.unique(cols["cpu"]).tolist())
        # Linux numbers at most 8192 CPUs (NR_CPUS); a larger number is noise, not a PU.
        cpus = sorted(c for c in seen if c < MAX_CPUS)[:MAX_CPUS] or [0]
        raw: list[dict[str, Any]] = [{"type": "Machine", "os_index": 0, "logical_index": 0,
                                      "depth": 0, "cpuset": cpus}]
        raw += [{"type": "PU", "os_index": c, "logical_index": i, "depth": 1, "cpuset": [c]}
                for i, c in enumerate(cpus)]
        kids = [list(range(1, len(raw)))] + [[] for _ in cpus]
        self._note(f"no recorded topology: a flat machine of the {len(cpus)} PUs the events "
                   "name is used (no cores, caches or NUMA nodes)")
        return Topology.from_flat(raw, [None] + [0] * len(cpus), kids,
                                  {"meta": {"source": "events", "source_kind": "events"}})

    @property
    def event_count(self) -> int:
        return int(sum(h.count for h in self._ev_chunks))

    @property
    def event_chunks(self) -> list[tuple[int, int, int]]:
        """(t_min, t_max, count) of each events chunk: enough to plan a lazy read."""
        return [(h.t_min, h.t_max, h.count) for h in self._ev_chunks]

    @property
    def t_start(self) -> int:
        """Earliest time in the recording (CLOCK_MONOTONIC ns)."""
        ts = [h.t_min for h in self._chunks if h.kind in C.SPAN_KINDS]
        if ts:
            return int(min(ts))
        return int(self.header.get("start_monotonic_ns", 0))

    @property
    def t_end(self) -> int:
        ts = [h.t_max for h in self._chunks if h.kind in C.SPAN_KINDS]
        return int(max(ts)) if ts else self.t_start

    # ---- regions -----------------------------------------------------------------------------

    def regions(self) -> Regions:
        """Every region record (uprobes, markers) with its name table (store/regions.py); a
        chunk that fails its checks or its schema is skipped and noted in ``damaged``."""
        parts = []
        for h in self._chunks:
            if h.kind != C.K_REGIONS:
                continue
            v = self._payload(h)
            if v is None:
                continue
            try:
                parts.append(decode_regions(v, h.count))
            except (ValueError, TypeError, KeyError, OverflowError) as e:
                self._note(f"undecodable regions chunk at byte {h.offset} skipped ({e})")
        return merge_chunks(parts)

    def process_memory(self) -> np.ndarray:
        """Every process memory row (store/procmem.py MEMORY_DTYPE), in time order; a chunk
        that fails its schema is skipped and noted in ``damaged``."""
        from snumap_tui.store.procmem import decode_memory, empty

        parts = [decode_memory(v) for h in self._chunks if h.kind == C.K_PROCESS_MEMORY
                 for v in (self._payload(h),) if v is not None]
        if not parts:
            return empty()
        rows = np.concatenate(parts)
        return rows[np.argsort(rows["t_ns"], kind="stable")]

    def thread_counters(self) -> ThreadCounters:
        """Every run interval with its counter deltas (store/counters.py), sorted by end; a
        chunk that fails its schema is skipped and noted in ``damaged``."""
        parts = []
        for h in self._chunks:
            if h.kind != K_THREAD_COUNTERS:
                continue
            v = self._payload(h)
            if v is not None:
                parts.append(decode_counters(v))
        table, notes = merge_counters(parts)
        for n in notes:
            self._note(n)
        return table

    # ---- samples -----------------------------------------------------------------------------

    def samples(self, t0: int | None = None, t1: int | None = None) -> Iterator[Sample]:
        """Samples with t0 <= t_ns < t1 (all by default), in time order, decoded lazily. A
        job merged from several nodes: one sample per step of every node's readings on the
        job's topology (store/jobsamples.py)."""
        if self.nodes is not None:
            yield from self._job_samples().samples(t0, t1)
            return
        lo = 0 if t0 is None else int(t0)
        hi = (1 << 64) if t1 is None else int(t1)
        for h in self._chunks:
            if h.kind != C.K_SAMPLES or h.t_max < lo or h.t_min >= hi:
                continue
            for t, wall, readings in self._payload(h) or []:
                if lo <= t < hi:
                    if "tasks" in readings:
                        readings["tasks"] = _clean_tasks(readings["tasks"])
                    yield Sample(t_ns=int(t), wall_ns=int(wall), readings=readings)

    @property
    def sample_times(self) -> np.ndarray:
        """The time of every sample, in time order. Cheap: each samples chunk's times come
        from the sample-times chunk written right after it (a few bytes), or from its header
        when it holds one sample; only a file without them (written before that chunk kind)
        has its readings decoded for the times."""
        if self._sample_times is None and self.nodes is not None:
            self._sample_times = self._job_samples().times()
        if self._sample_times is None:
            parts = [self._times_of(i, h) for i, h in enumerate(self._chunks)
                     if h.kind == C.K_SAMPLES]
            self._sample_times = np.concatenate(parts) if parts else np.empty(0, np.uint64)
        return self._sample_times

    def _job_samples(self) -> JobSamples:
        if self._job is None:
            self._job = JobSamples(self)
        return self._job

    def _times_of(self, i: int, h: C.ChunkHeader) -> np.ndarray:
        """The sample times of samples chunk ``h`` (``self._chunks[i]``): none if its payload
        is damaged, as ``samples()`` yields none from it (the stored bytes' CRC is checked,
        a small cost next to decompressing and decoding them)."""
        try:
            _check_crc(self._data, h)
        except C.PayloadError:
            self._payload(h)                  # notes the damage
            return np.empty(0, np.uint64)
        if h.count == 1:
            return np.array([h.t_min], dtype=np.uint64)
        nxt = self._chunks[i + 1] if i + 1 < len(self._chunks) else None
        if nxt is not None and nxt.kind == C.K_SAMPLE_TIMES and \
                (nxt.count, nxt.t_min, nxt.t_max) == (h.count, h.t_min, h.t_max):
            t = self._payload(nxt)
            if isinstance(t, np.ndarray) and t.shape == (h.count,):
                return t.astype(np.uint64, copy=False)
        got = self._payload(h) or []
        return np.array([int(x[0]) for x in got], dtype=np.uint64)

    # ---- events ------------------------------------------------------------------------------

    def _chunks_in(self, t0: int | None, t1: int | None) -> list[C.ChunkHeader]:
        keep = np.ones(len(self._ev_chunks), dtype=bool)
        if t0 is not None:
            keep &= self._ev_tmax >= np.uint64(max(int(t0), 0))
        if t1 is not None:
            if int(t1) <= 0:
                return []
            keep &= self._ev_tmin < np.uint64(int(t1))
        return [h for h, k in zip(self._ev_chunks, keep.tolist()) if k]

    def iter_event_columns(self, fields: tuple[str, ...] = EVENT_FIELDS,
                           t0: int | None = None, t1: int | None = None, *,
                           chunks: slice | list[int] | None = None
                           ) -> Iterator[dict[str, np.ndarray]]:
        """Columns of events with t0 <= t_ns < t1, one chunk at a time (bounded memory).

        ``t_ns`` is always included. Chunks come in file order; each is sorted by time, and
        consecutive chunks overlap in time only when a tracer delivered events late."""
        unknown = set(fields) - set(EVENT_FIELDS)
        if unknown:
            raise ValueError(f"unknown event fields {sorted(unknown)}; known: {EVENT_FIELDS}")
        need = tuple(fields) if "t_ns" in fields else ("t_ns", *fields)
        lo = None if t0 is None else np.uint64(max(int(t0), 0))
        hi = None if t1 is None else np.uint64(max(int(t1), 0))
        # ``chunks``: these events chunks in file order (a merged recording's nodes overlap in
        # time, so a time window would decode every chunk once per window it overlaps), a
        # slice of them or a list of their indexes (one node's, for a lazy replay).
        if isinstance(chunks, list):            # these events chunks, by index
            picked = [self._ev_chunks[i] for i in chunks]
        else:
            picked = self._ev_chunks[chunks] if chunks is not None else self._chunks_in(t0, t1)
        for h in picked:
            v = self._payload(h)
            if v is None:
                continue
            try:
                if int(v["n"]) != h.count:
                    raise ValueError(f"{v['n']} events inside, {h.count} in its header")
                cols = decode_event_columns(v, need)
                if self.nodes is not None:
                    cols = self.nodes.transform(h.offset, cols)
                t = cols["t_ns"]
                if t.size and (int(t[0]) != h.t_min or int(t[-1]) != h.t_max):
                    raise ValueError(f"event times {int(t[0])}..{int(t[-1])} differ from "
                                     f"its header's {h.t_min}..{h.t_max}")
                if t.size > 1 and not bool(np.all(t[1:] >= t[:-1])):
                    raise ValueError("events out of time order")
            except (KeyError, ValueError, TypeError, IndexError, OverflowError) as e:
                self._note(f"undecodable events chunk at byte {h.offset} skipped ({e})")
                continue
            if lo is not None or hi is not None:
                t = cols["t_ns"]
                a = 0 if lo is None else int(np.searchsorted(t, lo, side="left"))
                b = t.size if hi is None else int(np.searchsorted(t, hi, side="left"))
                if a > 0 or b < t.size:
                    cols = {k: c[a:b] for k, c in cols.items()}
            yield cols

    def event_columns(self, fields: tuple[str, ...] = ("t_ns", "cpu", "kind", "tid", "tid2"),
                      t0: int | None = None, t1: int | None = None) -> dict[str, np.ndarray]:
        """The named columns (plus ``t_ns``) of events with t0 <= t_ns < t1, in time order.

        Output arrays are allocated once from the chunk counts in the index and filled chunk by
        chunk, so peak memory is the output plus one chunk: 21 bytes per event for the default
        columns, against EVENT_DTYPE's 37."""
        fields = tuple(fields) if "t_ns" in fields else ("t_ns", *fields)
        if set(fields) - set(EVENT_FIELDS):
            raise ValueError(f"unknown event fields in {fields}; known: {EVENT_FIELDS}")
        chunks = self._chunks_in(t0, t1)
        cap = sum(h.count for h in chunks)
        out = {f: np.empty(cap, dtype=EVENT_DTYPE[f]) for f in fields}
        n = gather(out, self.iter_event_columns(fields, t0, t1), self.damaged)
        return {f: trimmed(a, n) for f, a in out.items()}

    def events(self, t0: int | None = None, t1: int | None = None) -> np.ndarray:
        """EVENT_DTYPE rows with t0 <= t_ns < t1 (all by default), in time order."""
        cap = sum(h.count for h in self._chunks_in(t0, t1))
        rows = np.empty(cap, dtype=EVENT_DTYPE)
        n = gather({f: rows[f] for f in EVENT_FIELDS},
                   self.iter_event_columns(EVENT_FIELDS, t0, t1), self.damaged)
        return trimmed(rows, n)

    # ---- tables ------------------------------------------------------------------------------

    def to_dataframes(self) -> dict[str, Any]:
        """``events``, ``tasks``, ``samples`` (times), ``markers`` and ``lost`` as pandas
        DataFrames when pandas is installed, else as numpy structured arrays / dicts of arrays."""
        return dataframes(self.events(), self.tasks, self.sample_times, self.markers, self.lost)

    def close(self) -> None:
        if isinstance(self._data, mmap.mmap):
            try:
                self._data.close()
            except BufferError:  # a caller still holds a view into it; GC will unmap it
                pass

    def __enter__(self) -> Recording:  # noqa: PYI034 - py3.10 has no typing.Self
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_topology(t: Topology) -> None:
    """What the readers size tables by: PU numbers (dense cpu -> row tables) and the object
    count. A real machine has at most a few thousand PUs and tens of thousands of objects."""
    pus = list(t.pu_os_indexes)
    if not pus:
        raise ValueError("it has no PU")
    if min(pus) < 0 or max(pus) >= MAX_CPUS:
        raise ValueError(f"PU numbers {min(pus)}..{max(pus)} are outside 0..{MAX_CPUS - 1}")
    if len(t) > 1 << 20:
        raise ValueError(f"{len(t)} objects")


def _decode(kind: int, raw: bytes | memoryview) -> Any:
    """A checked, decompressed payload decoded as its kind says (JSON for the header)."""
    k = kinds.REGISTRY.get(kind)
    if k is not None and k.encoding == kinds.JSON:
        # Within a budget of bytes, items and nesting (topology/jsonlimits.py); NaN and
        # Infinity are kept as floats here, so the schema drops the one key holding them.
        return jsonlimits.loads(raw, finite=False)
    if k is not None and k.encoding == kinds.RAW:
        return bytes(raw)
    return codec.decode(raw)


def _clean_tasks(r: dict[str, Any]) -> dict[str, Any]:
    """A tasks reading with its comms and process strings made valid text (store/text.py)."""
    threads = r.get("threads")
    comm = threads.get("comm") if isinstance(threads, dict) else None
    if isinstance(threads, dict) and comm is not None \
            and not all(isinstance(c, str) and c.isascii() for c in comm):
        cleaned = [clean_text(c) if isinstance(c, str) else c for c in comm]
        if any(a != b for a, b in zip(cleaned, comm)):
            threads["comm"] = np.array(cleaned) if isinstance(comm, np.ndarray) else cleaned
    procs = r.get("processes")
    if isinstance(procs, dict):
        for p in procs.values():
            if isinstance(p, dict):
                for k in ("cmdline", "user", "cgroup"):
                    if p.get(k) is not None:
                        p[k] = clean_value(p[k])
    return r


def _check_crc(data: bytes | mmap.mmap, h: C.ChunkHeader) -> None:
    start = h.offset + C.CHUNK_HEADER_SIZE
    stored = memoryview(data)[start:start + h.payload_len]
    if len(stored) != h.payload_len:
        raise C.PayloadError("truncated")
    if C.crc32(stored) != h.payload_crc:
        raise C.PayloadError("checksum mismatch")
