"""What `snumap merge` keeps of the attribution data (docs/format.md, "Version 2"): every
node's regions (kind 14), thread counters (kind 16) and process memory (kind 17) chunks, and
the header's ``regions``, ``counters`` and ``process_memory`` entries.

Events chunks are copied byte for byte and mapped by the reader (store/nodes.py); these three
kinds are instead decoded one chunk at a time, moved onto the job's numbering -- times by the
node's ``shift_ns``, tids and pids above 0 by its ``tid_base``, PUs by its ``cpu_base``, NUMA
nodes (>= 0) by its NUMA base, as the topology's were -- and re-encoded. So every reader of
them (report, export, replay) reads a job's as it reads one machine's, and the merge holds one
chunk in memory at a time.

Counter events: a merged recording has one list of events (one column each, as one node's
has). Nodes that counted the same events (in any order) are merged, their columns put in the
first node's order; nodes that counted different sets are refused before anything is written
(one line naming both), since a column one node lacks would read as a count of 0, not n/a.
A node recorded without ``--events`` (or whose events could not be counted) has no rows and
merges with any.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from snumap_tui.errors import SnumapError
from snumap_tui.store.counters import decode_counters, encode_counters
from snumap_tui.store.kinds import K_PROCESS_MEMORY, K_REGIONS, K_THREAD_COUNTERS
from snumap_tui.store.procmem import MemoryBuffer, decode_memory
from snumap_tui.store.regions import decode_regions, encode_regions
from snumap_tui.trace.counters import counter_dtype

KINDS = (K_REGIONS, K_THREAD_COUNTERS, K_PROCESS_MEMORY)


def _event_names(header: dict[str, Any]) -> list[str]:
    c = header.get("counters")
    events = c.get("events") if isinstance(c, dict) else None
    return [str(e.get("name")) if isinstance(e, dict) else str(e) for e in events or []]


def counter_events(paths: Sequence[Path], headers: Sequence[dict[str, Any]]) -> list[str]:
    """The events the nodes counted (the first counting node's order); SnumapError when two
    nodes counted different sets."""
    first: tuple[Path, list[str]] | None = None
    for p, h in zip(paths, headers):
        names = _event_names(h)
        if not names:
            continue
        if first is None:
            first = (p, names)
        elif set(names) != set(first[1]):
            raise SnumapError(
                f"{first[0].name} counted {','.join(first[1])} but {p.name} counted "
                f"{','.join(names)}: a merged recording has one set of counter events; "
                "record every node with the same --events (or merge those nodes apart)")
    return [] if first is None else first[1]


def _joined(values: list[tuple[str, Any]]) -> Any:
    """One value when every node has the same, else "node: value; ..."."""
    got = [(n, v) for n, v in values if v]
    if len({str(v) for _, v in got}) <= 1:
        return got[0][1] if got else None
    return "; ".join(f"{n}: {v}" for n, v in got)


def header_entries(names: Sequence[str], headers: Sequence[dict[str, Any]],
                   numa_bases: Sequence[int], events: list[str]) -> dict[str, Any]:
    """The merged header's ``counters``, ``regions`` and ``process_memory`` (each only when
    some node has it): per-node lines prefixed with the node's name, NUMA nodes moved."""
    out: dict[str, Any] = {}
    pairs = list(zip(names, headers))
    cs = [(n, h["counters"]) for n, h in pairs if isinstance(h.get("counters"), dict)]
    if cs:
        described: list[Any] = next((c["events"] for _, c in cs
                                     if _event_names({"counters": c})), [])
        order = {str(e.get("name")) if isinstance(e, dict) else str(e): e for e in described}
        out["counters"] = {
            "events": [order[e] for e in events if e in order],
            "source": _joined([(n, c.get("source")) for n, c in cs]),
            "dropped": [f"{n}: {d}" for n, c in cs for d in c.get("dropped") or []]}
    rs = [(n, h["regions"]) for n, h in pairs if isinstance(h.get("regions"), dict)]
    if rs:
        out["regions"] = {
            "mode": _joined([(n, r.get("mode")) for n, r in rs]),
            "found": sorted({str(f) for _, r in rs for f in r.get("found") or []}),
            "problems": [f"{n}: {p}" for n, r in rs for p in r.get("problems") or []],
            "markers": any(bool(r.get("markers")) for _, r in rs)}
    ms = [(n, h["process_memory"], b) for (n, h), b in zip(pairs, numa_bases)
          if isinstance(h.get("process_memory"), dict)]
    if ms:
        out["process_memory"] = {
            "source": _joined([(n, m.get("source")) for n, m, _ in ms]),
            "nodes": [int(x) + b for _, m, b in ms for x in m.get("nodes") or []]}
    return out


