"""BpfRingReader on a memfd laid out like a BPF ring buffer map (consumer page, producer page,
data mapped once): records that wrap around the end of the data area are read whole."""

from __future__ import annotations

import mmap
import os
import struct

import numpy as np
import pytest

from snumap_tui.trace.bpf_layout import load_layout
from snumap_tui.trace.bpf_ring import HDR_SIZE, BpfRingReader, record_stride


@pytest.mark.parametrize("shift", [0, 16, 40])
def test_records_wrapping_around_the_end_are_read_whole(shift: int) -> None:
    """SHIFT bytes earlier than a record boundary at the end: 0, or a record straddles it."""
    rec_dtype, _, _ = load_layout()
    page = os.sysconf("SC_PAGE_SIZE")
    size = page                        # the smallest ring: one data page
    stride = record_stride(rec_dtype.itemsize)
    fd = os.memfd_create("snumap-ring-test")
    try:
        os.ftruncate(fd, 2 * page + size)
        m = mmap.mmap(fd, 2 * page + size)
        ring = BpfRingReader(fd, size, rec_dtype)
        # Start 2 records before the end of the data area, so records 2.. wrap to the front.
        start_pos = 10 * size + size - 2 * stride - shift
        n = 5
        for i in range(n):
            rec = np.zeros(1, dtype=rec_dtype)
            rec["t_ns"], rec["tid"], rec["kind"] = 1000 + i, 40 + i, 1
            raw = struct.pack("<II", rec_dtype.itemsize, 0) + rec.tobytes()
            raw += b"\0" * (stride - len(raw))
            at = (start_pos + i * stride) % size
            first = min(stride, size - at)
            m[2 * page + at:2 * page + at + first] = raw[:first]
            if first < stride:
                m[2 * page:2 * page + stride - first] = raw[first:]
        m[0:8] = struct.pack("<Q", start_pos)                      # consumer_pos
        m[page:page + 8] = struct.pack("<Q", start_pos + n * stride)  # producer_pos
        got = ring.read()
        assert got["tid"].tolist() == [40, 41, 42, 43, 44]
        assert got["t_ns"].tolist() == [1000, 1001, 1002, 1003, 1004]
        assert struct.unpack("<Q", m[0:8])[0] == start_pos + n * stride
        assert ring.read().size == 0
        assert ring.pending() == 0 and HDR_SIZE == 8
        ring.close()
        m.close()
    finally:
        os.close(fd)


def _memfd_ring(records: list[tuple[int, int]], size: int) -> tuple[int, mmap.mmap]:
    """A memfd laid out as a ring holding RECORDS ((t_ns, tid) each) from position 0."""
    rec_dtype, _, _ = load_layout()
    page = os.sysconf("SC_PAGE_SIZE")
    stride = record_stride(rec_dtype.itemsize)
    fd = os.memfd_create("snumap-ring-set-test")
    os.ftruncate(fd, 2 * page + size)
    m = mmap.mmap(fd, 2 * page + size)
    for i, (t, tid) in enumerate(records):
        rec = np.zeros(1, dtype=rec_dtype)
        rec["t_ns"], rec["tid"], rec["kind"] = t, tid, 1
        raw = struct.pack("<II", rec_dtype.itemsize, 0) + rec.tobytes()
        m[2 * page + i * stride:2 * page + i * stride + len(raw)] = raw
    m[0:8] = struct.pack("<Q", 0)
    m[page:page + 8] = struct.pack("<Q", len(records) * stride)
    return fd, m


def test_a_ring_per_cpu_is_read_whole_within_a_budget_shared_evenly() -> None:
    from snumap_tui.trace.bpf_ring import BpfRingSet

    rec_dtype, _, _ = load_layout()
    page = os.sysconf("SC_PAGE_SIZE")
    stride = record_stride(rec_dtype.itemsize)
    rings = [_memfd_ring([(100 + i, 10 + i) for i in range(4)], page),
             _memfd_ring([(200 + i, 20 + i) for i in range(3)], page)]
    try:
        rs = BpfRingSet([fd for fd, _ in rings], page, rec_dtype)
        rs.min_share = 1                      # no floor under a ring's share here
        assert rs.pending() == 7 * stride
        # a budget of 4 records: 2 from each ring, so both rings advance at every read
        first = rs.read(4 * stride)
        assert first["tid"].tolist() == [10, 11, 20, 21]
        assert rs.capped and all(r.capped for r in rs.rings)   # both left records behind
        second = rs.read(3 * stride)          # 1.5 records each: one whole record each
        assert second["tid"].tolist() == [12, 22]
        assert rs.capped and [r.capped for r in rs.rings] == [True, False]
        rest = rs.read()
        assert rest["tid"].tolist() == [13] and rs.pending() == 0 and not rs.capped
        assert rs.read().size == 0
        rs.close()
        rs.close()
        assert rs.closed
    finally:
        for fd, m in rings:
            m.close()
            os.close(fd)


def test_ring_sizes_per_cpu() -> None:
    from snumap_tui.trace.bpf_common import ring_bytes_per_cpu

    page = os.sysconf("SC_PAGE_SIZE")
    assert ring_bytes_per_cpu(None, 2) == 4 << 20           # the default per CPU
    assert ring_bytes_per_cpu(None, 64) == 4 << 20
    assert ring_bytes_per_cpu(None, 128) == 2 << 20         # 256 MiB in all at most
    assert ring_bytes_per_cpu(3 << 20, 4) == 4 << 20        # rounded up to a power of two
    assert ring_bytes_per_cpu(1, 4) == page                 # at least a page
    assert ring_bytes_per_cpu(64 << 20, 64) == 4 << 20      # 256 MiB in all at most
    for n in (1, 3, 48, 384):
        b = ring_bytes_per_cpu(None, n)
        assert b % page == 0 and (b // page) & (b // page - 1) == 0


def test_rings_go_to_the_online_cpus(tmp_path) -> None:
    from snumap_tui.trace.libbpf import ring_cpus

    online = tmp_path / "sys/devices/system/cpu/online"
    online.parent.mkdir(parents=True)
    online.write_text("0-1,4\n")
    assert ring_cpus(8, tmp_path) == [0, 1, 4]
    assert ring_cpus(4, tmp_path) == [0, 1]              # never beyond the possible CPUs
    online.write_text("garbage\n")
    assert ring_cpus(3, tmp_path) == [0, 1, 2]
    assert ring_cpus(2, tmp_path / "missing") == [0, 1]


def test_a_rings_share_has_a_floor() -> None:
    """1 MiB shared by 384 rings would be 56 records a read, each paying a read's fixed cost:
    a ring's share is at least MIN_SHARE (~680 records); two rings share the budget."""
    from snumap_tui.trace.bpf_ring import MIN_SHARE, _share

    assert _share(1 << 20, 384) == MIN_SHARE
    assert _share(1 << 20, 2) == 1 << 19
    assert _share(None, 384) is None
