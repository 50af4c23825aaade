"""The registry of chunk kinds: number, name, payload encoding and schema (docs/format.md).

Every chunk kind a recording may hold is registered here, once, with what its decoded payload
must look like. The reader checks each payload against its kind's schema where it decodes it,
so a chunk with a valid CRC but a wrong structure (a crafted or buggy file) becomes a damage
report instead of a traceback in whatever uses it.

Adding a chunk kind (a new feature's data): pick the next free number, add one ``register``
call below with a schema built from ``store/schema.py``, document it in docs/format.md's
"Chunk kinds" table, and write it with ``Writer._write_chunk``. Registering a number or a name
twice fails at import, so two branches that picked the same number collide loudly, not
silently. Readers skip kinds they do not know (an older snumap reading a newer file).

    K_EXAMPLE = register(15, "example", Fields(
        required={"t_ns": Array("u", length=COUNT), "name": ListOf(Str(4096), length=COUNT)}),
        min_item_bytes=2)

``min_item_bytes`` is the fewest decompressed bytes one item of the kind can take: a header
whose ``count`` claims more items than its ``raw_len`` can hold is refused before anything is
allocated for them (a crafted count asked numpy for 148 GiB).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from snumap_tui.store.schema import (
    COUNT,
    I32,
    I64,
    U32,
    Anything,
    Array,
    Bool,
    Ctx,
    Fields,
    Int,
    ListOf,
    MapOf,
    Nullable,
    Number,
    OneOf,
    Row,
    Schema,
    SchemaError,
    Str,
)

# How a payload is encoded (after decompression).
VALUE = "value"    # the tagged value encoding (store/codec.py)
JSON = "json"      # UTF-8 JSON text
RAW = "raw"        # fixed binary layout, checked by its reader

# The most decompressed bytes a chunk may declare (its ``raw_len``). The writer's chunks are far
# smaller (65 536 events are ~2.5 MB; a samples chunk holds 0.5 s of samples) and it splits a
# samples chunk that would exceed this; a reader refuses larger ones unread (zstd bombs).
MAX_RAW_LEN = 256 << 20


@dataclass(frozen=True)
class ChunkKind:
    number: int
    name: str
    encoding: str
    schema: Schema | None
    min_item_bytes: int = 1
    doc: str = ""


REGISTRY: dict[int, ChunkKind] = {}
KIND_NAMES: dict[int, str] = {}


def register(number: int, name: str, schema: Schema | None, *, encoding: str = VALUE,
             min_item_bytes: int = 1, doc: str = "") -> int:
    """Add a chunk kind; returns its number (for the ``K_*`` constant)."""
    if not 0 < number < 256:
        raise ValueError(f"chunk kind {number} is not a u8 above 0")
    if number in REGISTRY:
        raise ValueError(f"chunk kind {number} is already {REGISTRY[number].name!r}")
    if name in KIND_NAMES.values():
        raise ValueError(f"chunk kind name {name!r} is already taken")
    REGISTRY[number] = ChunkKind(number, name, encoding, schema, min_item_bytes, doc)
    KIND_NAMES[number] = name
    return number


def kind_name(number: int) -> str:
    return KIND_NAMES.get(number, f"kind {number}")


def check_count(number: int, count: int, raw_len: int) -> str | None:
    """Why a chunk header's ``count`` cannot be true for its ``raw_len``, or None."""
    k = REGISTRY.get(number)
    per = k.min_item_bytes if k is not None else 1
    if count * per > raw_len:
        return (f"it claims {count} items in {raw_len} bytes (each takes at least {per})")
    return None


def validate(number: int, value: Any, count: int) -> tuple[Any, list[str]]:
    """The payload of a chunk of kind ``number`` checked against its schema: the normalised
    value and notes on optional parts dropped. Raises SchemaError. Unknown kinds pass."""
    k = REGISTRY.get(number)
    if k is None or k.schema is None:
        return value, []
    ctx = Ctx(count=count)
    return k.schema.check(value, k.name, ctx), ctx.notes


