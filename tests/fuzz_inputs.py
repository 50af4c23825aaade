"""Fuzzing the inputs beside a recording's chunks: recording headers, JSON and XML topologies,
TOML metrics files, ``--fsroot`` trees and marker streams (issue 23). Every case must end in
data or one ``snumap:`` line, within CASE_SECONDS and the harness's memory limit.

- headers: the header JSON of a small recording rebuilt from a structure-aware edit (a key
  dropped, a value of another type, ``Infinity``/``NaN``/``1e999``, deep nesting, a flood of
  empty objects, lone surrogates, a lying topology inside), then the readers of
  tests/fuzz_harness.py (API, report, export, replay load);
- topologies: a snumap JSON topology edited the same way (PU numbers 10^9 or -5, 2,000-deep
  trees, cpusets of strings) and an hwloc XML edited as text (DTD subsets, entities, attributes
  dropped or made absurd, deep nesting, bit flips), through ``snumap topo --topology``;
- metrics: TOML files nested deep, dividing by zero, of odd types, through ``snumap exporter
  --print-rules --metrics``;
- fsroot: a fake gathered tree (tests/fakefs.py) with files swapped for FIFOs, /dev/zero,
  absurd cpulists, garbage, huge or empty files, through ``topo``, ``probe`` and ``top
  --batch``;
- markers: byte streams written to a live marker FIFO (long lines, lines without a newline,
  huge ``@TID``, floods of distinct names, binary), the rows kept then written to a recording
  and reported;
- chunks: thread counters (kind 16) and process memory (kind 17) chunks a hostile writer
  crafts within their schema (floods of distinct pids, tids, PU numbers and NUMA node numbers
  -1..65535, times piled on one instant), through the recording readers;
- merged: a merged job's header with its node table edited (numbers null, negative, huge, of
  other types; nodes dropped, repeated, reordered), through the recording readers;
- fsnumbers: a number in an fsroot file (/proc/stat, meminfo, numastat, cpuinfo, a cache
  size) replaced by a word, a sign, an exponent or 30 digits, through ``topo``, ``probe`` and
  ``top --batch``.

Runs that go through hwloc (C: it cannot be interrupted, and a crash would end the harness)
run in a forked child; a child killed by a signal counts as a crash.

    .venv/bin/python tests/fuzz_inputs.py --seconds 25 --seed 3
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
for _p in (REPO, REPO / "tests"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import fuzz_harness as H

FAMILIES = ("headers", "topologies", "metrics", "fsroot", "markers", "chunks", "merged",
            "fsnumbers")
CHILD_SECONDS = 10      # a forked run (hwloc) taking longer is a hang


# ---- JSON values a hostile writer may put anywhere -------------------------------------------
class Raw(str):
    """JSON text put in place as it is (Infinity, NaN, 1e999, a deep nest, a bomb)."""


RAW_JSON = ["Infinity", "-Infinity", "NaN", "1e999", "-1e999", "9" * 5000, "-5",
            "1000000000", "2147483647", "18446744073709551616", '"\\udcff\\ud800"',
            "[" * 3000 + "]" * 3000, "[" + "{}," * 300_000 + "{}]",
            '{"a":' * 200 + "1" + "}" * 200, '""', "null", "true", "[]", "{}"]


def weird_json(r: random.Random) -> Any:
    if r.random() < 0.5:
        return Raw(r.choice(RAW_JSON))
    return r.choice([None, -1, 2**63, -(2**31), "x", "", [], {}, 1.5, True, [[1]],
                     {"k": [None]}, "\udcff", list(range(50))])


def mutate_json(v: Any, r: random.Random) -> Any:
    """One random change somewhere inside a JSON value (Raw constants among the weird ones)."""
    return H.mutate_value(v, r, weird=weird_json, encode=dumps, max_depth=12)


def dumps(v: Any) -> str:
    """JSON text of ``v`` with Raw pieces put in as they are."""
    if isinstance(v, Raw):
        return str(v)
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))}: {dumps(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(dumps(x) for x in v) + "]"
    return json.dumps(v)


def text_edit(s: str, r: random.Random) -> str:
    """A textual edit: a cut, a number swapped for a JSON constant, a byte made odd."""
    p = r.random()
    if p < 0.3 and s:
        return s[:r.randrange(len(s))]
    if p < 0.7:
        import re
        nums = [m.span() for m in re.finditer(r"-?\d+", s[:200_000])]
        if nums:
            a, b = r.choice(nums)
            return s[:a] + r.choice(RAW_JSON[:11]) + s[b:]
    i = r.randrange(len(s) + 1)
    return s[:i] + r.choice(["\x00", "\\", '"', "{", "]", "\udcff", ",", "\ufeff"]) + s[i:]


# ---- headers -------------------------------------------------------------------------------
def header_cases(seed_data: bytes, r: random.Random) -> Iterator[tuple[str, bytes]]:
    from snumap_tui.store import chunks as C
    chs = H.split(seed_data)
    header = next(json.loads(c.raw) for c in chs if c.kind == C.K_HEADER)
    while True:
        if r.random() < 0.8:
            text = dumps(mutate_json(header, r))
            label = "header edit"
        else:
            text = text_edit(json.dumps(header), r)
            label = "header text edit"
        raw = text.encode("utf-8", "surrogatepass")
        new = [H.Chunk(**vars(c)) for c in chs]
        for c in new:
            if c.kind in (C.K_HEADER, C.K_HEADER_COPY):
                c.raw = raw
        whole = r.random() < 0.5
        yield f"{label}{' + index' if whole else ''}", H.rebuild(new, whole)


# ---- topologies ----------------------------------------------------------------------------
def base_topology() -> dict[str, Any]:
    from topo_factory import make_topology
    return make_topology(2, 2, 2, 2).to_dict()


XML_ATTRS = ["os_index", "cpuset", "complete_cpuset", "nodeset", "type", "gp_index",
             "local_memory", "version"]


def xml_edit(xml: str, r: random.Random) -> str:
    import re
    p = r.random()
    if p < 0.15:
        doc = r.choice(['<!DOCTYPE topology SYSTEM "hwloc2.dtd" [ <!ELEMENT x ANY> ]>',
                        '<!DOCTYPE topology [ <!ENTITY a "aaaaaaaaaaaaaaaa"> ]>',
                        '<!DOCTYPE topology [<!ENTITY % p SYSTEM "file:///etc/passwd"> %p;]>',
                        '<!DOCTYPE topology SYSTEM "http://example.invalid/x.dtd">'])
        return xml.replace('<!DOCTYPE topology SYSTEM "hwloc2.dtd">', doc)
    if p < 0.35:
        attr = r.choice(XML_ATTRS)
        spans = [m.span() for m in re.finditer(rf'\s{attr}="[^"]*"', xml)]
        if spans:
            a, b = r.choice(spans)
            val = r.choice(["", "-5", "1000000000", "4294967295", "0xzz", "0x" + "f" * 5000,
                            "&a;", "PU", "Machine", "99999999999999999999"])
            return xml[:a] + ("" if r.random() < 0.4 else f' {attr}="{val}"') + xml[b:]
    if p < 0.45:
        n = r.choice([100, 2000, 20000])
        inner = '<object type="Group" cpuset="0x1">' * n + "</object>" * n
        return xml.replace("</topology>", inner + "</topology>")
    if p < 0.6 and xml:
        return xml[:r.randrange(len(xml))]
    b = bytearray(xml.encode())
    for _ in range(r.randint(1, 6)):
        b[r.randrange(len(b))] ^= 1 << r.randrange(8)
    return b.decode("utf-8", "replace")


def base_xml() -> str:
    corpus = Path(REPO).parent / "shared" / "corpus" / "xml"
    files = sorted(corpus.glob("*.xml")) if corpus.is_dir() else []
    if files:
        return min(files, key=lambda f: f.stat().st_size).read_text()
    from test_bounds import XML
    return XML.format(doctype='<!DOCTYPE topology SYSTEM "hwloc2.dtd">',
                      pu_index='os_index="0"')


def topology_cases(r: random.Random) -> Iterator[tuple[str, str, str]]:
    """(label, file suffix, text)."""
    topo = base_topology()
    xml = base_xml()
    while True:
        p = r.random()
        if p < 0.55:
            yield "json topology edit", "json", dumps(mutate_json(topo, r))
        elif p < 0.65:
            n = r.choice([100, 2000, 100_000])
            node = '{"type": "Group", "cpuset": [0], "children": ['
            text = (node * n + '{"type": "PU", "os_index": 0, "cpuset": [0]}' + "]}" * n)
            yield f"json tree {n} deep", "json", (
                '{"format": "snumap-topology", "version": 1, "root": ' + text + "}")
        elif p < 0.7:
            yield "json text edit", "json", text_edit(json.dumps(topo), r)
        else:
            yield "xml edit", "xml", xml_edit(xml, r)


# ---- metrics files ---------------------------------------------------------------------------
def metrics_cases(r: random.Random) -> Iterator[tuple[str, str]]:
    from fuzz_formulas import random_formula, toml_metrics
    while True:
        p = r.random()
        n = r.choice([20, 200, 1200, 5000])
        if p < 0.2:
            yield "nested arrays", "events = " + "[" * n + "]" * n
        elif p < 0.3:
            yield "nested inline tables", ('[metric.x]\nformula = "cycles"\nmin = '
                                           + "{a = " * n + "1" + "}" * n)
        elif p < 0.5:
            div = r.choice(["0", "(2 - 2)", "(1 - 1) * 3", "0.0", "1e-400", "(dt - dt)"])
            yield "division by a constant zero", (
                f'[metric.z]\nformula = "{random_formula(r)} / {div}"\n'
                + r.choice(["", 'rule = "sum"\n', 'rule = "mean"\n', 'object = "Package"\n']))
        elif p < 0.6:
            yield "huge constants", f'[metric.h]\nformula = "1e308 * 1e308 * {random_formula(r)}"'
        else:
            yield "random metrics file", toml_metrics(r)


# ---- fsroot trees ---------------------------------------------------------------------------
FS_FILES = ["proc/stat", "sys/devices/system/cpu/online", "proc/meminfo", "proc/cpuinfo",
            "sys/devices/system/node/node0/meminfo", "sys/devices/system/node/node0/cpulist",
            "sys/devices/system/node/online", "sys/devices/system/cpu/cpu0/topology/core_id",
            "sys/devices/system/node/node0/numastat",
            "sys/devices/system/cpu/cpu0/topology/thread_siblings_list"]


def fs_edit(root: Path, r: random.Random) -> str:
    done = []
    for _ in range(r.randint(1, 3)):
        rel = r.choice(FS_FILES)
        f = root / rel
        what = r.choice(["fifo", "zero", "cpulist", "garbage", "empty", "huge", "dir", "gone",
                         "negative", "binary"])
        if f.is_dir() and not f.is_symlink():
            shutil.rmtree(f)
        elif f.exists() or f.is_symlink():
            f.unlink()
        f.parent.mkdir(parents=True, exist_ok=True)
        if what == "fifo":
            os.mkfifo(f)
        elif what == "zero":
            try:
                os.mknod(f, 0o600 | 0o020000, os.makedev(1, 5))
            except PermissionError:
                f.write_bytes(b"\0" * 4096)
        elif what == "cpulist":
            f.write_text(r.choice(["0-4000000000", "5-1", "-3", "0-1,", "0-65535,70000",
                                   "0-" + "9" * 400]) + "\n")
        elif what == "garbage":
            f.write_text(r.choice(["x", "cpu  a b c\n", "MemTotal: -1 kB\n", "1 2 3\n" * 3]))
        elif what == "huge":
            f.write_bytes(b"cpu0 1 2 3 4 5 6 7 8 9 10\n" * 2_000_000)     # 52 MB
        elif what == "dir":
            f.mkdir()
        elif what == "negative":
            f.write_text("-1\n")
        elif what == "binary":
            f.write_bytes(bytes(r.randrange(256) for _ in range(512)))
        elif what == "empty":
            f.write_bytes(b"")
        done.append(f"{rel}={what}")
    return ", ".join(done)


# ---- fsroot numbers --------------------------------------------------------------------------
FS_NUMBER_FILES = ["proc/stat", "proc/meminfo", "proc/cpuinfo", "proc/4200/stat", "proc/4200/status",
                   "sys/devices/system/node/node0/meminfo",
                   "sys/devices/system/node/node0/numastat",
                   "sys/devices/system/cpu/cpu0/topology/core_id",
                   "sys/devices/system/cpu/cpu0/topology/physical_package_id",
                   "sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq",
                   "sys/devices/system/cpu/online"]
NUMBER_SWAPS = ["abc", "-5", "1e999", "9" * 30, "", "0x10", "nan", "\u0663", "1.5", "-",
                "18446744073709551616", "+7", " ", "4294967296"]


def fs_number_edit(root: Path, r: random.Random) -> str:
    """A few numbers in numeric fsroot files swapped for what is not a count."""
    import re
    done = []
    for _ in range(r.randint(1, 3)):
        rel = r.choice(FS_NUMBER_FILES)
        f = root / rel
        if not f.is_file():
            continue
        text = f.read_text(errors="replace")
        nums = [m.span() for m in re.finditer(r"\d+", text)]
        if not nums:
            continue
        for _ in range(r.randint(1, 3)):
            a, b = r.choice(nums)
            swap = r.choice(NUMBER_SWAPS)
            text = text[:a] + swap + text[b:]
            nums = [m.span() for m in re.finditer(r"\d+", text)] or [(0, 0)]
        f.write_text(text)
        done.append(rel)
    return "numbers in " + (", ".join(done) or "nothing")


# ---- crafted chunks of kinds 16 and 17 -------------------------------------------------------
def chunk_cases(work: Path, r: random.Random) -> Iterator[tuple[str, Path]]:
    """Recordings whose thread counters and process memory chunks hold what the schema lets
    a writer put there, in floods a reader must bound."""
    import crafted_chunks as K

    from snumap_tui.store.procmem import MEMORY_DTYPE
    from snumap_tui.trace.counters import counter_dtype
    n = 0
    while True:
        n += 1
        path = work / f"chunks-{n % 2}.rec"
        rows_n = r.choice([1, 10, 1000, 20_000, 60_000])
        p = r.random()
        if p < 0.4:
            rows = np.zeros(rows_n, dtype=MEMORY_DTYPE)
            t = np.sort(np.array([r.choice([0, 1, 10**6, 2**62]) for _ in range(8)]))
            rows["t_ns"] = np.sort(K.T0 + t[np.arange(rows_n) % 8]).astype(np.uint64)
            npid = r.choice([1, 7, rows_n])
            rows["pid"] = 1 + np.arange(rows_n) % npid
            span = r.choice([2, 64, 65537])
            rows["node"] = -1 + (np.arange(rows_n) * r.choice([1, 7919])) % span
            rows["bytes"] = r.choice([0, 1 << 20, (1 << 56) - 1])
            rows["exact"] = np.arange(rows_n) % 3 == 0
            K._with_memory(path, rows, [1, 2])
            yield f"memory: {rows_n} rows, {npid} pids, nodes over {span}", path
        else:
            rows = np.zeros(rows_n, counter_dtype(len(K.EVENTS)))
            ntid = r.choice([1, 3, rows_n])
            rows["tid"] = r.choice([1, 1000, 2**31 - rows_n - 1]) + np.arange(rows_n) % ntid
            rows["pid"] = rows["tid"] // r.choice([1, 4, 10**9])
            if r.random() < 0.2:
                rows["tid"][::2] = r.choice([-2, 0, -(2**31)])
            rows["cpu"] = (np.arange(rows_n) * r.choice([1, 65537, 4294967291])) % (2**32)
            step = r.choice([0, 1, 1000, 10**9])
            start = K.T0 + np.arange(rows_n, dtype=np.uint64) * np.uint64(step)
            rows["t_start"] = start
            rows["t_end"] = start + np.uint64(r.choice([0, 1, 900, 10**12]))
            rows["value"] = r.choice([0, 1, 2**40])
            rows["enabled"] = 900
            rows["running"] = r.choice([0, 450, 900])
            rows["n"] = len(K.EVENTS)
            from snumap_tui.analysis.synth import write_recording
            ev, tasks = K._base_events([1000, 1001])
            write_recording(path, K.TOPOLOGY, ev, tasks=tasks, counters=(rows, K.EVENTS),
                            header={"counters": {"source": r.choice(["libbpf: x", "perf: x"]),
                                                 "events": K.EVENTS}})
            yield f"counters: {rows_n} rows, {ntid} tids, step {step}", path


# ---- merged headers --------------------------------------------------------------------------
NODE_FIELDS = ("cpu_base", "n_pus", "tid_base", "shift_ns", "node", "host",
               "start_monotonic_ns", "align_error_ns", "interval_ns", "clock_drift_ns")


def merged_cases(merged: bytes, r: random.Random) -> Iterator[tuple[str, bytes]]:
    from snumap_tui.store import chunks as C
    chs = H.split(merged)
    header = next(json.loads(c.raw) for c in chs if c.kind == C.K_HEADER)
    while True:
        h = json.loads(json.dumps(header))
        nodes = h["nodes"]
        edits = []
        for _ in range(r.randint(1, 3)):
            p = r.random()
            dicts = [i for i, n in enumerate(nodes) if isinstance(n, dict)]
            if p < 0.6 and dicts:
                k, f = r.choice(dicts), r.choice(NODE_FIELDS)
                v = weird_json(r) if r.random() < 0.5 else r.choice(
                    [None, -1, 0, 65535, 65536, 2**31 - 1, 2**63, "x", [], 1.5])
                nodes[k][f] = v
                edits.append(f"node {k} {f}")
            elif p < 0.75:
                nodes = r.choice([[], nodes[:1], nodes[::-1], nodes + nodes, [None], ["a"]])
                edits.append("node table")
            elif p < 0.85:
                h["nodes"] = weird_json(r)
                edits.append("nodes")
            else:
                h.pop(r.choice(["nodes", "topology", "merged", "start_monotonic_ns"]), None)
                edits.append("key dropped")
        if isinstance(h.get("nodes"), list):
            h["nodes"] = nodes
        raw = dumps(h).encode("utf-8", "surrogatepass")
        new = [H.Chunk(**vars(c)) for c in chs]
        for c in new:
            if c.kind in (C.K_HEADER, C.K_HEADER_COPY):
                c.raw = raw
        yield "merged header: " + ", ".join(edits), \
            C.pack_preamble(2) + H.rebuild(new, r.random() < 0.5)[C.PREAMBLE_SIZE:]


# ---- marker streams --------------------------------------------------------------------------
def marker_stream(r: random.Random) -> bytes:
    parts = []
    for _ in range(r.randint(1, 6)):
        p = r.random()
        if p < 0.15:
            parts.append(b"x" * r.choice([1000, 1025, 5000, 70_000]) + b" mark tail\n")
        elif p < 0.3:
            parts.append(f"mark n @{r.choice([0, 4194304, 4194305, 2**31, 2**32 - 1, 10**10])}\n"
                         .encode())
        elif p < 0.45:
            parts.append(b"".join(f"mark d{i}\n".encode()
                                  for i in range(r.choice([100, 5000, 12_000]))))
        elif p < 0.55:
            parts.append(bytes(r.randrange(256) for _ in range(r.choice([10, 500, 5000]))))
        elif p < 0.7:
            parts.append(b"begin a @7\n" * r.choice([1, 100, 20_000]))
        elif p < 0.8:
            parts.append(b"end a @7\n" * r.choice([1, 100]))
        elif p < 0.9:
            parts.append("mark \udcff\u202e\x1b[2J name\n".encode("utf-8", "surrogateescape"))
        else:
            parts.append(b"mark no newline at the end")
    return b"".join(parts)


def run_markers(data: bytes, work: Path) -> str | None:
    """Write DATA to a live marker FIFO, keep its rows in a recording, report it."""
    from snumap_tui import store
    from snumap_tui.trace.markers import MarkerFifo
    from snumap_tui.trace.region_catalog import RegionNames
    names = RegionNames()
    fifo = MarkerFifo(names)
    try:
        fd = os.open(fifo.path, os.O_WRONLY | os.O_NONBLOCK)
        try:
            view = memoryview(data)
            end = time.monotonic() + 5
            while view and time.monotonic() < end:
                try:
                    view = view[os.write(fd, view[:65536]):]
                except BlockingIOError:
                    time.sleep(0.001)
        finally:
            os.close(fd)
        time.sleep(0.05)
        rows = fifo.stop()
    finally:
        fifo.close()
    problems = fifo.stats.problems()
    # What the recorder promises (trace/markers.py): at most 10,000 distinct names kept, no
    # thread id that is not one (a wrapped @TID), no marker made of a refused line's tail.
    if len(names.items) > 10_000:
        raise AssertionError(f"the marker name table grew to {len(names.items)}")
    if len(rows) and int(rows["tid"].min()) < 0:
        raise AssertionError(f"a marker of thread {int(rows['tid'].min())}")
    if any(names.items[int(i)].name == "tail" for i in np.unique(rows["rid"])):
        raise AssertionError("the tail of an over-long line was taken as a marker")
    path = work / "markers.rec"
    from topo_factory import make_topology
    with store.Writer(path, {"topology": make_topology(1, 1, 2, 1).to_json(),
                             "regions": {"markers": True, "problems": problems},
                             "start_monotonic_ns": 1}, force=True) as w:
        if len(rows):
            w.add_regions(rows, names.items)
    cli(["report", str(path)])
    cli(["report", str(path), "--json"])
    return None


# ---- running --------------------------------------------------------------------------------
KEEP: Path | None = None        # --keep DIR: inputs that crashed a child are copied there


def cli(argv: list[str]) -> None:
    """``snumap ARGV`` in this process: data, or SnumapError with its one line."""
    line = H.cli(argv)
    if line is not None:
        raise H.SnumapError(line.removeprefix("snumap: "))


def forked(fn: Callable[[], str | None], keep: Path | None = None) -> Callable[[], str | None]:
    """``fn`` run in a forked child (hwloc is C: no alarm stops it, a crash ends the process):
    the child's outcome comes back as data, a clean error, an exception, a hang or a crash."""
    def run() -> str | None:
        rd, wr = os.pipe()
        pid = os.fork()
        if pid == 0:                                   # the child
            os.close(rd)
            signal.alarm(0)
            try:
                fn()
                msg = "data:"
            except H.SnumapError as e:
                msg = "clean:" + str(e)
            except BaseException as e:  # noqa: BLE001 - reported to the parent
                import traceback
                tb = traceback.extract_tb(e.__traceback__)[-1]
                msg = f"exc:{type(e).__name__}: {str(e)[:160]} ({Path(tb.filename).name}:" \
                      f"{tb.lineno})"
            os.write(wr, msg.encode("utf-8", "replace")[:4000])
            os._exit(0)
        os.close(wr)
        deadline = time.monotonic() + CHILD_SECONDS
        status = None
        try:
            while time.monotonic() < deadline:
                got, status = os.waitpid(pid, os.WNOHANG)
                if got:
                    break
                time.sleep(0.01)
        finally:
            if status is None:        # past the deadline, or the harness's alarm (Hang)
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                os.close(rd)
        if status is None:
            raise H.Hang()
        msg = os.read(rd, 4096).decode("utf-8", "replace")
        os.close(rd)
        if os.WIFSIGNALED(status):
            if KEEP is not None and keep is not None:
                KEEP.mkdir(parents=True, exist_ok=True)
                dst = KEEP / f"crash-{time.time_ns()}-{keep.name}"
                (shutil.copytree if keep.is_dir() else shutil.copy)(keep, dst)
            raise Crash(f"killed by signal {os.WTERMSIG(status)}")
        kind, _, text = msg.partition(":")
        if kind == "clean":
            raise H.SnumapError(text)
        if kind == "exc":
            raise ChildError(text)
        return None
    return run


