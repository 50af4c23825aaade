"""Round trips through the recording store: every chunk kind, the value codec, event columns,
time seeking, and the Writer's rules (no overwrite, flush by age, thread safety)."""

from __future__ import annotations

import itertools
import math
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from snumap_tui import store
from snumap_tui.analysis.synth import synthetic_events, synthetic_topology
from snumap_tui.errors import SnumapError
from snumap_tui.model.sample import Sample
from snumap_tui.store import codec
from snumap_tui.store.columns import decode_event_columns, encode_events
from snumap_tui.trace.events import EVENT_DTYPE, SWITCH, EventBatch, TaskInfo


def random_events(n: int, seed: int = 0, t_start: int = 10**9) -> np.ndarray:
    """Adversarial events: unsorted, any kinds, unknown pids, broken switch chains."""
    rng = np.random.default_rng(seed)
    ev = np.zeros(n, dtype=EVENT_DTYPE)
    ev["t_ns"] = t_start + rng.integers(0, 10**9, n)
    ev["cpu"] = rng.integers(0, 300, n)
    ev["kind"] = rng.integers(1, 9, n)
    ev["tid"] = rng.integers(-1, 5_000_000, n)
    ev["tid2"] = rng.choice([0, -1, 7, 4_000_000], n)
    ev["pid"] = rng.integers(-1, 5_000_000, n)
    ev["pid2"] = rng.integers(-2**31, 2**31 - 1, n)
    ev["arg"] = rng.integers(-2**63, 2**63 - 1, n, dtype=np.int64)
    return ev


def time_sorted(ev: np.ndarray) -> np.ndarray:
    return ev[np.argsort(ev["t_ns"], kind="stable")]


READINGS = {
    "procstat": {"cpus": np.arange(4, dtype=np.int64),
                 "ticks": np.arange(40, dtype=np.uint64).reshape(4, 10), "hz": 100,
                 "ctxt": 2**70},
    "perf": {"cpus": np.arange(2, dtype=np.int64), "events": ["cycles", "instructions"],
             "value": np.array([[1.5, math.nan], [math.inf, -0.0]]),
             "enabled": np.zeros((2, 2), dtype=np.float32)},
    "rapl": {"domains": ["package-0", "psys"], "objects": [["Package", 0], ("Machine", 0)],
             "energy_uj": np.array([1.0, 2.0]), "max_uj": np.array([2.0**40, 2.0**40]),
             "via": "powercap",
             "flag": True, "none": None, "scalar": np.float32(2.5), "i": np.int16(-3)},
    "tasks": {"threads": {"comm": np.array(["bash", "ünïcode"]), "pid": [1, 2]},
              "processes": {1: {"cmdline": "init", "affinity": [0, 1], "job": None,
                                "numa_pages": {0: 12, 1: 0}}},
              "raw": b"\x00\xff", "empty": np.zeros((0, 3), dtype=np.int8)},
}


def assert_same(a: object, b: object) -> None:
    """Deep equality that also checks numpy dtypes/shapes, tuple-vs-list and NaN."""
    assert type(a) is type(b), (a, b)
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape  # type: ignore[union-attr]
        np.testing.assert_array_equal(a, b)
    elif isinstance(a, dict):
        assert list(a) == list(b)  # type: ignore[arg-type]
        for k in a:
            assert_same(a[k], b[k])  # type: ignore[index]
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)  # type: ignore[arg-type]
        for x, y in zip(a, b):  # type: ignore[call-overload]
            assert_same(x, y)
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b)  # type: ignore[arg-type]
    elif isinstance(a, np.generic):
        assert a.dtype == b.dtype and a == b  # type: ignore[union-attr]
    else:
        assert a == b


def test_codec_round_trip_is_lossless() -> None:
    for shuffle in (True, False):
        back = codec.decode(codec.encode(READINGS, shuffle=shuffle))
        assert_same(READINGS, back)