def _shifted(t: np.ndarray, shift: int) -> np.ndarray:
    return np.maximum(t.astype(np.int64) + shift, 0).astype(np.uint64)


def _qualified(a: np.ndarray, base: int) -> np.ndarray:
    return np.where(a > 0, a.astype(np.int64) + base, a).astype(a.dtype)


def _regions(v: Any, count: int, shift: int, tb: int, said: int = 0
             ) -> tuple[dict[str, Any], int, int, int]:
    rows, table, sums, lost = decode_regions(v, count)
    rows["t_ns"] = _shifted(rows["t_ns"], shift)
    rows["tid"] = _qualified(rows["tid"], tb)
    rows["pid"] = _qualified(rows["pid"], tb)
    # The calls the kernel summed (regions.bpf.c) and the records it lost, moved the same way.
    for k in ("t_first", "t_last"):
        sums[k] = _shifted(sums[k], shift)
    sums["tid"] = _qualified(sums["tid"], tb)
    sums["pid"] = _qualified(sums["pid"], tb)
    if not len(rows) and not len(sums) and not lost:
        return {}, 0, 0, 0
    value, t0, t1 = encode_regions(rows, table, sums, lost, max(said + shift, 0))
    return value, len(rows), t0, t1


def _counters(v: Any, shift: int, tb: int, cb: int, events: list[str]
              ) -> tuple[dict[str, Any], int, int, int]:
    tc = decode_counters(v)
    if sorted(tc.events) != sorted(events):
        raise ValueError(f"counts {','.join(tc.events)}, not the job's {','.join(events)}")
    src, k = tc.rows, len(events)
    idx = [tc.events.index(e) for e in events]
    rows = np.zeros(len(src), counter_dtype(k))
    rows["t_start"] = _shifted(src["t_start"], shift)
    rows["t_end"] = _shifted(src["t_end"], shift)
    rows["tid"] = _qualified(src["tid"], tb)
    rows["pid"] = _qualified(src["pid"], tb)
    rows["cpu"] = src["cpu"].astype(np.int64) + cb
    rows["n"] = k
    for f in ("value", "enabled", "running"):
        rows[f] = src[f].reshape(len(src), k)[:, idx]
    if not len(rows):
        return {}, 0, 0, 0
    value, t0, t1 = encode_counters(rows, events)
    return value, len(rows), t0, t1


def _memory(v: Any, shift: int, tb: int, numa_base: int) -> tuple[dict[str, Any], int, int, int]:
    rows = decode_memory(v)
    rows["t_ns"] = _shifted(rows["t_ns"], shift)
    rows["pid"] = _qualified(rows["pid"], tb)
    rows["node"] = np.where(rows["node"] >= 0, rows["node"] + numa_base, rows["node"])
    buf = MemoryBuffer()
    buf.add(rows)
    got = buf.take()
    if got is None:
        return {}, 0, 0, 0
    value, n, t0, t1 = got
    return value, n, t0, t1


def copy_attribution(rec: Any, node: dict[str, Any], numa_base: int, events: list[str],
                     add: Callable[..., None], note: Callable[[str], None]) -> int:
    """Node ``node``'s regions, thread counters and process memory chunks of ``rec``, moved
    onto the job's numbering and handed to ``add(kind, value, count=, t_min=, t_max=)`` one
    chunk at a time; a chunk that cannot be read is skipped with a ``note``. Returns the rows
    written."""
    shift, tb, cb = int(node["shift_ns"]), int(node["tid_base"]), int(node["cpu_base"])
    written = 0
    for h in rec._chunks:
        if h.kind not in KINDS:
            continue
        v = rec._payload(h)
        what = f"{rec.name}: {h.name} chunk at byte {h.offset}"
        if v is None:
            note(f"{what}: damaged, skipped")
            continue
        try:
            if h.kind == K_REGIONS:
                value, n, t0, t1 = _regions(v, h.count, shift, tb, h.t_min)
            elif h.kind == K_THREAD_COUNTERS:
                value, n, t0, t1 = _counters(v, shift, tb, cb, events)
            else:
                value, n, t0, t1 = _memory(v, shift, tb, numa_base)
        except (ValueError, TypeError, KeyError, IndexError) as e:
            note(f"{what}: skipped ({e})")
            continue
        if n or value:          # a regions chunk may hold only summed calls or a loss
            add(h.kind, value, count=n, t_min=t0, t_max=t1)
            written += n
    return written
