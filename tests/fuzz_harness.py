"""A seeded, time-bounded fuzzer for recordings and metric formulas.

Every case is a damaged or crafted input; every reader must end with data or one clear line
(a ``SnumapError``), within a time and memory bound. Recordings are mutated by:

- bit flips anywhere (1 to 8 bits);
- truncations at, and a few bytes around, every chunk boundary;
- structure-aware edits: a chunk's payload decoded, one value in it changed (a key dropped, a
  wrong type, a wrong shape or length, a negative or huge number, deep nesting), encoded and
  compressed again with fresh CRCs; half of them with a rebuilt index and trailer, so the
  reader's trusted "complete file" path sees them too; also lying chunk headers (count,
  raw_len, t_min/t_max);
- concatenations (with a recording of another backend, with itself, after a truncation);
- decompression bombs (zstd frames far larger than their chunk declares).

Each case goes through the API (``store.open``, events, columns, samples, sample times,
``metric_series``, ``to_dataframes``, ``verify``), ``snumap report`` (text and JSON),
``snumap export`` (chrome, csv of intervals, samples and events) and the replay's data load,
in this process, through ``cli.main`` as a user's command line would. Formulas are fuzzed
(tests/fuzz_formulas.py) through ``expr.parse`` + evaluation and ``usermetrics.parse_metrics``.

Run it (a few minutes; bench/fuzz.py writes the counts to docs/benchmarks.md)::

    .venv/bin/python tests/fuzz_harness.py --seconds 300 --seed 1

``tests/test_fuzz.py`` runs a short one in the suite. Seed recordings come from ``snumap
record`` with each backend this machine can run (proc, perf, bcc), one written through the
store API with every chunk kind and every source's readings, and a job of two nodes merged
(format 2).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import resource
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import zstandard

REPO = Path(__file__).resolve().parents[1]
for _p in (REPO, REPO / "tests"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from snumap_tui.errors import SnumapError
from snumap_tui.store import chunks as C
from snumap_tui.store import codec

CASE_SECONDS = 30          # a case taking longer than this is a hang
WORKLOAD = ("import threading,time\n"
            "def f():\n"
            "    x = 0\n"
            "    for i in range(200000):\n"
            "        x += i\n"
            "        if i % 50000 == 0: time.sleep(0.01)\n"
            "ts = [threading.Thread(target=f) for _ in range(3)]\n"
            "[t.start() for t in ts]; [t.join() for t in ts]\n")


# ---- seeds ---------------------------------------------------------------------------------
def record_seed(backend: str, out: Path) -> str | None:
    """A small real recording made by `snumap record --backend BACKEND`; None if the backend
    cannot run here (the reason is printed)."""
    cmd = [sys.executable, "-m", "snumap_tui.cli", "record", "--backend", backend,
           "--duration", "2s", "--interval", "100ms", "-o", str(out), "--force", "--",
           sys.executable, "-c", WORKLOAD]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False,
                       cwd=REPO)
    if p.returncode != 0 or not out.exists():
        return f"{backend}: {p.stderr.strip().splitlines()[-1:] or p.returncode}"
    return None


def api_seed(out: Path) -> None:
    """A recording with every chunk kind and every source's readings, through the store API."""
    from snumap_tui.model.sample import Sample
    from snumap_tui.store import Writer
    from snumap_tui.topology.model import Topology
    from snumap_tui.trace.events import EVENT_DTYPE, SWITCH, WAKEUP, EventBatch, TaskInfo

    sys.path.insert(0, str(REPO / "tests"))
    from topo_factory import make_topology

    topo: Topology = make_topology(1, 2, 1, 1)
    cpus = np.array(sorted(topo.pu_os_indexes), dtype=np.int64)
    n = len(cpus)
    rng = np.random.default_rng(5)
    with Writer(out, {"topology": topo.to_json(), "host": "api", "backend": "bcc",
                      "command": ["x"], "start_monotonic_ns": 10**9}, force=True) as w:
        for k in range(6):
            t = 10**9 + k * 10**8
            ev = np.zeros(200, dtype=EVENT_DTYPE)
            ev["t_ns"] = t + np.sort(rng.integers(0, 10**8, 200))
            ev["kind"] = np.where(np.arange(200) % 4 == 0, WAKEUP, SWITCH)
            ev["cpu"] = rng.integers(0, n, 200)
            ev["tid"] = rng.integers(100, 106, 200)
            ev["tid2"] = rng.integers(100, 106, 200)
            ev["pid"], ev["pid2"] = 100, 100
            w.add_events(EventBatch(ev, [TaskInfo(100 + k, 100, f"t{k}", 1, t)], {k % n: 1}))
            w.add_sample(Sample(t, 1_700_000_000 * 10**9 + t, {
                "procstat": {"cpus": cpus, "hz": 100, "ctxt": 1000 * k,
                             "ticks": (np.arange(n * 10, dtype=np.uint64).reshape(n, 10)
                                       * (k + 1))},
                "perf": {"cpus": cpus, "events": ["cycles", "instructions"],
                         "value": np.full((n, 2), 1e6 * (k + 1)),
                         "enabled": np.full((n, 2), 1e8 * (k + 1)),
                         "running": np.full((n, 2), 5e7 * (k + 1))},
                "freq": {"cpus": cpus, "cur_khz": np.full(n, 2e6)},
                "rapl": {"domains": ["package-0"], "objects": [["Package", 0]],
                         "energy_uj": np.array([1e6 * k]), "max_uj": np.array([2.6e11]),
                         "via": "powercap"},
                "numa": {"nodes": np.arange(2), "mem_total": np.full(2, 8e9),
                         "mem_free": np.full(2, 4e9), "numa_hit": np.full(2, 1e5 * k)},
                "tasks": {"hz": 100, "threads": {
                    "pid": [100, 100], "tid": [100, 101], "ppid": [1, 1], "uid": [0, 0],
                    "comm": ["a", "b"], "state": ["R", "S"], "last_cpu": [0, 1],
                    "utime": [10 * k, 5 * k], "stime": [k, k], "nice": [0, 0]},
                    "processes": {100: {"cmdline": "a", "user": "root", "affinity": [0, 1],
                                        "cgroup": "/", "job": None}}}}))
            w.add_marker(t, f"marker {k}")
            w.flush()


