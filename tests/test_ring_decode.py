"""The drain's decoder (ring bytes copied out by ``read_raw``, decoded straight into events on
the drain thread: ``rings_events``; counter rows widened there) against the decoder before it
(``decode_fixed`` per ring, the rings joined, ``to_events`` and ``widen`` on the main thread),
on a prepared ring dump: 8 drains of a real switch storm on this project's 2-PU VM with
``--events task-clock,context-switches``, forks, execs and exits among them
(tests/data/ring_dump.npz, made by tests/ringdump.capture). The same events, in the same
order, and the same run intervals -- the recording's content does not depend on which ran.
bench/observer_storm.py checks the same on a 30 M-event dump."""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

import numpy as np
import pytest

from snumap_tui import store
from snumap_tui.recording.runtime import merge_drains
from snumap_tui.trace import events as ev
from snumap_tui.trace.bpf_layout import load_layout, to_events
from snumap_tui.trace.bpf_ring import (
    BUSY_BIT,
    DISCARD_BIT,
    HDR_SIZE,
    BpfRingReader,
    committed_bytes,
    decode_fixed,
    record_stride,
    ring_events,
    rings_events,
)
from snumap_tui.trace.counters import ring_dtype
from tests.ringdump import COUNTERS, EVENTS, RingDump, offline_tracer

DUMP = Path(__file__).parent / "data" / "ring_dump.npz"
NAMES = ["task-clock", "context-switches"]


def _ring_bytes(drain: dict[tuple[int, int], bytes], stream: int) -> list[bytes]:
    return [b for (s, _cpu), b in sorted(drain.items()) if s == stream]


def _decode_all(dump: RingDump, proc: Path, new: bool) -> tuple[np.ndarray, np.ndarray]:
    """Every event and run interval of DUMP through one decoder, drains joined for the main
    thread as the Drainer joins them (merge_drains)."""
    rec, _, _ = load_layout()
    cdt = ring_dtype(dump.ncounters, dump.ntimed)
    t = offline_tracer(proc, NAMES)
    drained = []
    for d in dump.drains():
        evs = _ring_bytes(d, EVENTS)
        cs = [decode_fixed(b, cdt)[0] for b in _ring_bytes(d, COUNTERS)]
        crec = np.concatenate(cs) if cs else np.zeros(0, cdt)
        if new:        # the drain thread: decoded events, widened rows
            drained.append(rings_events(evs, rec))
            t._cdrained.append(t._widen(crec))
        else:          # before: the rings' records joined, everything else at decode
            drained.append(np.concatenate([decode_fixed(b, rec)[0] for b in evs]))
            t._cdrained.append(crec)
    events, counters = [], []
    for raw in merge_drains(drained, limit=1 << 18):
        if not new:    # before, the decode widened the ring records it took
            parts, t._cdrained = t._cdrained, []
            t._cdrained = [t._widen(np.concatenate(parts))] if parts else []
        batch = t.decode(raw)
        events.append(batch.events)
        if batch.counters is not None:
            counters.append(batch.counters)
    return np.concatenate(events), np.concatenate(counters)


def test_the_drain_decodes_a_ring_dump_to_the_same_events(tmp_path: Path) -> None:
    dump = RingDump.load(DUMP)
    old_ev, old_c = _decode_all(dump, tmp_path, new=False)
    new_ev, new_c = _decode_all(dump, tmp_path, new=True)
    assert len(old_ev) > 30_000 and len(old_c) > 20_000
    kinds = set(np.unique(old_ev["kind"]).tolist())
    assert {ev.SWITCH, ev.WAKEUP, ev.FORK, ev.EXEC, ev.EXIT} <= kinds
    assert new_ev.dtype == old_ev.dtype == ev.EVENT_DTYPE
    assert new_ev.tobytes() == old_ev.tobytes()
    assert new_c.tobytes() == old_c.tobytes()
    # Through the Writer (chunks built on its flusher thread) and back: the same again.
    path = tmp_path / "r.rec"
    with store.Writer(path, {}, max_chunk_events=5000) as w:
        w.counter_events = NAMES
        w.add_events(ev.EventBatch(new_ev[:12_345], counters=new_c[:7_000]))
        w.add_events(ev.EventBatch(new_ev[12_345:], counters=new_c[7_000:]))
    with store.open(path) as r:
        got = r.events()
        rows = r.thread_counters().rows
    # (batches overlap in time at their seams: the file holds them merged)
    assert got.tobytes() == np.take(new_ev, np.argsort(new_ev["t_ns"], kind="stable")).tobytes()
    want = new_c[np.argsort(new_c["t_end"], kind="stable")]
    for f in ("t_start", "t_end", "tid", "pid", "cpu", "value", "enabled", "running"):
        assert (rows[f] == want[f]).all(), f


