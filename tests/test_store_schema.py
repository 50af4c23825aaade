"""The chunk-kind registry and its schemas: crafted payloads with valid CRCs become damage
reports, zstd bombs are refused unread, a second file signature ends the first recording, and
the header survives a damaged header chunk through its copy."""

from __future__ import annotations

import json
import resource
from pathlib import Path

import numpy as np
import pytest
import zstandard
from test_store_damage import small_events

from snumap_tui import store
from snumap_tui.store import chunks as C
from snumap_tui.store import codec, kinds
from snumap_tui.store.columns import encode_events
from snumap_tui.store.reader import Recording
from snumap_tui.store.schema import COUNT, Array, Fields, Int, ListOf, SchemaError, Str
from snumap_tui.trace.events import EventBatch


def events(n: int, t0: int = 10**9) -> np.ndarray:
    return small_events(n, t0)


def file_with(*extra: bytes, header: dict | None = None) -> bytes:
    """A preamble, a header chunk and ``extra`` chunks (no copy, no index: a walked file)."""
    hdr = json.dumps(header if header is not None else {"host": "h"}).encode()
    return (C.pack_preamble(1) + C.pack_chunk(C.K_HEADER, hdr, count=1) + b"".join(extra))


def events_chunk(value: dict, count: int, t_min: int, t_max: int, **kw: object) -> bytes:
    return C.pack_chunk(C.K_EVENTS, codec.encode(value), count=count, t_min=t_min,
                        t_max=t_max, **kw)  # type: ignore[arg-type]


def test_registry_refuses_a_taken_number_or_name() -> None:
    with pytest.raises(ValueError, match="already 'events'"):
        kinds.register(kinds.K_EVENTS, "something", None)
    with pytest.raises(ValueError, match="name 'events' is already taken"):
        kinds.register(250, "events", None)
    assert kinds.kind_name(kinds.K_HEADER_COPY) == "header copy"
    assert kinds.kind_name(200) == "kind 200"


def test_schema_messages_name_the_path() -> None:
    s = Fields(required={"n": Int(0, 10)},
               optional={"t": Array("u", length="n"), "names": ListOf(Str(4), length=COUNT)})
    with pytest.raises(SchemaError, match=r"^x\.t: expected 3 values, got 2$"):
        s(({"n": 3, "t": np.zeros(2, np.uint8)}), path="x")
    with pytest.raises(SchemaError, match=r"x\.t: expected an array of kind 'u', got float64"):
        s({"n": 1, "t": np.zeros(1)}, path="x")
    with pytest.raises(SchemaError, match=r"x\.n: 11 is outside \[0, 10\]"):
        s({"n": 11}, path="x")
    with pytest.raises(SchemaError, match=r"x\.names\[0\]: a string of 5 characters"):
        s({"n": 0, "names": ["abcde"]}, path="x")
    ok = s({"n": 1, "t": np.ones(1, np.uint16), "new key": 1})
    assert sorted(ok) == ["n", "new key", "t"]           # a newer writer's keys are kept


@pytest.mark.parametrize(("edit", "why"), [
    (lambda v: v.update(cpu=v["cpu"][:-1]), "cpu: expected 40 values, got 39"),
    (lambda v: v.update(tid=np.zeros((40, 2), np.int8)), "tid: expected 1-D"),
    (lambda v: v.update(t0=-5), "t0: -5 is outside"),
    (lambda v: v.update(t0=2**64 - 10), "t0: 18446744073709551606 is outside"),
    (lambda v: v.update(dt=np.full(40, 2**62, np.uint64)), "past 2^63 ns"),
    (lambda v: v.update(kind=v["kind"].astype(np.float64)), "kind: expected an array of kind"),
    (lambda v: v.pop("tid"), "columns missing"),
    (lambda v: v.update(pid_table_tid=v["pid_table_tid"][::-1].copy()), "ascending order"),
    (lambda v: v.update(n="40"), "n: expected an integer"),
])
def test_structurally_wrong_events_chunks_are_damage(edit, why: str) -> None:
    good, t0, t1 = encode_events(events(40))
    bad = dict(good)
    edit(bad)
    blob = file_with(events_chunk(good, 40, t0, t1), events_chunk(bad, 40, t0, t1))
    rec = Recording(blob)
    assert rec.events().size == 40             # the good chunk is still read
    assert any(why in d and "events chunk" in d for d in rec.damaged), rec.damaged