def test_codec_refuses_what_it_cannot_store_losslessly() -> None:
    with pytest.raises(TypeError):
        codec.encode(np.array([object()], dtype=object))
    with pytest.raises(TypeError):
        codec.encode({"x": {1, 2}})
    with pytest.raises(codec.DecodeError):
        codec.decode(codec.encode([1, 2, 3])[:-3])
    with pytest.raises(codec.DecodeError):
        codec.decode(b"Z")


@pytest.mark.parametrize("n", [0, 1, 2, 1000])
def test_event_columns_round_trip_any_input(n: int) -> None:
    ev = random_events(n, seed=n)
    value, t_min, t_max = encode_events(ev)
    back = decode_event_columns(codec.decode(codec.encode(value)))
    want = time_sorted(ev)
    for f in EVENT_DTYPE.names or ():
        np.testing.assert_array_equal(back[f], want[f], err_msg=f)
        assert back[f].dtype == EVENT_DTYPE[f]
    if n:
        assert (t_min, t_max) == (int(want["t_ns"][0]), int(want["t_ns"][-1]))


def test_realistic_events_take_at_most_12_bytes_each(tmp_path: Path) -> None:
    ev = synthetic_events(200_000, list(range(16)), n_threads=300, duration_ns=2 * 10**9)
    path = tmp_path / "r.rec"
    with store.Writer(path, {}) as w:
        for i in range(0, ev.size, 4096):
            w.add_events(EventBatch(ev[i:i + 4096]))
    assert path.stat().st_size / ev.size <= 12