def _framed(rec: np.dtype, n: int) -> np.ndarray:
    stride = record_stride(rec.itemsize)
    framed = np.zeros(n, np.dtype({"names": ["len", "rec"], "formats": ["<u4", rec],
                                   "offsets": [0, HDR_SIZE], "itemsize": stride}))
    framed["len"] = rec.itemsize
    framed["rec"]["t_ns"] = np.arange(n) + 100
    framed["rec"]["tid"] = np.arange(n) + 7
    framed["rec"]["kind"] = ev.SWITCH
    return framed


def test_ring_events_keeps_what_decode_fixed_keeps() -> None:
    """Discarded records are left out, a record still being written ends what is committed,
    and records of another size are walked over by their headers -- as before."""
    rec, _, _ = load_layout()
    stride = record_stride(rec.itemsize)
    f = _framed(rec, 10)
    f["len"][3] |= DISCARD_BIT
    buf = f.tobytes()
    assert committed_bytes(buf, rec.itemsize) == len(buf)
    assert ring_events(buf, rec).tobytes() == to_events(decode_fixed(buf, rec)[0]).tobytes()
    assert ring_events(buf, rec)["tid"].tolist() == [7, 8, 9, 11, 12, 13, 14, 15, 16]
    f["len"][6] |= BUSY_BIT
    assert committed_bytes(f.tobytes(), rec.itemsize) == 6 * stride
    # A record of another size (16 bytes of payload) between two of ours.
    odd = struct.pack("<II", 16, 0) + bytes(16)
    buf = f[:2].tobytes() + odd + f[7:].tobytes()
    assert committed_bytes(buf, rec.itemsize) == len(buf)
    got = ring_events(buf, rec)
    assert got.tobytes() == to_events(decode_fixed(buf, rec)[0]).tobytes()
    assert got["tid"].tolist() == [7, 8, 14, 15, 16]


@pytest.mark.parametrize("shift", [0, 16])
def test_read_raw_takes_committed_records_across_the_end(shift: int) -> None:
    """read_raw on a ring laid out in a memfd: the records wrapping the end come whole, a
    busy one stops the read and stays for the next."""
    rec, _, _ = load_layout()
    page = os.sysconf("SC_PAGE_SIZE")
    stride = record_stride(rec.itemsize)
    fd = os.memfd_create("snumap-raw-test")
    try:
        os.ftruncate(fd, 3 * page)
        m = mmap.mmap(fd, 3 * page)
        f = _framed(rec, 6)
        f["len"][5] |= BUSY_BIT
        blob = f.tobytes()
        start = 7 * page + page - 2 * stride - shift
        for i in range(len(blob)):                     # byte by byte around the end
            m[2 * page + (start + i) % page] = blob[i]
        m[0:8] = struct.pack("<Q", start)
        m[page:page + 8] = struct.pack("<Q", start + len(blob))
        ring = BpfRingReader(fd, page, rec)
        raw = ring.read_raw()
        assert len(raw) == 5 * stride
        assert ring_events(raw, rec)["tid"].tolist() == [7, 8, 9, 10, 11]
        assert struct.unpack("<Q", m[0:8])[0] == start + 5 * stride
        assert ring.read_raw() == b"" and ring.pending() == stride   # the busy one waits
        ring.close()
        m.close()
    finally:
        os.close(fd)
