"""Ring dumps: the bytes the libbpf tracer's rings held, drain by drain, kept to replay the
decoder without a kernel (tests/test_ring_decode.py, bench/observer_storm.py).

A dump is an .npz file: ``meta`` (JSON: the event record's size, the counters' number and
how many are timed, the CPUs), ``index`` (one row per ring read: drain number, stream -- 0
the scheduling events, 1 the counter records --, CPU, offset and length in ``blob``) and
``blob`` (the ring bytes, headers included, as ``BpfRingReader.read_raw`` returns them).

``capture`` records one from the running kernel (root, BPF); ``synthesize`` makes one of any
size from bench/store_pipeline's synthetic trace, as a node of NCPU CPUs would fill its rings.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from snumap_tui.trace.bpf_layout import load_layout
from snumap_tui.trace.bpf_ring import HDR_SIZE, record_stride
from snumap_tui.trace.counters import ring_dtype

EVENTS, COUNTERS = 0, 1


@dataclass
class RingDump:
    rec_size: int
    ncounters: int
    ntimed: int
    cpus: list[int]
    reads: list[tuple[int, int, int, bytes]] = field(default_factory=list)  # drain, stream, cpu

    def drains(self) -> Iterator[dict[tuple[int, int], bytes]]:
        """Each drain as {(stream, cpu): bytes}, in order."""
        cur: dict[tuple[int, int], bytes] = {}
        at = None
        for d, stream, cpu, raw in self.reads:
            if at is not None and d != at:
                yield cur
                cur = {}
            at = d
            cur[(stream, cpu)] = raw
        if cur:
            yield cur

    def save(self, path: Path) -> None:
        offs, index = 0, []
        for d, stream, cpu, raw in self.reads:
            index.append((d, stream, cpu, offs, len(raw)))
            offs += len(raw)
        blob = np.frombuffer(b"".join(r[3] for r in self.reads), dtype=np.uint8)
        meta = json.dumps({"rec_size": self.rec_size, "ncounters": self.ncounters,
                           "ntimed": self.ntimed, "cpus": self.cpus})
        np.savez_compressed(path, meta=np.array(meta), index=np.array(index, dtype=np.int64)
                            .reshape(-1, 5), blob=blob)

    @classmethod
    def load(cls, path: Path) -> RingDump:
        with np.load(path) as z:
            meta = json.loads(str(z["meta"]))
            blob = z["blob"].tobytes()
            index = z["index"]
        dump = cls(meta["rec_size"], meta["ncounters"], meta["ntimed"], meta["cpus"])
        for d, stream, cpu, off, n in index.tolist():
            dump.reads.append((d, stream, cpu, blob[off:off + n]))
        return dump


def offline_tracer(proc: Path, events: list[str]) -> Any:
    """The libbpf tracer's user-space half without a kernel, counting EVENTS: no maps to read
    (nothing lost, no names), task names looked up in PROC (an empty directory: none)."""
    from snumap_tui.trace.counters import parse_events
    from snumap_tui.trace.libbpf import LibbpfTracer
    from snumap_tui.trace.tasks import TaskTable

    t = LibbpfTracer()
    t.counter_specs = parse_events(events)
    t._lost = dict
    t._names = lambda: None
    t._loaded = lambda: True
    t._tasks = TaskTable(proc)
    t._cring = object()                        # a tracer with counter rings
    return t


def capture(seconds: float, events: list[str], drain_s: float = 0.01) -> RingDump:
    """The rings of the libbpf tracer, system-wide, counting EVENTS, read raw every DRAIN_S
    for SECONDS (whatever the machine does meanwhile: run a storm beside it)."""
    from snumap_tui.trace.counters import parse_events
    from snumap_tui.trace.libbpf import LibbpfTracer

    t = LibbpfTracer()
    t.counter_specs = parse_events(events) if events else []
    t.start(None)
    try:
        rings = t._ring.rings if t._ring is not None else []    # type: ignore[union-attr]
        crings = t._cring.rings if t._cring is not None else []
        cpus = t._ring_cpus
        dump = RingDump(rings[0].rec_dtype.itemsize, len(t.counter_specs),
                        sum(s.needs_pmu for s in t.counter_specs), list(cpus))
        end = time.monotonic() + seconds
        d = 0
        while time.monotonic() < end:
            for stream, rs in ((EVENTS, rings), (COUNTERS, crings)):
                for cpu, r in zip(cpus, rs):
                    raw = r.read_raw()
                    if raw:
                        dump.reads.append((d, stream, cpu, raw))
            d += 1
            time.sleep(drain_s)
    finally:
        t.stop()
    return dump


def synthesize(n_events: int, ncpu: int, nthreads: int, per_drain: int,
               ncounters: int = 2, seed: int = 0) -> Iterator[dict[tuple[int, int], bytes]]:
    """Drains of rings as NCPU CPUs fill them with N_EVENTS scheduling events (switches,
    wakeups, migrations among NTHREADS threads) and, for every switch, a counter record of
    NCOUNTERS software events: PER_DRAIN events a drain, generated as they go (a dump of 30 M
    events is 3 GB of ring bytes)."""
    from bench.store_pipeline import sched_trace

    rec, _, _ = load_layout()
    stride = record_stride(rec.itemsize)
    cdt = ring_dtype(ncounters, 0)
    cstride = record_stride(cdt.itemsize)
    framed = np.dtype({"names": ["len", "rec"], "formats": ["<u4", rec],
                       "offsets": [0, HDR_SIZE], "itemsize": stride})
    cframed = np.dtype({"names": ["len", "rec"], "formats": ["<u4", cdt],
                        "offsets": [0, HDR_SIZE], "itemsize": cstride})
    block = max(per_drain, 1 << 20)
    t_base = 0
    made = 0
    while made < n_events:
        e = sched_trace(min(block, n_events - made), ncpu, nthreads, seed=seed + made)
        e = e[e["kind"] <= 4]                       # switch, wakeup(_new), migrate
        e["t_ns"] += t_base
        t_base = int(e["t_ns"][-1]) + 1
        for f in ("tid", "tid2", "pid", "pid2"):
            e[f] = np.where(e[f] > 0, e[f] + 4_000_000, e[f])
        for lo in range(0, len(e), per_drain):
            part = e[lo:lo + per_drain]
            out: dict[tuple[int, int], bytes] = {}
            for cpu in range(ncpu):
                mine = part[part["cpu"] == cpu]
                f = np.zeros(len(mine), framed)
                f["len"] = rec.itemsize
                for name in ("t_ns", "arg", "cpu", "tid", "tid2", "pid", "pid2", "kind"):
                    f["rec"][name] = mine[name]
                out[(EVENTS, cpu)] = f.tobytes()
                sw = mine[mine["kind"] == 1]
                c = np.zeros(len(sw), cframed)
                c["len"] = cdt.itemsize
                c["rec"]["t_end"] = sw["t_ns"]
                c["rec"]["t_start"] = np.concatenate([sw["t_ns"][:1], sw["t_ns"][:-1]])
                c["rec"]["tid"], c["rec"]["pid"] = sw["tid"], sw["pid"]
                c["rec"]["cpu"], c["rec"]["n"] = cpu, ncounters
                dur = c["rec"]["t_end"] - c["rec"]["t_start"]
                c["rec"]["value"][:, 0] = dur
                if ncounters > 1:
                    c["rec"]["value"][:, 1] = 1
                out[(COUNTERS, cpu)] = c.tobytes()
            yield out
        made += len(e) if len(e) else n_events
