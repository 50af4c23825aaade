"""Regions without a kernel: marker lines, the FIFO's bounds, pairing and statistics, the regions
chunk's round trip and schema checks, /proc/PID/maps parsing, the Python helper."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from snumap_tui.analysis.regions import pair, region_findings, region_stats, union_ns
from snumap_tui.store import Writer
from snumap_tui.store import open as open_rec
from snumap_tui.store.regions import Regions, decode_regions, encode_regions
from snumap_tui.trace.elfsyms import parse_maps
from snumap_tui.trace.markers import MAX_PER_S, BadMarker, MarkerFifo, parse_marker_line
from snumap_tui.trace.region_catalog import BEGIN, END, MARK, REGION_DTYPE, RegionNames


def rows(spec: list[tuple[int, int, int, int]]) -> np.ndarray:
    """(t_ns, tid, op, rid) -> REGION_DTYPE rows (pid = tid)."""
    out = np.zeros(len(spec), REGION_DTYPE)
    for i, (t, tid, op, rid) in enumerate(spec):
        out[i] = (t, tid, tid, op, rid)
    return out


def test_marker_lines() -> None:
    assert parse_marker_line("begin load\n") == (BEGIN, "load", None)
    assert parse_marker_line("end  two words  @123") == (END, "two words", 123)
    assert parse_marker_line("mark checkpoint 3") == (MARK, "checkpoint 3", None)
    for bad in ("hello world", "begin", "begin   ", "BEGIN x", "end " + "x" * 300):
        with pytest.raises(BadMarker):
            parse_marker_line(bad)


def test_marker_fifo_bad_lines_unmatched_end_and_flood() -> None:
    names = RegionNames()
    fifo = MarkerFifo(names)
    try:
        fd = os.open(fifo.path, os.O_WRONLY)
        os.write(fd, b"begin a @7\nnonsense\nend b\nmark m\nend a @7\n")
        # A flooding writer: far more lines than a second may keep; it must not block.
        burst = b"mark flood\n" * 4096
        sent = 0
        t_end = time.monotonic() + 3.0
        while sent < 3 * MAX_PER_S and time.monotonic() < t_end:
            try:
                sent += os.write(fd, burst) // len(b"mark flood\n")
            except BlockingIOError:
                time.sleep(0.001)
        os.close(fd)
        time.sleep(0.2)
        got = fifo.stop()
    finally:
        fifo.close()
    st = fifo.stats
    assert st.bad == 1 and st.bad_examples == ["nonsense"]
    assert st.unmatched_end == 1
    kept = got[got["rid"] == names.intern("flood", "marker", "marker")]
    # Bounded: at most MAX_PER_S a second kept (the burst spans at most 4 calendar seconds).
    assert len(kept) <= 4 * MAX_PER_S
    assert st.dropped > 0 or sent <= MAX_PER_S
    a = got[got["rid"] == names.intern("a", "marker", "marker")]
    assert a["op"].tolist() == [BEGIN, END] and a["tid"].tolist() == [7, 7]
    assert not os.path.exists(fifo.path)
    text = " ".join(st.problems())
    assert "not begin/end/mark NAME" in text and "without a 'begin'" in text


def test_pairing_and_union() -> None:
    r = rows([(10, 1, BEGIN, 0), (20, 1, END, 0), (5, 2, END, 0),      # end without begin
              (30, 1, BEGIN, 0), (40, 1, BEGIN, 0), (50, 1, END, 0)])  # recursion: innermost
    inst = pair(r)
    assert sorted(zip(inst.start.tolist(), inst.end.tolist())) == [(10, 20), (40, 50)]
    assert union_ns(np.array([0, 5, 20]), np.array([10, 8, 30])) == 20


def test_region_stats_imbalance_and_waits() -> None:
    names = RegionNames()
    span = names.intern("r (a.c:3)", "omp", "span")
    body = names.intern("r (a.c:3)", "omp", "body")
    bar = names.intern("MPI_Barrier", "mpi", "call", wait=True)
    spec = []
    for k in range(3):                 # 3 runs: thread 1 works 90, thread 2 works 10
        t = k * 1000
        spec += [(t, 1, BEGIN, span), (t + 1, 1, BEGIN, body), (t + 91, 1, END, body),
                 (t + 2, 2, BEGIN, body), (t + 12, 2, END, body), (t + 95, 1, END, span)]
    spec += [(5000, 1, BEGIN, bar), (5100, 1, END, bar), (5090, 2, BEGIN, bar),
             (5101, 2, END, bar)]
    r_all = rows(spec)
    r_all["pid"] = 1                   # two threads of one process
    stats = region_stats(Regions(r_all, names.items))
    r = next(s for s in stats if s["name"] == "r (a.c:3)")
    assert r["count"] == 3 and r["kind"] == "omp"
    assert r["imbalance"] == pytest.approx(270 / 150)
    assert r["wall_s"] == pytest.approx(285e-9)
    # The closing barrier: from each body's end to its span's end.
    waits = {t["tid"]: t["wait_s"] for t in r["threads"]}
    assert waits == {1: pytest.approx(12e-9), 2: pytest.approx(249e-9)}
    b = next(s for s in stats if s["name"] == "MPI_Barrier")
    assert b["count"] == 1 and b["calls"] == 2 and b["wait_s"] == pytest.approx(111e-9)
    f = region_findings(stats)
    assert f == [] or f[0]["region"] == "r (a.c:3)"     # below MIN_WASTE_S: no finding


def test_regions_chunk_round_trip_and_schema(tmp_path: Path) -> None:
    names = RegionNames()
    a = names.intern("GOMP_barrier", "omp", "call", wait=True)
    b = names.intern("load", "marker", "marker")
    r = rows([(100, 3, BEGIN, a), (200, 3, END, a), (150, 4, MARK, b)])
    p = tmp_path / "r.rec"
    with Writer(p, {"topology": None}) as w:
        w.add_regions(r[:2], names.items)
        w.flush()
        w.add_regions(r[2:], names.items)
    with open_rec(p) as rec:
        got = rec.regions()
        assert not rec.damaged
    assert got.rows["t_ns"].tolist() == [100, 150, 200]
    assert [got.names[i].name for i in got.rows["rid"].tolist()] == ["GOMP_barrier", "load",
                                                                     "GOMP_barrier"]
    assert got.names[int(got.rows["rid"][0])].wait
    value, _, _ = encode_regions(r, names.items)
    assert len(decode_regions(value, 3)[0]) == 3
    for key, bad in (("op", np.array([1, 9, 1], np.uint8)), ("kinds", ["omp", "gpu"]),
                     ("rid", np.array([0, 5, 0], np.uint32)), ("n", 4)):
        v = dict(value)
        v[key] = bad
        with pytest.raises(ValueError):
            decode_regions(v, 3)
    v = dict(value)
    del v["names"]
    with pytest.raises(ValueError, match="missing names"):
        decode_regions(v, 3)


def test_parse_maps() -> None:
    text = ("55d0c0a00000-55d0c0a01000 r--p 00000000 08:01 123 /usr/bin/prog\n"
            "55d0c0a01000-55d0c0a02000 r-xp 00001000 08:01 123 /usr/bin/prog\n"
            "7f0000000000-7f0000021000 rw-p 00000000 00:00 0 \n"
            "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]\n"
            "7f1000000000-7f1000001000 r-xp 00002000 08:01 9 /tmp/x.so (deleted)\n")
    m = parse_maps(text)
    assert [(x.path, x.offset) for x in m] == [("/usr/bin/prog", 0), ("/usr/bin/prog", 0x1000),
                                                ("/tmp/x.so", 0x2000)]


def test_phase_helper_costs_nothing_without_recording_and_writes_with_one() -> None:
    import subprocess
    import sys

    code = ("import snumap_tui, time\n"
            "t=time.perf_counter()\n"
            "for _ in range(10000):\n"
            "    with snumap_tui.phase('x'): pass\n"
            "print(time.perf_counter()-t)\n")
    env = {k: v for k, v in os.environ.items() if k != "SNUMAP_MARKERS"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    assert float(out.stdout) < 1.0          # 20,000 calls, no I/O at all
    names = RegionNames()
    fifo = MarkerFifo(names)
    try:
        env["SNUMAP_MARKERS"] = fifo.path
        subprocess.run([sys.executable, "-c", ("import snumap_tui\n"
                        "with snumap_tui.phase('assemble'):\n    snumap_tui.mark('half')\n")],
                       env=env, check=True)
        time.sleep(0.2)
        got = fifo.stop()
    finally:
        fifo.close()
    ops = [(names[int(r["rid"])].name, int(r["op"])) for r in got]
    assert ops == [("assemble", BEGIN), ("half", MARK), ("assemble", END)]
    assert len(set(got["tid"].tolist())) == 1 and int(got["tid"][0]) > 0


def test_body_probes_detached_above_the_budget() -> None:
    from snumap_tui.trace import region_catalog as C
    from snumap_tui.trace.probe_budget import BODY_BUDGET
    from snumap_tui.trace.regions import RegionTracer, Site
    from snumap_tui.trace.uprobes import HIT

    class Fake:
        def __init__(self) -> None:
            self.detached: list[str] = []

        def detach(self, group: str) -> None:
            self.detached.append(group)

    def hits(rate: float, seconds: float) -> np.ndarray:
        n = int(rate * seconds)
        h = np.zeros(n, HIT)
        h["t_ns"] = 10**9 + (np.arange(n) * (1e9 / rate)).astype(np.int64)
        h["tag"] = 0
        return h

    for rate, off in ((BODY_BUDGET / 2, False), (BODY_BUDGET * 3, True)):
        tr = RegionTracer("omp", [], RegionNames(), lambda s: None)
        tr.sites = [Site(C.EntryPoint("main._omp_fn.0", "omp", "body"), False, 0, "/x")]
        tr._body_tags = np.array([0])
        fake = tr.uprobes = Fake()
        for part in np.array_split(hits(rate, 1.2), 6):
            tr._budget(part)
        assert (fake.detached == ["body"]) == off
        assert (tr.bodies_off_at is not None) == off and (len(tr.notes) == 1) == off


def test_probe_budget_0_keeps_the_body_probes_at_any_rate() -> None:
    """--probe-budget 0 "never detaches": not the bodies' hit-rate rule either."""
    from snumap_tui.trace import region_catalog as C
    from snumap_tui.trace.probe_budget import BODY_BUDGET
    from snumap_tui.trace.regions import RegionTracer, Site
    from snumap_tui.trace.uprobes import HIT

    class Fake:
        def detach(self, group: str) -> None:
            raise AssertionError(f"{group} detached with --probe-budget 0")

    n = int(BODY_BUDGET * 3 * 1.2)
    h = np.zeros(n, HIT)
    h["t_ns"] = 10**9 + (np.arange(n) * (1e9 / (BODY_BUDGET * 3))).astype(np.int64)
    tr = RegionTracer("omp", [], RegionNames(), lambda s: None)
    tr.budget = 0
    tr.sites = [Site(C.EntryPoint("main._omp_fn.0", "omp", "body"), False, 0, "/x")]
    tr._body_tags = np.array([0])
    tr.uprobes = Fake()
    for part in np.array_split(h, 6):
        tr._budget(part)
    assert tr.bodies_off_at is None and not tr.notes and not tr.detached
