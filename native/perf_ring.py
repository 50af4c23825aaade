"""The mmap ring buffer of a perf event (perf_event_open(2), "MMAP layout"), read in bulk.

The mapping is 1 + 2^n pages: the first is ``struct perf_event_mmap_page`` (its ``data_head``
is written by the kernel, ``data_tail`` by us, offsets in native/perf_event.py), then the data
area, which records wrap around. Each record starts with ``struct perf_event_header``
(u32 type, u16 misc, u16 size) and is 8-byte aligned (include/uapi/linux/perf_event.h).

``PerfRing.read()`` copies everything between tail and head out in one or two slices, gives
the space back, and returns the bytes (an overrun, more than the ring holds between tail and
head, is counted in ``lost_bytes`` and skipped: the oldest of it was overwritten); ``split_records`` finds where each record starts, and
``gather`` pulls the same fixed-layout fields out of many records at once with numpy.
"""

from __future__ import annotations

import mmap
import os
import struct

import numpy as np
from snumap_tui.native.perf_event import (
    MMAP_PAGE_DATA_HEAD,
    MMAP_PAGE_DATA_OFFSET,
    MMAP_PAGE_DATA_SIZE,
    MMAP_PAGE_DATA_TAIL,
)

HEADER = struct.Struct("<IHH")