# ---- the values inside: times, ids -------------------------------------------------------------
# CLOCK_MONOTONIC or wall-clock ns: u64 on disk, but below 2^63 (292 years of uptime, the year
# 2262 on the wall clock), which lets every reader compute with int64 times.
MAX_TIME = I64[1]
TIME = Int(0, MAX_TIME)
TIMES = Array("u", lo=0, hi=MAX_TIME)
CPU = Int(*U32)
TEXT = Str(1 << 16)


def _i(lo_hi: tuple[int, int]) -> Array:
    return Array("iu", lo=lo_hi[0], hi=lo_hi[1])


# ---- samples: what each source's readings may hold (model/sample.py) ---------------------------
def _Source(**kw: Any) -> Fields:
    """A source's readings: every field optional, None counts as absent (model/sample.py)."""
    return Fields(none_is_absent=True, **kw)


def _has(d: dict[str, Any], k: str) -> bool:
    return d.get(k) is not None


def _needs(anchor: str, fields: Any) -> tuple[Any, str]:
    """A rule: any of ``fields`` present needs ``anchor`` (the cpus or nodes they align to)."""
    names = tuple(fields)
    return (lambda d: _has(d, anchor) or not any(_has(d, f) for f in names),
            f"{'/'.join(names)} without {anchor}")


def _pu_fields(*names: str, kinds: str = "fiu", ndim: int = 1) -> dict[str, Schema]:
    return {n: Array(kinds, ndim=ndim, length="cpus") for n in names}


_CPUS = {"cpus": Array("iu", lo=0, hi=U32[1])}
_SEQ = OneOf(Array("iufUSb", ndim=1), ListOf(Anything(4)))
_PERF = ("value", "enabled", "running")
_FREQ = ("cur_khz", "aperf", "mperf", "tsc", "base_khz", "max_khz")
_NUMA = ("mem_total", "mem_free", "mem_used", "file_pages", "anon_pages", "shmem",
         "hugepages_total", "hugepages_free", "numa_hit", "numa_miss", "numa_foreign",
         "interleave_hit", "local_node", "other_node")
_THREADS = ("pid", "tid", "ppid", "uid", "comm", "state", "last_cpu", "utime", "stime", "nice")
_READINGS: dict[str, Schema] = {
    "procstat": _Source(
        optional={**_CPUS, **_pu_fields("ticks", ndim=2), "hz": Int(0, 1 << 20),
                  "ctxt": Number(), "procs_running": Number(), "procs_blocked": Number()},
        rules=(_needs("cpus", ["ticks"]),)),
    "perf": _Source(
        optional={**_CPUS, "events": ListOf(TEXT, max_len=4096),
                  **_pu_fields(*_PERF, ndim=2)},
        rules=(_needs("cpus", _PERF), _needs("events", _PERF),
               (lambda d: all(not _has(d, k) or d[k].shape[1] == len(d["events"])
                              for k in _PERF), "counter columns do not match the events"))),
    "freq": _Source(optional={**_CPUS, **_pu_fields(*_FREQ)}, rules=(_needs("cpus", _FREQ),)),
    "rapl": _Source(
        optional={"domains": ListOf(TEXT, max_len=4096),
                  "objects": ListOf(Row(TEXT, Int(*I64)), length="domains"),
                  "energy_uj": Array("fiu", length="domains"),
                  "max_uj": Array("fiu", length="domains"), "via": TEXT},
        rules=(_needs("domains", ("energy_uj", "max_uj", "objects")),
               (lambda d: not _has(d, "domains") or _has(d, "energy_uj"),
                "domains without energy_uj"))),
    "numa": _Source(optional={"nodes": Array("iu", lo=0, hi=U32[1]),
                              **{n: Array("fiu", length="nodes") for n in _NUMA}},
                    rules=(_needs("nodes", _NUMA),)),
    "tasks": _Source(optional={
        "threads": _Source(optional={k: _SEQ for k in _THREADS}, same_length=_THREADS),
        "processes": MapOf(Int(*I64), Fields(optional={
            "cmdline": Nullable(OneOf(TEXT, ListOf(TEXT))), "user": Nullable(Anything(1)),
            "affinity": Nullable(ListOf(Int(*U32))), "cgroup": Nullable(TEXT),
            "job": Nullable(Anything(2)),
            "numa_pages": Nullable(MapOf(Int(*U32), Number())),
            "counters": Nullable(Fields(optional={"events": ListOf(TEXT),
                                                  "value": Array("fiu"),
                                                  "multiplexed": Array("b"),
                                                  "threads": Int(0, I64[1])}))})),
        "hz": Int(0, 1 << 20), "partial": ListOf(Int(*I64))}),
}