def attr_seed(out: Path) -> None:
    """A recording with the kinds of attribution: thread counters (16) with traced and
    untraced rows, process memory (17) over two NUMA nodes and the RSS, regions and a
    phase, written as `record --events ... --regions` writes them."""
    from snumap_tui.analysis.synth import synthetic_topology, write_recording
    from snumap_tui.store import Writer
    from snumap_tui.store.procmem import rows_at
    from snumap_tui.trace.counters import counter_dtype
    from snumap_tui.trace.events import EVENT_DTYPE, SWITCH, TaskInfo
    from snumap_tui.trace.region_catalog import BEGIN, END, REGION_DTYPE, RegionName

    t0, ms = 10**9, 10**6
    ev = np.zeros(8, dtype=EVENT_DTYPE)
    for i, (tid, cpu) in enumerate([(101, 0), (102, 1), (101, 1), (102, 0)]):
        ev[2 * i] = (t0 + i * 10 * ms, cpu, SWITCH, 0, tid, 0, 100, 0)
        ev[2 * i + 1] = (t0 + (i * 10 + 8) * ms, cpu, SWITCH, tid, 0, 100, 0, 1)
    events = ["task-clock", "page-faults", "instructions", "cycles"]
    rows = np.zeros(6, counter_dtype(len(events)))
    for i, (tid, pid, cpu) in enumerate([(101, 100, 0), (102, 100, 1), (101, 100, 1),
                                         (102, 100, 0), (-2, -2, 0), (-2, -2, 1)]):
        a = t0 + (i % 4) * 10 * ms
        rows[i]["tid"], rows[i]["pid"], rows[i]["cpu"] = tid, pid, cpu
        rows[i]["t_start"], rows[i]["t_end"] = a, a + 8 * ms
        rows[i]["value"] = [8 * ms, 3 + i, 10**6, 2 * 10**6]
        rows[i]["enabled"] = 8 * ms
        rows[i]["running"] = 8 * ms if i != 3 else 4 * ms          # one multiplexed row
        rows[i]["n"] = len(events)
    names = [RegionName("loop", "omp", "body"), RegionName("init", "marker", "marker")]
    reg = np.array([(t0 + 2 * ms, 101, 100, BEGIN, 0), (t0 + 6 * ms, 101, 100, END, 0),
                    (t0, 101, 100, BEGIN, 1), (t0 + 30 * ms, 101, 100, END, 1)],
                   dtype=REGION_DTYPE)
    topo = synthetic_topology(1, 2, 1, 1, host="attr")
    write_recording(out, topo, ev, tasks=[TaskInfo(101, 100, "a", 1, t0),
                                          TaskInfo(102, 100, "b", 1, t0)],
                    regions=(reg, names), counters=(rows, events),
                    header={"counters": {"source": "libbpf: per-thread counters",
                                         "events": events},
                            "process_memory": {"source": "numa_maps"}})
    # The memory rows: appended through the Writer, as record's sampling loop adds them.
    from snumap_tui import store

    with store.open(out) as rec:
        hdr, evs, regions = dict(rec.header), rec.events(), rec.regions()
        tc = rec.thread_counters()
    from snumap_tui.trace.events import EventBatch
    with Writer(out, hdr, force=True) as w:
        w.add_events(EventBatch(events=evs, tasks=[TaskInfo(101, 100, "a", 1, t0),
                                                   TaskInfo(102, 100, "b", 1, t0)]))
        w.add_regions(regions.rows, regions.names)
        w.counter_events = list(tc.events)
        w.add_events(EventBatch(counters=tc.rows))
        for k in range(4):
            w.add_process_memory(rows_at(t0 + k * 10 * ms, [(100, -1, (k + 1) << 20, True),
                                                            (100, 0, (k + 1) << 19, k % 2 == 0),
                                                            (100, 1, (k + 1) << 19, True)]))


