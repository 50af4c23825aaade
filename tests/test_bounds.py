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
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
    rec = write_rec(tmp_path / "r.rec", regions=marker_regions(200_000))
    t0 = time.monotonic()
    p = snumap("report", str(rec), "--json", timeout=240)
    took = time.monotonic() - t0
    ok(p)
    assert len(json.loads(p.stdout)["regions"]) == 200_000
    assert took < 40, took                 # 78 s before (a scan of every mark per name)


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


ONLINE = "sys/devices/system/cpu/online"
FSROOT_CASES = [(cmd, rel, what) for cmd in (("top", "--batch", "-n", "1"), ("probe",))
                for rel, what in (("proc/stat", "zero"), ("proc/stat", "fifo"), (ONLINE, "zero"),
                                  (ONLINE, "fifo"), (ONLINE, "0-4000000000\n"))]
FSROOT_CASES.append((("topo",), ONLINE, "fifo"))      # hwloc itself blocked on it


@pytest.mark.parametrize(("cmd", "rel", "what"), FSROOT_CASES)
def test_fsroot_files_that_never_end_or_block(tmp_path: Path, what: str, rel: str,
                                             cmd: tuple[str, ...]) -> None:
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


# ---- class 6: crafted structure --------------------------------------------------------------
def header_bytes(**fields: object) -> bytes:
    hdr = {"format": "snumap-recording", "format_version": 1, "topology": topo_json(),
           "host": "h", "start_monotonic_ns": 10**9, "start_wall_ns": 2 * 10**9}
    hdr.update(fields)
    return json.dumps(hdr).encode()


BAD_HEADERS = {
    "regions a string": header_bytes(regions="x"),
    "regions problems of numbers": header_bytes(regions={"problems": 5}),
    "topology version Infinity": header_bytes(topology={"format": "snumap-topology",
                                                        "version": 1, "root": {}}).replace(
        b'"version": 1', b'"version": Infinity'),
}


@pytest.mark.parametrize("name", sorted(BAD_HEADERS))
def test_header_fields_of_the_wrong_type_are_dropped_not_tracebacks(tmp_path: Path,
                                                                    name: str) -> None:
    rec = with_raw_header(write_rec(tmp_path / "r.rec"), BAD_HEADERS[name])
    for argv in (["report", str(rec)], ["report", str(rec), "--json"],
                 ["export", str(rec), "--format", "chrome", "-o", str(tmp_path / "o.json")],
                 ["export", str(rec), "--format", "csv", "-o", str(tmp_path / "o.csv")]):
        ok(snumap(*argv))