def _per_device(*cumulative: str, extra: dict[str, Schema] | None = None) -> Fields:
    """The I/O sources (net, ib, disk, gpu): one value per device, aligned with ``names``."""
    fields: dict[str, Schema] = {
        "names": ListOf(TEXT, max_len=1 << 16),
        "physical": Array("b", length="names"), "numa": Array("iu", length="names"),
        "busid": ListOf(Nullable(TEXT), length="names"), "devices": ListOf(TEXT),
        **{f: Array("fiu", length="names") for f in cumulative}, **(extra or {})}
    return _Source(optional=fields, rules=(_needs("names", cumulative),))


_NET = ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets")
_READINGS.update({
    "net": _per_device(*_NET),
    "ib": _per_device(*_NET, extra={"saturated": ListOf(TEXT)}),
    "disk": _per_device("reads", "read_bytes", "writes", "write_bytes", "io_ms"),
    "gpu": _per_device("util_pct", "mem_util_pct", "mem_used", "mem_total", "power_w",
                       "energy_mj"),
})
SAMPLE = Row(TIME, TIME, MapOf(Str(256), Anything(8)))


class _Samples(Schema):
    """A samples payload: ``[t_ns, wall_ns, readings]`` rows, each source's readings checked by
    its own schema (unknown sources pass unchecked: derive ignores what it does not know). A
    source whose readings break its schema is dropped from that sample, with one note per
    chunk and source: the other sources of the sample are still good data."""

    def check(self, v: Any, path: str, ctx: Ctx) -> Any:
        rows = ListOf(SAMPLE, length=COUNT).check(v, path, ctx)
        bad: dict[str, tuple[str, int]] = {}
        for row in rows:
            readings = row[2]
            for source in list(readings):
                s = _READINGS.get(source)
                if s is None:
                    continue
                try:
                    readings[source] = s.check(readings[source], f"readings.{source}", ctx)
                except SchemaError as e:
                    del readings[source]
                    first, n = bad.get(source, (str(e), 0))
                    bad[source] = (first, n + 1)
        for first, n in bad.values():
            ctx.notes.append(f"{first}: ignored in {n} of {len(rows)} samples")
        return rows


# ---- the built-in kinds ------------------------------------------------------------------------
_TEXTS = ListOf(TEXT, max_len=1 << 16)
_OFFSET = Int(-MAX_TIME, MAX_TIME)
# A clock reading (sources/clocksync.py): in the header at the start, in an info at the end.
_CLOCK = Fields(required={"wall_minus_monotonic_ns": _OFFSET},
                optional={"t_monotonic_ns": TIME, "uncertainty_ns": TIME,
                          "ntp": Nullable(Fields(optional={"synced": Bool(),
                                                           "maxerror_ns": _OFFSET},
                                                 none_is_absent=True))},
                none_is_absent=True)
