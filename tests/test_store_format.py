"""Format versions: a version-1 file built here byte by byte from docs/format.md (not by the
Writer, and not a committed binary) must read back; newer versions are refused clearly; what the
Writer writes follows the same spec."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
import zstandard

from snumap_tui import store
from snumap_tui.errors import SnumapError
from snumap_tui.trace.events import SWITCH, WAKEUP

# ---- an encoder written from docs/format.md alone ----------------------------------------------


def crc(b: bytes) -> int:
    return zlib.crc32(b) & 0xFFFFFFFF


def preamble(version: int) -> bytes:
    head = b"\x89SNUMAP\n" + struct.pack("<HH", version, 0)
    return head + struct.pack("<I", crc(head))


def chunk(kind: int, payload: bytes, count: int, t_min: int = 0, t_max: int = 0,
          zstd: bool = False) -> bytes:
    raw_len = len(payload)
    if zstd:
        payload = zstandard.ZstdCompressor().compress(payload)
    head = struct.pack("<4sBBHIIIQQI", b"\xc5SNC", kind, 1 if zstd else 0, 0, len(payload),
                       raw_len, count, t_min, t_max, crc(payload))
    return head + struct.pack("<I", crc(head)) + payload


def val(v: object) -> bytes:
    """The 'Values' table of docs/format.md (shuffled arrays only where the test says)."""
    if v is None:
        return b"N"
    if isinstance(v, bool):
        return b"T" if v else b"F"
    if isinstance(v, int):
        return b"i" + struct.pack("<q", v)
    if isinstance(v, float):
        return b"f" + struct.pack("<d", v)
    if isinstance(v, str):
        return b"s" + struct.pack("<I", len(v.encode())) + v.encode()
    if isinstance(v, list):
        return b"l" + struct.pack("<I", len(v)) + b"".join(val(x) for x in v)
    if isinstance(v, dict):
        return b"d" + struct.pack("<I", len(v)) + b"".join(val(k) + val(x) for k, x in v.items())
    raise TypeError(v)


def arr(dtype: str, items: list[int], shuffled: bool = False) -> bytes:
    a = np.array(items, dtype=dtype)
    data = a.tobytes()
    if shuffled:
        data = bytes(data[i::a.itemsize][j] for i in range(a.itemsize)
                     for j in range(a.size))
    return (b"a" + bytes([len(dtype)]) + dtype.encode() + bytes([1]) + struct.pack("<Q", a.size)
            + bytes([1 if shuffled else 0]) + struct.pack("<Q", len(data)) + data)


def tagged_map(items: dict[str, bytes]) -> bytes:
    """A map whose values are already encoded."""
    return b"d" + struct.pack("<I", len(items)) + b"".join(val(k) + v for k, v in items.items())


T0 = 5_000_000_000
# Three events: switch on cpu 1 (tid 0 -> 42), wakeup of 43 on cpu 0, switch on cpu 1 (42 -> 43).
EVENTS = [
    # t_ns, cpu, kind, tid, tid2, pid, pid2, arg
    (T0, 1, SWITCH, 0, 42, 0, 40, 0),
    (T0 + 300, 0, WAKEUP, 43, -1, 40, -1, 0),
    (T0 + 70_000, 1, SWITCH, 42, 43, 40, 40, 1),
]


def frozen_v1_file() -> bytes:
    header = {"format": "snumap-recording", "format_version": 1, "host": "frozen",
              "start_monotonic_ns": T0 - 1000, "start_wall_ns": 1_700_000_000_000_000_000}
    ev_payload = tagged_map({
        "n": val(3), "t0": val(T0),
        "dt": arr("<u4", [0, 300, 69_700], shuffled=True),
        "cpu": arr("|u1", [1, 0, 1]),
        "kind": arr("|u1", [SWITCH, WAKEUP, SWITCH]),
        "tid2": arr("|i1", [42, -1, 43]),
        # pred: 0, 0 (not a switch), 42 (tid2 of the previous switch on cpu 1) -> residuals
        "tid": arr("|i1", [0, 43, 0]),
        "pid_table_tid": arr("<i2", [-1, 0, 42, 43]),
        "pid_table_pid": arr("<i2", [-1, 0, 40, 40]),
        "pid": arr("|i1", [0, 0, 0]),
        "pid2": arr("|i1", [40 - 40, -1 - -1, 0]),
        "arg": arr("|u1", [0, 0, 1]),
    })
    body = preamble(1)
    parts = [
        chunk(1, json.dumps(header).encode(), 1, T0 - 1000, T0 - 1000),
        chunk(3, ev_payload, 3, T0, T0 + 70_000, zstd=True),
        chunk(2, val([[T0, 17, {"procstat": {"hz": 100, "cpus": None}}]]), 1, T0, T0),
        chunk(4, tagged_map({"tid": arr("<i4", [42]), "pid": arr("<i4", [40]),
                             "ppid": arr("<i4", [1]), "t_ns": arr("<u8", [T0]),
                             "comm": val(["worker"])}), 1, T0, T0),
        chunk(5, val({"t_ns": T0, "lost": {1: 5}}), 1, T0, T0),
        chunk(6, val([[T0, "command start"]]), 1, T0, T0),
    ]
    offsets = []
    for p in parts:
        offsets.append(len(body))
        body += p
    index_at = len(body)
    body += chunk(7, tagged_map({"offset": arr("<u8", offsets),
                                 "kind": arr("|u1", [1, 3, 2, 4, 5, 6]),
                                 "count": arr("<u4", [1] * 6),
                                 "t_min": arr("<u8", [0] * 6), "t_max": arr("<u8", [0] * 6)}),
                  6, zstd=True)
    body += chunk(8, struct.pack("<QQQ", index_at, 6, 3), 0)
    return body


# ---- tests -------------------------------------------------------------------------------------


def check_frozen(rec: store.Recording) -> None:
    assert rec.version == 1 and rec.complete and rec.damaged == []
    assert rec.header["host"] == "frozen"
    ev = rec.events()
    got = [tuple(int(x) for x in row) for row in ev.tolist()]
    assert got == EVENTS
    assert [(s.t_ns, s.wall_ns, s.readings) for s in rec.samples()] == [
        (T0, 17, {"procstat": {"hz": 100, "cpus": None}})]
    assert rec.tasks[42].comm == "worker" and rec.tasks[42].ppid == 1
    assert rec.lost == {1: 5}
    assert rec.markers == [(T0, "command start")]
    assert rec.events(T0 + 1, T0 + 70_000)["tid"].tolist() == [43]


def test_a_hand_built_version_1_file_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "v1.rec"
    path.write_bytes(frozen_v1_file())
    with store.open(path) as rec:
        check_frozen(rec)


def test_the_hand_built_file_also_reads_without_its_index(tmp_path: Path) -> None:
    data = frozen_v1_file()
    path = tmp_path / "v1-crashed.rec"
    path.write_bytes(data[:-68 - 10])  # trailer and part of the index gone: scan
    with store.open(path) as rec:
        assert not rec.complete and len(rec.damaged) == 1 and "truncated index" in rec.damaged[0]
        assert rec.events().size == 3 and rec.lost == {1: 5}


def test_a_newer_version_is_refused_with_a_clear_line(tmp_path: Path) -> None:
    data = frozen_v1_file()
    path = tmp_path / "v3.rec"      # format 2 is a merged recording of several nodes
    path.write_bytes(preamble(3) + data[16:])
    with pytest.raises(SnumapError, match=r"newer snumap \(format 3\).*up to 2"):
        store.open(path)


def test_writer_output_follows_the_spec(tmp_path: Path) -> None:
    """Walk a Writer's file with the spec's struct layout, independent of the reader."""
    path = tmp_path / "w.rec"
    with store.Writer(path, {"host": "w"}) as w:
        w.add_marker(7, "x")
    data = path.read_bytes()
    assert data[:8] == b"\x89SNUMAP\n" and struct.unpack_from("<H", data, 8)[0] == 1
    pos, kinds, offsets = 16, [], []
    while pos < len(data):
        (magic, kind, codec, _r, plen, raw_len, _count, _t0, _t1, pcrc,
         hcrc) = struct.unpack_from("<4sBBHIIIQQII", data, pos)
        assert magic == b"\xc5SNC" and hcrc == crc(data[pos:pos + 40])
        payload = data[pos + 44:pos + 44 + plen]
        assert pcrc == crc(payload)
        raw = zstandard.ZstdDecompressor().decompress(payload) if codec == 1 else payload
        assert len(raw) == raw_len
        if kind in (1, 13):   # the header, and its copies
            assert json.loads(raw)["host"] == "w"
        if kind == 6:
            assert raw == val([[7, "x"]])
        kinds.append(kind)
        offsets.append(pos)
        pos += 44 + plen
    assert kinds == [1, 13, 6, 13, 7, 8]
    index_at, n_chunks, n_events = struct.unpack_from("<QQQ", data, len(data) - 24)
    assert (index_at, n_chunks, n_events) == (offsets[4], 4, 0)
