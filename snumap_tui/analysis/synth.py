"""Regular topologies and scheduling workloads generated without hwloc.

Why here: the tests of the analysis and the replay, the replay benchmark and the 384-PU demo
screenshot need machines of any size and event streams whose run times are known exactly, on a
machine that may have neither hwloc nor a tracer. The tree mirrors what hwloc's synthetic
backend builds for ``pack:P numa:N core:C pu:T`` (Machine > Package > Group with a NUMANode
memory child > Core > PU, PU OS indexes in logical order).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from snumap_tui.model.sample import Sample
from snumap_tui.topology.model import Topology
from snumap_tui.trace.events import EVENT_DTYPE, MIGRATE, SWITCH, WAKEUP, EventBatch, TaskInfo


def synthetic_topology(packages: int = 2, numa_per_package: int = 2, cores_per_numa: int = 2,
                       pus_per_core: int = 2, host: str = "synthetic") -> Topology:
    """A regular Machine > Package > Group(+NUMANode) > Core > PU tree."""
    raw: list[dict[str, Any]] = []
    parents: list[int | None] = []
    kids: list[list[int]] = []
    counters: dict[str, int] = {}

    def add(type_: str, parent: int | None, cpus: range, nodes: range, depth: int,
            os_index: int | None, **extra: Any) -> int:
        i = len(raw)
        logical = counters.get(type_, 0)
        counters[type_] = logical + 1
        raw.append({"type": type_, "os_index": os_index, "logical_index": logical,
                    "depth": depth, "cpuset": list(cpus), "nodeset": list(nodes), **extra})
        parents.append(parent)
        kids.append([])
        if parent is not None:
            kids[parent].append(i)
        return i

    pus_per_numa = cores_per_numa * pus_per_core
    n_pu = packages * numa_per_package * pus_per_numa
    n_numa = packages * numa_per_package
    root = add("Machine", None, range(n_pu), range(n_numa), 0, 0)
    core_os = 0
    for p in range(packages):
        pc = range(p * numa_per_package * pus_per_numa, (p + 1) * numa_per_package * pus_per_numa)
        pn = range(p * numa_per_package, (p + 1) * numa_per_package)
        pkg = add("Package", root, pc, pn, 1, p)
        for n in range(numa_per_package):
            node = p * numa_per_package + n
            nc = range(node * pus_per_numa, (node + 1) * pus_per_numa)
            grp = add("Group", pkg, nc, range(node, node + 1), 2, None)
            add("NUMANode", grp, nc, range(node, node + 1), -3, node, local_memory=1 << 30,
                total_memory=1 << 30)
            for c in range(cores_per_numa):
                cc = range(nc.start + c * pus_per_core, nc.start + (c + 1) * pus_per_core)
                core = add("Core", grp, cc, range(node, node + 1), 3, core_os)
                core_os += 1
                for pu in cc:
                    add("PU", core, range(pu, pu + 1), range(node, node + 1), 4, pu)
    desc = f"pack:{packages} numa:{numa_per_package} core:{cores_per_numa} pu:{pus_per_core}"
    return Topology.from_flat(raw, parents, kids,
                              {"meta": {"source": f"synthetic {desc}", "HostName": host}})


def synthetic_events(n_events: int, cpus: list[int] | np.ndarray, n_threads: int = 64,
                     duration_ns: int = 10_000_000_000, t0_ns: int = 1_000_000_000,
                     seed: int = 0, threads_per_process: int = 16) -> np.ndarray:
    """A plausible busy machine: about 60 % sched_switch, 35 % sched_wakeup, 5 % migrations,
    each CPU's switches chaining prev -> next so that run intervals are consistent; every
    ``threads_per_process`` threads share a pid. Time-sorted. Used by the benchmark and the demo
    screenshot; the exact run times are not known in advance (tests use hand-made events)."""
    rng = np.random.default_rng(seed)
    cpus = np.asarray(cpus, dtype=np.int64)
    ev = np.zeros(n_events, dtype=EVENT_DTYPE)
    t = np.sort(rng.integers(t0_ns, t0_ns + duration_ns, n_events, dtype=np.int64))
    ev["t_ns"] = t
    kind = rng.choice(np.array([SWITCH, WAKEUP, MIGRATE], dtype=np.uint8), n_events,
                      p=[0.60, 0.35, 0.05])
    ev["kind"] = kind
    cpu_idx = rng.integers(0, len(cpus), n_events)
    ev["cpu"] = cpus[cpu_idx]
    # Threads prefer "their" CPU (thread i -> cpu i % ncpu), idle (tid 0) a fifth of the time.
    home = rng.integers(0, n_threads, n_events)
    tid_next = np.where(rng.random(n_events) < 0.2, 0, 1000 + home).astype(np.int32)
    sw = kind == SWITCH
    # prev of each switch = next of the previous switch on the same CPU (per-CPU chain).
    sw_idx = np.flatnonzero(sw)
    order = np.argsort(cpu_idx[sw_idx], kind="stable")
    s = sw_idx[order]
    prev = np.empty(len(s), dtype=np.int32)
    prev[1:] = tid_next[s[:-1]]
    same = np.ones(len(s), dtype=bool)
    same[1:] = cpu_idx[s[1:]] == cpu_idx[s[:-1]]
    same[0] = False
    prev[~same] = 0
    ev["tid"][s] = prev
    ev["tid2"][s] = tid_next[s]

    def pid_of(tid: np.ndarray) -> np.ndarray:
        return np.where(tid == 0, 0, 1000 + (tid - 1000) // threads_per_process
                        * threads_per_process)

    ev["pid"][s] = pid_of(prev)
    ev["pid2"][s] = pid_of(tid_next[s])
    ev["arg"][s] = np.where(rng.random(len(s)) < 0.5, 0, 1)
    other = np.flatnonzero(~sw)
    ev["tid"][other] = 1000 + home[other]
    ev["pid"][other] = pid_of(1000 + home[other])
    mig = np.flatnonzero(kind == MIGRATE)
    ev["arg"][mig] = cpus[rng.integers(0, len(cpus), len(mig))]
    ev["tid2"][other] = -1
    ev["pid2"][other] = -1
    return ev


def write_recording(path: str | Path, topology: Topology, events: np.ndarray | Iterable[np.ndarray],
                    tasks: Iterable[TaskInfo] = (), samples: Iterable[Sample] = (),
                    header: dict[str, Any] | None = None, lost: dict[int, int] | None = None,
                    markers: Iterable[tuple[int, str]] = (), chunk: int = 65536,
                    regions: tuple[np.ndarray, list[Any]] | None = None,
                    counters: tuple[np.ndarray, list[str]] | None = None) -> Path:
    """A recording written through the store API, as `snumap record` would: the tests' known
    workloads, the benchmark's 10 M events and the 384-PU demo. ``events`` may be one array or
    an iterable of time-ordered arrays (so a huge recording is never whole in memory)."""
    from snumap_tui.store import Writer

    hdr: dict[str, Any] = {"host": topology.meta.get("HostName", "synthetic"), "backend": "synthetic",
           "kernel": "synthetic", "topology": topology.to_dict()}
    hdr.update(header or {})
    parts = iter([events] if isinstance(events, np.ndarray) else events)
    first = next(parts, None)
    if first is not None and len(first) and "start_monotonic_ns" not in hdr:
        # The events' clock, not this machine's: the replay header turns cursor times into
        # wall-clock times through start_monotonic_ns (the Writer's default is time.monotonic).
        hdr["start_monotonic_ns"] = int(first["t_ns"].min())
    if first is not None:
        parts = itertools.chain([first], parts)
    with Writer(path, hdr, force=True, max_chunk_events=chunk) as w:
        w.add_events(EventBatch(tasks=list(tasks), lost=dict(lost or {})))
        for t, text in markers:
            w.add_marker(t, text)
        if regions is not None:              # REGION_DTYPE rows and their RegionName table
            w.add_regions(*regions)
        if counters is not None:             # run intervals' counters and their events
            w.counter_events = list(counters[1])
            w.add_events(EventBatch(counters=counters[0]))
        for s in samples:
            w.add_sample(s)
        for ev in parts:
            for i in range(0, len(ev), chunk):
                w.add_events(EventBatch(events=ev[i:i + chunk]))
    return Path(path)
