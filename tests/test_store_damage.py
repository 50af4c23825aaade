"""Damaged recordings: truncation at every offset, every single-bit flip, garbage, empty files,
a SIGKILLed writer and a full disk. The rule under test: nothing damaged is ever returned as
data, nothing intact before the damage is lost, and what was skipped is said."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from snumap_tui import store
from snumap_tui.errors import SnumapError
from snumap_tui.model.sample import Sample
from snumap_tui.store import chunks as C
from snumap_tui.store.reader import Recording
from snumap_tui.trace.events import EVENT_DTYPE, SWITCH, EventBatch, TaskInfo

REPO = Path(__file__).resolve().parents[1]


def small_events(n: int, t0: int) -> np.ndarray:
    ev = np.zeros(n, dtype=EVENT_DTYPE)
    ev["t_ns"] = t0 + np.arange(n) * 997
    ev["kind"] = SWITCH
    ev["cpu"] = np.arange(n) % 3
    ev["tid2"] = 100 + np.arange(n) % 7
    ev["tid"] = 100 + (np.arange(n) + 3) % 7
    return ev


@pytest.fixture(scope="module")
def small_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, list[np.ndarray]]:
    """A small complete recording (a few KB) and the events of each of its events chunks."""
    path = tmp_path_factory.mktemp("small") / "s.rec"
    parts = [small_events(40, 10**9 + k * 10**6) for k in range(4)]
    w = store.Writer(path, {"host": "h"})
    for k, part in enumerate(parts):
        w.add_events(EventBatch(part, [TaskInfo(100 + k, 100, f"t{k}")], {k: 1}))
        w.add_sample(Sample(int(part["t_ns"][0]), 0, {"procstat": {"hz": k}}))
        w.add_marker(int(part["t_ns"][0]), f"m{k}")
        w.flush()
    w.close()
    return path.read_bytes(), parts


def chunk_map(data: bytes) -> list[C.ChunkHeader]:
    res = C.scan(data)
    assert res.damaged == []
    return res.chunks


def events_of(rec: Recording) -> list[int]:
    return rec.events()["t_ns"].tolist()


def test_truncation_at_every_offset_keeps_every_complete_chunk(
        small_file: tuple[bytes, list[np.ndarray]]) -> None:
    data, parts = small_file
    chunks = chunk_map(data)
    assert len(data) < 8000 and len(chunks) > 15
    for cut in range(len(data) + 1):
        blob = data[:cut]
        if cut < C.PREAMBLE_SIZE:
            with pytest.raises(SnumapError, match="empty file|not a snumap recording"):
                Recording(blob)
            continue
        rec = Recording(blob)
        whole = [h for h in chunks if h.end <= cut]
        want = [t for h in whole if h.kind == C.K_EVENTS
                for t in parts[[p["t_ns"][0] for p in parts].index(h.t_min)]["t_ns"].tolist()]
        assert events_of(rec) == want, cut
        assert len(list(rec.samples())) == sum(h.kind == C.K_SAMPLES for h in whole)
        assert len(rec.markers) == sum(h.kind == C.K_MARKERS for h in whole)
        at_boundary = any(h.end == cut for h in chunks)  # (cut 16: no header: said too)
        assert (rec.damaged == []) == at_boundary, (cut, rec.damaged)
        assert rec.complete == (cut == len(data))


def test_every_single_bit_flip_is_detected_and_only_its_chunk_is_lost(
        small_file: tuple[bytes, list[np.ndarray]]) -> None:
    data, parts = small_file
    chunks = chunk_map(data)
    all_t = [t for p in parts for t in p["t_ns"].tolist()]
    rng = np.random.default_rng(1)
    for pos in range(len(data)):
        blob = bytearray(data)
        blob[pos] ^= 1 << int(rng.integers(0, 8))
        if pos < C.PREAMBLE_SIZE:
            with pytest.raises(SnumapError):
                Recording(bytes(blob))
            continue
        rec = Recording(bytes(blob), verify=True)
        hit = next(h for h in chunks if h.offset <= pos < h.end)
        got = events_of(rec)
        assert rec.damaged, pos
        if hit.kind == C.K_EVENTS:
            lost = parts[[p["t_ns"][0] for p in parts].index(hit.t_min)]["t_ns"].tolist()
            assert got == [t for t in all_t if t not in lost], pos
        else:
            assert got == all_t, pos
        # A flip in the header chunk is repaired from its copy (written right after it).
        assert rec.header["host"] == "h", pos


def test_a_damaged_payload_in_a_complete_file_is_reported_when_read(
        small_file: tuple[bytes, list[np.ndarray]]) -> None:
    data, _parts = small_file
    ev_chunk = [h for h in chunk_map(data) if h.kind == C.K_EVENTS][1]
    blob = bytearray(data)
    blob[ev_chunk.offset + C.CHUNK_HEADER_SIZE + 3] ^= 0x10
    rec = Recording(bytes(blob))  # trusts the trailing index: no full read at open
    assert rec.complete and rec.damaged == []
    assert len(events_of(rec)) == 120
    assert rec.damaged == [(f"damaged events chunk at byte {ev_chunk.offset} skipped "
                            "(checksum mismatch)")]


def test_garbage_in_the_middle_is_skipped_by_resynchronising(
        small_file: tuple[bytes, list[np.ndarray]]) -> None:
    data, _parts = small_file
    ev = [h for h in chunk_map(data) if h.kind == C.K_EVENTS]
    rng = np.random.default_rng(2)
    junk = rng.integers(0, 256, 5000, dtype=np.uint8).tobytes() + C.CHUNK_MAGIC + b"x" * 50
    blob = data[:ev[2].offset] + junk + data[ev[2].offset:]
    rec = Recording(blob)
    assert rec.complete  # the index offsets are now wrong: found by a scan, trailer and all
    assert len(events_of(rec)) == 160
    assert rec.damaged == [(f"unreadable bytes {ev[2].offset}-{ev[2].offset + len(junk)} "
                            f"({len(junk)} bytes) skipped")]


@pytest.mark.parametrize("content, message", [
    (b"", "empty file"),
    (os.urandom(4096), "not a snumap recording"),
    (b"hello\n", "not a snumap recording"),
    (C.FILE_MAGIC + b"\x01\x00\x00\x00\x00\x00\x00\x00", "file header is damaged"),
    (C.pack_preamble(99), "newer snumap"),
])
def test_unreadable_files_give_one_clear_line(tmp_path: Path, content: bytes,
                                             message: str) -> None:
    path = tmp_path / "f.rec"
    path.write_bytes(content)
    with pytest.raises(SnumapError, match=message) as exc:
        store.open(path)
    assert "\n" not in str(exc.value) and str(path) in str(exc.value)


def test_missing_path_and_directory(tmp_path: Path) -> None:
    with pytest.raises(SnumapError, match="no such file"):
        store.open(tmp_path / "nope.rec")
    with pytest.raises(SnumapError, match="directory"):
        store.open(tmp_path)


def test_a_preamble_only_file_is_an_empty_incomplete_recording() -> None:
    rec = Recording(C.pack_preamble(1))
    assert not rec.complete and rec.event_count == 0 and rec.events().size == 0
    assert any("header" in d for d in rec.damaged)


WRITER_SCRIPT = textwrap.dedent("""
    import sys, time
    import numpy as np
    sys.path.insert(0, sys.argv[2])
    from snumap_tui import store
    from snumap_tui.model.sample import Sample
    from snumap_tui.trace.events import EVENT_DTYPE, SWITCH, EventBatch
    w = store.Writer(sys.argv[1], {"host": "killed"})
    print(w.header["start_monotonic_ns"], flush=True)
    while True:
        now = time.monotonic_ns()
        ev = np.zeros(200, dtype=EVENT_DTYPE)
        ev["t_ns"] = now - np.arange(200, 0, -1) * 1000
        ev["kind"] = SWITCH
        ev["cpu"] = np.arange(200) % 2
        w.add_events(EventBatch(ev))
        w.add_sample(Sample(now, time.time_ns(), {"procstat": {"hz": 100}}))
        time.sleep(0.05)
