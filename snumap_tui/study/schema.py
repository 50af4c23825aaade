"""What a study's files may hold: every field of ``manifest.json`` and of ``runs/ID.json``
that snumap reads, with its type and range, as recording headers have theirs
(``store/schema.py``'s checks). A file that fails is one line naming the field
(``configurations[0].threads: 0 is outside [1, 1048576]``), never a traceback three layers on
(a ZeroDivisionError in the speedups, a RecursionError, a NaN in a plot).

Numbers are finite (JSON's NaN and Infinity are refused when read: study/files.py) and
bounded so that sums and products stay finite; names are strings of bounded length; a
configuration's ``key`` is the one its fields make, so a run file's name never leaves
``runs/``. Keys snumap does not read are kept unchecked (a newer snumap may add some).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from snumap_tui.errors import SnumapError
from snumap_tui.store.schema import (
    Anything,
    Bool,
    Ctx,
    Fields,
    Int,
    ListOf,
    MapOf,
    Nullable,
    OneOf,
    Schema,
    SchemaError,
    Str,
)
from snumap_tui.textsafe import safe_text

MAX_COUNT = 1 << 20          # threads, ranks, repeats, PUs
MAX_ITEMS = 1 << 20          # runs in a plan, regions in a run
MAX_TIME_S = 1e12            # ~31,700 years
MAX_VALUE = 1e30             # event totals, energies, bytes


@dataclass(frozen=True)
class Finite(Schema):
    """An int or float (never a bool), finite, within [lo, hi]."""

    lo: float = -MAX_VALUE
    hi: float = MAX_VALUE

    def check(self, v: Any, path: str, ctx: Ctx) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise SchemaError(f"{path}: expected a number, got a {type(v).__name__}")
        try:
            x = float(v)
        except OverflowError:
            x = math.inf
        if not math.isfinite(x) or not self.lo <= x <= self.hi:
            raise SchemaError(f"{path}: {str(v)[:40]} is outside [{self.lo:g}, {self.hi:g}]")
        return v


@dataclass(frozen=True)
class Choice(Schema):
    values: tuple[str, ...]

    def check(self, v: Any, path: str, ctx: Ctx) -> str:
        if not isinstance(v, str) or v not in self.values:
            raise SchemaError(f"{path}: {safe_text(str(v))[:40]!s} is not one of "
                              f"{', '.join(self.values)}")
        return v


NAME = Str(4096)
TEXT = Nullable(Str(1 << 16))
WORDS = ListOf(Str(1 << 16), max_len=1 << 16)
COUNT = Int(1, MAX_COUNT)
SECONDS = Nullable(Finite(0.0, MAX_TIME_S))
OPT_NUMBER = Nullable(Finite())

# A measurement's counters and memory (study/figures.py); an older run's may lack them.
COUNTERS = Fields(optional={
    "why": TEXT, "on_cpu_s": SECONDS, "events": MapOf(Str(256), Finite(), max_len=4096),
    "events_per_s": MapOf(Str(256), OPT_NUMBER, max_len=4096),
    **{k: OPT_NUMBER for k in ("ipc", "ghz", "mpki", "llc_miss_ratio", "faults",
                               "migrations")},
    "processes": Nullable(Int(0, 1 << 40)), "threads": Nullable(Int(0, 1 << 40)),
    "multiplexed": ListOf(Str(256), max_len=4096), "dropped": ListOf(Str(4096), max_len=4096),
    "na": Nullable(OneOf(MapOf(Str(256), Str(4096), max_len=64), Str(4096)))})
MEMORY = Fields(optional={
    "why": TEXT, "samples": Nullable(Int(0, 1 << 40)),
    "rss_bytes": Nullable(Finite(0, 2.0 ** 62)),            # an int64 column in the exports
    "nodes": MapOf(Str(32), OPT_NUMBER, max_len=65536)})
FIGURES = {"counters": Nullable(COUNTERS), "memory": Nullable(MEMORY)}

PROGRAM = Fields(optional={"time_s": SECONDS, "energy_j": OPT_NUMBER,
                           "energy_note": TEXT, **FIGURES})
REGION = Fields(required={"region": NAME},
                optional={"parent": Nullable(NAME), "kind": TEXT, "wait": Nullable(Bool()),
                          "time_s": SECONDS, "count": Nullable(Int(0, 1 << 62)), **FIGURES})
MEASUREMENTS = Fields(optional={
    "program": Nullable(PROGRAM), "regions": Nullable(ListOf(REGION, max_len=MAX_ITEMS)),
    "host": TEXT, "backend": TEXT, "cpus": Nullable(Anything(4))})

STATUSES = ("running", "ok", "failed", "interrupted", "pending")
RUN = Fields(required={"status": Choice(STATUSES)}, optional={
    "id": Str(256), "config": Str(256), "repeat": COUNT, "exit_status": Nullable(Int(-(1 << 31),
                                                                                    1 << 31)),
    "why": TEXT, "recording": TEXT, "log": TEXT, "host": TEXT, "start": TEXT, "end": TEXT,
    "pid": Nullable(Int(0, 1 << 31)), "recorder_pid": Nullable(Int(0, 1 << 31)),
    "recorder_status": Nullable(Int(-(1 << 31), 1 << 31)), "wall_s": SECONDS,
    "cpuset": TEXT, "command": Nullable(WORDS), "slurm": Nullable(MapOf(Str(64), Str(256))),
    "cpus_recorded": Nullable(Anything(4)), "measurements": Nullable(MEASUREMENTS),
    # the command run once untraced beside the recording (study/untraced.py)
    "untraced": Nullable(Fields(optional={
        "time_s": SECONDS, "exit_status": Nullable(Int(-(1 << 31), 1 << 31)), "why": TEXT,
        "log": TEXT, "order": TEXT}))})


def _config_key(c: dict[str, Any]) -> bool:
    from snumap_tui.study.configs import Config

    return bool(c["key"] == Config.from_dict(c).key)


CONFIG = Fields(
    required={"threads": COUNT, "places": Choice(("compact", "spread", "cores", "pus", "numa",
                                                  "none")), "key": Str(256)},
    optional={"ranks": Nullable(COUNT), "input": TEXT, "input_args": TEXT,
              "input_value": OPT_NUMBER, "freq": Nullable(Str(64)),
              "cpus": Nullable(ListOf(Int(0, 65535), max_len=65536)), "cpuset": TEXT,
              "omp_env": Nullable(MapOf(Str(64), Str(1 << 16), max_len=64)),
              "command": Nullable(WORDS)},
    rules=((_config_key, "key is not the one its fields make"),))
MACHINE = Fields(optional={**{k: TEXT for k in ("hostname", "kernel", "arch", "cpu_model")},
                           **{k: Nullable(Int(0, MAX_COUNT))
                              for k in ("pus", "cores", "packages", "numa_nodes")}})
MANIFEST = Fields(
    required={"format": Choice(("snumap-study",)), "version": Int(0, 1 << 31),
              "command": WORDS, "configurations": ListOf(CONFIG, max_len=MAX_ITEMS),
              "plan": ListOf(Fields(required={"config": Str(256), "repeat": COUNT}),
                             max_len=MAX_ITEMS)},
    optional={"record_args": Nullable(WORDS), "created": TEXT, "updated": TEXT, "host": TEXT,
              "machine": Nullable(MACHINE), "snumap_version": TEXT,
              "actuators": Nullable(MapOf(Str(64), TEXT, max_len=64)),
              "options": Nullable(Anything(6)), "events": Nullable(WORDS),
              "runs": ListOf(Anything(6), max_len=MAX_ITEMS),
              "resumed": ListOf(Str(64), max_len=MAX_ITEMS),
              "slurm": ListOf(Anything(6), max_len=MAX_ITEMS)})


def check(schema: Schema, value: Any, where: str) -> dict[str, Any]:
    """VALUE if it follows SCHEMA, else one SnumapError line naming WHERE and the field."""
    try:
        out: dict[str, Any] = schema(value)
    except SchemaError as exc:
        raise SnumapError(f"{safe_text(where)[:200]}: {safe_text(str(exc))[:200]}") from None
    return out


def check_manifest(value: Any, where: str) -> dict[str, Any]:
    if isinstance(value, dict) and value.get("format") != "snumap-study":
        raise SnumapError(f"{safe_text(where)[:200]} is not a snumap study manifest")
    return check(MANIFEST, value, where)


def check_run(value: Any, where: str) -> dict[str, Any]:
    return check(RUN, value, where)
