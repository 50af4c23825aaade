"""Pure parts of the tracers: record layouts, tracefs formats, ring decoding, /proc parsing."""

from __future__ import annotations

import struct
import time

import numpy as np
import pytest
from snumap_tui.native.perf_ring import gather, split_records, split_records_walk

from snumap_tui.sources.privileges import has_caps, parse_capeff
from snumap_tui.trace import events as ev
from snumap_tui.trace.bpf_layout import load_layout, struct_dtype, to_events
from snumap_tui.trace.bpf_ring import BUSY_BIT, DISCARD_BIT, decode_fixed, record_stride
from snumap_tui.trace.perf import RAW_AT, data_loc_str, sample_dtype
from snumap_tui.trace.proc import parse_schedstat, parse_stat
from snumap_tui.trace.tasks import TaskTable, parse_status
from snumap_tui.trace.tracefs import parse_format

# Verbatim from /sys/kernel/tracing/events/sched/*/format on Linux 6.18.
SWITCH_FORMAT = """name: sched_switch
ID: 372
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;
\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;
\tfield:int prev_prio;\toffset:28;\tsize:4;\tsigned:1;
\tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;
\tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;
\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;
\tfield:int next_prio;\toffset:60;\tsize:4;\tsigned:1;

print fmt: "prev_comm=%s prev_pid=%d", REC->prev_comm, REC->prev_pid
"""
FORK_FORMAT = """name: sched_process_fork
ID: 366
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:__data_loc char[] parent_comm;\toffset:8;\tsize:4;\tsigned:0;
\tfield:pid_t parent_pid;\toffset:12;\tsize:4;\tsigned:1;
\tfield:__data_loc char[] child_comm;\toffset:16;\tsize:4;\tsigned:0;
\tfield:pid_t child_pid;\toffset:20;\tsize:4;\tsigned:1;
"""


def test_bpf_header_layout_matches_events_contract() -> None:
    rec, names, consts = load_layout()
    assert rec.itemsize == consts["SNUMAP_EVENT_SIZE"] == 40
    assert rec.fields["t_ns"][1] == 0 and rec.fields["arg"][1] == 8
    assert rec.fields["cpu"][1] == 16 and rec.fields["kind"][1] == 36
    assert names.fields["comm"][0] == np.dtype("S16")
    for kind, label in ev.KIND_NAMES.items():
        if kind != ev.RUN:
            assert consts[f"SNUMAP_{label.upper()}"] == kind


def test_struct_parser_rejects_what_it_cannot_lay_out() -> None:
    with pytest.raises(ValueError, match="unsupported type"):
        struct_dtype("struct x {\n  float f;\n};", "x")
    with pytest.raises(ValueError, match="not found"):
        struct_dtype("struct y { __u8 a; };", "x")


def _ring_bytes(recs: np.ndarray, flags: list[int]) -> bytes:
    out = b""
    stride = record_stride(recs.dtype.itemsize)
    for r, fl in zip(recs, flags):
        body = r.tobytes()
        out += struct.pack("<II", recs.dtype.itemsize | fl, 0) + body
        out += b"\0" * (stride - 8 - len(body))
    return out


def test_bpf_ring_decode_stops_at_busy_and_drops_discarded() -> None:
    rec, _, _ = load_layout()
    recs = np.zeros(5, dtype=rec)
    recs["t_ns"] = [10, 20, 30, 40, 50]
    recs["kind"] = ev.SWITCH
    buf = _ring_bytes(recs, [0, DISCARD_BIT, 0, BUSY_BIT, 0])
    out, used = decode_fixed(buf, rec)
    assert out["t_ns"].tolist() == [10, 30]
    assert used == 3 * record_stride(rec.itemsize)      # the busy one and after wait
    events = to_events(out)
    assert events.dtype == ev.EVENT_DTYPE and events["kind"].tolist() == [1, 1]


def test_bpf_ring_decode_of_submitted_records_is_the_header_walks() -> None:
    """The fast path (every record submitted, of our size) gives what following each header
    gives, field for field, and consumes every byte."""
    from snumap_tui.trace.bpf_ring import _walk

    rec, _, _ = load_layout()
    rng = np.random.default_rng(2)
    recs = np.zeros(300, dtype=rec)
    for f in ("t_ns", "arg", "cpu", "tid", "tid2", "pid", "pid2", "kind"):
        recs[f] = rng.integers(0, 200, 300)
    buf = _ring_bytes(recs, [0] * 300)
    out, used = decode_fixed(buf, rec)
    walked, walked_used = _walk(buf, rec)
    assert out.flags.c_contiguous and used == walked_used == len(buf)
    assert (out == walked).all() and (out == recs).all()
    # Cut short (the end of a read mid-record): the whole records only, the rest stays.
    out, used = decode_fixed(buf[:-3], rec)
    assert len(out) == 299 and used == 299 * record_stride(rec.itemsize)
    assert (out == recs[:299]).all()