def merged_seed(where: Path) -> Path:
    """A job of two nodes as `snumap merge` writes it (format 2: node chunks, shifts)."""
    sys.path.insert(0, str(REPO / "tests"))
    from jobrecs import MB, WALL, node_rec, with_samples

    from snumap_tui.store.merge import merge

    a = node_rec(where / "node-a.rec", "a", 100 * 10**9, WALL, rank_pids={0: 500, 1: 501})
    b = node_rec(where / "node-b.rec", "b", 95 * 10**9, WALL + 5 * 10**9,
                 rank_pids={2: 500, 3: 777}, runs={3: [(0, 30_000_000)]})
    merge([a, b], where / "merged.rec")
    # and a job whose nodes sampled metrics (read back as one sample per step)
    c = with_samples(where / "node-c.rec", "c", 100 * 10**9, WALL, 0.5, MB, 20.0)
    d = with_samples(where / "node-d.rec", "d", 95 * 10**9, WALL + 5 * 10**9, 1.0, MB, 50.0)
    merge([c, d], where / "merged-samples.rec")
    return where / "merged.rec"


def make_seeds(where: Path) -> tuple[dict[str, bytes], list[str]]:
    seeds: dict[str, bytes] = {}
    skipped = []
    for backend in ("proc", "perf", "bcc"):
        out = where / f"{backend}.rec"
        why = record_seed(backend, out)
        if why:
            skipped.append(why)
        else:
            seeds[backend] = out.read_bytes()
    api_seed(where / "api.rec")
    seeds["api"] = (where / "api.rec").read_bytes()
    attr_seed(where / "attr.rec")
    seeds["attr"] = (where / "attr.rec").read_bytes()
    seeds["merged"] = merged_seed(where).read_bytes()
    seeds["merged-samples"] = (where / "merged-samples.rec").read_bytes()
    return seeds, skipped


