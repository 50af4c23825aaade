"""Small hostile inputs that asked for unbounded work, and crafted structure the schema checks
did not reach (issue 23, classes 4, 6 and 7). Each input must end in data or one `snumap:` line
with exit 2, within a time and memory bound: never a traceback, a hang or gigabytes."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import zstandard

from snumap_tui import store
from snumap_tui.store import chunks as C
from snumap_tui.trace.events import EVENT_DTYPE, SWITCH, EventBatch, TaskInfo
from snumap_tui.trace.region_catalog import MARK, REGION_DTYPE, RegionName, RegionNames

PY = sys.executable
MEM = 1536 << 20          # address-space limit of every command run here


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEM, MEM))


def snumap(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-m", "snumap_tui.cli", *args], capture_output=True, text=True,
                          timeout=timeout, check=False, preexec_fn=_limit,
                          env={**os.environ, "PYTHONUTF8": "1"})


def one_line(p: subprocess.CompletedProcess[str], *words: str) -> str:
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    lines = [ln for ln in p.stderr.strip().splitlines() if not ln.startswith("snumap: warning")]
    assert len(lines) == 1, p.stderr
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def ok(p: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    assert p.returncode == 0, (p.returncode, p.stderr[-2000:])


def topo_json() -> str:
    sys.path.insert(0, str(Path(__file__).parent))
    from topo_factory import make_topology
    return make_topology(1, 1, 2, 1).to_json()


def write_rec(path: Path, header: dict | None = None, *, tids: list[int] | None = None,
              comms: list[str] | None = None, cpus: list[int] | None = None,
              regions: tuple[np.ndarray, list[RegionName]] | None = None) -> Path:
    hdr = {"topology": topo_json(), "host": "h", "start_monotonic_ns": 10**9}
    hdr.update(header or {})
    with store.Writer(path, hdr, force=True) as w:
        tids = tids or [100, 101]
        ev = np.zeros(len(tids), dtype=EVENT_DTYPE)
        ev["t_ns"] = 10**9 + np.arange(len(tids)) * 1000
        ev["kind"] = SWITCH
        ev["cpu"] = (cpus or [0]) * len(tids) if cpus is None or len(cpus) == 1 else cpus
        ev["tid"] = tids
        ev["tid2"] = tids[::-1]
        ev["pid"] = ev["pid2"] = 100
        tasks = [TaskInfo(t, 100, c, 1, 10**9) for t, c in zip(tids, comms or ["a"] * len(tids))]
        w.add_events(EventBatch(ev, tasks, {}))
        if regions is not None:
            w.add_regions(*regions)
    return path


def with_raw_header(path: Path, raw: bytes) -> Path:
    """The recording at PATH with its header (and header copy) replaced by RAW bytes, freshly
    compressed and checksummed, no index (scanned)."""
    data = path.read_bytes()
    cctx = zstandard.ZstdCompressor(level=3)
    out = [C.pack_preamble(1)]
    dctx = zstandard.ZstdDecompressor()
    for h in C.scan(data).chunks:
        if h.kind in (C.K_INDEX, C.K_TRAILER):
            continue
        body = raw if h.kind in (C.K_HEADER, C.K_HEADER_COPY) else \
            bytes(C.payload_of(data, h, dctx))
        out.append(C.pack_chunk(h.kind, body, count=h.count, t_min=h.t_min, t_max=h.t_max,
                                compress=cctx))
    path.write_bytes(b"".join(out))
    return path


# ---- class 4: unbounded work from small inputs ---------------------------------------------
def test_a_header_of_millions_of_empty_objects_is_refused_unparsed(tmp_path: Path) -> None:
    rec = write_rec(tmp_path / "r.rec")
    n = 20_000_000                       # 60 MB of JSON, ~60 KB compressed
    raw = b'{"host": "h", "x": [' + b"{}," * (n - 1) + b"{}]}"
    with_raw_header(rec, raw)
    assert rec.stat().st_size < 1 << 20
    t0 = time.monotonic()
    p = snumap("report", str(rec))
    assert time.monotonic() - t0 < 20
    assert "Traceback" not in p.stderr and "MemoryError" not in p.stderr, p.stderr[-2000:]
    ok(p)                                  # the events are still reported
    assert "header chunk" in p.stdout and "JSON items" in p.stdout, p.stdout


def test_a_tid_near_2_31_does_not_size_a_table(tmp_path: Path) -> None:
    rec = write_rec(tmp_path / "r.rec", tids=[100, 2**31 - 1])
    for argv in (["report", str(rec)], ["report", str(rec), "--json"],
                 ["export", str(rec), "--format", "csv", "-o", str(tmp_path / "o.csv")],
                 ["export", str(rec), "--format", "chrome", "-o", str(tmp_path / "o.json")]):
        ok(snumap(*argv))


def marker_regions(n: int) -> tuple[np.ndarray, list[RegionName]]:
    rows = np.zeros(n, REGION_DTYPE)
    rows["t_ns"] = 10**9 + np.arange(n)
    rows["tid"] = rows["pid"] = 100
    rows["op"] = MARK
    rows["rid"] = np.arange(n)
    return rows, [RegionName(f"m{i}", "marker", "marker") for i in range(n)]


def test_many_distinct_marker_names_report_in_linear_time(tmp_path: Path) -> None:
    rec = write_rec(tmp_path / "r.rec", regions=marker_regions(50_000))
    t0 = time.monotonic()
    p = snumap("report", str(rec), "--json", timeout=120)
    took = time.monotonic() - t0
    ok(p)
    assert len(json.loads(p.stdout)["regions"]) == 50_000
    assert took < 30, took                 # quadratic: ~2 s per 10k names squared


def test_the_marker_fifo_keeps_a_bounded_name_table() -> None:
    from snumap_tui.trace.markers import MAX_NAMES, MarkerFifo
    names = RegionNames()
    fifo = MarkerFifo(names)
    try:
        for i in range(MAX_NAMES + 500):
            fifo._line(f"mark n{i}".encode(), 10**9 + i)
        rows = fifo.take()
    finally:
        fifo.close()
    assert len(names.items) == MAX_NAMES
    assert len(rows) == MAX_NAMES
    assert fifo.stats.names_dropped == 500
    assert any("distinct" in p for p in fifo.stats.problems())


def test_a_synthetic_level_of_16000_children_is_refused_before_hwloc() -> None:
    t0 = time.monotonic()
    one_line(snumap("topo", "--synthetic", "core:16000 pu:1", timeout=30), "children")
    assert time.monotonic() - t0 < 10


def fsroot_with(tmp_path: Path, rel: str, what: str) -> Path:
    sys.path.insert(0, str(Path(__file__).parent))
    from fakefs import FakeRoot
    base = tmp_path / "fs"
    FakeRoot(base, cpus=2)
    f = base / rel
    f.unlink()
    if what == "zero":                 # a device node inside the tree: /dev/zero's numbers
        os.mknod(f, 0o600 | 0o020000, os.makedev(1, 5))
    elif what == "fifo":
        os.mkfifo(f)
    else:
        f.write_text(what)
    return base


@pytest.mark.parametrize("what", ["zero", "fifo", "0-4000000000\n"])
@pytest.mark.parametrize("rel", ["proc/stat", "sys/devices/system/cpu/online"])
@pytest.mark.parametrize("cmd", [("top", "--batch", "-n", "1"), ("probe",), ("topo",)])
def test_fsroot_files_that_never_end_or_block(tmp_path: Path, what: str, rel: str,
                                             cmd: tuple[str, ...]) -> None:
    if what[0].isdigit() and rel == "proc/stat":
        pytest.skip("no cpulist there")
    root = fsroot_with(tmp_path, rel, what)
    t0 = time.monotonic()
    p = snumap(*cmd, "--fsroot", str(root), timeout=30)
    assert time.monotonic() - t0 < 20
    if p.returncode == 0:              # data: probe reports each check, hwloc may cope
        ok(p)
        if cmd == ("probe",):
            out = " ".join(p.stdout.split())
            assert any(w in out for w in ("not a file", "cpulist", "regular")), out
    else:
        out = one_line(p)
        assert any(w in out for w in ("not a file", "cpulist", "regular")), out


@pytest.mark.parametrize("value", ["/dev/zero", "fifo"])
def test_metrics_file_that_is_not_a_regular_file(tmp_path: Path, value: str) -> None:
    if value == "fifo":
        value = str(tmp_path / "m.toml")
        os.mkfifo(value)
    t0 = time.monotonic()
    one_line(snumap("exporter", "--print-rules", "--metrics", value, timeout=20),
             "not a regular file")
    assert time.monotonic() - t0 < 10


def test_absurd_option_values(tmp_path: Path) -> None:
    rec = write_rec(tmp_path / "r.rec")
    one_line(snumap("record", "--buffer-size", "999999999999G", "-o", str(tmp_path / "x.rec"),
                    "--duration", "1s"), "--buffer-size")
    one_line(snumap("replay", str(rec), "--screenshot", str(tmp_path / "s.svg"), "--size",
                    "100000x100000"), "--size")
    for speed in ("nan", "inf", "-inf"):
        one_line(snumap("replay", str(rec), f"--speed={speed}"), "--speed")


# ---- class 6: markers ------------------------------------------------------------------------
def test_a_marker_tid_beyond_any_thread_is_refused() -> None:
    from snumap_tui.trace.markers import BadMarker, parse_marker_line
    with pytest.raises(BadMarker):
        parse_marker_line("begin x @4294967295")       # wrapped to -1 in the i32 column
    with pytest.raises(BadMarker):
        parse_marker_line("mark x @9999999999")
    assert parse_marker_line("mark x @4194304")[2] == 4194304


def test_the_tail_of_an_over_long_marker_line_is_no_marker() -> None:
    from snumap_tui.trace.markers import MAX_LINE, MarkerFifo
    names = RegionNames()
    fifo = MarkerFifo(names)
    try:
        fd = os.open(fifo.path, os.O_WRONLY)
        # One line far over MAX_LINE whose last part looks like a marker, then a good one.
        os.write(fd, b"x" * (MAX_LINE + 100))
        time.sleep(0.3)
        os.write(fd, b" mark injected\nmark good\n")
        os.close(fd)
        time.sleep(0.3)
        got = fifo.stop()
    finally:
        fifo.close()
    kept = [names.items[int(r)].name for r in got["rid"]]
    assert kept == ["good"], kept
    assert fifo.stats.bad == 1