# Every key a writer puts in the header (record, record --job, --regions, merge), checked
# where a reader uses it; a key that fails is dropped with a note, the rest is kept.
_HEADER = Fields(optional={
    "format": TEXT, "format_version": Int(0, 1 << 16),
    "start_monotonic_ns": TIME, "start_wall_ns": TIME,
    "topology": OneOf(Str(64 << 20), Fields()),
    "host": Nullable(TEXT), "kernel": Nullable(TEXT), "cpu_model": Nullable(TEXT),
    "hostname": Nullable(TEXT), "node": Nullable(TEXT), "boot_id": Nullable(TEXT),
    "sources": OneOf(MapOf(TEXT, Anything(4)), ListOf(Anything(4))),   # record writes a list
    "command": Nullable(OneOf(ListOf(TEXT), TEXT)), "argv": Nullable(OneOf(ListOf(TEXT), TEXT)),
    "backend": Nullable(TEXT), "backend_reason": Nullable(TEXT),
    "interval_ns": Int(0, I64[1]), "approximate": Bool(), "system_wide": Bool(),
    "pid_max": Int(0, I32[1]),
    "recorder_nice": Int(-20, 20),     # record --nice (recording/priority.py)
    "clock_start": _CLOCK,
    # record --job (recording/job.py)
    "job": Fields(optional={"system": Nullable(TEXT), "id": Nullable(OneOf(TEXT, Int(*I64)))},
                  none_is_absent=True),
    "jobs": _TEXTS,
    # record --regions (recording/regions.py)
    "regions": Fields(optional={"mode": Nullable(TEXT), "problems": _TEXTS,
                                "found": ListOf(Anything(4), max_len=1 << 16),
                                "probes": Nullable(TEXT), "markers": Bool(),
                                "budget": Number()},
                      none_is_absent=True),
    # version 2 (merged recordings, docs/format.md "Version 2"): what each node's events get
    "nodes": ListOf(Fields(optional={"shift_ns": _OFFSET,
                                     "cpu_base": Int(0, 1 << 16), "tid_base": Int(0, I32[1]),
                                     "n_pus": Int(0, 1 << 16), "node": Nullable(TEXT),
                                     "host": Nullable(TEXT), "file": Nullable(TEXT),
                                     "job": Nullable(TEXT), "align_error_ns": TIME,
                                     "align_how": Nullable(TEXT), "clock_drift_ns": _OFFSET,
                                     "kernel": Nullable(TEXT), "cpu_model": Nullable(TEXT),
                                     "backend": Nullable(TEXT), "approximate": Bool(),
                                     "interval_ns": Int(0, I64[1]),
                                     "start_monotonic_ns": _OFFSET, "damaged": _TEXTS},
                           none_is_absent=True, drop_bad=True,     # one bad field, not the node
                           drop_none=True),      # a null number: the default, as if absent
                    max_len=1 << 12),
    "merged": Anything(4)},
    drop_bad=True, none_is_absent=True)

def _times_fit(d: dict[str, Any]) -> bool:
    """t0 + the sum of the deltas stays a time (below 2^63: no wrap-around, no overflow)."""
    dt = d.get("dt")
    if not d["n"] or dt is None or not dt.size:
        return True
    t0 = int(d.get("t0", 0))
    if t0 + int(dt.max()) * int(dt.size) <= MAX_TIME:
        return True
    c = np.cumsum(dt, dtype=np.uint64)
    return bool(np.all(c[1:] >= c[:-1])) and t0 + int(c[-1]) <= MAX_TIME


_EVENTS = Fields(
    required={"n": Int(0, 1 << 26)},
    optional={"t0": TIME, "dt": Array("u", length="n"), "cpu": Array("iu", lo=0, hi=U32[1],
                                                                    length="n"),
              "kind": Array("iu", lo=0, hi=255, length="n"),
              "tid2": Array("iu", lo=I32[0], hi=I32[1], length="n"),
              "tid": Array("iu", lo=-(2 ** 33), hi=2 ** 33, length="n"),
              "pid_table_tid": Array("iu", lo=I32[0], hi=I32[1], sorted=True),
              "pid_table_pid": Array("iu", lo=I32[0], hi=I32[1]),
              "pid": Array("iu", lo=-(2 ** 33), hi=2 ** 33, length="n"),
              "pid2": Array("iu", lo=-(2 ** 33), hi=2 ** 33, length="n"),
              "arg": Array("iu", lo=I64[0], hi=I64[1], length="n")},
    same_length=("pid_table_tid", "pid_table_pid"),
    rules=((lambda d: d["n"] == 0 or all(k in d for k in (
        "t0", "dt", "cpu", "kind", "tid2", "tid", "pid_table_tid", "pid_table_pid", "pid",
        "pid2", "arg")), "columns missing"),
           (_times_fit, "event times run past 2^63 ns")))

K_HEADER = register(1, "header", _HEADER, encoding=JSON,
                    doc="UTF-8 JSON object: topology, host, sources, command, backend")
