"""The mmap ring buffer of a perf event (perf_event_open(2), "MMAP layout"), read in bulk.

The mapping is 1 + 2^n pages: the first is ``struct perf_event_mmap_page`` (its ``data_head``
is written by the kernel, ``data_tail`` by us, offsets in native/perf_event.py), then the data
area, which records wrap around. Each record starts with ``struct perf_event_header``
(u32 type, u16 misc, u16 size) and is 8-byte aligned (include/uapi/linux/perf_event.h).

``PerfRing.read()`` copies everything between tail and head out in one or two slices, gives
the space back, and returns the bytes; ``split_records`` finds where each record starts, and
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

    def pending(self) -> int:
        return int(self._meta[MMAP_PAGE_DATA_HEAD // 8]) - int(self._meta[MMAP_PAGE_DATA_TAIL // 8])

    def read(self) -> bytes:
        """All complete records written since the last read (a copy), space given back."""
        head = int(self._meta[MMAP_PAGE_DATA_HEAD // 8])
        tail = int(self._meta[MMAP_PAGE_DATA_TAIL // 8])
        if head == tail:
            return b""
        size = self.data_size
        start, end = tail % size, head % size
        if head - tail >= size or end <= start:
            out = bytes(self._data[start:]) + bytes(self._data[:end])
        else:
            out = bytes(self._data[start:end])
        # The kernel writes whole records before moving data_head, so all of it is complete.
        self._meta[MMAP_PAGE_DATA_TAIL // 8] = head
        return out

    def close(self) -> None:
        del self._meta
        self._data.release()
        self._map.close()


def split_records(buf: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(type, offset, size) of each record in BUF (a sequence of perf records).

    The one per-record Python loop of the perf backend: record sizes vary, so the starts can
    only be found by walking; everything after this is vectorised.
    """
    n = len(buf)
    offs: list[int] = []
    types: list[int] = []
    sizes: list[int] = []
    off = 0
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
    raw = np.frombuffer(buf, dtype=np.uint8)
    idx = offsets[:, None] + np.arange(dtype.itemsize)
    return np.ascontiguousarray(raw[idx]).view(dtype).reshape(-1)
