"""The regions chunk (kind 14, docs/format.md "Regions chunk"): region enter/leave records from
uprobes and user markers, with the table of the region names they use.

Encoding, decoding and validation of that one chunk kind live here; the Writer buffers rows
(``RegionBuffer``) and the reader decodes each chunk with ``decode_regions`` (which refuses a
payload that does not follow the schema, so a damaged chunk is skipped, never misread).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from snumap_tui.store.chunks import K_REGIONS
from snumap_tui.store.text import clean_text
from snumap_tui.trace.region_catalog import (
    BEGIN,
    KINDS,
    MARK,
    REGION_DTYPE,
    ROLES,
    SUM_DTYPE,
    RegionName,
)

__all__ = ["K_REGIONS", "RegionBuffer", "Regions", "decode_regions", "encode_regions",
           "merge_chunks", "no_sums"]
_KEYS = ("n", "t_ns", "tid", "pid", "op", "rid", "names", "kinds", "roles", "wait")
# The optional "sums" map (a newer writer's: readers before it ignore the key): SUM_DTYPE's
# columns, rids indexing the same name table.
SUM_KEYS: tuple[str, ...] = tuple(SUM_DTYPE.names or ())


def no_sums() -> np.ndarray:
    return np.zeros(0, SUM_DTYPE)


def encode_regions(rows: np.ndarray, table: list[RegionName], sums: np.ndarray | None = None,
                   lost: dict[str, int] | None = None, lost_t: int = 0
                   ) -> tuple[dict[str, object], int, int]:
    """(chunk value, t_min, t_max) of ROWS (REGION_DTYPE) and SUMS (SUM_DTYPE), whose rids
    index TABLE, and LOST (records lost per region name, said at LOST_T). The chunk carries only the names
    they use, renumbered from 0."""
    rows = rows[np.argsort(rows["t_ns"], kind="stable")]
    sums = no_sums() if sums is None else sums
    used, local = np.unique(np.concatenate([rows["rid"], sums["rid"]]).astype(np.uint32),
                            return_inverse=True)
    local, sum_rid = local[:len(rows)], local[len(rows):]
    names = [table[int(r)] for r in used.tolist()]
    value: dict[str, object] = {
        "n": len(rows),
        "t_ns": rows["t_ns"].astype(np.uint64),
        "tid": rows["tid"].astype(np.int32),
        "pid": rows["pid"].astype(np.int32),
        "op": rows["op"].astype(np.uint8),
        "rid": local.astype(np.uint32),
        "names": [n.name for n in names],
        "kinds": [n.kind for n in names],
        "roles": [n.role for n in names],
        "wait": np.array([n.wait for n in names], dtype=bool),
    }
    times = [rows["t_ns"]]
    if len(sums):
        cols = {k: sums[k] for k in SUM_KEYS}
        cols["rid"] = sum_rid.astype(np.uint32)
        value["sums"] = cols
        times += [sums["t_first"], sums["t_last"]]
    if lost:
        value["lost"] = {"names": list(lost), "n": np.array(list(lost.values()), np.uint64)}
    every = np.concatenate(times)
    if not len(every):              # a loss alone: when it was said
        return value, int(lost_t), int(lost_t)
    return value, int(every.min()), int(every.max())


def _decode_lost(value: dict) -> dict[str, int]:
    """The optional "lost" map: records lost per region name."""
    raw = value.get("lost")
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not isinstance(raw.get("names"), list):
        raise ValueError("lost: not a map of names and counts")  # noqa: TRY004 - damage path
    n = np.asarray(raw.get("n"))
    if n.shape != (len(raw["names"]),) or n.dtype.kind not in "iu":
        raise ValueError("lost: counts do not match the names")
    return {clean_text(str(k)): int(v) for k, v in zip(raw["names"], n.tolist())}


def _decode_sums(value: dict, m: int) -> np.ndarray:
    """The SUM_DTYPE rows of a chunk's "sums" map (none without one); ValueError as below."""
    raw = value.get("sums")
    if raw is None:
        return no_sums()
    if not isinstance(raw, dict) or any(k not in raw for k in SUM_KEYS):
        raise ValueError("sums: not a map of its columns")
    cols = {k: np.asarray(raw[k]) for k in SUM_KEYS}
    n = len(cols["count"])
    for k, c in cols.items():
        if c.shape != (n,) or c.dtype.kind not in "iu":
            raise ValueError(f"sums: column {k} is not {n} integers")
    if n and int(cols["rid"].max()) >= m:
        raise ValueError("sums: a region id outside the name table")
    out = np.zeros(n, SUM_DTYPE)
    for k, c in cols.items():
        out[k] = c
    return out


