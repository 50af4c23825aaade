"""Reading a BPF ring buffer map (BPF_MAP_TYPE_RINGBUF) directly from its mmap, in bulk.

bcc's ``open_ring_buffer`` calls one Python function per record; at tens of thousands of context
switches per second (millions on a big node) that is the bottleneck. The kernel lets user space
map the ring itself (Documentation/bpf/ringbuf.rst, and libbpf's ringbuf.c for the layout):

- page 0 (read-write): ``consumer_pos`` (u64), advanced by the reader;
- page 1 (read-only): ``producer_pos`` (u64);
- then the data area, ``max_entries`` bytes, which the kernel offers mapped twice back to back
  (so a record that wraps around the end is contiguous). This reader maps it once: a mapped
  page counts in the recorder's RSS for each mapping that touched it, so the double map
  doubled the ring's share of RSS; a read that wraps joins its two parts instead (a copy of
  what wraps, once per lap of the ring).

Each record is an 8-byte header (``u32 len`` with BUSY bit 31 = not yet submitted and DISCARD bit
30, then ``u32 pg_off``) followed by ``len`` bytes, the whole rounded up to 8. All records of the
snumap tracer have the same size, so the available bytes are an array of fixed-stride records that
numpy decodes in one view; the stride walk below handles any other content.
"""

from __future__ import annotations

import mmap
import os

import numpy as np

from snumap_tui.trace.bpf_layout import to_events
from snumap_tui.trace.events import empty_events
from snumap_tui.trace.rows import concat_rows

BUSY_BIT = 1 << 31
DISCARD_BIT = 1 << 30
HDR_SIZE = 8
# The BPF programs (sched.bpf.c, regions.bpf.c) wake a ring's reader with the record that
# crosses every 1/WAKE_FRACTION of the ring (their ``snumap_wake_bytes``), not for each one.
WAKE_FRACTION = 8


def record_stride(payload_size: int) -> int:
    """Bytes one record of PAYLOAD_SIZE occupies in the ring (header + payload, 8-aligned)."""
    return (payload_size + HDR_SIZE + 7) & ~7


def decode_fixed(buf: bytes | memoryview, rec_dtype: np.dtype) -> tuple[np.ndarray, int]:
    """Records of REC_DTYPE from the ring bytes BUF: (records, bytes consumed).

    Stops at the first record still BUSY (reserved, not yet submitted); drops DISCARDed ones.
    Falls back to a header walk if a record of another size is met.
    """
    stride = record_stride(rec_dtype.itemsize)
    n = len(buf) // stride
    framed = np.dtype({"names": ["len", "rec"], "formats": ["<u4", rec_dtype],
                       "offsets": [0, HDR_SIZE], "itemsize": stride})
    arr = np.frombuffer(buf, dtype=framed, count=n)
    lens = arr["len"]
    if n and bool((lens == rec_dtype.itemsize).all()):
        # The common case, every record submitted and of our size: one strided byte copy of
        # the payloads (4x faster than the masks and the gather below).
        raw = np.frombuffer(buf, dtype=np.uint8, count=n * stride).reshape(n, stride)
        payload = raw[:, HDR_SIZE:HDR_SIZE + rec_dtype.itemsize].copy()
        return payload.view(rec_dtype).reshape(n), n * stride
    busy = np.flatnonzero(lens & BUSY_BIT)
    upto = int(busy[0]) if len(busy) else n
    sizes = lens[:upto] & ~np.uint32(BUSY_BIT | DISCARD_BIT)
    odd = np.flatnonzero(sizes != rec_dtype.itemsize)
    if len(odd):
        return _walk(buf, rec_dtype)
    keep = np.flatnonzero((lens[:upto] & DISCARD_BIT) == 0)
    # np.take copies whole records as bytes; a structured copy or mask goes field by field.
    return np.take(arr["rec"], keep), upto * stride


