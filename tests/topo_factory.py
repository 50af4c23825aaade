"""Hand-built topologies for the model tests (no hwloc needed).

Machine > Package > L3 (one per NUMA node, the node as its memory child) > L2 > L1d > Core > PU,
in hwloc 2.x's nesting. With ``smt_os_split`` the PU OS indexes are numbered like Intel/Linux
does on SMT machines (first hyperthread of every core, then the second ones), so tests prove
that per-PU arrays are aligned by OS index and not by position.
"""

from __future__ import annotations

from typing import Any

from snumap_tui.topology.model import Topology


def make_topology(packages: int = 1, numa_per_package: int = 1, cores_per_numa: int = 2,
                  pus_per_core: int = 1, smt_os_split: bool = False,
                  node_bytes: int = 8 << 30) -> Topology:
    ncores = packages * numa_per_package * cores_per_numa
    counters = {"L3Cache": 0, "L2Cache": 0, "L1Cache": 0, "Core": 0, "PU": 0, "NUMANode": 0,
                "Package": 0}

    def pu_os(core: int, thread: int) -> int:
        return thread * ncores + core if smt_os_split else core * pus_per_core + thread

    def obj(type_: str, os_index: int | None, cpus: list[int], nodes: list[int],
            children: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        li = counters.get(type_, 0)
        counters[type_] = li + 1
        return {"type": type_, "os_index": os_index, "logical_index": li, "depth": 0,
                "cpuset": sorted(cpus), "nodeset": nodes, "children": children, **extra}

    core = 0
    pkgs = []
    for p in range(packages):
        l3s = []
        for n in range(numa_per_package):
            node_os = p * numa_per_package + n
            node_cpus = [pu_os(c, t) for c in range(core, core + cores_per_numa)
                         for t in range(pus_per_core)]
            node = obj("NUMANode", node_os, node_cpus, [node_os], [], local_memory=node_bytes)
            l2s = []
            for _ in range(cores_per_numa):
                cpus = [pu_os(core, t) for t in range(pus_per_core)]
                pus = [obj("PU", c, [c], [node_os], []) for c in cpus]
                cobj = obj("Core", core, cpus, [node_os], pus)
                l1 = obj("L1Cache", None, cpus, [node_os], [cobj], cache_size=48 << 10)
                l2s.append(obj("L2Cache", None, cpus, [node_os], [l1], cache_size=1 << 20))
                core += 1
            l3s.append(obj("L3Cache", None, node_cpus, [node_os], [node, *l2s],
                           cache_size=32 << 20))
        pcpus = sorted(c for l3 in l3s for c in l3["cpuset"])
        pnodes = [p * numa_per_package + n for n in range(numa_per_package)]
        pkgs.append(obj("Package", p, pcpus, pnodes, l3s))
    allc = sorted(c for pk in pkgs for c in pk["cpuset"])
    root = {"type": "Machine", "os_index": 0, "logical_index": 0, "depth": 0, "cpuset": allc,
            "nodeset": list(range(packages * numa_per_package)), "children": pkgs}
    # PU logical indexes follow the DFS order, whatever the OS numbering.
    _renumber_pus(root)
    return Topology.from_dict({"format": "snumap-topology", "version": 1,
                               "meta": {"source": "tests.topo_factory"}, "root": root})


def _renumber_pus(root: dict[str, Any]) -> None:
    n = 0
    stack = [root]
    while stack:
        o = stack.pop()
        if o["type"] == "PU":
            o["logical_index"] = n
            n += 1
        stack.extend(reversed(o["children"]))