def seed_damage(where: Path, seeds: dict[str, bytes]) -> dict[str, list[str]]:
    """What the reader says is wrong with the untouched seeds: must be nothing (a schema that
    refuses what snumap itself writes would make every fuzz case look damaged)."""
    from snumap_tui import store

    out = {}
    for name, data in seeds.items():
        path = where / f"seed-{name}.rec"
        path.write_bytes(data)
        with store.open(path) as rec:
            list(rec.samples())
            rec.events()
            _ = rec.topology
            if rec.damaged:
                out[name] = list(rec.damaged)
    return out


# ---- mutations -----------------------------------------------------------------------------
@dataclass
class Chunk:
    kind: int
    codec: int
    raw: bytes              # decompressed payload
    count: int
    t_min: int
    t_max: int


def split(data: bytes) -> list[Chunk]:
    dctx = zstandard.ZstdDecompressor()
    out = []
    for h in C.scan(data).chunks:
        raw = bytes(C.payload_of(data, h, dctx))
        out.append(Chunk(h.kind, h.codec, raw, h.count, h.t_min, h.t_max))
    return out


def pack(ch: Chunk, cctx: zstandard.ZstdCompressor) -> bytes:
    return C.pack_chunk(ch.kind, ch.raw, count=ch.count & 0xFFFFFFFF, t_min=ch.t_min,
                        t_max=ch.t_max, compress=cctx if ch.codec else None)


def rebuild(chs: list[Chunk], with_index: bool) -> bytes:
    """A file from chunks, with a fresh index and trailer (or none): the reader's trusted
    path for complete files then meets whatever the chunks hold."""
    cctx = zstandard.ZstdCompressor(level=1)
    body = [C.pack_preamble(1)]
    pos = C.PREAMBLE_SIZE
    index = []
    for ch in chs:
        if ch.kind in (C.K_INDEX, C.K_TRAILER):
            continue
        b = pack(ch, cctx)
        index.append((pos, ch.kind, ch.count & 0xFFFFFFFF, ch.t_min, ch.t_max))
        body.append(b)
        pos += len(b)
    if with_index:
        idx = np.array(index, dtype=np.uint64).reshape(-1, 5)
        payload = codec.encode({"offset": idx[:, 0], "kind": idx[:, 1].astype(np.uint8),
                                "count": idx[:, 2].astype(np.uint32), "t_min": idx[:, 3],
                                "t_max": idx[:, 4]})
        body.append(C.pack_chunk(C.K_INDEX, payload, count=len(index)))
        body.append(C.pack_chunk(C.K_TRAILER, C.TRAILER.pack(pos, len(index), 0)))
    return b"".join(body)


WEIRD: list[Callable[[random.Random], Any]] = [
    lambda r: None, lambda r: -1, lambda r: 2**64 + 5, lambda r: -(2**63), lambda r: 2**70,
    lambda r: "text", lambda r: "", lambda r: [], lambda r: {}, lambda r: 1.5,
    lambda r: float("nan"), lambda r: True, lambda r: b"\xff",
    lambda r: [[[[[[[[1]]]]]]]], lambda r: {"a": {"b": {"c": [1, 2]}}},
    lambda r: np.zeros((3, 2), np.float64), lambda r: np.arange(r.randint(0, 9)),
    lambda r: np.full(4, -(2**40), np.int64), lambda r: np.array(["x", "y"]),
    lambda r: np.full(5, 2**63, np.uint64), lambda r: np.int16(-3),
    lambda r: {0: 1, "k": None},
]


def mutate_array(a: np.ndarray, r: random.Random) -> Any:
    ops: list[Callable[[], Any]] = [
        lambda: a[:-1] if a.size else a,
        lambda: np.concatenate([a, a[:1]]) if a.ndim == 1 else a.reshape(-1),
        lambda: a.reshape(-1, 1) if a.size else a.reshape(0, 3),
        lambda: a.astype(np.float64),
        lambda: a.astype(np.int64) * -1,
        lambda: np.full(a.shape, 2**63 - 1, np.int64),
        lambda: a[::-1].copy(),
        lambda: np.zeros(0, a.dtype),
    ]
    return r.choice(ops)()