def _walk(buf: bytes | memoryview, rec_dtype: np.dtype) -> tuple[np.ndarray, int]:
    """The general case: follow each header; keep records whose size is REC_DTYPE's."""
    view = memoryview(buf)
    off, keep = 0, []
    while off + HDR_SIZE <= len(view):
        length = int.from_bytes(view[off:off + 4], "little")
        if length & BUSY_BIT:
            break
        size = length & ~(BUSY_BIT | DISCARD_BIT)
        total = record_stride(size)
        if off + total > len(view):
            break
        if not length & DISCARD_BIT and size == rec_dtype.itemsize:
            keep.append(off + HDR_SIZE)
        off += total
    raw = np.frombuffer(view, dtype=np.uint8)
    if not keep:
        return np.empty(0, dtype=rec_dtype), off
    idx = np.asarray(keep)[:, None] + np.arange(rec_dtype.itemsize)
    return raw[idx].copy().view(rec_dtype).reshape(-1), off


def committed_bytes(buf: bytes | memoryview, payload: int) -> int:
    """How many leading bytes of BUF are whole records that the producer has submitted (or
    discarded): up to the first BUSY one, or the first cut short. PAYLOAD: the size of the
    records expected (any other size is followed by its header)."""
    stride = record_stride(payload)
    n = len(buf) // stride
    off = 0
    if n:
        lens = np.ndarray((n,), dtype="<u4", buffer=buf, strides=(stride,))
        bad = np.flatnonzero((lens & ~np.uint32(DISCARD_BIT)) != payload)
        if not len(bad):
            return n * stride               # every record submitted, all of this size
        k = int(bad[0])
        if lens[k] & BUSY_BIT:
            return k * stride               # the producer is still writing that one
        off = k * stride                    # a record of another size: follow the headers
    view = memoryview(buf)
    while off + HDR_SIZE <= len(view):
        length = int.from_bytes(view[off:off + 4], "little")
        if length & BUSY_BIT:
            break
        total = record_stride(length & ~(BUSY_BIT | DISCARD_BIT))
        if off + total > len(view):
            break
        off += total
    return off


def ring_events(buf: bytes | memoryview, rec_dtype: np.dtype) -> np.ndarray:
    """The scheduling records of ring bytes BUF (``read_raw``: whole, committed records) in
    EVENT_DTYPE: one strided copy per field straight from the ring's layout (the payload
    copy ``decode_fixed`` makes first is skipped). Discarded records and records of another
    size are left out, as ``decode_fixed`` does."""
    stride = record_stride(rec_dtype.itemsize)
    n = len(buf) // stride
    framed = np.dtype({"names": ["len", "rec"], "formats": ["<u4", rec_dtype],
                       "offsets": [0, HDR_SIZE], "itemsize": stride})
    arr = np.frombuffer(buf, dtype=framed, count=n)
    if n and not bool((arr["len"] == rec_dtype.itemsize).all()):
        recs, _ = decode_fixed(buf, rec_dtype)      # discarded or odd records among them
        src = recs
    else:
        src = arr["rec"]
    return to_events(src)


def rings_events(raws: list[bytes], rec_dtype: np.dtype) -> np.ndarray:
    """The events of one drain of every ring (``read_raw``'s bytes, in ring order), in time
    order: each ring decoded (``ring_events``), then their runs merged by a stable sort --
    the order today's decoder gave the rings' records joined and sorted (equal times: ring
    order, then ring position)."""
    parts = [ring_events(raw, rec_dtype) for raw in raws if raw]
    if not parts:
        return empty_events()
    out = parts[0] if len(parts) == 1 else concat_rows(parts)
    t = out["t_ns"]
    if len(t) > 1 and not bool(np.all(t[1:] >= t[:-1])):
        out = np.take(out, np.argsort(t, kind="stable"))
    return out


# Bytes after the end of the ring joined to the record that straddles it: more than any record.
JOIN_MAX = 1 << 16