""")


def test_sigkill_after_three_seconds_leaves_the_first_two_readable(tmp_path: Path) -> None:
    path = tmp_path / "killed.rec"
    script = tmp_path / "writer.py"
    script.write_text(WRITER_SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script), str(path), str(REPO)],
                            stdout=subprocess.PIPE, text=True)
    try:
        start = int(proc.stdout.readline())  # type: ignore[union-attr]
        time.sleep(3.0)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]
    killed_at = time.monotonic_ns()
    rec = store.open(path)
    assert rec.header["host"] == "killed" and not rec.complete
    assert [d for d in rec.damaged if "truncated" not in d] == []
    t = rec.sample_times
    assert t.size >= 20 and t[0] - start < 5 * 10**8
    assert int(t[-1]) >= start + 2 * 10**9
    assert killed_at - int(t[-1]) < 15 * 10**8  # at most ~1 s (+ scheduling slack) lost
    ev = rec.events()
    assert ev.size >= 200 * 20 and int(ev["t_ns"][-1]) >= start + 2 * 10**9
    first_two = rec.events(start, start + 2 * 10**9)
    assert first_two.size >= 200 * 20


def test_disk_full_is_a_clear_error_and_keeps_the_file_readable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "full.rec"
    w = store.Writer(path, {"host": "h"})
    w.add_events(EventBatch(small_events(100, 10**9)))
    w.flush()
    good = path.stat().st_size
    real_write = os.write
    budget = [300]

    def failing_write(fd: int, data: bytes) -> int:
        if budget[0] <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = real_write(fd, bytes(data)[:budget[0]])  # partial writes, then the disk is full
        budget[0] -= n
        return n

    monkeypatch.setattr(os, "write", failing_write)
    ev = small_events(5000, 2 * 10**9)
    ev["arg"] = np.random.default_rng(0).integers(0, 2**62, ev.size)  # incompressible
    w.add_events(EventBatch(ev))
    with pytest.raises(SnumapError, match="disk full") as exc:
        w.flush()
    assert "\n" not in str(exc.value)
    with pytest.raises(SnumapError, match="disk full"):
        w.add_marker(1, "later")
    w.close()  # closes without raising again
    monkeypatch.undo()
    assert path.stat().st_size == good  # the half-written chunk was cut back
    rec = store.open(path)
    assert rec.damaged == [] and not rec.complete and rec.event_count == 100


def test_disk_full_on_a_real_tiny_filesystem(tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)],
            check=False, capture_output=True).returncode != 0:
        pytest.skip("needs root and mount to make a tiny tmpfs")
    try:
        w = store.Writer(mnt / "r.rec", {}, max_chunk_events=2000)
        rng = np.random.default_rng(0)
        with pytest.raises(SnumapError, match="disk full"):
            for k in range(1000):
                ev = small_events(2000, 10**9 + k * 10**7)
                ev["arg"] = rng.integers(0, 2**62, ev.size)  # incompressible
                w.add_events(EventBatch(ev))
        w.close()
        with store.open(mnt / "r.rec") as rec:
            assert rec.damaged == [] and rec.event_count >= 2000
            assert rec.events().size == rec.event_count
    finally:
        if subprocess.run(["umount", str(mnt)], check=False, capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_disk_full_while_closing_leaves_an_incomplete_but_clean_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "close.rec"
    w = store.Writer(path, {"host": "h"}, autoflush=False)
    w.add_events(EventBatch(small_events(300, 10**9)))
    w.flush()
    w.add_marker(5, "never written")

    def full(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(SnumapError, match="disk full .*markers chunk"):
        w.close()
    monkeypatch.undo()
    w.close()  # already closed: nothing to do, no second error
    rec = store.open(path)
    assert not rec.complete and rec.damaged == [] and rec.event_count == 300
    assert rec.markers == []
