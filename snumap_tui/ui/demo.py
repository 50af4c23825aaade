"""Deterministic machines and frames for the UI's tests, snapshots, screenshots and benchmark.

Why this exists: the views must be checked on machines this 2-vCPU VM is not (384 PUs, 8 NUMA
nodes, a PMU, RAPL) and snapshot tests need the same pixels every run. So this builds a
``Topology`` in hwloc's shape (Machine > Package > Group+NUMANode > L3 > L2 > L1d > Core > PU, as
``lstopo --input "pack:2 numa:2 l3:2 core:2 pu:2"`` prints it) without hwloc, and Frames whose
values are a pure function of (object, step), with the metric names of the model's catalogue.
Nothing here is used on the live path; headless (no textual, no rich).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from snumap_tui.model.frame import Frame, TaskRow
from snumap_tui.sources.base import SourceStatus
from snumap_tui.topology.model import Topology

GIB = 1 << 30


def synthetic_topology(packages: int = 2, numa_per_package: int = 2, l3_per_numa: int = 2,
                       cores_per_l3: int = 4, pus_per_core: int = 2,
                       meta: dict[str, str] | None = None) -> Topology:
    """A topology like hwloc's synthetic ``pack:P numa:N l3:L core:C pu:T`` (PU OS index =
    logical index, as hwloc numbers synthetic PUs)."""
    counters: dict[str, int] = {}

    def nxt(kind: str) -> int:
        counters[kind] = counters.get(kind, 0) + 1
        return counters[kind] - 1

    def node(type_: str, depth: int, children: list[dict[str, Any]], os_index: bool = True,
             **extra: Any) -> dict[str, Any]:
        li = nxt(type_)
        cpus = sorted({c for ch in children for c in ch["cpuset"]}) if children else []
        nodes = sorted({n for ch in children for n in ch["nodeset"]}) if children else []
        d: dict[str, Any] = {"type": type_, "os_index": li if os_index else None,
                             "logical_index": li, "depth": depth, "cpuset": cpus,
                             "nodeset": nodes, "children": children}
        d.update(extra)
        return d

    def pu() -> dict[str, Any]:
        li = nxt("PU")
        return {"type": "PU", "os_index": li, "logical_index": li, "depth": 8,
                "cpuset": [li], "nodeset": [], "children": []}

    def core() -> dict[str, Any]:
        c = node("Core", 7, [pu() for _ in range(pus_per_core)])
        l1 = node("L1Cache", 6, [c], os_index=False, cache_size=48 << 10, cache_depth=1)
        return node("L2Cache", 5, [l1], os_index=False, cache_size=1 << 20, cache_depth=2)

    def l3() -> dict[str, Any]:
        return node("L3Cache", 4, [core() for _ in range(cores_per_l3)], os_index=False,
                    cache_size=32 << 20, cache_depth=3)

    def numa_group(parent_type: str) -> dict[str, Any]:
        kids = [l3() for _ in range(l3_per_numa)]
        cpus = sorted({c for ch in kids for c in ch["cpuset"]})
        ni = nxt("NUMANode")
        numa = {"type": "NUMANode", "os_index": ni, "logical_index": ni, "depth": 9,
                "cpuset": cpus, "nodeset": [ni], "children": [], "local_memory": 64 * GIB}
        for k in kids:
            _add_node(k, ni)
        g = node(parent_type, 3 if parent_type == "Group" else 2, kids,
                 os_index=parent_type != "Group")
        g["children"] = [numa] + g["children"]
        g["nodeset"] = [ni]
        return g

    def package() -> dict[str, Any]:
        if numa_per_package == 1:
            return numa_group("Package")
        groups = [numa_group("Group") for _ in range(numa_per_package)]
        return node("Package", 1, groups, infos=[["CPUModel", "Demo CPU 9000 96-Core"]])

    pkgs = [package() for _ in range(packages)]
    root = node("Machine", 0, pkgs)
    total = 64 * GIB * packages * numa_per_package
    root["total_memory"] = total
    m = {"HostName": "demo-node", "OSName": "Linux", "OSRelease": "6.1.0-demo",
         "source": f"synthetic pack:{packages} numa:{numa_per_package} l3:{l3_per_numa} "
                   f"core:{cores_per_l3} pu:{pus_per_core}"}
    m.update(meta or {})
    return Topology.from_dict({"format": "snumap-topology", "version": 1, "meta": m,
                               "root": root})


def _add_node(d: dict[str, Any], ni: int) -> None:
    d["nodeset"] = [ni]
    for c in d["children"]:
        _add_node(c, ni)


def _wave(i: int, step: int, period: float = 7.0) -> float:
    """A smooth, deterministic 0..1 value per (index, step): no RNG, identical every run."""
    return 0.5 + 0.5 * math.sin(i * 1.7 + step / period * 2 * math.pi + (i % 5) * 0.9)


def demo_frame(topo: Topology, step: int = 0, busy_pus: int | None = None,
               pmu: bool = True, t0_ns: int = 1_700_000_000_000_000_000) -> Frame:
    """A Frame with plausible values: the first ``busy_pus`` PUs (default: the first package's
    worth) loaded by a 'solver' job, the rest lightly used; aggregated up the tree with the
    model's rules (utilisation averaged over PUs, IPC as a ratio of sums, watts summed)."""
    n = len(topo)
    pus = topo.pus
    npu = len(pus)
    busy = npu // 2 if busy_pus is None else busy_pus
    util_pu = np.array([
        (85 + 15 * _wave(k, step)) if k < busy else 3 + 20 * _wave(k, step) ** 4
        for k in range(npu)])
    cyc_pu = util_pu / 100 * 2.6e9
    ins_pu = cyc_pu * np.array([1.4 + 0.8 * _wave(k + 3, step) if k < busy else 0.6
                                for k in range(npu)])
    csum = np.concatenate([[0.0], np.cumsum(cyc_pu)])
    isum = np.concatenate([[0.0], np.cumsum(ins_pu)])
    usum = np.concatenate([[0.0], np.cumsum(util_pu)])
    util = np.full(n, np.nan)
    ipc = np.full(n, np.nan)
    ghz = np.full(n, np.nan)
    watts = np.full(n, np.nan)
    mem_used = np.full(n, np.nan)
    mem_total = np.full(n, np.nan)
    mpki = np.full(n, np.nan)
    for o in topo:
        a, b = o.pu_range
        if b > a:
            util[o.id] = (usum[b] - usum[a]) / (b - a)
            if pmu:
                c = csum[b] - csum[a]
                ipc[o.id] = (isum[b] - isum[a]) / c if c else np.nan
                ghz[o.id] = 2.45 + 0.3 * _wave(a, step)
                mpki[o.id] = 1.5 + 8 * _wave(a + 11, step) ** 3
        if o.type == "NUMANode":
            total = float(o.local_memory or 64 * GIB)
            mem_total[o.id] = total
            mem_used[o.id] = total * (0.2 + 0.6 * _wave(o.logical_index, 0))
    if pmu:
        for p in topo.by_type("Package"):
            a, b = p.pu_range
            watts[p.id] = 45 + 2.2 * (usum[b] - usum[a]) / max(1, b - a)
        pk = [p.id for p in topo.by_type("Package")]
        watts[topo.root.id] = float(np.nansum(watts[pk])) if pk else np.nan
    mt = [nd.id for nd in topo.numa_nodes]
    if mt:
        mem_total[topo.root.id] = float(np.nansum(mem_total[mt]))
        mem_used[topo.root.id] = float(np.nansum(mem_used[mt]))
    with np.errstate(invalid="ignore"):
        mem_pct = 100 * mem_used / mem_total
    values = {"util_pct": util, "ipc": ipc, "ghz": ghz, "mpki": mpki, "power_pkg_w": watts,
              "mem_used_bytes": mem_used, "mem_total_bytes": mem_total,
              "mem_used_pct": mem_pct}
    sources = {
        "procstat": SourceStatus("procstat", True),
        "perf": SourceStatus("perf", pmu, None if pmu else "no hardware PMU (virtual machine)",
                             None if pmu else "run on bare metal or enable vPMU in the hypervisor"),
        "rapl": SourceStatus("rapl", pmu, None if pmu else "no powercap (RAPL) interface",
                             None if pmu else "load intel_rapl_common; run as root"),
        "numa": SourceStatus("numa", True),
        "tasks": SourceStatus("tasks", True),
    }
    return Frame(t_ns=t0_ns + step * 1_000_000_000, wall_ns=t0_ns + step * 1_000_000_000,
                 dt_s=1.0, topology=topo, values=values, tasks=demo_tasks(topo, step, busy),
                 sources=sources)