def _weird(r: random.Random) -> Any:
    return r.choice(WEIRD)(r)


def mutate_value(v: Any, r: random.Random, depth: int = 0, *,
                 weird: Callable[[random.Random], Any] = _weird,
                 encode: Callable[[Any], str] = json.dumps, max_depth: int = 6) -> Any:
    """One random change somewhere inside ``v``: a key or item dropped, repeated or replaced
    by ``weird(r)``. A string holding JSON (the topology inside a header) is edited inside
    and written back with ``encode``."""
    again = {"weird": weird, "encode": encode, "max_depth": max_depth}
    if isinstance(v, dict) and v and depth < max_depth and r.random() < 0.8:
        key = r.choice(list(v))
        out = dict(v)
        p = r.random()
        if p < 0.2:
            del out[key]
        elif p < 0.4:
            out[key] = weird(r)
        else:
            out[key] = mutate_value(v[key], r, depth + 1, **again)
        return out
    if isinstance(v, (list, tuple)) and v and depth < max_depth and r.random() < 0.8:
        out_l = list(v)
        i = r.randrange(len(out_l))
        p = r.random()
        if p < 0.15:
            del out_l[i]
        elif p < 0.25:
            out_l.append(out_l[i])
        elif p < 0.45:
            out_l[i] = weird(r)
        else:
            out_l[i] = mutate_value(out_l[i], r, depth + 1, **again)
        return type(v)(out_l) if isinstance(v, tuple) else out_l
    if isinstance(v, np.ndarray) and r.random() < 0.8:
        return mutate_array(v, r)
    if isinstance(v, str) and r.random() < 0.5 and v.lstrip().startswith("{"):
        try:   # the topology inside the header, as JSON text
            return encode(mutate_value(json.loads(v), r, depth + 1, **again))
        except (ValueError, TypeError):
            pass
    return weird(r)


def structure_edit(chs: list[Chunk], r: random.Random) -> list[Chunk]:
    chs = [Chunk(**vars(c)) for c in chs]
    ch = r.choice([c for c in chs if c.kind not in (C.K_TRAILER,)] or chs)
    p = r.random()
    if p < 0.15:      # a lying chunk header
        f = r.choice(["count", "t_min", "t_max"])
        setattr(ch, f, r.choice([0, 1, 2**32 - 1, 2**63, 2**64 - 1, getattr(ch, f) + 1]))
        return chs
    try:
        if ch.kind in (C.K_HEADER, C.K_HEADER_COPY):
            value = json.loads(ch.raw)
            ch.raw = json.dumps(mutate_value(value, r)).encode()
        else:
            ch.raw = codec.encode(mutate_value(codec.decode(ch.raw), r))
    except (TypeError, ValueError, codec.DecodeError):
        ch.raw = ch.raw[: r.randrange(len(ch.raw) + 1)]
    return chs


def bomb(chs: list[Chunk], r: random.Random) -> bytes:
    """A chunk whose zstd frame inflates far beyond what it declares (or the limit)."""
    size = r.choice([64 << 20, 300 << 20, 1 << 30])
    cobj = zstandard.ZstdCompressor(level=3, write_content_size=r.random() < 0.5).compressobj()
    frame = b"".join(cobj.compress(b"\0" * (16 << 20)) for _ in range(size >> 24)) + cobj.flush()
    kind = r.choice([C.K_EVENTS, C.K_SAMPLES, C.K_HEADER, C.K_MARKERS, C.K_INDEX])
    declared = r.choice([100, size, 1 << 28, 2**32 - 1])
    head = C.CHUNK_HEADER.pack(C.CHUNK_MAGIC, kind, C.CODEC_ZSTD, 0, len(frame), declared, 1,
                               0, 0, C.crc32(frame), 0)[:40]
    chunk = head + C.crc32(head).to_bytes(4, "little") + frame
    at = r.randrange(len(chs) + 1)
    cctx = zstandard.ZstdCompressor(level=1)
    parts = [pack(c, cctx) for c in chs if c.kind not in (C.K_INDEX, C.K_TRAILER)]
    parts.insert(min(at, len(parts)), chunk)
    return C.pack_preamble(1) + b"".join(parts)