def merged_with(tmp_path: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    """A job of two nodes as `snumap merge` writes it, its header edited by EDIT."""
    sys.path.insert(0, str(Path(__file__).parent))
    import fuzz_harness as H
    where = tmp_path / "job"
    where.mkdir()
    data = H.merged_seed(where).read_bytes()
    chs = H.split(data)
    hdr = next(json.loads(c.raw) for c in chs if c.kind == C.K_HEADER)
    edit(hdr)
    for c in chs:
        if c.kind in (C.K_HEADER, C.K_HEADER_COPY):
            c.raw = json.dumps(hdr).encode()
    out = tmp_path / "edited.rec"
    out.write_bytes(C.pack_preamble(2) + H.rebuild(chs, True)[C.PREAMBLE_SIZE:])
    return out


MERGED_EDITS: dict[str, Callable[[dict[str, Any]], None]] = {
    "job a list": lambda h: h.update(job=[1]),
    "regions a string": lambda h: h.update(regions="x"),
    "node align_error_ns a string": lambda h: h["nodes"][0].update(align_error_ns="x"),
    "node shift_ns a string": lambda h: h["nodes"][0].update(shift_ns="x"),
    "node name a list": lambda h: h["nodes"][1].update(node=[1]),
}


@pytest.mark.parametrize("name", sorted(MERGED_EDITS))
def test_merged_header_fields_of_the_wrong_type(tmp_path: Path, name: str) -> None:
    """One bad field of a merged recording's header costs that field (with a note), not the
    node table (which dropped every node's events but the first) and never a traceback."""
    rec = merged_with(tmp_path, MERGED_EDITS[name])
    for argv in (["report", str(rec)], ["report", str(rec), "--json"],
                 ["export", str(rec), "--format", "csv", "-o", str(tmp_path / "o.csv")]):
        ok(snumap(*argv))
    p = snumap("export", str(rec), "--format", "chrome", "-o", str(tmp_path / "o.json"))
    ok(p)
    assert "wrote 28 rows" in p.stderr, p.stderr       # as many as the unedited job


def test_merge_of_a_header_with_an_infinite_clock_offset(tmp_path: Path) -> None:
    raw = header_bytes(clock_start={"wall_minus_monotonic_ns": 0}).replace(
        b'"wall_minus_monotonic_ns": 0', b'"wall_minus_monotonic_ns": Infinity')
    a = with_raw_header(write_rec(tmp_path / "a.rec"), raw)
    b = write_rec(tmp_path / "b.rec")
    p = snumap("merge", str(a), str(b), "-o", str(tmp_path / "m.rec"))
    if p.returncode:
        one_line(p)
    else:
        ok(p)
        ok(snumap("report", str(tmp_path / "m.rec")))


def test_a_regions_chunk_with_n_infinite(tmp_path: Path) -> None:
    from snumap_tui.store import codec
    rec = write_rec(tmp_path / "r.rec", regions=marker_regions(3))
    data = rec.read_bytes()
    dctx = zstandard.ZstdDecompressor()
    out = [C.pack_preamble(1)]
    for h in C.scan(data).chunks:
        if h.kind in (C.K_INDEX, C.K_TRAILER):
            continue
        body = bytes(C.payload_of(data, h, dctx))
        if h.kind == C.K_REGIONS:
            v = codec.decode(body)
            v["n"] = float("inf")
            body = codec.encode(v)
        out.append(C.pack_chunk(h.kind, body, count=h.count, t_min=h.t_min, t_max=h.t_max))
    rec.write_bytes(b"".join(out))
    p = snumap("report", str(rec))
    ok(p)
    assert "regions chunk" in p.stdout


@pytest.mark.parametrize("text", [
    '{"format": "snumap-topology", "version": 1, "root": ' + '{"children": [' * 2000
    + "]}" * 2000 + "}",
    "PU10^9", "PU-5", "PUnone", "cpuset-str", "version-inf",
])
def test_json_topologies_are_checked(tmp_path: Path, text: str) -> None:
    good = topo_json()
    if text == "PU10^9":
        text = good.replace('"type": "PU", "os_index": 0', '"type": "PU", "os_index": 10' * 1
                            + "00000000")
    elif text == "PU-5":
        text = good.replace('"type": "PU", "os_index": 0', '"type": "PU", "os_index": -5')
    elif text == "PUnone":
        text = good.replace('"type": "PU", "os_index": 0', '"type": "PU", "os_index": null')
    elif text == "cpuset-str":
        text = good.replace('"cpuset": [0]', '"cpuset": "0"')
    elif text == "version-inf":
        text = good.replace('"version": 1', '"version": Infinity')
    assert text != good
    f = tmp_path / "t.json"
    f.write_text(text)
    one_line(snumap("topo", "--topology", str(f)), "topology")


def test_a_good_json_topology_still_loads(tmp_path: Path) -> None:
    f = tmp_path / "t.json"
    f.write_text(topo_json())
    ok(snumap("topo", "--topology", str(f)))


XML = """<?xml version="1.0" encoding="UTF-8"?>
{doctype}
<topology version="2.0">
  <object type="Machine" os_index="0" cpuset="0x00000001" complete_cpuset="0x00000001"
   allowed_cpuset="0x00000001" nodeset="0x00000001" complete_nodeset="0x00000001"
   allowed_nodeset="0x00000001" gp_index="1">
    <object type="NUMANode" os_index="0" cpuset="0x00000001" complete_cpuset="0x00000001"
     nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="3" local_memory="1000000"/>
    <object type="Core" os_index="0" cpuset="0x00000001" complete_cpuset="0x00000001"
     nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="4">
      <object type="PU" {pu_index} cpuset="0x00000001" complete_cpuset="0x00000001"
       nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="2"/>
    </object>
  </object>
</topology>
"""


def test_a_plain_hwloc_xml_loads(tmp_path: Path) -> None:
    f = tmp_path / "t.xml"
    f.write_text(XML.format(doctype='<!DOCTYPE topology SYSTEM "hwloc2.dtd">',
                            pu_index='os_index="0"'))
    ok(snumap("topo", "--topology", str(f)))


@pytest.mark.parametrize("doctype", [
    '<!DOCTYPE topology SYSTEM "hwloc2.dtd" [ <!ELEMENT x ANY> ]>',
    '<!DOCTYPE topology [ <!ENTITY a "aaaaaaaaaa"> ]>',
    '<!DOCTYPE topology SYSTEM "file:///etc/passwd">',
])
def test_hwloc_xml_with_a_dtd_subset_is_refused_before_parsing(tmp_path: Path,
                                                               doctype: str) -> None:
    f = tmp_path / "t.xml"
    f.write_text(XML.format(doctype=doctype, pu_index='os_index="0"'))
    one_line(snumap("topo", "--topology", str(f)), "refused before parsing")


def test_hwloc_xml_pu_without_os_index(tmp_path: Path) -> None:
    f = tmp_path / "t.xml"
    f.write_text(XML.format(doctype='<!DOCTYPE topology SYSTEM "hwloc2.dtd">', pu_index=""))
    one_line(snumap("topo", "--topology", str(f)), "PU L#0 has no os_index")
    one_line(snumap("top", "--batch", "-n", "1", "--topology", str(f)), "os_index")


@pytest.mark.parametrize("body", [
    "a = " + "[" * 1200 + "]" * 1200,
    '[metric.x]\nformula = "cycles"\ncolor = ' + "{a = " * 1200 + "1" + "}" * 1200,
])
def test_toml_nested_deeply_is_one_line(tmp_path: Path, body: str) -> None:
    f = tmp_path / "m.toml"
    f.write_text(body)
    one_line(snumap("exporter", "--print-rules", "--metrics", str(f)), "nested")


def test_print_rules_of_a_division_by_zero(tmp_path: Path) -> None:
    f = tmp_path / "m.toml"
    f.write_text('[metric.z]\nformula = "instructions / 0"\n'
                 '[metric.w]\nformula = "instructions / (2 - 2)"\n')
    p = snumap("exporter", "--print-rules", "--metrics", str(f))
    ok(p)
    assert "snumap_z" not in p.stdout      # no PromQL for it; the others are printed
    assert "snumap_ipc" in p.stdout


def test_comms_and_argv_that_are_not_text_export_and_report(tmp_path: Path) -> None:
    from snumap_tui.model.sample import Sample
    rec = write_rec(tmp_path / "r.rec", {"command": ["prog", "--x=\udcff\udcfe", "\ud800"]},
                    comms=["a\udcffb", "c\ud83d"])
    with store.Writer(tmp_path / "s.rec", {"topology": topo_json(), "command": ["\udcff"],
                                           "start_monotonic_ns": 10**9}, force=True) as w:
        w.add_marker(10**9, "m\udcff")
        w.add_sample(Sample(10**9, 0, {"tasks": {"hz": 100, "threads": {
            "pid": [1], "tid": [1], "ppid": [0], "uid": [0], "comm": ["x\udcff"],
            "state": ["R"], "last_cpu": [0], "utime": [1], "stime": [1], "nice": [0]},
            "processes": {1: {"cmdline": "run \udcfe", "user": "root"}}}}))
    for r in (rec, tmp_path / "s.rec"):
        for argv in (["report", str(r)], ["report", str(r), "--json"],
                     ["export", str(r), "--format", "csv", "-o", str(tmp_path / "o.csv")],
                     ["export", str(r), "--format", "csv", "--table", "samples", "-o",
                      str(tmp_path / "t.csv")],
                     ["export", str(r), "--format", "parquet", "-o", str(tmp_path / "o.pq")],
                     ["export", str(r), "--format", "perfetto", "-o", str(tmp_path / "o.pb")],
                     ["export", str(r), "--format", "chrome", "-o", str(tmp_path / "o.json")]):
            p = snumap(*argv, "--force") if argv[0] == "export" else snumap(*argv)
            if p.returncode:
                one_line(p)
            else:
                ok(p)
    out = snumap("report", str(rec)).stdout
    assert "a\\udcffb" in out and "--x=\\udcff\\udcfe" in out
    from snumap_tui.commands.report import open_readable
    from snumap_tui.ui.replay_data import load_replay
    with open_readable(str(tmp_path / "s.rec")) as r:
        load_replay(r)
        (s,) = list(r.samples())
        assert s.readings["tasks"]["threads"]["comm"] == ["x\\udcff"]
        assert r.markers[0][1] == "m\\udcff"


def test_events_on_no_pu_of_the_topology(tmp_path: Path) -> None:
    """What `taskset -c 1 snumap record --synthetic pu:1` writes: a topology of PU 0 and
    every event on CPU 1."""
    sys.path.insert(0, str(Path(__file__).parent))
    from topo_factory import make_topology
    rec = write_rec(tmp_path / "r.rec", {"topology": make_topology(1, 1, 1, 1).to_json(),
                                         "backend": "perf"},
                    tids=[100, 101, 100, 101], cpus=[1, 1, 1, 1])
    for argv in (["report", str(rec)], ["report", str(rec), "--json"],
                 ["export", str(rec), "--format", "csv", "-o", str(tmp_path / "o.csv")],
                 ["export", str(rec), "--format", "chrome", "-o", str(tmp_path / "o.json")],
                 ["export", str(rec), "--format", "parquet", "-o", str(tmp_path / "o.pq")],
                 ["replay", str(rec), "--screenshot", str(tmp_path / "s.svg")]):
        ok(snumap(*argv))


# ---- class 7: hwloc in C on a file others wrote -------------------------------------------------
CORPUS_XML = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "xml"


def test_an_xml_that_crashes_hwloc_is_one_line(tmp_path: Path) -> None:
    """The system's hwloc 2.9 (lstopo too) segfaults on a real export whose one L1 cache lost
    its complete_cpuset; hwloc reads files in a child, so that is one line, not the process."""
    src = CORPUS_XML / "Intel-RaptorLake-Corei7-1370P.xml"
    if not src.exists():
        pytest.skip("the corpus of real machines is not here")
    import re
    text, n = re.subn(r'(type="L1Cache" cpuset="0x00010000") complete_cpuset="0x00010000"',
                      r"\1", src.read_text())
    assert n == 1
    f = tmp_path / "t.xml"
    f.write_text(text)
    p = snumap("topo", "--topology", str(f))
    if p.returncode == 0:          # an hwloc without that bug (the wheel's 2.11)
        ok(p)
    else:
        one_line(p, "hwloc crashed")


def test_a_child_that_crashes_or_hangs_is_one_line() -> None:
    from snumap_tui.errors import SnumapError
    from snumap_tui.topology.isolate import in_child

    def crash() -> str:
        os.kill(os.getpid(), 11)
        return ""

    with pytest.raises(SnumapError, match="crashed reading it .SIGSEGV"):
        in_child(crash, "x")
    with pytest.raises(SnumapError, match="did not finish within 1 s"):
        in_child(lambda: time.sleep(30) or "", "x", timeout_s=1)
    with pytest.raises(SnumapError, match="^nope$"):
        in_child(lambda: (_ for _ in ()).throw(SnumapError("nope")), "x")
    assert in_child(lambda: "é" * 300_000, "x") == "é" * 300_000


def test_marks_only_names_are_counted_per_thread() -> None:
    from snumap_tui.analysis.regions import region_stats
    from snumap_tui.store.regions import Regions
    rows = np.zeros(6, REGION_DTYPE)
    rows["t_ns"] = np.arange(6)
    rows["tid"] = rows["pid"] = [1, 1, 1, 2, 2, 3]
    rows["op"] = MARK
    rows["rid"] = [0, 0, 0, 0, 1, 2]
    names = [RegionName("a", "marker", "marker"), RegionName("b", "marker", "marker"),
             RegionName("a", "user", "call")]
    got = {r["name"]: r for r in region_stats(Regions(rows, names))}
    assert (got["a"]["count"], got["a"]["calls"]) == (3, 5)   # thread 1: 3 of a's 5 marks
    assert (got["b"]["count"], got["b"]["calls"]) == (1, 1)
    assert got["a"]["threads"] == [] and got["a"]["wall_s"] == 0.0