class PerfRing:
    """The consumer side of one perf event's ring (the fd others are redirected into)."""

    def __init__(self, fd: int, data_pages: int) -> None:
        if data_pages & (data_pages - 1):
            raise ValueError("the data area must be a power of two pages")
        page = os.sysconf("SC_PAGE_SIZE")
        self._map = mmap.mmap(fd, (1 + data_pages) * page, flags=mmap.MAP_SHARED,
                              prot=mmap.PROT_READ | mmap.PROT_WRITE)
        meta = np.frombuffer(self._map, dtype="<u8", count=(MMAP_PAGE_DATA_SIZE + 8) // 8)
        self._meta = meta
        # data_offset/data_size exist since Linux 4.1; before, the data follows the first page.
        self.data_offset = int(meta[MMAP_PAGE_DATA_OFFSET // 8]) or page
        self.data_size = int(meta[MMAP_PAGE_DATA_SIZE // 8]) or data_pages * page
        self._data = memoryview(self._map)[self.data_offset:self.data_offset + self.data_size]
        # Bytes skipped because head ran more than a ring ahead of tail (read()).
        self.lost_bytes = 0
        self.closed = False

    def pending(self) -> int:
        return int(self._meta[MMAP_PAGE_DATA_HEAD // 8]) - int(self._meta[MMAP_PAGE_DATA_TAIL // 8])

    def read(self) -> bytes:
        """All complete records written since the last read (a copy), space given back."""
        head = int(self._meta[MMAP_PAGE_DATA_HEAD // 8])
        tail = int(self._meta[MMAP_PAGE_DATA_TAIL // 8])
        if head == tail:
            return b""
        size = self.data_size
        if head - tail > size:
            # With the ring mapped writable (not overwrite mode) the kernel never writes past
            # data_tail (it drops records and reports PERF_RECORD_LOST instead), so this means
            # the tail was moved wrongly or the ring was written over: the oldest bytes are
            # gone and the first record boundary in what is left is unknown. All of it is
            # lost, counted, never handed on as records.
            self.lost_bytes += head - tail
            self._meta[MMAP_PAGE_DATA_TAIL // 8] = head
            return b""
        start, end = tail % size, head % size
        if end <= start:                  # wraps (or exactly full: start == end)
            out = bytes(self._data[start:]) + bytes(self._data[:end])
        else:
            out = bytes(self._data[start:end])
        # The kernel writes whole records before moving data_head, so all of it is complete.
        self._meta[MMAP_PAGE_DATA_TAIL // 8] = head
        return out

    def close(self) -> None:
        """Unmap the ring; a second call does nothing."""
        if self.closed:
            return
        self.closed = True
        del self._meta
        self._data.release()
        self._map.close()


PERF_RECORD_SAMPLE = 9
# A sample with SAMPLE_TYPE TID|TIME|CPU|RAW (what the tracers open): header(8), pid/tid(8),
# time(8), cpu/res(8), then u32 raw size and the raw bytes, padded to 8
# (perf_event_open(2), PERF_RECORD_SAMPLE).
RAW_SIZE_AT = 32
RAW_AT = 36


def _sample_slots(buf: bytes, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(offset, size) of every 8-aligned spot in BUF that looks like a complete sample
    header of the tracers' layout: type SAMPLE, size = align8(36 + its raw size field), inside
    BUF. A few spots inside records may look like one by chance; the chain walk drops them."""
    nslot = n // 8
    if nslot < 5:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    w = np.frombuffer(buf, dtype="<u4", count=nslot * 2)
    # The type word first, alone (one pass over the buffer): the other checks only where it
    # says SAMPLE, about one slot in a record's size / 8.
    slot = np.flatnonzero(w[0:2 * nslot - 8:2] == PERF_RECORD_SAMPLE)
    word = 2 * slot
    size = (w[word + 1] >> 16).astype(np.int64)
    raw = w[word + RAW_SIZE_AT // 4].astype(np.int64)
    pos = slot * 8
    ok = (size == ((RAW_AT + raw + 7) & ~7)) & (pos + size <= n)
    return pos[ok], size[ok]


def split_records(buf: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(type, offset, size) of each record in BUF (a sequence of perf records).

    Record sizes vary, so in general the starts can only be found by walking the headers. Most
    records are the tracers' samples, whose headers numpy finds in one pass (``_sample_slots``);
    a chain of them is accepted where each one ends exactly where the next begins, starting at
    the current position, which is what the walk would have found. Python steps over one record
    only where the chain breaks (a PERF_RECORD_LOST, another layout, a look-alike inside a
    record)."""
    n = len(buf) - len(buf) % 8
    cpos, csize = _sample_slots(buf, n)
    if not len(cpos):
        return split_records_walk(buf)
    cend = cpos + csize
    link = np.zeros(len(cpos), dtype=bool)           # link[i]: record i ends where i+1 starts
    link[:-1] = cend[:-1] == cpos[1:]
    breaks = np.flatnonzero(~link)                   # last record of each unbroken chain
    offs: list[np.ndarray] = []
    types: list[np.ndarray] = []
    sizes: list[np.ndarray] = []
    off = steps = 0
    unpack = HEADER.unpack_from
    while off + 8 <= n:
        i = int(np.searchsorted(cpos, off))
        if i < len(cpos) and int(cpos[i]) == off:
            j = int(breaks[np.searchsorted(breaks, i)]) + 1
            offs.append(cpos[i:j])
            sizes.append(csize[i:j])
            types.append(np.full(j - i, PERF_RECORD_SAMPLE, dtype=np.uint32))
            off = int(cend[j - 1])
            continue
        steps += 1
        if steps > 64 and steps * 4 > off // 64:     # mostly other records: walk the rest
            t, o, z = split_records_walk(buf, off)
            types.append(t)
            offs.append(o)
            sizes.append(z)
            break
        rtype, _misc, size = unpack(buf, off)
        if size < 8 or off + size > len(buf):
            break
        offs.append(np.array([off], dtype=np.int64))
        sizes.append(np.array([size], dtype=np.int64))
        types.append(np.array([rtype], dtype=np.uint32))
        off += size
    if not offs:
        return np.zeros(0, np.uint32), np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(types), np.concatenate(offs), np.concatenate(sizes)


def split_records_walk(buf: bytes, off: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The plain header walk from OFF (one Python step per record): the reference the tests
    hold ``split_records`` to, and its fallback for buffers of other records."""
    n = len(buf)
    offs: list[int] = []
    types: list[int] = []
    sizes: list[int] = []
    unpack = HEADER.unpack_from
    while off + 8 <= n:
        rtype, _misc, size = unpack(buf, off)
        if size < 8 or off + size > n:
            break
        offs.append(off)
        types.append(rtype)
        sizes.append(size)
        off += size
    return (np.asarray(types, dtype=np.uint32), np.asarray(offs, dtype=np.int64),
            np.asarray(sizes, dtype=np.int64))


def gather(buf: bytes, offsets: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The DTYPE-shaped bytes starting at each of OFFSETS in BUF, as one structured array."""
    if not len(offsets):
        return np.empty(0, dtype=dtype)
    size = dtype.itemsize
    if int(offsets.max()) + size > len(buf) or int(offsets.min()) < 0:
        raise ValueError("gather: a record runs past the end of the buffer")
    if not (offsets & 7).any():
        # perf records are 8-aligned: view BUF as one SIZE-byte item starting at every 8th
        # byte (the views overlap; nothing is copied) and take whole rows, one memcpy each,
        # instead of indexing SIZE single bytes per record. The items are opaque (void) while
        # indexed: numpy copies a structured item field by field (~70 ns per record here),
        # and np.take would first copy the whole overlapping view contiguous.
        slots = (len(buf) - size) // 8 + 1
        view = np.ndarray((slots,), dtype=np.dtype((np.void, size)), buffer=buf, strides=(8,))
        return view[offsets >> 3].view(dtype)
    raw = np.frombuffer(buf, dtype=np.uint8)
    idx = offsets[:, None] + np.arange(size)
    return np.ascontiguousarray(raw[idx]).view(dtype).reshape(-1)