_BOMBS: dict[int, bytes] = {}


def cases(seeds: dict[str, bytes], rng: random.Random) -> Iterator[tuple[str, bytes]]:
    """An endless stream of (description, file bytes)."""
    parsed = {k: split(v) for k, v in seeds.items()}
    names = sorted(seeds)
    while True:
        name = rng.choice(names)
        data, chs = seeds[name], parsed[name]
        p = rng.random()
        if p < 0.25:
            blob = bytearray(data)
            for _ in range(rng.randint(1, 8)):
                blob[rng.randrange(len(blob))] ^= 1 << rng.randrange(8)
            yield f"{name}: bit flips", bytes(blob)
        elif p < 0.42:
            bounds = [h.offset for h in C.scan(data).chunks] + [len(data)]
            cut = max(0, rng.choice(bounds) + rng.choice([-45, -44, -2, -1, 0, 0, 1, 2, 44, 45]))
            yield f"{name}: cut at {cut}", data[:cut]
        elif p < 0.82:
            edited = structure_edit(chs, rng)
            whole = rng.random() < 0.5
            yield f"{name}: structure edit{' + index' if whole else ''}", rebuild(edited, whole)
        elif p < 0.94:
            other = seeds[rng.choice(names)]
            q = rng.random()
            first = data if q < 0.6 else data[:rng.randrange(len(data))]
            yield f"{name}: concatenated", first + other + (other if q > 0.9 else b"")
        else:
            key = rng.randrange(8)
            if key not in _BOMBS:
                _BOMBS[key] = bomb(chs, random.Random(key))
            yield f"{name}: bomb {key}", _BOMBS[key]


# ---- running a case ------------------------------------------------------------------------
@dataclass
class Tally:
    cases: int = 0
    runs: int = 0
    data: int = 0
    clean_errors: int = 0
    tracebacks: int = 0
    hangs: int = 0
    crashes: int = 0               # a forked child killed by a signal (tests/fuzz_inputs.py)
    multi_line_errors: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    slowest_s: float = 0.0
    base_rss_mib: float = 0.0      # the harness itself (seeds made, bombs built), before cases
    peak_rss_mib: float = 0.0

    def line(self) -> str:
        return (f"cases {self.cases}, runs {self.runs}: data {self.data}, clean errors "
                f"{self.clean_errors}, tracebacks {self.tracebacks} (crashes {self.crashes}), "
                f"hangs {self.hangs}, "
                f"multi-line errors {self.multi_line_errors}; slowest run {self.slowest_s:.2f} s,"
                f" peak RSS {self.peak_rss_mib:.0f} MiB (harness alone "
                f"{self.base_rss_mib:.0f} MiB)")


class Hang(Exception):
    pass


def _alarm(_sig: int, _frame: object) -> None:
    raise Hang()


def cli(argv: list[str]) -> str | None:
    """``snumap ARGV`` in this process: None for data, the error line for a clean error;
    raises for a traceback."""
    from snumap_tui.cli import main

    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        rc = main(argv)
    lines = [ln for ln in err.getvalue().splitlines() if not ln.startswith("snumap: warning:")
             and not ln.startswith("snumap: wrote")]
    if rc == 0:
        return None
    if len(lines) != 1:
        raise AssertionError(f"exit {rc} with {len(lines)} error lines: {lines[:3]}")
    return lines[0]


def api(path: str) -> str | None:
    """The Python API over everything a recording holds (None: data)."""
    from snumap_tui import store

    with store.open(path) as rec:
        rec.events()
        rec.event_columns(("cpu", "tid2", "pid"))
        for _ in rec.samples():
            pass
        _ = rec.sample_times, rec.markers, rec.tasks, rec.lost, rec.t_start, rec.t_end
        rec.to_dataframes()
        rec.verify()
        store.metric_series(rec)
    return None