def test_bpf_ring_walks_records_of_another_size() -> None:
    rec, _, _ = load_layout()
    one = np.zeros(1, dtype=rec)
    one["t_ns"] = 7
    odd = struct.pack("<II", 12, 0) + b"x" * 16           # a 12-byte record, 8-aligned
    buf = odd + _ring_bytes(one, [0])
    out, used = decode_fixed(buf, rec)
    assert out["t_ns"].tolist() == [7] and used == len(buf)


def test_tracefs_format_parsed_by_name() -> None:
    fmt = parse_format(SWITCH_FORMAT)
    assert fmt.id == 372 and fmt.name == "sched_switch"
    assert fmt.fields["prev_state"].offset == 32 and fmt.fields["prev_state"].size == 8
    assert fmt.fields["next_comm"].array == 16
    dt = fmt.numpy_dtype(["prev_pid", "next_pid", "prev_comm"])
    assert dt.fields["next_pid"][1] == 56 and dt.itemsize == 64
    fork = parse_format(FORK_FORMAT)
    assert fork.fields["child_comm"].data_loc and fork.fields["child_pid"].offset == 20


def _perf_sample(fmt_dt_size: int, raw: bytes, pid: int, tid: int, t: int, cpu: int) -> bytes:
    raw_size = len(raw) + 4
    pad = (-(RAW_AT - 4 + raw_size)) % 8     # the kernel pads the raw part so records align
    raw = raw + b"\0" * pad
    body = struct.pack("<IIQII", pid, tid, t, cpu, 0) + struct.pack("<I", len(raw)) + raw
    return struct.pack("<IHH", 9, 0, 8 + len(body)) + body


def test_perf_records_split_and_gathered() -> None:
    fmt = parse_format(SWITCH_FORMAT)
    raw = bytearray(64)
    struct.pack_into("<H", raw, 0, 372)
    raw[8:13] = b"busy\0"
    struct.pack_into("<i", raw, 24, 4242)
    struct.pack_into("<q", raw, 32, 1)
    struct.pack_into("<i", raw, 56, 0)
    s1 = _perf_sample(64, bytes(raw), 4240, 4242, 1000, 1)
    lost = struct.pack("<IHHQQ", 2, 0, 24, 0, 17)
    buf = s1 + lost + s1
    types, offs, sizes = split_records(buf)
    assert types.tolist() == [9, 2, 9] and offs[1] == len(s1) and sizes[1] == 24
    dt = sample_dtype(fmt, ["prev_pid", "prev_state", "next_pid", "prev_comm"])
    got = gather(buf, offs[types == 9], dt)
    assert got["prev_pid"].tolist() == [4242, 4242] and got["s_time"].tolist() == [1000, 1000]
    assert got["prev_comm"][0].split(b"\0")[0] == b"busy" and got["s_cpu"][0] == 1
    # A truncated tail is left for the next read, not misparsed.
    assert len(split_records(buf[:-5])[0]) == 2


def _switch_sample(prev: int, nxt: int, t: int, cpu: int) -> bytes:
    raw = bytearray(64)
    struct.pack_into("<H", raw, 0, 372)
    struct.pack_into("<i", raw, 24, prev)
    struct.pack_into("<q", raw, 32, 1)
    struct.pack_into("<i", raw, 56, nxt)
    return _perf_sample(64, bytes(raw), prev, prev, t, cpu)