def _joined(parts: list[np.ndarray], rec_dtype: np.dtype) -> np.ndarray:
    parts = [p for p in parts if len(p)]
    if not parts:
        return np.empty(0, dtype=rec_dtype)
    return parts[0] if len(parts) == 1 else concat_rows(parts)


class BpfRingReader:
    """Consumer side of one BPF ring buffer map, mapped from its file descriptor."""

    def __init__(self, map_fd: int, size: int, rec_dtype: np.dtype) -> None:
        page = os.sysconf("SC_PAGE_SIZE")
        self.size = size
        self.rec_dtype = rec_dtype
        self._cons_map = mmap.mmap(map_fd, page, flags=mmap.MAP_SHARED,
                                   prot=mmap.PROT_READ | mmap.PROT_WRITE, offset=0)
        self._data_map = mmap.mmap(map_fd, page + size, flags=mmap.MAP_SHARED,
                                   prot=mmap.PROT_READ, offset=page)
        self._cons = np.frombuffer(self._cons_map, dtype="<u8", count=1)
        self._prod = np.frombuffer(self._data_map, dtype="<u8", count=1)
        self._data = memoryview(self._data_map)[page:page + size]
        self.closed = False
        self.capped = False       # the last read stopped at its MAX_BYTES, with more there

    def pending(self) -> int:
        """Bytes written by the kernel and not consumed yet."""
        return int(self._prod[0]) - int(self._cons[0])

    def read(self, max_bytes: int | None = None) -> np.ndarray:
        """The complete records available now (at most MAX_BYTES of ring), copied out, and
        their space given back."""
        cons = int(self._cons[0])
        avail = int(self._prod[0]) - cons
        self.capped = max_bytes is not None and avail > max_bytes
        if avail <= 0:
            return np.empty(0, dtype=self.rec_dtype)
        if max_bytes is not None and avail > max_bytes:
            # Whole records only for the fixed-size fast path; a record cut short otherwise
            # stays for the next read (_walk stops before it).
            stride = record_stride(self.rec_dtype.itemsize)
            avail = max(stride, max_bytes // stride * stride)
        start = cons & (self.size - 1)
        end = start + avail
        if end <= self.size:
            recs, used = decode_fixed(self._data[start:end], self.rec_dtype)
        else:
            recs, used = self._read_wrapped(start, end - self.size)
        self._cons[0] = cons + used
        return recs

    def read_raw(self, max_bytes: int | None = None) -> bytes:
        """The complete records available now (at most about MAX_BYTES of ring) as the ring
        holds them, headers included -- one copy, no decoding -- and their space given back.
        What the drain thread takes: the records are decoded later, off the thread that must
        keep the rings from filling (``ring_events``)."""
        cons = int(self._cons[0])
        avail = int(self._prod[0]) - cons
        self.capped = max_bytes is not None and avail > max_bytes
        if avail <= 0:
            return b""
        stride = record_stride(self.rec_dtype.itemsize)
        if max_bytes is not None and avail > max_bytes:
            avail = max(stride, max_bytes // stride * stride)
        start = cons & (self.size - 1)
        end = start + avail
        if end <= self.size:
            raw = bytes(self._data[start:end])
        else:
            raw = bytes(self._data[start:]) + bytes(self._data[:end - self.size])
        used = committed_bytes(raw, self.rec_dtype.itemsize)
        self._cons[0] = cons + used
        return raw if used == len(raw) else raw[:used]

    def _read_wrapped(self, start: int, head: int) -> tuple[np.ndarray, int]:
        """Records from START to the end of the data area and on from its beginning up to
        HEAD: the records on each side are decoded where they are, and only the record that
        straddles the end is copied to be joined (joining both sides whole held three copies
        of up to a drain's worth of ring, once per lap)."""
        parts = []
        recs, used = decode_fixed(self._data[start:], self.rec_dtype)
        parts.append(recs)
        tail = self.size - start - used
        if tail:      # a record straddles the end, or stopped the decoding (busy)
            joined = bytes(self._data[start + used:]) + bytes(self._data[:min(head, JOIN_MAX)])
            recs, n = decode_fixed(joined, self.rec_dtype)
            parts.append(recs)
            used += n
            if n <= tail:
                return _joined(parts, self.rec_dtype), used
            at = n - tail
        else:
            at = 0
        recs, n = decode_fixed(self._data[at:head], self.rec_dtype)
        parts.append(recs)
        return _joined(parts, self.rec_dtype), used + n

    def close(self) -> None:
        """Unmap the ring; a second call does nothing."""
        if self.closed:
            return
        self.closed = True
        del self._cons, self._prod
        self._data.release()
        self._cons_map.close()
        self._data_map.close()


# A ring's share of a drain's budget is at least this (~680 scheduling records): a read has a
# fixed cost (~10 us of Python), and 1 MiB shared by 384 rings was 56 records a read.
MIN_SHARE = 32 << 10


def _share(max_bytes: int | None, rings: int, least: int = MIN_SHARE) -> int | None:
    """Each of RINGS' share of MAX_BYTES, at least LEAST (None: no limit)."""
    if max_bytes is None or not rings:
        return None
    return max(max_bytes // rings, least, 1)


class BpfRingSet:
    """Consumer side of one BPF ring per CPU (the CO-RE tracer's array of rings).

    One ring shared by every CPU takes a spinlock for each record: with two CPUs switching a
    million times a second each, the two BPF programs took 150-170 ns a call, against 86-92
    ns with a ring per CPU (bpf_stats, `stress-ng --switch 2`, this project's 2-PU VM), and
    the lock's cache line only bounces more with more CPUs. Records are read ring by ring and
    put in time order after (bpf_common's _finish), as the perf backend does with its rings."""

    def __init__(self, map_fds: list[int], size: int, rec_dtype: np.dtype) -> None:
        self.rec_dtype = rec_dtype
        self.rings: list[BpfRingReader] = []
        try:
            for fd in map_fds:
                self.rings.append(BpfRingReader(fd, size, rec_dtype))
        except BaseException:
            self.close()
            raise
        self.closed = False
        self.capped = False       # some ring's last read stopped at its share, with more there
        self.min_share = MIN_SHARE

    def pending(self) -> int:
        return sum(r.pending() for r in self.rings)

    def read(self, max_bytes: int | None = None) -> np.ndarray:
        """The complete records of every ring, at most about MAX_BYTES of ring in all, shared
        evenly (at least a record each): every ring advances at each read, so a later read
        does not bring one ring's older events after another ring's newer ones from a read
        that spent its budget elsewhere (the reconstruction carries times across reads)."""
        n = len(self.rings)
        if not n:
            return np.empty(0, dtype=self.rec_dtype)
        share = _share(max_bytes, n, self.min_share)
        out = _joined([r.read(share) for r in self.rings], self.rec_dtype)
        self.capped = any(r.capped for r in self.rings)
        return out

    def read_events(self, max_bytes: int | None = None) -> np.ndarray:
        """``read`` as scheduling events (EVENT_DTYPE), in time order: each ring's bytes
        copied out at once (``read_raw``) and decoded straight into events after, the rings'
        runs merged by a stable sort. The drain thread does this, so the thread that finishes
        and writes the batches gets them ready to use."""
        n = len(self.rings)
        share = _share(max_bytes, n, self.min_share)
        raws = [r.read_raw(share) for r in self.rings]
        self.capped = any(r.capped for r in self.rings)
        return rings_events(raws, self.rec_dtype)

    def close(self) -> None:
        """Unmap every ring, each on its own (one still exported does not keep the others
        mapped); a second call does nothing."""
        self.closed = True
        for r in self.rings:
            try:
                r.close()
            except (BufferError, ValueError, OSError):
                pass