def replay_load(path: str) -> str | None:
    """What `snumap replay` loads before it draws (None: data)."""
    from snumap_tui.commands.report import open_readable
    from snumap_tui.ui.replay_data import load_replay

    with open_readable(path) as rec:
        load_replay(rec)
    return None


def operations(path: str, out: str) -> list[tuple[str, Callable[[], str | None]]]:
    return [
        ("api", lambda: api(path)),
        ("report", lambda: cli(["report", path])),
        ("report --json", lambda: cli(["report", path, "--json"])),
        ("export chrome", lambda: cli(["export", path, "--format", "chrome", "-o", out,
                                       "--force"])),
        ("export csv", lambda: cli(["export", path, "--format", "csv", "-o", out, "--force"])),
        ("export samples", lambda: cli(["export", path, "--format", "csv", "--table",
                                        "samples", "-o", out, "--force"])),
        ("export readings", lambda: cli(["export", path, "--format", "csv", "--table",
                                         "readings", "-o", out, "--force"])),
        ("export events", lambda: cli(["export", path, "--format", "csv", "--table", "events",
                                       "-o", out, "--force"])),
        ("export perfetto", lambda: cli(["export", path, "--format", "perfetto", "-o", out,
                                         "--force"])),
        ("export parquet", lambda: cli(["export", path, "--format", "parquet", "-o",
                                        out + ".pq", "--force"])),
        ("replay load", lambda: replay_load(path)),
    ]


def run_one(t: Tally, what: str, fn: Callable[[], str | None], label: str) -> None:
    t.runs += 1
    t0 = time.monotonic()
    signal.alarm(CASE_SECONDS)
    try:
        try:
            if fn() is None:
                t.data += 1
            else:                  # a command's one error line (``cli``)
                t.clean_errors += 1
        except SnumapError as e:
            if "\n" in str(e):
                t.multi_line_errors += 1
                t.failures.append(f"{label} / {what}: multi-line error {str(e)[:200]!r}")
            t.clean_errors += 1
        finally:
            signal.alarm(0)
    except Hang:
        t.hangs += 1
        t.failures.append(f"{label} / {what}: no answer within {CASE_SECONDS} s")
    except Exception as e:  # noqa: BLE001 - what the fuzzer is looking for
        t.tracebacks += 1
        tb = traceback.extract_tb(e.__traceback__)[-1]
        where = f"{Path(tb.filename).name}:{tb.lineno}"
        t.kinds[f"{type(e).__name__} at {where}"] += 1
        if len(t.failures) < 40:
            t.failures.append(f"{label} / {what}: {type(e).__name__}: {str(e)[:160]} ({where})")
    t.slowest_s = max(t.slowest_s, time.monotonic() - t0)


def fuzz_recordings(seconds: float, seed: int, work: Path, t: Tally,
                    seeds: dict[str, bytes]) -> None:
    rng = random.Random(seed)
    path, out = str(work / "case.rec"), str(work / "out")
    first = split(seeds[min(seeds)])
    for key in range(8):             # built before any case, so the baseline includes them
        _BOMBS.setdefault(key, bomb(first, random.Random(key)))
    t.base_rss_mib = _rss_mib()
    end = time.monotonic() + seconds
    for label, blob in cases(seeds, rng):
        if time.monotonic() >= end:
            break
        Path(path).write_bytes(blob)
        t.cases += 1
        for what, fn in operations(path, out):
            run_one(t, what, fn, f"case {t.cases} ({label})")
        t.peak_rss_mib = _rss_mib()


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def limit(memory_mib: int) -> None:
    """This process's address space limited to MEMORY_MIB (a bomb that inflates fails) and
    SIGALRM made a Hang (run_one's per-run alarm)."""
    soft = memory_mib << 20
    resource.setrlimit(resource.RLIMIT_AS, (soft, resource.getrlimit(resource.RLIMIT_AS)[1]))
    signal.signal(signal.SIGALRM, _alarm)