def decode_regions(value: object, count: int
                   ) -> tuple[np.ndarray, list[RegionName], np.ndarray, dict[str, int]]:
    """(REGION_DTYPE rows, their name table, SUM_DTYPE sums, records lost per region name) of
    one chunk; ValueError when it does not follow
    the schema (missing key, lengths that disagree, an unknown op, kind or role, a rid
    outside the table)."""
    if not isinstance(value, dict):
        raise ValueError("the payload is not a map")  # noqa: TRY004 - the reader's damage path
    missing = [k for k in _KEYS if k not in value]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}")
    n = int(value["n"])
    if n != count:
        raise ValueError(f"{n} rows inside, {count} in its header")
    cols = {k: np.asarray(value[k]) for k in ("t_ns", "tid", "pid", "op", "rid")}
    for k, c in cols.items():
        if c.shape != (n,) or c.dtype.kind not in "iu":
            raise ValueError(f"column {k} is not {n} integers")
    names, kinds, roles = list(value["names"]), list(value["kinds"]), list(value["roles"])
    wait = np.asarray(value["wait"])
    m = len(names)
    if not (len(kinds) == len(roles) == m == len(wait)):
        raise ValueError("name table columns of different lengths")
    bad = sorted({str(k) for k in kinds} - set(KINDS)) + sorted({str(r) for r in roles} -
                                                                 set(ROLES))
    if bad:
        raise ValueError(f"unknown kind or role {bad[0]!r}")
    if n and (int(cols["op"].min()) < BEGIN or int(cols["op"].max()) > MARK):
        raise ValueError("an op outside begin/end/mark")
    if n and int(cols["rid"].max()) >= m:
        raise ValueError("a region id outside the name table")
    rows = np.zeros(n, REGION_DTYPE)
    for k, c in cols.items():
        rows[k] = c
    table = [RegionName(clean_text(str(a)), str(b), str(c), bool(d))
             for a, b, c, d in zip(names, kinds, roles, wait.tolist())]
    return rows, table, _decode_sums(value, m), _decode_lost(value)


@dataclass
class Regions:
    """Every region row of a recording, time-ordered, with one name table, and the kernel's
    summaries of aggregated calls (``sums``, SUM_DTYPE, by ``t_last``)."""

    rows: np.ndarray
    names: list[RegionName]
    sums: np.ndarray = field(default_factory=no_sums)
    lost: dict[str, int] = field(default_factory=dict)     # records lost, per region name

    def __len__(self) -> int:
        return len(self.rows)


def merge_chunks(parts: Iterable[tuple[Any, ...]]) -> Regions:
    """Chunks' rows (and sums) renumbered into one table (names equal in all fields are one
    region)."""
    ids: dict[RegionName, int] = {}
    names: list[RegionName] = []
    out, sums = [], []
    lost: dict[str, int] = {}
    for part in parts:
        rows, table = part[0], part[1]
        remap = np.array([ids.setdefault(t, len(ids)) for t in table], dtype=np.uint32)
        for t in table:
            if ids[t] == len(names):
                names.append(t)
        r = rows.copy()
        if len(r):
            r["rid"] = remap[r["rid"]]
        out.append(r)
        if len(part) > 2 and len(part[2]):
            s = part[2].copy()
            s["rid"] = remap[s["rid"]]
            sums.append(s)
        for k, v in (part[3] if len(part) > 3 else {}).items():
            lost[k] = lost.get(k, 0) + v
    rows = np.concatenate(out) if out else np.zeros(0, REGION_DTYPE)
    if len(rows) > 1:
        rows = rows[np.argsort(rows["t_ns"], kind="stable")]
    every = np.concatenate(sums) if sums else no_sums()
    return Regions(rows, names, every[np.argsort(every["t_last"], kind="stable")], lost)


class RegionBuffer:
    """What the Writer holds between flushes."""

    def __init__(self) -> None:
        self.parts: list[np.ndarray] = []
        self.sums: list[np.ndarray] = []
        self.lost: dict[str, int] = {}
        self.lost_t = 0
        self.table: list[RegionName] = []
        self.n = 0

    def add(self, rows: np.ndarray, table: list[RegionName]) -> None:
        if len(rows):
            self.parts.append(np.asarray(rows, dtype=REGION_DTYPE))
            self.n += len(rows)
        self.table = list(table)

    def add_sums(self, sums: np.ndarray, table: list[RegionName]) -> None:
        if len(sums):
            self.sums.append(np.asarray(sums, dtype=SUM_DTYPE))
            self.n += len(sums)
        self.table = list(table)

    def add_lost(self, lost: dict[str, int], t_ns: int) -> None:
        for k, v in lost.items():
            self.lost[k] = self.lost.get(k, 0) + v
        self.lost_t = t_ns

    def take(self) -> tuple[np.ndarray, list[RegionName], np.ndarray, dict[str, int], int] | None:
        if not self.parts and not self.sums and not self.lost:
            return None
        rows = np.concatenate(self.parts) if self.parts else np.zeros(0, REGION_DTYPE)
        sums = np.concatenate(self.sums) if self.sums else no_sums()
        got = rows, self.table, sums, self.lost, self.lost_t
        self.parts, self.sums, self.lost, self.n = [], [], {}, 0
        return got