def test_perf_rings_decoded_joined_keep_each_cpus_losses(tmp_path) -> None:
    """decode() joins all CPUs' ring bytes into one buffer: events come out merged by time
    (equal times in CPU order, as sorting each ring and merging gave) and a PERF_RECORD_LOST,
    which does not say its CPU, counts for the ring it was in."""
    from snumap_tui.trace.perf import PerfTracer, _Decoder
    from snumap_tui.trace.tasks import TaskTable

    fmt = parse_format(SWITCH_FORMAT)
    tr = PerfTracer()
    tr._tasks = TaskTable(proc=tmp_path)
    tr._dec[fmt.id] = _Decoder("sched_switch", fmt.id, sample_dtype(
        fmt, ["prev_comm", "prev_pid", "prev_state", "next_comm", "next_pid"]))

    def lost(n: int) -> bytes:
        return struct.pack("<IHHQQ", 2, 0, 24, 0, n)

    ring0 = _switch_sample(10, 11, 1000, 0) + lost(3) + _switch_sample(11, 10, 3000, 0)
    ring1 = lost(5) + _switch_sample(20, 21, 1000, 1) + _switch_sample(21, 20, 2000, 1) + lost(1)
    batch = tr.decode({1: ring1, 0: ring0})
    e = batch.events
    assert batch.lost == {0: 3, 1: 6}
    assert list(zip(e["t_ns"].tolist(), e["cpu"].tolist(), e["tid"].tolist())) == [
        (1000, 1, 20), (1000, 0, 10), (2000, 1, 21), (3000, 0, 11)]


def test_gather_rows_match_the_bytes_at_each_offset() -> None:
    """gather's overlapping-view path (8-aligned offsets, as perf records are) and its byte
    path (any offset) give the bytes at each offset, up to a record that ends the buffer."""
    rng = np.random.default_rng(3)
    buf = rng.integers(0, 256, 4096, dtype=np.uint8).tobytes()
    dt = np.dtype({"names": ["a", "b"], "formats": ["<u4", "<u8"], "offsets": [0, 12],
                   "itemsize": 20})
    for offs in (np.array([0, 8, 4072, 64, 8], dtype=np.int64),      # aligned, repeated
                 np.array([3, 4075, 100], dtype=np.int64)):          # unaligned
        got = gather(buf, offs, dt)
        want = [(int.from_bytes(buf[o:o + 4], "little"), int.from_bytes(buf[o + 12:o + 20],
                                                                         "little")) for o in offs]
        assert list(zip(got["a"].tolist(), got["b"].tolist())) == want
        got["a"] = 0                     # a copy, never a view of the ring bytes
    with pytest.raises(ValueError):
        gather(buf, np.array([4080], dtype=np.int64), dt)


def test_learn_pairs_keeps_each_tids_tgid(tmp_path) -> None:
    t = TaskTable(proc=tmp_path)
    t.learn_pairs(np.array([7, 7, 8, 2**31 - 1, 5], dtype=np.int32),
                  np.array([7, 7, 7, 2**31 - 2, -2], dtype=np.int32))
    assert {k: v for k, v in t.tgid.items() if k} == {7: 7, 8: 7, 2**31 - 1: 2**31 - 2}


def test_perf_split_matches_the_header_walk_with_look_alikes() -> None:
    """Mixed record sizes, LOST records, and fake sample headers inside raw payloads: the
    vectorised split finds exactly the records the plain walk finds."""
    rng = np.random.default_rng(7)
    parts = []
    for i in range(400):
        n = int(rng.choice([20, 28, 60, 68]))
        raw = bytearray(rng.integers(0, 256, n, dtype=np.uint8).tobytes())
        if i % 7 == 0 and n >= 60:      # a look-alike header at an 8-aligned spot inside
            fake = _perf_sample(0, bytes(4), 1, 1, 5, 0)[:40]
            raw[12:12 + 40] = fake
        parts.append(_perf_sample(n, bytes(raw), i, i, 1000 + i, 0))
        if i % 50 == 0:
            parts.append(struct.pack("<IHHQQ", 2, 0, 24, 0, i))
    buf = b"".join(parts)
    want = split_records_walk(buf)
    for cut in (len(buf), len(buf) - 13):
        got = split_records(buf[:cut])
        ref = split_records_walk(buf[:cut])
        for a, b in zip(got, ref):
            assert a.tolist() == b.tolist()
    assert len(want[0]) == 408 and (want[0] == 2).sum() == 8


def test_data_loc_string() -> None:
    raw = bytearray(32)
    raw[24:29] = b"bash\0"
    assert data_loc_str(bytes(raw), 0, (5 << 16) | 24) == "bash"