def demo_tasks(topo: Topology, step: int, busy: int) -> list[TaskRow]:
    """A solver job spread over the busy PUs, and a handful of system daemons."""
    pus = topo.pu_os_indexes
    nodes = [nd.os_index or 0 for nd in topo.numa_nodes] or [0]
    rows = [TaskRow(pid=4242, tid=4242, comm="solver", user="alice", state="R",
                    cpu_pct=float(busy * 95), last_cpu=pus[max(0, busy - 1)],
                    affinity=frozenset(pus[:max(1, busy)]), cgroup="/system.slice/slurmstepd",
                    job="slurm:81723", cmdline="./solver --mesh big.h5",
                    numa_pages={n: (300_000 if i == 0 else 4_000) for i, n in enumerate(nodes)},
                    nthreads=max(1, busy))]
    daemons = [("postproc", "bob", "pbs:991.head"), ("python3", "bob", "pbs:991.head"),
               ("sshd", "root", "systemd:ssh.service"), ("rsyslogd", "root", None),
               ("chronyd", "_chrony", "systemd:chrony.service"), ("bash", "alice", None),
               ("kworker/0:1", "root", None), ("snumap", "alice", None)]
    for k, (comm, user, job) in enumerate(daemons):
        cpu = pus[(busy + 3 * k) % len(pus)]
        rows.append(TaskRow(pid=5000 + 17 * k, tid=5000 + 17 * k, comm=comm, user=user,
                            state="R" if k < 2 else "S",
                            cpu_pct=round(60 * _wave(k, step) ** 2 / (k + 1), 1),
                            last_cpu=cpu, affinity=frozenset(pus) if k else frozenset({cpu}),
                            job=job, cmdline=comm,
                            numa_pages={nodes[-1]: 2000 + 100 * k}))
    return rows