def make_recording(path: Path, n_events: int = 5000, chunk: int = 700) -> dict[str, object]:
    """A recording with every chunk kind, several of each; returns what went in."""
    topo = synthetic_topology(1, 1, 2, 2)
    ev = random_events(n_events, seed=3)
    samples = [Sample(t_ns=10**9 + i * 10**8, wall_ns=1_700_000_000 * 10**9 + i,
                      readings=READINGS if i % 2 else {"procstat": {"hz": i}})
               for i in range(7)]
    tasks = [TaskInfo(10, 10, "bash", 1, 5), TaskInfo(10, 10, "python3", 1, 9),
             TaskInfo(11, 10, "worker", 1, 7)]
    w = store.Writer(path, {"topology": topo.to_json(), "host": "h", "command": ["x", "y"]},
                     max_chunk_events=chunk)
    for i, s in enumerate(samples):
        part = ev[i * n_events // 7:(i + 1) * n_events // 7]
        w.add_events(EventBatch(part, tasks[i:i + 1], {i % 3: i + 1}))
        w.add_sample(s)
        w.add_marker(s.t_ns, f"marker {i}")
        w.flush()
    w.close()
    return {"events": ev, "samples": samples, "topology": topo, "tasks": tasks}


def test_every_chunk_kind_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "all.rec"
    want = make_recording(path)
    with store.open(path) as rec:
        assert rec.complete and rec.damaged == []
        assert rec.version == store.FORMAT_VERSION == 1
        assert rec.header["host"] == "h" and rec.header["command"] == ["x", "y"]
        assert rec.header["format_version"] == 1 and rec.header["start_wall_ns"] > 0
        assert rec.topology.to_dict() == want["topology"].to_dict()  # type: ignore[attr-defined]
        got = list(rec.samples())
        for a, b in zip(got, want["samples"], strict=True):  # type: ignore[call-overload]
            assert (a.t_ns, a.wall_ns) == (b.t_ns, b.wall_ns)
            assert_same(b.readings, a.readings)
        np.testing.assert_array_equal(rec.sample_times, [s.t_ns for s in got])
        ev = rec.events()
        assert ev.dtype == EVENT_DTYPE
        np.testing.assert_array_equal(ev, time_sorted(want["events"]))  # type: ignore[arg-type]
        assert rec.event_count == ev.size
        assert rec.tasks[10].comm == "python3" and rec.tasks[11].comm == "worker"
        assert [t.comm for t in rec.task_history] == ["bash", "python3", "worker"]
        assert rec.lost == {0: 1 + 4 + 7, 1: 2 + 5, 2: 3 + 6}
        assert rec.markers == [(s.t_ns, f"marker {i}")
                               for i, s in enumerate(want["samples"])]  # type: ignore[arg-type]
        assert rec.t_start == min(int(ev["t_ns"][0]), got[0].t_ns) == 10**9
        assert rec.t_end == max(int(ev["t_ns"][-1]), got[-1].t_ns)
        frames = rec.to_dataframes()
        assert len(frames["events"]) == ev.size and len(frames["markers"]["t_ns"]) == 7


def test_seek_by_time_returns_exactly_the_half_open_range(tmp_path: Path) -> None:
    path = tmp_path / "seek.rec"
    ev = random_events(10_000, seed=5)
    ev["t_ns"] //= 1000  # many equal times, some across chunk borders
    with store.Writer(path, {}, max_chunk_events=500) as w:
        for i in range(0, ev.size, 1500):  # batches overlap in time: chunks overlap too
            w.add_events(EventBatch(ev[i:i + 1500]))
    everything = time_sorted(ev)
    t = everything["t_ns"]
    rng = np.random.default_rng(0)
    cases = [(None, None), (None, int(t[500])), (int(t[500]), None), (int(t[0]), int(t[0])),
             (0, 1), (int(t[-1]), int(t[-1]) + 1), (int(t[-1]) + 1, None)]
    cases += [tuple(sorted(int(x) for x in rng.choice(t, 2))) for _ in range(16)]
    with store.open(path) as rec:
        for t0, t1 in cases:
            m = np.ones(t.size, dtype=bool)
            if t0 is not None:
                m &= t >= t0
            if t1 is not None:
                m &= t < t1
            got = rec.events(t0, t1)
            assert np.array_equal(np.sort(got, order=list(EVENT_DTYPE.names)),
                                  np.sort(everything[m], order=list(EVENT_DTYPE.names)))
            assert np.all(np.diff(got["t_ns"].astype(np.int64)) >= 0)
            cols = rec.event_columns(("cpu", "tid2"), t0, t1)
            assert set(cols) == {"t_ns", "cpu", "tid2"}
            np.testing.assert_array_equal(cols["t_ns"], got["t_ns"])
            np.testing.assert_array_equal(cols["cpu"], got["cpu"])
        with pytest.raises(ValueError, match="unknown event fields"):
            rec.event_columns(("cpu", "nope"))
        assert rec.damaged == []


def test_batches_overlapping_at_their_seams_are_stored_in_time_order(tmp_path: Path) -> None:
    """As per-CPU rings hand them over: each batch in time order, the next starting before
    the last one ended. The file holds them merged; the caller's batches are left alone."""
    path = tmp_path / "seams.rec"
    ev = synthetic_events(30_000, list(range(4)), duration_ns=10**9)
    rng = np.random.default_rng(3)
    batches = []
    for lo in range(0, ev.size, 3000):
        b = ev[lo:lo + 3000].copy()
        b["t_ns"] += rng.integers(0, 5 * 10**6, b.size).astype(np.uint64)   # ~150 events
        batches.append(np.sort(b, order="t_ns", kind="stable"))
    assert all(a["t_ns"][-1] > b["t_ns"][0] for a, b in itertools.pairwise(batches))
    kept = [b.copy() for b in batches]
    with store.Writer(path, {}, max_chunk_events=4000) as w:
        for b in batches:
            w.add_events(EventBatch(b))
    for b, k in zip(batches, kept, strict=True):
        assert (b == k).all()
    want = np.concatenate(kept)
    want = want[np.argsort(want["t_ns"], kind="stable")]
    with store.open(path) as rec:
        got = rec.events()
        assert len(rec.event_chunks) == 8
    assert (got == want).all()

    # One batch out of order on its own, more than a chunk: sorted in a copy, never in the
    # caller's array.
    one = ev[:9000].copy()
    one["t_ns"] = one["t_ns"][::-1].copy()
    before = one.copy()
    path1 = tmp_path / "one.rec"
    with store.Writer(path1, {}, max_chunk_events=4000) as w:
        w.add_events(EventBatch(one))
    assert (one == before).all()
    with store.open(path1) as rec:
        assert (rec.events() == before[np.argsort(before["t_ns"], kind="stable")]).all()


def test_seek_reads_only_the_chunks_in_range(tmp_path: Path) -> None:
    path = tmp_path / "sorted.rec"
    ev = synthetic_events(50_000, list(range(8)), duration_ns=10**10)
    with store.Writer(path, {}, max_chunk_events=5000) as w:
        w.add_events(EventBatch(ev))
    with store.open(path) as rec:
        assert len(rec.event_chunks) == 10
        t0, t1 = int(ev["t_ns"][12_000]), int(ev["t_ns"][13_000])
        assert len(rec._chunks_in(t0, t1)) == 1
        np.testing.assert_array_equal(rec.events(t0, t1), ev[12_000:13_000])


def test_writer_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    path = tmp_path / "x.rec"
    path.write_bytes(b"precious")
    with pytest.raises(SnumapError, match="already exists"):
        store.Writer(path, {})
    assert path.read_bytes() == b"precious"
    store.Writer(path, {"n": 1}, force=True).close()
    assert store.open(path).header["n"] == 1
    with pytest.raises(SnumapError, match="cannot create"):
        store.Writer(tmp_path / "no" / "dir.rec", {})


def test_writer_flushes_by_age_so_a_live_reader_sees_recent_data(tmp_path: Path) -> None:
    path = tmp_path / "live.rec"
    w = store.Writer(path, {}, flush_interval=0.05, autoflush=False)
    ev = synthetic_events(100, [0, 1])
    w.add_events(EventBatch(ev))
    w.add_sample(Sample(1, 2, {}))
    assert store.open(path).event_count == 0  # still buffered
    time.sleep(0.06)
    w.flush_if_due()
    rec = store.open(path)
    assert not rec.complete and rec.event_count == 100 and rec.damaged == []
    assert rec.sample_times.tolist() == [1]
    w.close()
    assert store.open(path).complete


def test_autoflush_writes_even_when_the_caller_stalls(tmp_path: Path) -> None:
    path = tmp_path / "stall.rec"
    with store.Writer(path, {}, flush_interval=0.1) as w:
        w.add_events(EventBatch(synthetic_events(50, [0])))
        w.add_marker(5, "start")
        deadline = time.monotonic() + 5
        while store.open(path).event_count == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        rec = store.open(path)
        assert rec.event_count == 50 and rec.markers == [(5, "start")]
        assert time.monotonic() < deadline


def test_writer_is_safe_to_share_between_threads(tmp_path: Path) -> None:
    path = tmp_path / "threads.rec"
    ev = random_events(8000, seed=9)
    w = store.Writer(path, {}, max_chunk_events=500)

    def feed(part: np.ndarray) -> None:
        for i in range(0, part.size, 100):
            w.add_events(EventBatch(part[i:i + 100]))
            w.add_sample(Sample(i, i, {"x": {"i": i}}))

    threads = [threading.Thread(target=feed, args=(ev[k::4],)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    w.close()
    rec = store.open(path)
    assert rec.event_count == ev.size and len(list(rec.samples())) == 80
    assert np.array_equal(np.sort(rec.events(), order=list(EVENT_DTYPE.names)),
                          np.sort(ev, order=list(EVENT_DTYPE.names)))


def test_switch_chains_compress_to_almost_nothing() -> None:
    """A consistent chain makes the tid residuals all zero (the point of the prediction)."""
    n = 10_000
    ev = np.zeros(n, dtype=EVENT_DTYPE)
    ev["t_ns"] = np.arange(n) * 1000
    ev["kind"] = SWITCH
    ev["cpu"] = np.arange(n) % 4
    nxt = 100 + (np.arange(n) * 7919) % 300
    ev["tid2"] = nxt
    ev["tid"][4:] = nxt[:-4]
    ev["tid"][:4] = 5  # no earlier switch on these CPUs: nothing to predict from
    value, _, _ = encode_events(ev)
    assert np.count_nonzero(value["tid"]) == 4
    assert np.count_nonzero(value["pid"]) == 0


def test_slow_sync_does_not_block_the_writer(tmp_path, monkeypatch) -> None:
    """The flusher thread's fdatasync runs without the writer's lock: a sync that takes long
    (a busy disk) no longer stops the main thread adding and flushing its batches -- which
    stopped it emptying the kernel's event buffers -- and what was written during the sync
    is synced again afterwards."""
    import os as os_mod

    from snumap_tui.store import writer as writer_mod

    entered = threading.Event()
    calls: list[float] = []
    real = os_mod.fdatasync

    def slow_sync(fd: int) -> None:
        calls.append(time.monotonic())
        entered.set()
        time.sleep(0.6)
        real(fd)

    monkeypatch.setattr(writer_mod.os, "fdatasync", slow_sync)
    path = tmp_path / "r.rec"
    with store.Writer(path, {}, flush_interval=0.05, sync_interval=0.05) as w:
        time.sleep(0.1)                 # the last sync is old: the flusher's first is due
        w.add_events(EventBatch(events=random_events(100)))
        assert entered.wait(5)          # the flusher thread flushed and is syncing now
        t0 = time.monotonic()
        w.add_events(EventBatch(events=random_events(100, seed=1, t_start=2 * 10**9)))
        w.flush()
        blocked = time.monotonic() - t0
        deadline = time.monotonic() + 5
        while len(calls) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert blocked < 0.3, f"add_events + flush waited {blocked:.2f} s for a sync"
    assert len(calls) >= 2          # the batch written during the first sync was synced too
    with store.open(path) as r:
        assert r.event_count == 200


def test_codec_bytes_follow_the_documented_layout() -> None:
    """docs/format.md "Values", byte for byte: the encoder's fast paths (exact types first,
    cached array heads) write what the table says, for each tag."""
    import struct

    arr = np.array([[1, 2], [3, 4]], dtype="<u2")
    value = {"k": [None, True, False, 7, 2 ** 70, 1.5, "é", b"\x00", (1,), arr,
                   np.float32(2.0)]}
    want = (b"d" + struct.pack("<I", 1) + b"s" + struct.pack("<I", 1) + b"k"
            + b"l" + struct.pack("<I", 11) + b"N" + b"T" + b"F"
            + b"i" + struct.pack("<q", 7)
            + b"I" + struct.pack("<I", 22) + str(2 ** 70).encode()
            + b"f" + struct.pack("<d", 1.5)
            + b"s" + struct.pack("<I", 2) + "é".encode()
            + b"b" + struct.pack("<I", 1) + b"\x00"
            + b"t" + struct.pack("<I", 1) + b"i" + struct.pack("<q", 1)
            # array: dtype, ndim, shape, layout 1 (byte-shuffled), nbytes, data
            + b"a" + bytes([3]) + b"<u2" + bytes([2]) + struct.pack("<QQ", 2, 2)
            + bytes([1]) + struct.pack("<Q", 8) + bytes([1, 2, 3, 4, 0, 0, 0, 0])
            + b"x" + bytes([3]) + b"<f4" + struct.pack("<I", 4) + struct.pack("<f", 2.0))
    assert codec.encode(value) == want
    plain = codec.encode(arr, shuffle=False)
    assert plain.endswith(bytes([0]) + struct.pack("<Q", 8) + arr.tobytes())