# ---- a fuzzer of several targets, a Tally each (tests/fuzz_inputs.py, tests/fuzz_study.py) ----
def targets_parser(doc: str, seconds: float, seed: int) -> argparse.ArgumentParser:
    """--seconds, --seed, --memory-mib and --json, with these defaults."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=seconds)
    ap.add_argument("--seed", type=int, default=seed)
    ap.add_argument("--memory-mib", type=int, default=3072)
    ap.add_argument("--json", metavar="OUT")
    return ap


def targets_main(ap: argparse.ArgumentParser, argv: list[str] | None, prefix: str, width: int,
                 fuzz: Callable[[argparse.Namespace, Path, dict[str, Tally]], None]) -> int:
    """Parse ARGV, limit(), run FUZZ (its arguments, a private temporary directory and the
    tallies by target), print a line per target and its first failures, write --json; 1 when
    a run ended in a traceback, a hang or several lines."""
    args = ap.parse_args(argv)
    limit(args.memory_mib)
    tallies: dict[str, Tally] = {}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"{prefix}-{os.getpid()}-") as tmp:
        fuzz(args, Path(tmp), tallies)
    for target, t in tallies.items():
        print(f"{target + ':':{width}s}{t.line()}")
        for f in t.failures[:10]:
            print(f"  {f}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "seed": args.seed, "seconds": round(time.monotonic() - started, 1),
            **{k: {x: v for x, v in vars(t).items() if x != "kinds"}
               for k, t in tallies.items()},
            "traceback_kinds": {k: dict(t.kinds) for k, t in tallies.items()}},
            indent=1, default=str))
    bad = sum(t.tracebacks + t.hangs + t.multi_line_errors for t in tallies.values())
    return 1 if bad else 0


# ---- main ----------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    from fuzz_formulas import fuzz_formulas
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60, help="total time budget")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--formula-share", type=float, default=0.2,
                    help="share of the time spent on formulas (default 0.2)")
    ap.add_argument("--memory-mib", type=int, default=3072,
                    help="address-space limit of this process (a bomb that inflates fails)")
    ap.add_argument("--json", metavar="OUT", help="write the counts as JSON")
    args = ap.parse_args(argv)
    limit(args.memory_mib)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"snumap-fuzz-{os.getpid()}-") as tmp:
        work = Path(tmp)
        seeds, skipped = make_seeds(work)
        damaged_seeds = seed_damage(work, seeds)
        seed_s = time.monotonic() - started
        budget = max(args.seconds - seed_s, 1.0)
        rec_t, form_t = Tally(), Tally()
        fuzz_recordings(budget * (1 - args.formula_share), args.seed, work, rec_t, seeds)
        fuzz_formulas(budget * args.formula_share, args.seed, form_t, run_one, _rss_mib)
    result = {
        "seed": args.seed, "seconds": round(time.monotonic() - started, 1),
        "seeds": {k: len(v) for k, v in seeds.items()}, "skipped_backends": skipped,
        "seed_damage": damaged_seeds,
        "load": os.getloadavg(),
        "recordings": {k: v for k, v in vars(rec_t).items() if k != "kinds"},
        "formulas": {k: v for k, v in vars(form_t).items() if k != "kinds"},
        "traceback_kinds": dict(rec_t.kinds + form_t.kinds),
    }
    print(f"seeds: {', '.join(f'{k} {v} B' for k, v in result['seeds'].items())}"
          + (f"; skipped: {skipped}" if skipped else ""))
    print(f"recordings: {rec_t.line()}")
    print(f"formulas:   {form_t.line()}")
    for f in rec_t.failures[:20] + form_t.failures[:20]:
        print(f"  {f}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=str))
    if damaged_seeds:
        print(f"seeds read as damaged: {damaged_seeds}")
    bad = sum(x.tracebacks + x.hangs + x.multi_line_errors for x in (rec_t, form_t))
    bad += len(damaged_seeds)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