class Crash(Exception):
    pass


class ChildError(Exception):
    pass


def _rss_mib() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, kids) / 1024


def fuzz_inputs(seconds: float, seed: int, work: Path,
                tallies: dict[str, H.Tally]) -> None:
    """Each family gets an even share of SECONDS; TALLIES gets one Tally per family."""
    r = random.Random(seed)
    share = seconds / len(FAMILIES)
    H.api_seed(work / "api.rec")
    seed_rec = (work / "api.rec").read_bytes()
    (work / "job").mkdir()
    merged_rec = H.merged_seed(work / "job").read_bytes()
    from fakefs import FakeRoot
    FakeRoot(work / "fs-base", cpus=2)
    from snumap_tui.cli import main  # noqa: F401 - imported before forking
    for fam in FAMILIES:
        t = tallies.setdefault(fam, H.Tally())
        t.base_rss_mib = _rss_mib()
        end = time.monotonic() + share
        gen: Iterator[Any] = {"headers": lambda: header_cases(seed_rec, r),
                              "topologies": lambda: topology_cases(r),
                              "metrics": lambda: metrics_cases(r),
                              "fsroot": lambda: iter(int, 1),
                              "fsnumbers": lambda: iter(int, 1),
                              "chunks": lambda: chunk_cases(work, r),
                              "merged": lambda: merged_cases(merged_rec, r),
                              "markers": lambda: iter(int, 1)}[fam]()
        while time.monotonic() < end:
            case = next(gen)
            t.cases += 1
            label = f"{fam} case {t.cases}"
            for what, fn in _operations(fam, case, work, r):
                run_one(t, what, fn, f"{label} ({what})")
            t.peak_rss_mib = max(t.peak_rss_mib, _rss_mib())


