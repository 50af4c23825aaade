"""``Recording.sample_times`` without decoding the readings: the sample-times chunk written
after each samples chunk (docs/format.md, "Sample times"), the header for a one-sample chunk,
the readings only for files without them, and nothing for a damaged samples chunk."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from snumap_tui import store
from snumap_tui.model.sample import Sample
from snumap_tui.store import chunks as C
from snumap_tui.store.reader import Recording

PER_CHUNK = (1, 5, 3, 7)        # samples per flush: one-sample chunks take the header path


def write(path: Path) -> list[int]:
    times = []
    t = 10**9
    with store.Writer(path, {"host": "h"}, autoflush=False) as w:
        for n in PER_CHUNK:
            for _ in range(n):
                t += 10**8
                times.append(t)
                w.add_sample(Sample(t, t + 5, {"procstat": {"cpu": np.arange(4) * t}}))
            w.flush()
    return times


def decoded_samples_chunks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record which samples chunks have their payload decoded."""
    seen: list[int] = []
    real = Recording._payload

    def spy(self: Recording, h: C.ChunkHeader) -> object:
        if h.kind == C.K_SAMPLES:
            seen.append(h.offset)
        return real(self, h)

    monkeypatch.setattr(Recording, "_payload", spy)
    return seen


def test_sample_times_come_without_decoding_readings(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    want = write(tmp_path / "r.rec")
    seen = decoded_samples_chunks(monkeypatch)
    with store.open(tmp_path / "r.rec") as rec:
        kinds = [h.kind for h in rec._chunks]
        assert kinds.count(C.K_SAMPLE_TIMES) == kinds.count(C.K_SAMPLES) == len(PER_CHUNK)
        assert rec.sample_times.tolist() == want
        assert seen == []                                     # no reading was decoded
        assert [s.t_ns for s in rec.samples()] == want        # and they agree with samples()


def test_a_file_without_sample_time_chunks_falls_back_to_the_readings(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Files written before the chunk kind existed: the same times, from the readings."""
    real = store.Writer._write_chunk

    def old_writer(self: store.Writer, kind: int, payload: bytes, **kw: int) -> None:
        if kind != C.K_SAMPLE_TIMES:
            real(self, kind, payload, **kw)

    monkeypatch.setattr(store.Writer, "_write_chunk", old_writer)
    want = write(tmp_path / "old.rec")
    monkeypatch.undo()
    seen = decoded_samples_chunks(monkeypatch)
    with store.open(tmp_path / "old.rec") as rec:
        assert C.K_SAMPLE_TIMES not in [h.kind for h in rec._chunks]
        assert rec.sample_times.tolist() == want
        assert len(seen) == sum(n > 1 for n in PER_CHUNK)     # one-sample chunks: the header


def test_a_damaged_samples_chunk_has_no_times(tmp_path: Path) -> None:
    path = tmp_path / "bad.rec"
    want = write(path)
    with store.open(path) as rec:
        second = [h for h in rec._chunks if h.kind == C.K_SAMPLES][1]
    data = bytearray(path.read_bytes())
    data[second.offset + C.CHUNK_HEADER_SIZE + 3] ^= 0xFF      # flip a payload byte
    path.write_bytes(bytes(data))
    with store.open(path) as rec:
        lost = set(want[PER_CHUNK[0]:PER_CHUNK[0] + PER_CHUNK[1]])
        assert rec.sample_times.tolist() == [t for t in want if t not in lost]
        assert [s.t_ns for s in rec.samples()] == rec.sample_times.tolist()
        assert any("samples chunk" in d for d in rec.damaged)