def test_a_count_that_cannot_fit_its_bytes_is_refused_before_allocating() -> None:
    good, t0, t1 = encode_events(events(40))
    blob = file_with(events_chunk(good, 2**32 - 1, t0, t1))
    rec = Recording(blob)
    # The reader preallocates from the header counts; this one asked for 148 GiB.
    assert rec.event_count == 0 and rec.events().size == 0
    assert any("claims 4294967295 items" in d for d in rec.damaged), rec.damaged


def test_deep_nesting_and_huge_containers_are_damage_not_recursion() -> None:
    deep = b"l\x01\x00\x00\x00" * 5000 + b"N"
    wide = b"l" + (2**31).to_bytes(4, "little") + b"N" * 10
    blob = file_with(C.pack_chunk(C.K_MARKERS, deep, count=1),
                     C.pack_chunk(C.K_MARKERS, wide, count=1),
                     C.pack_chunk(C.K_MARKERS, codec.encode([[5, "ok"]]), count=1, t_min=5,
                                  t_max=5))
    rec = Recording(blob)
    assert rec.markers == [(5, "ok")]
    assert any("nested deeper than 32" in d for d in rec.damaged)
    assert any("cannot be in this payload" in d for d in rec.damaged)
    hdr = b"[" * 100_000 + b"]" * 100_000
    rec = Recording(C.pack_preamble(1) + C.pack_chunk(C.K_HEADER, hdr, count=1))
    assert rec.header == {} and any("header chunk" in d for d in rec.damaged)


def test_a_zstd_bomb_is_refused_without_inflating_it() -> None:
    gib = zstandard.ZstdCompressor(level=19).compress(b"\0" * (64 << 20))  # 64 MiB in ~2 kB
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for raw_len in (100, 1 << 30):     # claims little (frame says more), or more than the cap
        head = C.CHUNK_HEADER.pack(C.CHUNK_MAGIC, C.K_MARKERS, C.CODEC_ZSTD, 0, len(gib),
                                   raw_len, 1, 0, 0, C.crc32(gib), 0)[:40]
        chunk = head + C.crc32(head).to_bytes(4, "little") + gib
        rec = Recording(file_with(chunk))
        assert rec.markers == []
        assert any("markers chunk" in d for d in rec.damaged), rec.damaged
    # A frame without a declared size, streamed: stops after raw_len + 1 bytes.
    cobj = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    stream = cobj.compress(b"\0" * (64 << 20)) + cobj.flush()
    head = C.CHUNK_HEADER.pack(C.CHUNK_MAGIC, C.K_MARKERS, C.CODEC_ZSTD, 0, len(stream),
                               1000, 1, 0, 0, C.crc32(stream), 0)[:40]
    rec = Recording(file_with(head + C.crc32(head).to_bytes(4, "little") + stream))
    assert any("decompressed size mismatch" in d for d in rec.damaged), rec.damaged
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 48 << 10, grown_kib     # never near the 64 MiB the frames hold


def write(path: Path, t0: int, n: int = 50, backend: str = "bcc") -> None:
    with store.Writer(path, {"host": path.stem, "backend": backend,
                             "start_monotonic_ns": t0}) as w:
        w.add_events(EventBatch(events(n, t0)))


def test_concatenated_recordings_end_at_the_second_signature(tmp_path: Path) -> None:
    a, b = tmp_path / "a.rec", tmp_path / "b.rec"
    write(a, 10**9, 50)
    write(b, 5 * 10**9, 70, "proc")
    joined = a.read_bytes() + b.read_bytes()
    rec = Recording(joined)
    assert rec.header["host"] == "a" and rec.events().size == 50
    assert rec.complete
    assert any(f"a second recording starts at byte {a.stat().st_size}" in d
               for d in rec.damaged), rec.damaged
    # The first one cut off mid-chunk, then the second: still only the first one's chunks.
    cut = a.read_bytes()[:-100] + b.read_bytes()
    rec = Recording(cut)
    assert rec.header["host"] == "a" and rec.events().size == 50
    assert any("second recording" in d for d in rec.damaged)