def _operations(fam: str, case: Any, work: Path, r: random.Random
                ) -> list[tuple[str, Callable[[], str | None]]]:
    if fam in ("headers", "merged"):
        label, blob = case
        path = work / "case.rec"
        path.write_bytes(blob)
        return [(f"{label}: {w}", f) for w, f in H.operations(str(path), str(work / "out"))]
    if fam == "chunks":
        label, path = case
        return [(f"{label}: {w}", f) for w, f in H.operations(str(path), str(work / "out"))]
    if fam == "topologies":
        label, suffix, text = case
        path = work / f"topo.{suffix}"
        path.write_bytes(text.encode("utf-8", "surrogatepass"))
        return [(f"{label}: topo",
                 forked(lambda: cli(["topo", "--topology", str(path)]), path)),
                (f"{label}: topo --json",
                 forked(lambda: cli(["topo", "--topology", str(path), "--json"]), path))]
    if fam == "metrics":
        label, text = case
        path = work / "m.toml"
        path.write_bytes(text.encode("utf-8", "surrogatepass"))
        return [(f"{label}: --print-rules", lambda: cli(["exporter", "--print-rules",
                                                         "--metrics", str(path)]))]
    if fam in ("fsroot", "fsnumbers"):
        root = work / "fs"
        if root.exists():
            shutil.rmtree(root)
        shutil.copytree(work / "fs-base", root, symlinks=True)
        what = fs_edit(root, r) if fam == "fsroot" else fs_number_edit(root, r)
        return [(f"{what}: topo", forked(lambda: cli(["topo", "--fsroot", str(root)]), root)),
                (f"{what}: probe", forked(lambda: cli(["probe", "--fsroot", str(root)]), root)),
                (f"{what}: top --batch", forked(lambda: cli(["top", "--batch", "-n", "1",
                                                             "--fsroot", str(root)]),
                                               root))]
    data = marker_stream(r)
    return [(f"marker stream of {len(data)} B", lambda: run_markers(data, work))]


def run_one(t: H.Tally, what: str, fn: Callable[[], str | None], label: str) -> None:
    """tests/fuzz_harness.py's run_one, plus what a forked child reports."""
    def wrapped() -> str | None:
        try:
            return fn()
        except Crash as e:
            t.crashes += 1
            raise RuntimeError(f"crash: {e}") from None
        except ChildError as e:
            raise RuntimeError(str(e)) from None
    H.run_one(t, what, wrapped, label)


def main(argv: list[str] | None = None) -> int:
    ap = H.targets_parser(__doc__, 25, 3)
    ap.add_argument("--keep", metavar="DIR", help="copy inputs that crashed a child here")

    def run(args: argparse.Namespace, work: Path, tallies: dict[str, H.Tally]) -> None:
        global KEEP
        KEEP = Path(args.keep) if args.keep else None
        fuzz_inputs(args.seconds, args.seed, work, tallies)

    return H.targets_main(ap, argv, "snumap-fuzz-inputs", 12, run)


if __name__ == "__main__":
    sys.exit(main())