def test_proc_parsers() -> None:
    # proc(5): a comm with spaces and parentheses; utime=250, stime=50, processor=1.
    stat = ("123 (my (odd) prog) R 1 123 123 0 -1 4194304 100 0 0 0 250 50 0 0 20 0 1 0 "
            "1000 1000000 100 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0")
    assert parse_stat(stat) == ("my (odd) prog", 1, 300, 1)
    assert parse_stat("garbage") is None
    assert parse_schedstat("2000000000 5000 12\n") == 2_000_000_000
    status = "Name:\tpython3\nUmask:\t0022\nState:\tR (running)\nTgid:\t77\nNgid:\t0\nPid:\t78\nPPid:\t5\n"
    assert parse_status(status) == (77, 5, "python3")


def test_capabilities() -> None:
    assert parse_capeff("Name:\tx\nCapEff:\t000001ffffffffff\n") == (1 << 41) - 1
    assert has_caps(("CAP_BPF", "CAP_PERFMON"), mask=(1 << 41) - 1) is None
    assert has_caps(("CAP_BPF", "CAP_PERFMON"), mask=0) == "CAP_BPF/CAP_PERFMON"
    assert has_caps(("CAP_PERFMON",), alternative="CAP_SYS_ADMIN", mask=1 << 21) is None


def test_task_table_fills_unknown_pids(tmp_path) -> None:
    t = TaskTable(proc=tmp_path)          # an empty /proc: only what events taught counts
    e = np.zeros(4, dtype=ev.EVENT_DTYPE)
    e["kind"] = [ev.SWITCH, ev.WAKEUP, ev.SWITCH, ev.FORK]
    e["tid"] = [10, 11, 11, 10]
    e["pid"] = [9, -1, 9, 9]
    e["tid2"] = [11, 0, 12, 13]
    e["pid2"] = [-1, -1, -1, -1]
    t.learn_pairs(e["tid"], e["pid"])
    t.fill(e)
    assert e["pid"].tolist() == [9, 9, 9, 9]
    assert e["pid2"].tolist() == [9, -1, -1, -1]    # 12 and 13 never seen; wakeup has no tid2
    t.learn(13, comm="child", ppid=9)
    infos = t.take_infos()
    assert [(i.tid, i.comm, i.ppid) for i in infos] == [(13, "child", 9)]
    t.learn(13, comm="renamed")                      # exec: reported again
    assert [i.comm for i in t.take_infos()] == ["renamed"]
    assert t.take_infos() == []


def test_task_table_arrays_answer_as_its_dicts(tmp_path) -> None:
    """fill/learn_pairs/unnamed read arrays indexed by tid; they must give what the dicts say,
    also when a tid changes tgid and for tids no kernel makes (>= PID_MAX_LIMIT)."""
    from snumap_tui.trace.tasks import PID_LIMIT

    t = TaskTable(proc=tmp_path)
    big = PID_LIMIT + 5
    t.learn_pairs(np.array([20, 21, big], dtype=np.int32), np.array([20, 20, 30], np.int32))
    t.learn_pairs(np.array([21, 21], dtype=np.int32), np.array([20, 20], np.int32))  # known
    t.learn_pairs(np.array([21], dtype=np.int32), np.array([25], np.int32))  # moved tgid
    assert t.tgid[21] == 25 and t.tgid_by_tid[21] == 25
    for tids in ([20, 21, 0, 99], [20, big, 21, 0]):
        e = np.zeros(len(tids), dtype=ev.EVENT_DTYPE)
        e["kind"], e["tid"], e["pid"] = ev.WAKEUP, tids, -1
        t.fill(e)
        assert e["pid"].tolist() == [t.tgid.get(x, -1) for x in tids]
    t.learn(21, comm="a")
    t.learn(big, comm="b")
    got = t.unnamed(np.array([0, 21, 20, 20, 99, 21], dtype=np.int32))
    assert got.tolist() == [20, 99]
    assert t.unnamed(np.array([big, big + 1, 21], dtype=np.int64)).tolist() == [big + 1]


def test_row_copies_match_numpy_structured_indexing() -> None:
    """rows.py copies records as bytes; the values must be what numpy's own indexing gives."""
    from snumap_tui.trace.rows import concat_rows, copy_rows, insert_rows, take_rows

    rng = np.random.default_rng(5)
    e = np.zeros(50, dtype=ev.EVENT_DTYPE)
    e["t_ns"] = np.sort(rng.integers(0, 1000, 50))
    e["tid"], e["arg"] = rng.integers(-2, 99, 50), rng.integers(-5, 5, 50)
    mask, order = e["tid"] % 2 == 0, rng.permutation(50)
    assert (take_rows(e, mask) == e[mask]).all() and (take_rows(e, order) == e[order]).all()
    assert (concat_rows([e[:7], e[30:]]) == np.concatenate([e[:7], e[30:]])).all()
    c = copy_rows(e[10:])
    c["tid"] = 1000
    assert (e["tid"] != 1000).all()
    new = e[:4].copy()
    new["tid"] = [-7, -8, -9, -10]
    at = np.searchsorted(e["t_ns"], [0, e["t_ns"][20], e["t_ns"][20], 5000], side="right")
    assert (insert_rows(e, at, new) == np.insert(e, at, new)).all()
    with pytest.raises(ValueError):
        concat_rows([e, np.zeros(2, dtype=[("x", "<u8")])])


