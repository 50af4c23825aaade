"""The topology model: plain, immutable objects that do not need hwloc.

This is what recordings store, so `snumap replay` works on a machine with other hardware or
without hwloc at all. It is built from hwloc by ``snumap_tui.topology.build`` (or read back from
JSON with ``Topology.from_json``).

Conventions (hwloc 2.x):
- ``type`` is hwloc's type name: Machine, Package, Die, Group, NUMANode, MemCache, L3Cache,
  L2Cache, L1Cache, L1iCache, Core, PU, ...
- ``children`` lists every child, memory children (NUMA nodes, memory-side caches) first,
  then the normal children, in hwloc's order. So a walk over ``children`` visits every object
  exactly once, NUMA nodes included.
- ``id`` is the object's position in a depth-first walk of that tree (memory children first):
  a stable small integer that metric arrays are indexed by.
- cpusets and nodesets are frozensets of OS indexes.
- Every object covers a contiguous range of PUs in logical order (hwloc's logical PU order
  is a DFS order): ``pu_range = (first, last + 1)`` into ``Topology.pus``. Aggregating a per-PU
  array up the tree is one prefix sum (see ``snumap_tui.model``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from snumap_tui.topology import jsonlimits, validate
from snumap_tui.topology.io import IoObject, io_from_dicts, io_to_dicts

FORMAT_VERSION = 1

CACHE_TYPES = ("L1Cache", "L2Cache", "L3Cache", "L4Cache", "L5Cache",
               "L1iCache", "L2iCache", "L3iCache", "MemCache")
MEMORY_TYPES = ("NUMANode", "MemCache")


@dataclass(frozen=True)
class TopoObject:
    id: int
    type: str
    os_index: int | None
    logical_index: int
    depth: int
    parent: int | None
    children: tuple[int, ...]
    cpuset: frozenset[int]
    nodeset: frozenset[int]
    name: str | None = None
    subtype: str | None = None
    # Caches: size in bytes, level (1, 2, 3...), line size, "unified"/"data"/"instruction".
    cache_size: int | None = None
    cache_depth: int | None = None
    cache_linesize: int | None = None
    cache_type: str | None = None
    # NUMA nodes: local memory in bytes; every object: memory below it.
    local_memory: int | None = None
    total_memory: int | None = None
    # hwloc object infos (CPUModel, CPUVendor, ...), in hwloc's order.
    infos: tuple[tuple[str, str], ...] = ()
    # Index range into Topology.pus (logical PU order) of the PUs this object covers.
    pu_range: tuple[int, int] = (0, 0)

    @property
    def is_cache(self) -> bool:
        return self.type in CACHE_TYPES

    @property
    def is_memory(self) -> bool:
        return self.type in MEMORY_TYPES

    def info(self, key: str) -> str | None:
        for k, v in self.infos:
            if k == key:
                return v
        return None

    def label(self) -> str:
        """Short human label: 'Package 0', 'L3 #2 (32MB)', 'PU 17'."""
        short = self.type.replace("Cache", "")
        if self.type == "NUMANode":
            short = "NUMA"
        idx = self.os_index if self.os_index is not None and not self.is_cache else self.logical_index
        sep = " " if self.os_index is not None and not self.is_cache else " #"
        return f"{short}{sep}{idx}"


@dataclass(frozen=True)
class CpuKind:
    """A kind of CPU on a hybrid machine (hwloc_cpukinds): higher efficiency = faster core."""

    cpuset: frozenset[int]
    efficiency: int
    infos: tuple[tuple[str, str], ...] = ()

    def info(self, key: str) -> str | None:
        return dict(self.infos).get(key)


@dataclass(frozen=True)
class Distances:
    """A NUMA distance matrix (hwloc_distances), rows/columns in ``nodes`` order (OS indexes)."""

    name: str | None
    kind: int
    nodes: tuple[int, ...]
    values: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class Topology:
    objects: tuple[TopoObject, ...]
    cpukinds: tuple[CpuKind, ...] = ()
    distances: tuple[Distances, ...] = ()
    # Machine-level facts (hwloc's root infos: OSName, OSRelease, HostName, Architecture, ...)
    # plus where it came from ("source": "this machine", an XML path, a synthetic string).
    meta: Mapping[str, str] = field(default_factory=dict)
    # Bridges, PCI devices and OS devices (topology/io.py); empty in recordings made before
    # snumap kept them, and for synthetic topologies.
    io: tuple[IoObject, ...] = ()
    # Derived lookups, built once.
    _by_type: dict[str, tuple[TopoObject, ...]] = field(default_factory=dict, init=False,
                                                        repr=False, compare=False)
    _by_os: dict[tuple[str, int], TopoObject] = field(default_factory=dict, init=False,
                                                      repr=False, compare=False)
    _io_by_name: dict[tuple[str | None, str], IoObject] = field(
        default_factory=dict, init=False, repr=False, compare=False)
    _io_by_bus: dict[str, IoObject] = field(default_factory=dict, init=False, repr=False,
                                            compare=False)

    def __post_init__(self) -> None:
        by_type: dict[str, list[TopoObject]] = {}
        for o in self.objects:
            by_type.setdefault(o.type, []).append(o)
            if o.os_index is not None:
                self._by_os[(o.type, o.os_index)] = o
        for t, objs in by_type.items():
            self._by_type[t] = tuple(sorted(objs, key=lambda o: o.logical_index))
        for io in self.io:
            if io.type == "OSDev" and io.name:
                self._io_by_name.setdefault((io.osdev_type, io.name), io)
            elif io.type == "PCIDev" and io.busid:
                self._io_by_bus.setdefault(io.busid, io)

    # ---- basic access -------------------------------------------------------------------
    @property
    def root(self) -> TopoObject:
        return self.objects[0]

    def __getitem__(self, obj_id: int) -> TopoObject:
        return self.objects[obj_id]

    def __len__(self) -> int:
        return len(self.objects)

    def __iter__(self) -> Iterator[TopoObject]:
        return iter(self.objects)

    def by_type(self, type_name: str) -> tuple[TopoObject, ...]:
        """Objects of a type in logical order."""
        return self._by_type.get(type_name, ())

    def types(self) -> list[str]:
        return list(self._by_type)

    def get(self, type_name: str, os_index: int) -> TopoObject:
        """The object of a type with an OS index; KeyError if none."""
        return self._by_os[(type_name, os_index)]

    def find(self, type_name: str, os_index: int) -> TopoObject | None:
        return self._by_os.get((type_name, os_index))

    def io_osdev(self, osdev_type: str | None, name: str) -> IoObject | None:
        """The OS device of that type and name ("Network", "eth0"), or None."""
        return self._io_by_name.get((osdev_type, name))

    def io_pci(self, busid: str) -> IoObject | None:
        """The PCI device at that bus id ("0000:02:00.0"), or None."""
        return self._io_by_bus.get(busid)

    @property
    def pus(self) -> tuple[TopoObject, ...]:
        """PUs in logical order (the order per-PU arrays use)."""
        return self.by_type("PU")

    @property
    def pu_os_indexes(self) -> tuple[int, ...]:
        return tuple(p.os_index for p in self.pus)  # type: ignore[misc]

    @property
    def numa_nodes(self) -> tuple[TopoObject, ...]:
        return self.by_type("NUMANode")

    def children_of(self, obj: TopoObject) -> list[TopoObject]:
        return [self.objects[c] for c in obj.children]

    def parent_of(self, obj: TopoObject) -> TopoObject | None:
        return None if obj.parent is None else self.objects[obj.parent]

    def ancestors(self, obj: TopoObject) -> Iterator[TopoObject]:
        """Parent, grandparent, ... up to the root."""
        cur = self.parent_of(obj)
        while cur is not None:
            yield cur
            cur = self.parent_of(cur)

    def walk(self, start: TopoObject | None = None) -> Iterator[TopoObject]:
        """Depth-first, memory children first: the order of ``id``."""
        stack = [start or self.root]
        while stack:
            o = stack.pop()
            yield o
            stack.extend(self.objects[c] for c in reversed(o.children))

    # ---- PU lookups -----------------------------------------------------------------------
    def pu(self, os_index: int) -> TopoObject:
        return self.get("PU", os_index)

    def ancestor_of_type(self, obj: TopoObject, type_name: str) -> TopoObject | None:
        for a in self.ancestors(obj):
            if a.type == type_name:
                return a
        return None

    def core_of(self, pu_os: int) -> TopoObject | None:
        return self.ancestor_of_type(self.pu(pu_os), "Core")

    def package_of(self, pu_os: int) -> TopoObject | None:
        return self.ancestor_of_type(self.pu(pu_os), "Package")

    def caches_of(self, pu_os: int) -> list[TopoObject]:
        """The caches above a PU, innermost (L1) first."""
        return [a for a in self.ancestors(self.pu(pu_os)) if a.is_cache]

    def numa_of(self, pu_os: int) -> TopoObject | None:
        """The NUMA node local to a PU: the first NUMANode whose cpuset holds it. On machines
        with several memory kinds (DRAM + HBM) per locality, the one with the smallest cpuset
        that contains the PU, then the lowest OS index (normally DRAM)."""
        cands = [n for n in self.numa_nodes if pu_os in n.cpuset]
        if not cands:
            return None
        return min(cands, key=lambda n: (len(n.cpuset), n.os_index or 0))

    def numa_nodes_of(self, pu_os: int) -> list[TopoObject]:
        """Every NUMA node local to a PU (several on machines with HBM/CXL tiers)."""
        return [n for n in self.numa_nodes if pu_os in n.cpuset]

    def smallest_covering(self, cpus: frozenset[int] | set[int]) -> TopoObject:
        """The smallest normal object whose cpuset contains ``cpus`` (what hwloc-ps prints)."""
        cur = self.root
        while True:
            nxt = None
            for c in self.children_of(cur):
                if not c.is_memory and cpus <= c.cpuset:
                    nxt = c
                    break
            if nxt is None:
                return cur
            cur = nxt

    def cpukind_of(self, pu_os: int) -> CpuKind | None:
        for k in self.cpukinds:
            if pu_os in k.cpuset:
                return k
        return None

    def distance_matrix(self) -> Distances | None:
        """The NUMA latency matrix if hwloc has one (the first of kind 'from OS')."""
        return self.distances[0] if self.distances else None

    # ---- (de)serialisation ------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Nested form: every object once, NUMA nodes included, as ``children`` of its parent."""

        def obj_dict(o: TopoObject) -> dict[str, Any]:
            d: dict[str, Any] = {
                "type": o.type,
                "os_index": o.os_index,
                "logical_index": o.logical_index,
                "depth": o.depth,
                "cpuset": sorted(o.cpuset),
                "nodeset": sorted(o.nodeset),
            }
            for k in ("name", "subtype", "cache_size", "cache_depth", "cache_linesize",
                      "cache_type", "local_memory", "total_memory"):
                v = getattr(o, k)
                if v is not None:
                    d[k] = v
            if o.infos:
                d["infos"] = [list(kv) for kv in o.infos]
            d["children"] = [obj_dict(self.objects[c]) for c in o.children]
            return d

        return {
            "format": "snumap-topology",
            "version": FORMAT_VERSION,
            "meta": dict(self.meta),
            "root": obj_dict(self.root),
            "cpukinds": [{"cpuset": sorted(k.cpuset), "efficiency": k.efficiency,
                          "infos": [list(kv) for kv in k.infos]} for k in self.cpukinds],
            "distances": [{"name": d.name, "kind": d.kind, "nodes": list(d.nodes),
                           "values": [list(r) for r in d.values]} for d in self.distances],
            **({"io": io_to_dicts(self.io)} if self.io else {}),
        }

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Topology:
        """The model of a snumap JSON topology; ValueError (one line) when it is not one or
        breaks its checks (topology/validate.py): the JSON comes from files others wrote."""
        if not isinstance(data, Mapping) or data.get("format") != "snumap-topology":
            raise validate.TopologyError("not a snumap topology (missing format marker)")
        version = data.get("version", 0)
        if not isinstance(version, int) or isinstance(version, bool):
            raise validate.TopologyError(f"topology format version {str(version)[:20]!r} is "
                                         "not a number")
        if version > FORMAT_VERSION:
            raise ValueError(f"topology format version {version} is newer than "
                             f"this snumap understands ({FORMAT_VERSION})")
        raw, parents, kids = validate.flatten(data)
        validate.check_extras(data)
        if any(d["attach"] >= len(raw) for d in data.get("io", [])):
            raise ValueError("an I/O object attaches outside the tree")
        return cls.from_flat(raw, parents, kids, data)

    @classmethod
    def from_flat(cls, raw: list[dict[str, Any]], parents: list[int | None],
                  kids: list[list[int]], extra: Mapping[str, Any]) -> Topology:
        """Build from objects in DFS order (memory children first) given as plain dicts."""
        # PU ranges: PUs in logical order are a DFS order, so each object covers a run.
        pu_pos: dict[int, int] = {}
        pus = sorted((i for i, d in enumerate(raw) if d["type"] == "PU"),
                     key=lambda i: raw[i]["logical_index"])
        for pos, i in enumerate(pus):
            pu_pos[raw[i]["os_index"]] = pos
        objs = []
        for i, d in enumerate(raw):
            cpus = frozenset(int(c) for c in d.get("cpuset", ()))
            positions = [pu_pos[c] for c in cpus if c in pu_pos]
            rng = (min(positions), max(positions) + 1) if positions else (0, 0)
            objs.append(TopoObject(
                id=i, type=d["type"], os_index=d.get("os_index"),
                logical_index=int(d.get("logical_index", 0)), depth=int(d.get("depth", 0)),
                parent=parents[i], children=tuple(kids[i]), cpuset=cpus,
                nodeset=frozenset(int(n) for n in d.get("nodeset", ())),
                name=d.get("name"), subtype=d.get("subtype"),
                cache_size=d.get("cache_size"), cache_depth=d.get("cache_depth"),
                cache_linesize=d.get("cache_linesize"), cache_type=d.get("cache_type"),
                local_memory=d.get("local_memory"), total_memory=d.get("total_memory"),
                infos=tuple((str(k), str(v)) for k, v in d.get("infos", ())),
                pu_range=rng,
            ))
        kinds = tuple(CpuKind(frozenset(k["cpuset"]), int(k["efficiency"]),
                              tuple((str(a), str(b)) for a, b in k.get("infos", ())))
                      for k in extra.get("cpukinds", ()))
        dists = tuple(Distances(d.get("name"), int(d.get("kind", 0)), tuple(d["nodes"]),
                                tuple(tuple(r) for r in d["values"]))
                      for d in extra.get("distances", ()))
        return cls(objects=tuple(objs), cpukinds=kinds, distances=dists,
                   meta=dict(extra.get("meta", {})), io=io_from_dicts(extra.get("io", ())))

    @classmethod
    def from_json(cls, text: str | bytes) -> Topology:
        return cls.from_dict(jsonlimits.loads(text))