K_SAMPLES = register(2, "samples", _Samples(), min_item_bytes=3)
K_EVENTS = register(3, "events", _EVENTS, min_item_bytes=8)
K_TASKS = register(4, "tasks", Fields(
    required={"tid": Array("iu", lo=I32[0], hi=I32[1], length=COUNT), "pid": _i(I32),
              "ppid": _i(I32), "t_ns": TIMES, "comm": ListOf(TEXT)},
    same_length=("tid", "pid", "ppid", "t_ns", "comm")), min_item_bytes=4)
K_LOST = register(5, "lost", Fields(required={"t_ns": TIME,
                                              "lost": MapOf(CPU, Int(0, I64[1]))}))
K_MARKERS = register(6, "markers", ListOf(Row(TIME, TEXT), length=COUNT), min_item_bytes=3)
K_INDEX = register(7, "index", Fields(
    required={"offset": TIMES, "kind": _i((0, 255)), "count": _i(U32), "t_min": TIMES,
              "t_max": TIMES},
    same_length=("offset", "kind", "count", "t_min", "t_max")), min_item_bytes=5)
K_TRAILER = register(8, "trailer", None, encoding=RAW)
K_SAMPLE_TIMES = register(9, "sample times", Array("u", hi=MAX_TIME, length=COUNT),
                          min_item_bytes=1)
_CELL = Nullable(OneOf(Int(*I64), TEXT))
_INT_COLUMNS = ("pid", "local_pid", "rank")


def _job_rows_fit(d: dict[str, Any]) -> bool:
    """A "job processes" info's rows: one cell per column, pids and ranks integers."""
    if d.get("what") != "job processes":
        return True
    cols = d.get("columns") or []
    ints = [i for i, c in enumerate(cols) if c in _INT_COLUMNS]
    return all(isinstance(r, (list, tuple)) and len(r) == len(cols)
               and all(isinstance(r[i], (int, np.integer)) and not isinstance(r[i], bool)
                       for i in ints) for r in d.get("rows") or [])


_COUNT = Int(0, I64[1])
K_INFO = register(10, "info", Fields(
    required={"what": TEXT},
    optional={"t_ns": TIME, "node": Nullable(TEXT), "columns": ListOf(TEXT, max_len=64),
              "clock": _CLOCK, "tid_max": _COUNT,
              "rows": ListOf(ListOf(_CELL, max_len=64)),
              # "recorder steady" and "recorder cost" (recording/selfcost.py)
              "steps": ListOf(Row(TEXT, TIME), max_len=64),
              "recorded_ns": TIME, "cpu_ns": TIME, "setup_cpu_ns": TIME, "writer_ns": TIME,
              "threads": Int(0, 1 << 22), "rss_peak_bytes": Int(0, 1 << 56), "lost": _COUNT,
              "wakeups": _COUNT,
              "cpu_by": MapOf(TEXT, TIME, max_len=256),
              "bpf": MapOf(TEXT, Row(_COUNT, TIME), max_len=256)},
    rules=((_job_rows_fit, "job process rows do not match their columns"),)),
    doc="a fact learnt while recording: job processes (record --job), the clock, the "
        "recorder's steady state and its own cost")
K_NODE = register(11, "node", Fields(required={"node": Int(0, 1 << 12)},
                                     optional={"name": Nullable(TEXT)}),
                  doc="version 2: the events and node-samples chunks after it are this node's")
K_NODE_SAMPLES = register(12, "node samples", _Samples(), min_item_bytes=3,
                          doc="version 2: a node's samples chunk, payload as recorded")
K_HEADER_COPY = register(13, "header copy", _HEADER, encoding=JSON,
                         doc="the header's JSON again: read when the header chunk is damaged")