def test_an_index_that_does_not_tile_the_file_is_not_trusted(tmp_path: Path) -> None:
    a = tmp_path / "a.rec"
    write(a, 10**9)
    data = bytearray(a.read_bytes())
    # Garbage spliced in before the index: the index offsets no longer tile the file.
    trailer_at = len(data) - C.TRAILER_CHUNK_SIZE
    index_at = int.from_bytes(data[trailer_at + 44:trailer_at + 52], "little")
    data[index_at:index_at] = b"junk" * 4
    rec = Recording(bytes(data))
    assert rec.events().size == 50 and any("unreadable bytes" in d for d in rec.damaged)


def test_the_header_copy_stands_in_for_a_damaged_header(tmp_path: Path) -> None:
    a = tmp_path / "a.rec"
    write(a, 10**9)
    data = bytearray(a.read_bytes())
    data[C.PREAMBLE_SIZE + C.CHUNK_HEADER_SIZE + 3] ^= 0x10      # in the header's payload
    rec = Recording(bytes(data))
    assert rec.header["host"] == "a"
    assert any("damaged header chunk" in d for d in rec.damaged)
    assert any("header read from its copy" in d for d in rec.damaged)
    copies = [h for h in rec._chunks if h.kind == C.K_HEADER_COPY]
    assert len(copies) == 2 and copies[1].offset > copies[0].offset + 100


def test_header_keys_of_the_wrong_type_are_dropped_not_fatal() -> None:
    rec = Recording(file_with(header={"host": ["not", "a", "str"], "start_monotonic_ns": -1,
                                      "kernel": "6.1"}))
    assert rec.header == {"kernel": "6.1"}
    assert any("host" in d and "ignored" in d for d in rec.damaged)
    assert any("start_monotonic_ns" in d for d in rec.damaged)


def test_a_bad_source_is_dropped_from_its_sample_only() -> None:
    rows = [[10**9, 1, {"procstat": {"cpus": np.arange(4), "ticks": np.zeros((3, 10))},
                        "numa": {"nodes": np.arange(1), "mem_total": np.ones(1)}}],
            [2 * 10**9, 2, {"procstat": {"cpus": np.arange(4), "ticks": np.zeros((4, 10))}}]]
    blob = file_with(C.pack_chunk(C.K_SAMPLES, codec.encode(rows), count=2, t_min=10**9,
                                  t_max=2 * 10**9))
    rec = Recording(blob)
    got = list(rec.samples())
    assert [sorted(s.readings) for s in got] == [["numa"], ["procstat"]]
    assert any("readings.procstat.ticks: expected 4 values, got 3: ignored in 1 of 2"
               in d for d in rec.damaged), rec.damaged


def test_without_any_header_the_events_still_read_on_a_flat_machine(tmp_path: Path) -> None:
    from snumap_tui.analysis.report import build_report

    a = tmp_path / "a.rec"
    write(a, 10**9)
    data = bytearray(a.read_bytes())
    for h in C.scan(bytes(data)).chunks:
        if h.kind in (C.K_HEADER, C.K_HEADER_COPY):
            data[h.offset + C.CHUNK_HEADER_SIZE + 1] ^= 0x01
    rec = Recording(bytes(data))
    assert rec.header == {}
    assert sorted(rec.topology.pu_os_indexes) == [0, 1, 2]       # the cpus the events name
    r = build_report(rec)
    assert r["events"] == 50 and r["tasks"]
    assert any("flat machine of the 3 PUs" in d for d in rec.damaged)


def test_a_topology_with_absurd_pu_numbers_falls_back_to_the_events(tmp_path: Path) -> None:
    from snumap_tui.ui.demo import synthetic_topology

    topo = json.loads(synthetic_topology(1, 1, 1, 2, 1).to_json())

    def renumber(o: dict) -> None:
        if o["type"] == "PU":
            o["os_index"] = 2**40 + o["os_index"]
            o["cpuset"] = [o["os_index"]]
        for c in o.get("children", []) + o.get("memory_children", []):
            renumber(c)

    renumber(topo["root"])
    path = tmp_path / "t.rec"
    with store.Writer(path, {"topology": topo, "backend": "perf"}) as w:
        w.add_events(EventBatch(events(30)))
    with store.open(path) as rec:
        assert sorted(rec.topology.pu_os_indexes) == [0, 1, 2]
        assert any("PU numbers" in d for d in rec.damaged), rec.damaged