def test_distinct_ids_is_np_unique() -> None:
    from snumap_tui.trace.tasks import distinct_ids

    rng = np.random.default_rng(4)
    for ids in (rng.integers(-3, 500, 2000, dtype=np.int32),       # a dense range: marked
                rng.integers(0, 2**31 - 1, 50, dtype=np.int64),    # sparse: sorted
                np.array([7, 7, 7], dtype=np.int32), np.zeros(0, dtype=np.int32)):
        got = distinct_ids(ids)
        assert got.dtype == ids.dtype and np.array_equal(got, np.unique(ids))


def test_sort_rows_moves_rows_in_place_as_numpy_indexing_would() -> None:
    from snumap_tui.trace.rows import copy_rows, sort_rows

    rng = np.random.default_rng(6)
    e = np.zeros(400, dtype=ev.EVENT_DTYPE)
    e["t_ns"] = rng.integers(0, 10**6, 400)
    e["tid"], e["arg"], e["kind"] = np.arange(400), rng.integers(-9, 9, 400), 1
    seam = np.arange(400)
    seam[180:220] = 180 + rng.permutation(40)       # only the rows at a seam out of place
    for order in (rng.permutation(400), seam, np.arange(400)):
        a = copy_rows(e)
        sort_rows(a, order)
        assert (a == e[order]).all()
    with pytest.raises(ValueError):
        sort_rows(e[::2], np.arange(200))           # not contiguous
    with pytest.raises(ValueError):
        sort_rows(copy_rows(e), np.arange(10))


def _perf_tracer_tracking(tmp_path, tracked: set[int], lag_ns: int):
    from snumap_tui.trace.perf import PerfTracer, _Decoder
    from snumap_tui.trace.tasks import TaskTable

    fmt = parse_format(SWITCH_FORMAT)
    tr = PerfTracer()
    tr._tasks = TaskTable(proc=tmp_path)
    tr._dec[fmt.id] = _Decoder("sched_switch", fmt.id, sample_dtype(
        fmt, ["prev_comm", "prev_pid", "prev_state", "next_comm", "next_pid"]))
    tr._tracked = set(tracked)
    tr.follow_lag_ns = lag_ns
    return tr


@pytest.mark.parametrize("lag_s", [0.0, 0.5])
def test_perf_holds_events_back_for_a_process_found_late(tmp_path, lag_s: float) -> None:
    """`record --job` with perf: a rank (B) that ran 0.1 s before the job's rescan found it
    keeps those events when the tracer holds back the last follow_lag_ns (without it, the tree
    filter had dropped them at the read before the rescan)."""
    a, b, other = 3_999_901, 3_999_902, 3_999_903      # pids no process of this host has
    tr = _perf_tracer_tracking(tmp_path, {a}, int(lag_s * 1e9))
    now = time.monotonic_ns()
    ring = (_switch_sample(other, b, now - 450_000_000, 0)      # B starts running
            + _switch_sample(b, a, now - 350_000_000, 0))       # B -> A (A is tracked)
    first = tr.decode({0: ring}).events
    tr.follow([b])                                  # the rescan finds B after that read
    time.sleep(0.2)                                 # both events now older than the lag
    second = tr.decode({}).events
    got = [(int(t), int(p), int(n)) for t, p, n in zip(
        np.concatenate([first["t_ns"], second["t_ns"]]),
        np.concatenate([first["tid"], second["tid"]]),
        np.concatenate([first["tid2"], second["tid2"]]))]
    if lag_s:
        assert len(first) == 0                      # held back at the first read
        assert got == [(now - 450_000_000, other, b), (now - 350_000_000, b, a)]
    else:
        assert got == [(now - 350_000_000, b, a)]   # only the switch into tracked A