# Regions and markers: a map of columns and a name table; store/regions.py's decode_regions
# checks what is particular to them (ops, kinds, roles) where the reader decodes it.
_NAMES = ListOf(TEXT, max_len=1 << 20)
K_REGIONS = register(14, "regions", Fields(
    required={"n": Int(0, 1 << 26), "t_ns": Array("u", hi=MAX_TIME, length="n"),
              "tid": Array("iu", lo=I32[0], hi=I32[1], length="n"),
              "pid": Array("iu", lo=I32[0], hi=I32[1], length="n"),
              "op": Array("iu", lo=0, hi=255, length="n"),
              "rid": Array("iu", lo=0, hi=U32[1], length="n"),
              "names": _NAMES, "kinds": ListOf(TEXT, length="names"),
              "roles": ListOf(TEXT, length="names"), "wait": Array("b", length="names")},
    rules=((lambda d: d["n"] == 0 or int(d["rid"].max()) < len(d["names"]),
            "a region id outside the name table"),)), min_item_bytes=2,
                     doc="region enter/leave records and user markers (store/regions.py)")
# Memory per process and NUMA node at each sample (sources/procmem.py, store/procmem.py):
# columns of one row per process and node (node -1: the process's RSS). Kind 17: 15 and 16
# are left to the per-interval counters being added beside it.
K_PROCESS_MEMORY = register(17, "process memory", Fields(
    required={"t_ns": Array("u", lo=0, hi=MAX_TIME, length=COUNT, sorted=True),
              "pid": Array("iu", lo=1, hi=I32[1], length=COUNT),
              "node": Array("iu", lo=-1, hi=1 << 16, length=COUNT),
              "bytes": Array("iu", lo=0, hi=1 << 56, length=COUNT),
              "exact": Array("b", length=COUNT)}), min_item_bytes=8,
    doc="memory per traced process and NUMA node at each sample (record)")

# Counters per run interval (docs/format.md "Thread counters", store/counters.py): one row per
# interval a traced thread ran on a PU (tid -2: untraced tasks there, summed), the counter,
# enabled-time and not-running-time deltas of each event, times as t0 + cumulative dt of the
# interval ends (sorted) and each interval's duration.
MAX_COUNTER_EVENTS = 8
_CROWS = ("dt", "dur", "tid", "pid", "cpu", "value", "enabled", "unrun")


def _counter_times_fit(d: dict[str, Any]) -> bool:
    if not d["n"]:
        return True
    ends = int(d["t0"]) + np.cumsum(d["dt"], dtype=np.uint64).astype(object)
    last = int(ends[-1]) if len(ends) else int(d["t0"])
    if last > MAX_TIME or int(d["dt"].max()) > MAX_TIME:
        return False
    return bool(np.all(d["dur"].astype(object) <= ends))


K_THREAD_COUNTERS = register(16, "thread counters", Fields(
    required={"n": Int(0, 1 << 26), "events": ListOf(TEXT, max_len=MAX_COUNTER_EVENTS),
              "t0": TIME, "dt": Array("u", hi=MAX_TIME, length="n"),
              "dur": Array("u", hi=MAX_TIME, length="n"),
              "tid": Array("iu", lo=I32[0], hi=I32[1], length="n"),
              "pid": Array("iu", lo=I32[0], hi=I32[1], length="n"),
              "cpu": Array("iu", lo=0, hi=U32[1], length="n"),
              "value": Array("u", ndim=2, length="n"),
              "unrun": Array("u", ndim=2, hi=MAX_TIME, length="n")},
    optional={"enabled": Array("u", ndim=2, hi=MAX_TIME, length="n"),
              "enabled_is_dur": Bool()},
    rules=((lambda d: ("enabled" in d) != bool(d.get("enabled_is_dur")),
            "neither enabled times nor enabled_is_dur (or both)"),
           (lambda d: all(d[k].shape[1] == len(d["events"]) for k in
                          ("value", "enabled", "unrun") if k in d),
            "counter columns do not match the events"),
           (lambda d: bool(np.all(d["unrun"] <= (d["enabled"] if "enabled" in d
                                                  else d["dur"][:, None]))),
            "not-running time above the enabled time"),
           (_counter_times_fit, "interval times run past 2^63 ns or start before 0"))),
    min_item_bytes=5, doc="counter deltas per run interval of a thread (store/counters.py)")

__all__ = [
    "COUNT",
    "JSON",
    "KIND_NAMES",
    "MAX_RAW_LEN",
    "MAX_TIME",
    "RAW",
    "REGISTRY",
    "VALUE",
    "ChunkKind",
    "SchemaError",
    "check_count",
    "kind_name",
    "register",
    "validate",
]
