"""Checks of a snumap JSON topology before the model is built from it.

A topology comes from files others wrote: ``--topology FILE.json`` and the header of every
recording. Readers size tables by its PU numbers (a cpu -> row table per PU number) and walk
its tree, so a PU numbered 10^9 or -5, a tree 2,000 levels deep or an object with a cpuset of a
string must become one line (ValueError naming the object), never an allocation, a recursion
or a TypeError three layers later. The tree is walked with an explicit stack.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MAX_OBJECTS = 1 << 20       # a real machine has at most a few tens of thousands
MAX_TREE_DEPTH = 64         # hwloc has ~12 levels (Machine .. PU, Groups, memory)
MAX_PU = (1 << 16) - 1      # Linux numbers at most 8192 CPUs (NR_CPUS)
MAX_INDEX = (1 << 32) - 1   # other objects' os_index, logical_index (hwloc: unsigned)


class TopologyError(ValueError):
    """A JSON topology that breaks a check (one line, naming the object)."""


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _int(where: str, v: Any, lo: int, hi: int) -> None:
    if not _is_int(v) or not lo <= v <= hi:
        raise TopologyError(f"{where}: {str(v)[:40]!r} is not an integer in {lo}..{hi}")


def _opt(where: str, v: Any, kind: type | tuple[type, ...]) -> None:
    if v is not None and (not isinstance(v, kind) or isinstance(v, bool)):
        raise TopologyError(f"{where}: expected {getattr(kind, '__name__', 'a value')}, "
                         f"got {type(v).__name__}")


def _ints(where: str, v: Any, hi: int) -> None:
    if not isinstance(v, list) or not all(_is_int(x) and 0 <= x <= hi for x in v):
        raise TopologyError(f"{where}: expected a list of integers in 0..{hi}")


def _pairs(where: str, v: Any) -> None:
    if not isinstance(v, list) or not all(isinstance(p, (list, tuple)) and len(p) == 2
                                          for p in v):
        raise TopologyError(f"{where}: expected a list of [key, value] pairs")


def check_object(where: str, d: Any) -> None:
    """One object dict as ``Topology.from_flat`` reads it."""
    if not isinstance(d, Mapping):
        raise TopologyError(f"{where}: expected an object, got {type(d).__name__}")
    t = d.get("type")
    if not isinstance(t, str) or not t or len(t) > 64:
        raise TopologyError(f"{where}: no object type")
    os_index = d.get("os_index")
    if t == "PU":
        if not isinstance(os_index, int) or isinstance(os_index, bool) \
                or not 0 <= os_index <= MAX_PU:
            raise TopologyError(f"{where}: PU numbers are 0..{MAX_PU}, not "
                                f"{str(os_index)[:40]!r}")
    elif os_index is not None:
        _int(f"{where} ({t}) os_index", os_index, 0, MAX_INDEX)
    for k in ("logical_index", "depth"):
        if k in d:
            _int(f"{where} {k}", d[k], -MAX_INDEX, MAX_INDEX)
    _ints(f"{where} cpuset", d.get("cpuset", []), MAX_PU)
    _ints(f"{where} nodeset", d.get("nodeset", []), MAX_INDEX)
    for k in ("name", "subtype", "cache_type"):
        _opt(f"{where} {k}", d.get(k), str)
    for k in ("cache_size", "cache_depth", "cache_linesize", "local_memory", "total_memory"):
        _opt(f"{where} {k}", d.get(k), int)
    _pairs(f"{where} infos", d.get("infos", []))


def flatten(data: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[int | None],
                                              list[list[int]]]:
    """The tree under ``data["root"]`` checked and flattened depth first, as
    ``Topology.from_flat`` takes it (raw dicts, parent ids, child ids)."""
    raw: list[dict[str, Any]] = []
    parents: list[int | None] = []
    kids: list[list[int]] = []
    stack: list[tuple[Any, int | None, int]] = [(data.get("root"), None, 0)]
    while stack:
        d, parent, level = stack.pop()
        where = f"object {len(raw)}"
        if level > MAX_TREE_DEPTH:
            raise TopologyError(f"the tree is deeper than {MAX_TREE_DEPTH} levels")
        if len(raw) >= MAX_OBJECTS:
            raise TopologyError(f"more than {MAX_OBJECTS:,} objects")
        check_object(where, d)
        children = d.get("children", [])
        if not isinstance(children, list):
            raise TopologyError(f"{where}: children is not a list")
        my_id = len(raw)
        raw.append(dict(d))
        parents.append(parent)
        kids.append([])
        if parent is not None:
            kids[parent].append(my_id)
        stack.extend((c, my_id, level + 1) for c in reversed(children))
    pus = [d["os_index"] for d in raw if d["type"] == "PU"]
    if not pus:
        raise TopologyError("it has no PU")
    if len(set(pus)) != len(pus):
        raise TopologyError("two PUs have one os_index")
    return raw, parents, kids


def check_extras(data: Mapping[str, Any]) -> None:
    """The machine-level parts: CPU kinds, NUMA distances, meta, I/O objects."""
    for key in ("cpukinds", "distances", "io"):
        if not isinstance(data.get(key, []), list):
            raise TopologyError(f"{key} is not a list")
    for i, k in enumerate(data.get("cpukinds", [])):
        if not isinstance(k, Mapping):
            raise TopologyError(f"cpukinds[{i}] is not an object")
        _ints(f"cpukinds[{i}] cpuset", k.get("cpuset"), MAX_PU)
        _int(f"cpukinds[{i}] efficiency", k.get("efficiency"), -MAX_INDEX, MAX_INDEX)
        _pairs(f"cpukinds[{i}] infos", k.get("infos", []))
    for i, d in enumerate(data.get("distances", [])):
        if not isinstance(d, Mapping):
            raise TopologyError(f"distances[{i}] is not an object")
        _ints(f"distances[{i}] nodes", d.get("nodes"), MAX_INDEX)
        vals = d.get("values")
        n = len(d["nodes"])
        if not isinstance(vals, list) or len(vals) != n:
            raise TopologyError(f"distances[{i}]: values are not {n} rows")
        for r in vals:
            if not isinstance(r, list) or len(r) != n or not all(_is_int(x) for x in r):
                raise TopologyError(f"distances[{i}]: values are not {n} integers a row")
    if not isinstance(data.get("meta", {}), Mapping):
        raise TopologyError("meta is not an object")
    for i, d in enumerate(data.get("io", [])):
        if not isinstance(d, Mapping) or not isinstance(d.get("type"), str):
            raise TopologyError(f"io[{i}] is not an I/O object")
        _int(f"io[{i}] attach", d.get("attach"), 0, MAX_OBJECTS)
        for k in ("io_parent", "class_id", "vendor_id", "device_id", "numa", "logical_index"):
            if d.get(k) is not None:
                _int(f"io[{i}] {k}", d[k], 0, MAX_INDEX)
        if d.get("io_parent") is not None and d["io_parent"] >= len(data["io"]):
            raise TopologyError(f"io[{i}] io_parent is outside the list")
        _opt(f"io[{i}] linkspeed", d.get("linkspeed"), (int, float))
        _pairs(f"io[{i}] infos", d.get("infos", []))
