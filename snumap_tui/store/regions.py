"""The regions chunk (kind 14, docs/format.md "Regions chunk"): region enter/leave records from
uprobes and user markers, with the table of the region names they use.

Encoding, decoding and validation of that one chunk kind live here; the Writer buffers rows
(``RegionBuffer``) and the reader decodes each chunk with ``decode_regions`` (which refuses a
payload that does not follow the schema, so a damaged chunk is skipped, never misread).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from snumap_tui.store.chunks import K_REGIONS
from snumap_tui.store.text import clean_text
from snumap_tui.trace.region_catalog import (
    BEGIN,
    KINDS,
    MARK,
    REGION_DTYPE,
    ROLES,
    RegionName,
)

__all__ = ["K_REGIONS", "RegionBuffer", "Regions", "decode_regions", "encode_regions",
           "merge_chunks"]
_KEYS = ("n", "t_ns", "tid", "pid", "op", "rid", "names", "kinds", "roles", "wait")


def encode_regions(rows: np.ndarray, table: list[RegionName]) -> tuple[dict[str, object], int,
                                                                           int]:
    """(chunk value, t_min, t_max) of ROWS (REGION_DTYPE; rids index TABLE). The chunk carries
    only the names its rows use, renumbered from 0."""
    rows = rows[np.argsort(rows["t_ns"], kind="stable")]
    used, local = np.unique(rows["rid"], return_inverse=True)
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
    return value, int(rows["t_ns"][0]), int(rows["t_ns"][-1])


def decode_regions(value: object, count: int) -> tuple[np.ndarray, list[RegionName]]:
    """(REGION_DTYPE rows, their name table) of one chunk; ValueError when it does not follow
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
    return rows, table


@dataclass
class Regions:
    """Every region row of a recording, time-ordered, with one name table."""

    rows: np.ndarray
    names: list[RegionName]

    def __len__(self) -> int:
        return len(self.rows)


def merge_chunks(parts: Iterable[tuple[np.ndarray, list[RegionName]]]) -> Regions:
    """Chunks' rows renumbered into one table (names equal in all fields are one region)."""
    ids: dict[RegionName, int] = {}
    names: list[RegionName] = []
    out = []
    for rows, table in parts:
        remap = np.array([ids.setdefault(t, len(ids)) for t in table], dtype=np.uint32)
        for t in table:
            if ids[t] == len(names):
                names.append(t)
        r = rows.copy()
        if len(r):
            r["rid"] = remap[r["rid"]]
        out.append(r)
    rows = np.concatenate(out) if out else np.zeros(0, REGION_DTYPE)
    if len(rows) > 1:
        rows = rows[np.argsort(rows["t_ns"], kind="stable")]
    return Regions(rows, names)


class RegionBuffer:
    """What the Writer holds between flushes."""

    def __init__(self) -> None:
        self.parts: list[np.ndarray] = []
        self.table: list[RegionName] = []
        self.n = 0

    def add(self, rows: np.ndarray, table: list[RegionName]) -> None:
        if len(rows):
            self.parts.append(np.asarray(rows, dtype=REGION_DTYPE))
            self.n += len(rows)
        self.table = list(table)

    def take(self) -> tuple[np.ndarray, list[RegionName]] | None:
        if not self.parts:
            return None
        rows = np.concatenate(self.parts)
        self.parts, self.n = [], 0
        return rows, self.table
