"""Several machines as one topology: the nodes of a job under one root.

The root is a ``System`` object (hwloc 1.x's name for the level above Machine: a set of
machines) whose children are each node's Machine subtree, in the order of the nodes, with the
node's name as the Machine's ``name``. OS indexes are made unique across nodes by adding a
per-type base (node k's PU 3 is PU ``pu_base[k] + 3``), so everything that looks objects up by
``(type, os_index)`` (events' ``cpu``, per-PU arrays, ``Topology.pu``) keeps working; the
original index is ``os_index - base`` (analysis/noderows.py gives each PU its node and its
node-local indexes). Logical PU order stays a depth-first order, so every object still covers
a contiguous run of PUs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from snumap_tui.topology.model import Topology

ROOT_TYPE = "System"


def _shift(d: dict[str, Any], bases: dict[str, int], pu_base: int, numa_base: int,
           logical: dict[str, int]) -> dict[str, Any]:
    out = dict(d)
    t = out["type"]
    if out.get("os_index") is not None:
        out["os_index"] = int(out["os_index"]) + bases.get(t, 0)
    out["logical_index"] = logical.get(t, 0)
    logical[t] = logical.get(t, 0) + 1
    out["cpuset"] = [int(c) + pu_base for c in out.get("cpuset", ())]
    out["nodeset"] = [int(n) + numa_base for n in out.get("nodeset", ())]
    out["depth"] = int(out.get("depth", 0)) + 1 if int(out.get("depth", 0)) >= 0 \
        else out["depth"]
    out["children"] = [_shift(c, bases, pu_base, numa_base, logical)
                       for c in out.get("children", ())]
    return out


def _max_os(d: dict[str, Any], acc: dict[str, int]) -> None:
    if d.get("os_index") is not None:
        acc[d["type"]] = max(acc.get(d["type"], -1), int(d["os_index"]))
    for c in d.get("children", ()):
        _max_os(c, acc)


def combine(topologies: Sequence[Topology], names: Sequence[str]
            ) -> tuple[Topology, list[dict[str, int]]]:
    """(the combined topology, per node the bases added to each type's OS index)."""
    bases_out: list[dict[str, int]] = []
    running: dict[str, int] = {}
    logical: dict[str, int] = {}
    machines = []
    all_pus: list[int] = []
    all_nodes: list[int] = []
    for k, (topo, name) in enumerate(zip(topologies, names)):
        d = topo.to_dict()["root"]
        maxes: dict[str, int] = {}
        _max_os(d, maxes)
        maxes["PU"] = max([maxes.get("PU", -1), *d.get("cpuset", [])])
        maxes["NUMANode"] = max([maxes.get("NUMANode", -1), *d.get("nodeset", [])])
        bases = {t: running.get(t, 0) for t in maxes}
        bases["Machine"] = k - int(d.get("os_index") or 0)
        m = _shift(d, bases, bases.get("PU", 0), bases.get("NUMANode", 0), logical)
        m["name"] = name
        m["infos"] = [*d.get("infos", []), ["HostName", name]]
        machines.append(m)
        all_pus += m["cpuset"]
        all_nodes += m["nodeset"]
        for t, mx in maxes.items():
            running[t] = bases[t] + mx + 1
        bases_out.append(bases)
    root = {"type": ROOT_TYPE, "os_index": None, "logical_index": 0, "depth": 0,
            "cpuset": sorted(all_pus), "nodeset": sorted(all_nodes), "name": "job",
            "children": machines}
    data = {"format": "snumap-topology", "version": 1,
            "meta": {"source": f"{len(machines)} nodes merged", "HostName": "+".join(names)},
            "root": root, "cpukinds": [], "distances": []}
    return Topology.from_dict(data), bases_out