def test_perf_stop_gives_what_it_held_back(tmp_path) -> None:
    a = 3_999_911
    tr = _perf_tracer_tracking(tmp_path, {a}, 500_000_000)
    now = time.monotonic_ns()
    held = tr.decode({0: _switch_sample(0, a, now - 100_000_000, 0)}).events
    assert len(held) == 0
    last = tr.stop().events                         # the recording's end: nothing held back
    assert last["t_ns"].tolist() == [now - 100_000_000] and last["tid2"].tolist() == [a]


def test_perf_hold_back_is_bounded(tmp_path, monkeypatch) -> None:
    """Past HOLD_MAX events held back (a storm), the oldest go through at once."""
    from snumap_tui.trace import perf

    monkeypatch.setattr(perf, "HOLD_MAX", 2)
    a = 3_999_921
    tr = _perf_tracer_tracking(tmp_path, {a}, 500_000_000)
    now = time.monotonic_ns()
    ring = b"".join(_switch_sample(0, a, now - d, 0) for d in (40, 30, 20, 10))
    got = tr.decode({0: ring}).events["t_ns"].tolist()
    assert got == [now - 40, now - 30]                      # two held back, two through
    assert tr.stop().events["t_ns"].tolist() == [now - 20, now - 10]


def _fork_sample(parent: int, child: int, comm: str, t: int, cpu: int) -> bytes:
    s = comm.encode() + b"\0"
    raw = bytearray(24) + s
    struct.pack_into("<H", raw, 0, 366)
    struct.pack_into("<I", raw, 8, (len(s) << 16) | 24)     # parent_comm: the same string
    struct.pack_into("<i", raw, 12, parent)
    struct.pack_into("<I", raw, 16, (len(s) << 16) | 24)
    struct.pack_into("<i", raw, 20, child)
    return _perf_sample(len(raw), bytes(raw), parent, parent, t, cpu)


def test_perf_hold_back_cap_keeps_a_time_together(tmp_path, monkeypatch) -> None:
    """Past HOLD_MAX, the cut never falls between two events of one time: a fork's child
    keeps the name its record gave, whichever read lets it through."""
    from snumap_tui.trace import perf
    from snumap_tui.trace.perf import _Decoder

    monkeypatch.setattr(perf, "HOLD_MAX", 1)
    a, child, other = 3_999_931, 3_999_932, 3_999_933
    tr = _perf_tracer_tracking(tmp_path, {a}, 500_000_000)
    fk = parse_format(FORK_FORMAT)
    tr._dec[fk.id] = _Decoder("sched_process_fork", fk.id,
                              sample_dtype(fk, ["parent_pid", "child_pid", "child_comm"]))
    t = time.monotonic_ns() - 10
    first = tr.decode({0: _switch_sample(other, a, t, 0), 1: _fork_sample(a, child, "kid", t, 1)})
    last = tr.stop()
    names = {i.tid: i.comm for b in (first, last) for i in b.tasks}
    assert names.get(child) == "kid"
    assert len(first.events) + len(last.events) == 2


def test_perf_hold_back_opens_counters_at_once(tmp_path) -> None:
    """`record --job --events`: a tree thread whose events are held back gets its counters
    at that read (they count from their open), not when its events go through."""
    from snumap_tui.trace.perf import _Decoder

    class Reads:                                    # ThreadReads' two calls, recorded
        def __init__(self) -> None:
            self.seen: list[set[int]] = []

        def see(self, events, tracked) -> None:
            keep = set(tracked or ())
            self.seen.append({int(x) for x in events["tid2"].tolist() if x in keep}
                             | {int(x) for x in events["tid"].tolist() if x in keep})

        def rows(self, t_ns: int) -> np.ndarray:
            return np.empty(0)

    a, child = 3_999_941, 3_999_942
    tr = _perf_tracer_tracking(tmp_path, {a}, 500_000_000)
    fk = parse_format(FORK_FORMAT)
    tr._dec[fk.id] = _Decoder("sched_process_fork", fk.id,
                              sample_dtype(fk, ["parent_pid", "child_pid", "child_comm"]))
    reads = Reads()
    tr._threads = reads
    now = time.monotonic_ns()
    got = tr.decode({0: _fork_sample(a, child, "kid", now - 100_000_000, 0)
                     + _switch_sample(a, child, now - 50_000_000, 0)})
    assert len(got.events) == 0                     # both held back ...
    assert any(child in s for s in reads.seen)      # ... and the child's counters open now
