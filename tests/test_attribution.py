"""Counters per run interval attributed to threads, processes, regions and phases
(analysis/attribution.py), the thread counters chunk (store/counters.py) and ``--events``
parsing -- on constructed intervals whose every share is known."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from snumap_tui.analysis.attribution import attribute
from snumap_tui.errors import SnumapError
from snumap_tui.store import Writer
from snumap_tui.store import open as open_recording
from snumap_tui.store.counters import ThreadCounters
from snumap_tui.store.kinds import K_THREAD_COUNTERS, SchemaError, validate
from snumap_tui.store.regions import Regions
from snumap_tui.trace.bpf_layout import bpf_dir, defines, struct_dtype
from snumap_tui.trace.counters import (
    HEAD_FIELDS,
    MAX_COUNTERS,
    counter_dtype,
    parse_events,
    ring_dtype,
    split_events,
    timed_first,
    widen,
)
from snumap_tui.trace.events import EventBatch
from snumap_tui.trace.region_catalog import BEGIN, END, REGION_DTYPE, RegionName

EVENTS = ["task-clock", "page-faults", "instructions", "cycles"]


def _rows(spec: list[tuple[int, int, int, int, int, list[int]]],
          running: dict[int, list[int]] | None = None) -> np.ndarray:
    """(tid, pid, cpu, start, end, values) -> counter rows; enabled = the interval."""
    rows = np.zeros(len(spec), counter_dtype(len(EVENTS)))
    for i, (tid, pid, cpu, a, b, vals) in enumerate(spec):
        rows[i]["tid"], rows[i]["pid"], rows[i]["cpu"] = tid, pid, cpu
        rows[i]["t_start"], rows[i]["t_end"] = a, b
        rows[i]["value"] = vals
        rows[i]["enabled"] = [b - a] * len(EVENTS)
        rows[i]["running"] = (running or {}).get(i, [b - a] * len(EVENTS))
        rows[i]["n"] = len(EVENTS)
    return rows


ROWS = [
    # tid 11 runs [0,100) on PU 0 then [200,300) on PU 1 (a migration); tid 12 [100,200) on 0
    (11, 10, 0, 0, 100, [100, 10, 400, 200]),
    (12, 10, 0, 100, 200, [100, 50, 100, 100]),
    (11, 10, 1, 200, 300, [100, 0, 200, 100]),
    (-2, -2, 1, 0, 200, [200, 7, 0, 0]),          # untraced tasks on PU 1
]


def _regions() -> Regions:
    names = [RegionName("loop", "omp", "body"), RegionName("init", "marker", "marker")]
    recs = [(50, 11, 10, BEGIN, 0), (100, 11, 10, END, 0),       # half of 11's first interval
            (0, 11, 10, BEGIN, 1), (150, 11, 10, END, 1)]        # phase: [0,150) everywhere
    rows = np.array(recs, dtype=REGION_DTYPE)
    return Regions(rows=rows, names=names)


def test_threads_processes_regions_phases() -> None:
    c = attribute(ThreadCounters(EVENTS, _rows(ROWS)), _regions(), {11: "a", 12: "b", 10: "p"})
    th = {r["tid"]: r for r in c["threads"]}
    assert th[11]["events"]["page-faults"] == 10 and th[12]["events"]["page-faults"] == 50
    assert th[11]["on_cpu_s"] == pytest.approx(200e-9) and th[11]["migrations"] == 1
    assert th[11]["ipc"] == pytest.approx(600 / 300) and th[12]["ipc"] == pytest.approx(1.0)
    assert th[11]["ghz"] == pytest.approx(300 / 200)
    assert th[11]["mpki"] is None and "LLC-load-misses" in th[11]["na"]["mpki"]
    (proc,) = c["processes"]
    assert proc["pid"] == 10 and proc["events"]["page-faults"] == 60
    assert proc["migrations"] == 1 and proc["comm"] == "p"
    (loop,) = c["regions"]                  # half of tid 11's [0,100) interval
    assert loop["events"]["page-faults"] == pytest.approx(5)
    assert loop["events"]["instructions"] == pytest.approx(200)
    assert loop["on_cpu_s"] == pytest.approx(50e-9) and loop["threads"] == 1
    (phase,) = c["phases"]                  # all of [0,100) on PU 0, half of [100,200)
    assert phase["events"]["page-faults"] == pytest.approx(10 + 25)
    assert phase["threads"] == 2
    cpus = {r["cpu"]: r for r in c["cpus"]}
    assert cpus[1]["other"]["page-faults"] == 7 and cpus[1]["total"]["page-faults"] == 7
    assert cpus[0]["traced"]["page-faults"] == 60


def test_multiplexed_event_is_scaled_and_flagged() -> None:
    # cycles ran half of its enabled time in the first interval: counted 200 -> 400
    c = attribute(ThreadCounters(EVENTS, _rows(ROWS[:1], {0: [100, 100, 100, 50]})))
    assert c["threads"][0]["events"]["cycles"] == pytest.approx(400)
    assert c["multiplexed"] == ["cycles"] and c["unmeasured"] == []
    c = attribute(ThreadCounters(EVENTS, _rows(ROWS[:1], {0: [100, 100, 100, 0]})))
    assert c["unmeasured"] == ["cycles"]


def test_chunk_round_trip_and_schema(tmp_path: Path) -> None:
    path = tmp_path / "c.rec"
    w = Writer(path, {"interval_ns": 1}, autoflush=False)
    w.counter_events = EVENTS
    rows = _rows(ROWS, {1: [100, 100, 60, 40]})
    w.add_events(EventBatch(counters=rows[::-1].copy()))
    w.close()
    with open_recording(path) as rec:
        tc = rec.thread_counters()
        assert not rec.damaged
    assert tc.events == EVENTS
    got = tc.rows[np.lexsort((tc.rows["tid"], tc.rows["t_end"]))]
    want = rows[np.lexsort((rows["tid"], rows["t_end"]))]
    for f in ("t_start", "t_end", "tid", "pid", "cpu", "value", "enabled", "running"):
        assert np.array_equal(got[f], want[f]), f
    # A payload whose counter columns do not match its events is refused by the schema.
    from snumap_tui.store.counters import encode_counters

    value, _, _ = encode_counters(rows, EVENTS)
    # every event enabled for its whole interval: no enabled column, the flag instead
    assert value.get("enabled_is_dur") is True and "enabled" not in value
    validate(K_THREAD_COUNTERS, dict(value), len(rows))
    bad = dict(value, events=EVENTS[:2])
    with pytest.raises(SchemaError):
        validate(K_THREAD_COUNTERS, bad, len(rows))
    bad = dict(value, unrun=value["dur"][:, None].repeat(len(EVENTS), axis=1) + 1)
    with pytest.raises(SchemaError, match="not-running"):
        validate(K_THREAD_COUNTERS, bad, len(rows))
    bad = dict(value)
    del bad["enabled_is_dur"]
    with pytest.raises(SchemaError, match="enabled"):
        validate(K_THREAD_COUNTERS, bad, len(rows))
    # one event enabled for less than its interval: the column is written, and read back
    odd = rows.copy()
    odd["enabled"][0, 1] -= 1
    value, _, _ = encode_counters(odd, EVENTS)
    assert "enabled_is_dur" not in value and value["enabled"].shape == (len(odd), len(EVENTS))
    validate(K_THREAD_COUNTERS, dict(value), len(odd))
    from snumap_tui.store.counters import decode_counters

    back = decode_counters(value).rows
    assert sorted(back["enabled"].tolist()) == sorted(odd["enabled"].tolist())
    with pytest.raises(SchemaError, match="enabled"):
        validate(K_THREAD_COUNTERS, dict(value, enabled_is_dur=True), len(odd))


def test_a_chunk_of_small_one_event_rows_is_not_taken_for_damaged(tmp_path: Path) -> None:
    """One software event, short intervals, small tids: with the enabled column left out a
    row narrows to about 11 bytes, under the 12 the kind once required of every row (a chunk
    of them was then reported damaged)."""
    n = 4000
    rows = np.zeros(n, counter_dtype(1))
    rows["tid"] = rows["pid"] = 100 + np.arange(n) % 7
    rows["cpu"] = np.arange(n) % 2
    rows["t_end"] = 1_000_000 + 1000 * np.arange(1, n + 1)
    rows["t_start"] = rows["t_end"] - 900
    rows["value"] = 1
    rows["enabled"] = rows["running"] = 900
    rows["n"] = 1
    path = tmp_path / "small.rec"
    w = Writer(path, {"interval_ns": 1}, autoflush=False)
    w.counter_events = ["context-switches"]
    w.add_events(EventBatch(counters=rows))
    w.close()
    with open_recording(path) as rec:
        tc = rec.thread_counters()
        assert not rec.damaged
    assert len(tc) == n
    assert tc.rows["enabled"].ravel().tolist() == [900] * n


def test_record_layout_matches_the_bpf_header() -> None:
    text = (bpf_dir() / "sched_event.h").read_text()
    consts = defines(text)
    head = struct_dtype(text, "snumap_counter_head")
    assert consts["SNUMAP_MAX_COUNTERS"] == MAX_COUNTERS
    assert head.itemsize == consts["SNUMAP_COUNTER_HEAD_SIZE"]
    assert [(n, head[n].str) for n in head.names] == [(n, np.dtype(t).str)
                                                      for n, t in HEAD_FIELDS]
    # in the ring: 3 counts, enabled and running of the 1 hardware event among them
    assert ring_dtype(3, 1).itemsize == head.itemsize + 8 * (3 + 2)
    recs = np.zeros(2, ring_dtype(3, 1))
    recs["t_start"], recs["t_end"] = [10, 20], [15, 40]
    recs["value"] = [[1, 2, 3], [4, 5, 6]]
    recs["enabled"], recs["running"] = [[5], [20]], [[5], [10]]
    rows = widen(recs, 3, 1)
    assert rows["enabled"].tolist() == [[5, 5, 5], [20, 20, 20]]
    assert rows["running"].tolist() == [[5, 5, 5], [10, 20, 20]]
    assert rows["value"].tolist() == [[1, 2, 3], [4, 5, 6]]
    specs = parse_events(["task-clock", "cycles", "faults", "r1a"])
    assert [s.name for s in timed_first(specs)] == ["cycles", "r1a", "task-clock", "faults"]


def test_events_lists() -> None:
    assert split_events("task-clock, cpu/event=0x3c,umask=0x1/,faults") == [
        "task-clock", "cpu/event=0x3c,umask=0x1/", "faults"]
    assert [s.name for s in parse_events(["task-clock", "faults:u"])] == ["task-clock",
                                                                         "faults:u"]
    for bad in (["nonsense-event"], ["software/bogus=1/"], ["faults"] * 2,
                ["task-clock"] * (MAX_COUNTERS + 1)):
        with pytest.raises(SnumapError):
            parse_events(bad)
    with pytest.raises(SnumapError):
        split_events(" , ")


@pytest.mark.parametrize("events", ["nonsense-event", "software/bogus=1/", "r12zz", ","])
def test_bad_events_are_one_line_exit_2(tmp_path: Path, events: str) -> None:
    out = tmp_path / "x.rec"
    r = subprocess.run([sys.executable, "-m", "snumap_tui.cli", "record", "-o", str(out),
                        "--events", events, "--", "true"], capture_output=True, text=True,
                       timeout=60, check=False)
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "--events" in r.stderr
    assert "Traceback" not in r.stderr and not out.exists()


def _synthetic(tmp_path: Path) -> Path:
    from snumap_tui.analysis.synth import synthetic_topology, write_recording
    from tests.test_analysis import SCENARIO, make_events

    reg = _regions()
    return write_recording(tmp_path / "t.rec", synthetic_topology(2, 1, 1, 1, host="h"),
                           make_events(SCENARIO), regions=(reg.rows, reg.names),
                           counters=(_rows(ROWS), EVENTS))


def test_parquet_thread_counters_and_regions(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    from snumap_tui.export.parquet import write_parquet

    with open_recording(_synthetic(tmp_path)) as rec:
        (tmp_path / "pq").mkdir()       # export gives it a temporary directory (safeout)
        counts = write_parquet(tmp_path / "pq", rec)
    assert counts["thread_counters"] == len(ROWS) and counts["regions"] == 2
    t = pq.read_table(tmp_path / "pq" / "thread_counters.parquet").to_pylist()
    first = min(t, key=lambda r: (r["end_ns"], r["tid"]))
    assert (first["tid"], first["cpu"], first["start_ns"], first["end_ns"]) == (11, 0, 0, 100)
    assert first["page-faults"] == 10 and first["cycles:running_ns"] == 100
    r = pq.read_table(tmp_path / "pq" / "regions.parquet").to_pylist()
    assert sorted((x["name"], x["tid"], x["start_ns"], x["end_ns"]) for x in r) == [
        ("init", 11, 0, 150), ("loop", 11, 50, 100)]


def test_perfetto_counter_tracks_per_thread_and_process(tmp_path: Path) -> None:
    pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    from snumap_tui.export.perfetto import write_perfetto

    out = tmp_path / "t.pftrace"
    with open_recording(_synthetic(tmp_path)) as rec, out.open("wb") as f:
        counts = write_perfetto(f, rec)
    assert counts["thread_counter_tracks"] == len(EVENTS) * 3      # 2 threads, 1 process
    trace = pb.Trace()
    trace.ParseFromString(out.read_bytes())
    names = {p.track_descriptor.uuid: p.track_descriptor.name for p in trace.packet
             if p.HasField("track_descriptor")}
    values: dict[str, list[tuple[int, float]]] = {}
    for p in trace.packet:
        te = p.track_event if p.HasField("track_event") else None
        if te is not None and te.track_uuid in names and te.type == pb.TrackEvent.TYPE_COUNTER:
            values.setdefault(names[te.track_uuid], []).append((p.timestamp, te.double_counter_value))
    assert values["page-faults (thread 11)"] == [(0, 0.0), (100, 10.0), (300, 10.0)]
    assert values["page-faults (process 10)"] == [(0, 0.0), (100, 10.0), (200, 60.0),
                                                  (300, 60.0)]


def test_top_events_unsupported_is_one_line_and_bad_is_exit_2() -> None:
    cmd = [sys.executable, "-m", "snumap_tui.cli", "top", "--batch", "--count", "1"]
    r = subprocess.run([*cmd, "--events", "nonsense-event"], capture_output=True, text=True,
                       timeout=60, check=False)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    r = subprocess.run([*cmd, "--events", "task-clock,LLC-load-misses"], capture_output=True,
                       text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    from snumap_tui.sources.perf import core_pmus

    if not core_pmus(Path("/")):
        assert "LLC-load-misses not supported here: no hardware PMU" in r.stderr
    assert "task-clock" not in r.stderr


STAT = ("4242 (a b) c) R 1 4242 4242 0 -1 4194304 1500 0 7 0 250 30 0 0 20 0 2 0 100 "
        "1000000 100 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0")
STATUS = "Name:\ta\nvoluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches:\t3\n"


def test_proc_counters_parse_and_rows() -> None:
    from snumap_tui.trace.proc_counters import (
        PROC_EVENTS,
        interval_rows,
        parse_stat_counters,
        parse_status_switches,
    )

    # fields 10 (minflt) 1500, 12 (majflt) 7, 14 (utime) 250, 15 (stime) 30 ticks
    assert parse_stat_counters(STAT, 10_000_000) == (2_500_000_000, 300_000_000, 1500, 7)
    assert parse_status_switches(STATUS) == (12, 3)
    prev = {5: (0, 0, 10, 0, 1, 1), 6: (1, 1, 1, 1, 1, 1)}
    cur = {5: (100, 50, 30, 1, 4, 2), 6: (1, 1, 1, 1, 1, 1), 7: (9, 9, 9, 9, 9, 9)}
    rows = interval_rows(prev, cur, {5: (4, 1), 6: (4, 0), 7: (4, 0)}, 1000, 3000)
    assert rows["tid"].tolist() == [5]          # 6 did not move, 7 has no previous poll
    assert rows["value"][0].tolist() == [100, 50, 20, 1, 3, 1]
    assert (rows["cpu"][0], rows["pid"][0], rows["n"][0]) == (1, 4, len(PROC_EVENTS))
    c = attribute(ThreadCounters(PROC_EVENTS, rows), runs=False)
    (t,) = c["threads"]
    assert t["faults"] == 21 and t["on_cpu_s"] == pytest.approx(150e-9)
    # A damaged header naming utime without stime: that one is the on-CPU time, no traceback.
    only = ThreadCounters(PROC_EVENTS[:1], _one_event(rows))
    (t,) = attribute(only, runs=False)["threads"]
    assert t["on_cpu_s"] == pytest.approx(100e-9)


def _one_event(rows: np.ndarray) -> np.ndarray:
    """ROWS with their first event only."""
    out = np.zeros(len(rows), counter_dtype(1))
    for f in ("tid", "pid", "cpu", "t_start", "t_end"):
        out[f] = rows[f]
    out["value"][:, 0] = rows["value"][:, 0]
    out["enabled"][:, 0] = rows["enabled"][:, 0]
    out["running"][:, 0] = rows["running"][:, 0]
    out["n"] = 1
    return out


@pytest.mark.parametrize("backend", ["proc", "perf"])
def test_coarser_backends_record_counters_per_thread(tmp_path: Path, backend: str) -> None:
    """perf: the events per thread, read at each poll; proc: what /proc gives. Both say how
    coarse they are in the header; the faults of the traced program are there."""
    from snumap_tui.trace.select import tracer_class

    if not tracer_class(backend).status().available:
        pytest.skip(f"the {backend} backend cannot run here")
    out = tmp_path / "p.rec"
    prog = ("import time\nx = bytearray(32 << 20)\nfor i in range(0, len(x), 4096): x[i] = 1\n"
            "time.sleep(0.5)\n")
    r = subprocess.run([sys.executable, "-m", "snumap_tui.cli", "record", "-o", str(out),
                        "--backend", backend, "--events", "task-clock,page-faults",
                        "--regions", "none", "--", sys.executable, "-c", prog],
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    with open_recording(out) as rec:
        tc = rec.thread_counters()
        source = rec.header["counters"]["source"]
    if backend == "proc":
        assert "task-clock not counted by the proc backend" in r.stderr
        assert source.startswith("/proc polling")
        assert tc.events[:2] == ["proc:utime-ns", "proc:stime-ns"]
        faults = tc.rows["value"][:, 2].sum()
    else:
        assert source.startswith("perf: per-thread counters")
        assert tc.events == ["task-clock", "page-faults"]
        faults = tc.rows["value"][:, 1].sum()
    assert faults >= 8192 * 0.9             # 32 MiB touched, seen before the sleep ends


def test_a_comm_that_is_not_utf8_does_not_stop_the_tree_scan(tmp_path: Path) -> None:
    """Any user can name a process with bytes that are not UTF-8 (prctl PR_SET_NAME): the scan
    of /proc that seeds the traced tree raised UnicodeDecodeError, and `snumap record -- CMD`
    died with a traceback on a machine where one such process ran."""
    from snumap_tui.trace.tasks import children_map, tree_of

    for pid, ppid, comm in ((10, 1, b"init"), (11, 10, b"\xff\xfe odd) x"), (12, 11, b"k")):
        d = tmp_path / str(pid)
        d.mkdir()
        (d / "stat").write_bytes(b"%d (%s) S %d 0 0" % (pid, comm, ppid))
    assert {k: sorted(v) for k, v in children_map(tmp_path).items()} == {
        1: [10], 10: [11], 11: [12]}
    assert sorted(tree_of([10], tmp_path)) == [10, 11, 12]


def test_counter_backlog_is_decoded_in_slices_and_bounded() -> None:
    """The libbpf tracer hands at most DECODE_COUNTERS of drained counter rows per decode
    (a whole backlog at once was the recorder's peak under a switch storm), the rest to
    later decodes in order, stops reading the counter rings past COUNTER_BACKLOG, and gives
    everything left at stop -- no record dropped by the slicing. The drain widens the ring
    records into rows (on the drain thread)."""
    from snumap_tui.trace.counters import parse_events, ring_dtype
    from snumap_tui.trace.libbpf import LibbpfTracer

    t = LibbpfTracer()
    t.counter_specs = parse_events(["task-clock", "page-faults"])
    dt = ring_dtype(2, 0)
    per = t.DECODE_COUNTERS // t._widen(np.zeros(1, dt)).itemsize // 2 + 1  # two > a slice
    parts = []
    for i in range(5):
        p = np.zeros(per, dt)
        p["tid"] = i + 1
        p["t_end"] = np.arange(per) + i * per + 1
        parts.append(p)
    rows = [t._widen(p) for p in parts]
    t._cdrained, t._cbytes = list(rows), sum(r.nbytes for r in rows)
    got = []
    for _ in range(5):
        b = t.decode(None)
        assert b.counters is not None and len(b.counters) == per    # one part a decode
        got.append(b.counters)
    assert t._cbytes == 0 and not t._cdrained
    tids = np.concatenate([g["tid"] for g in got])
    assert tids.tolist() == np.repeat(np.arange(1, 6), per).tolist()       # in order

    class Ring:
        capped = False

        def __init__(self) -> None:
            self.reads = 0

        def read(self, _max: int) -> np.ndarray:
            self.reads += 1
            return parts[0].copy()

    ring = Ring()
    t._cring = ring  # type: ignore[assignment]
    t._ring = None
    t._cbytes = t.COUNTER_BACKLOG           # full: the drain leaves the rings alone
    t.drain()
    assert ring.reads == 0
    t._cbytes = 0
    t.drain()
    assert ring.reads == 1 and t._cbytes == rows[0].nbytes
    assert t._cdrained[0].dtype == rows[0].dtype            # widened by the drain
