"""Findings about a running (or recorded) job, each with its evidence, its fix and how sure.

Pure functions of the job's nodes as jobview/aggregate.py's ``NodeView``s (topology, per PU
utilisation, the job's ranks with their threads' PUs, CPU %, affinity and memory per NUMA
node); `top --job` gives the live ones, `report` of a job recording builds the same views
from the recording. A finding is ``{"kind", "node", "text" (the evidence, with its numbers),
"fix" (a command line), "confidence" ("high" / "medium" / "low", and why)}``.

- ``oversubscribed``: two or more of the job's threads share a PU (each got at least
  ``SHARE_MIN`` % of it, together at most what one PU gives) while a PU of the job's
  allocation on that node ran the job less than ``IDLE_MAX`` %: the binding that spreads them
  (``srun --cpu-bind=cores`` for ranks, ``OMP_PLACES=cores OMP_PROC_BIND=spread`` for threads
  of one rank). High when the threads' affinity pins them there (the binding did it).
- ``numa_spread``: the threads of one rank run on PUs of several NUMA nodes while most of its
  memory sits on one: ``OMP_PROC_BIND=close`` and ``srun --cpu-bind=ldoms --mem-bind=local``.
- ``memory_far``: a rank's memory is mostly on a NUMA node other than its GPU's.
- ``idle_cores`` / ``idle_node``: cores of the allocation (all of a core's PUs: an SMT sibling
  left idle is a choice) or whole nodes where the job ran < IDLE_MAX %.
- ``slow_node``: one node's ranks got much less CPU than the others' (waiting, throttled, shared).
"""

from __future__ import annotations

import re
import shlex
import statistics
from collections.abc import Sequence
from typing import Any

from snumap_tui.jobview.aggregate import LIVE, NodeView, RankView, core_maps, cpus_of
from snumap_tui.jobview.threadstats import (
    SHARE_MIN,  # % of a PU each thread sharing one got
    USED_MIN,
    rank_cpu,
    thread_stats,
)
from snumap_tui.topology.render import format_cpulist

IDLE_MAX = USED_MIN   # % of a PU the job used for it to count as idle for the job
SLOW_RATIO = 0.6      # a node whose ranks' mean CPU is below this share of the others'
_CPU_BIND = re.compile(r"^--cpu-bind(=\S*)?$|^--cpu_bind(=\S*)?$")


def _pus_of(cl: str) -> set[int]:
    return set(cpus_of(cl))


def _rank_name(r: RankView) -> str:
    return f"rank {r.rank}" if r.rank is not None else f"pid {r.pid}"


def spread_fix(launch: str | None, threads_of_one_rank: bool) -> str:
    """The command line that spreads them: the job's own srun line with ``--cpu-bind=cores``
    in place of its binding, or the OpenMP variables for one rank's threads."""
    if threads_of_one_rank:
        return "OMP_PLACES=cores OMP_PROC_BIND=spread <your command>"
    if launch:
        try:
            argv = shlex.split(launch)
        except ValueError:
            argv = []
        if argv and argv[0].rsplit("/", 1)[-1] == "srun":
            kept = [a for a in argv[1:] if not _CPU_BIND.match(a)]
            return shlex.join([argv[0], "--cpu-bind=cores", *kept])
    return "srun --cpu-bind=cores <your command>"


def oversubscribed(v: NodeView, launch: str | None = None) -> list[dict[str, Any]]:
    topo = v.topology
    if topo is None or v.status != LIVE:
        return []
    if not thread_stats(v).shares:    # no PU with two busy threads: done
        return []
    by_pu: dict[int, list[tuple[RankView, float, str]]] = {}
    job_on: dict[int, float] = {}
    alloc: set[int] = _pus_of(v.alloc)          # the job's PUs on the node, when known
    for r in v.ranks:
        if not v.alloc:
            alloc |= _pus_of(r.affinity)
        for t in r.threads:
            if t.pu < 0 or t.cpu_pct is None:
                continue
            job_on[t.pu] = job_on.get(t.pu, 0.0) + t.cpu_pct
            if t.cpu_pct >= SHARE_MIN:
                by_pu.setdefault(t.pu, []).append((r, t.cpu_pct, r.affinity))
    node_pus = {p.os_index for p in topo.pus if p.os_index is not None}
    alloc = (alloc & node_pus) or node_pus
    idle = sorted(p for p in alloc if job_on.get(p, 0.0) < IDLE_MAX)
    base = v.pu_base
    out = []
    for pu, sharers in sorted(by_pu.items()):
        total = sum(c for _, c, _ in sharers)
        if len(sharers) < 2 or not idle or total > 100.0 + SHARE_MIN * len(sharers):
            continue
        ranks = {r.pid for r, _, _ in sharers}
        names = ", ".join(f"{_rank_name(r)} {c:.0f}%" for r, c, _ in sharers[:6])
        pinned = all(len(_pus_of(a)) == 1 for _, _, a in sharers)
        where = f"PU {pu - base}"
        out.append({
            "kind": "oversubscribed", "node": v.name, "pu": pu - base,
            "threads": len(sharers), "idle_pus": [p - base for p in idle],
            "text": f"{v.name}: {len(sharers)} threads share {where}: {names} "
                    f"(together {total:.0f}%), while PU {format_cpulist([p - base for p in idle])} of the "
                    f"allocation ran the job < {IDLE_MAX:.0f}%",
            "fix": spread_fix(launch, threads_of_one_rank=len(ranks) == 1),
            "confidence": _confidence(v.affinity_known, pinned)})
    return out


def _confidence(live: bool, pinned: bool) -> str:
    if not live:
        return ("medium (over the whole recording, as shares of the job's busiest PU time; "
                "a recording keeps no affinity)")
    return ("high (their affinity pins them to that PU)" if pinned else
            "medium (placed there by the scheduler in this interval)")


def numa_spread(v: NodeView) -> list[dict[str, Any]]:
    if v._tc is not None and not thread_stats(v).multi:
        return []                     # one thread a process: nothing to spread
    if v._index_of and len(v.numa_mem) < 2:     # a stream's node with one NUMA node
        return []
    out = []
    for r in v.ranks:
        if len(r.run_numa) < 2 or not r.numa_mem:
            continue
        total = sum(r.numa_mem.values())
        home, most = max(r.numa_mem.items(), key=lambda kv: kv[1])
        if total <= 0 or most < 0.7 * total:
            continue
        away = [n for n in r.run_numa if n != home]
        out.append({
            "kind": "numa_spread", "node": v.name, "pid": r.pid,
            "text": f"{v.name}: {_rank_name(r)}'s threads run on NUMA nodes "
                    f"{', '.join(map(str, r.run_numa))} while {100 * most / total:.0f}% of its "
                    f"memory is on node {home}: threads on node(s) "
                    f"{', '.join(map(str, away))} read it remotely",
            "fix": f"OMP_PROC_BIND=close OMP_PLACES=cores srun --cpu-bind=ldoms "
                   f"--mem-bind=local <your command>   (or numactl --cpunodebind={home} "
                   f"--membind={home})",
            "confidence": "medium (where its threads ran last; memory per node now)"
                          if v.affinity_known else
                          "medium (where its threads ran over the recording, its memory's "
                          "high-water mark per node)"})
    return out


def memory_far(v: NodeView) -> list[dict[str, Any]]:
    gpus = [g for g in v.gpus if isinstance(g.get("numa"), int)]
    if not gpus:
        return []
    near = {g["numa"] for g in gpus}
    out = []
    for r in v.ranks:
        total = sum(r.numa_mem.values())
        if total <= 0 or r.rank is None:
            continue
        home, most = max(r.numa_mem.items(), key=lambda kv: kv[1])
        if home in near or most < 0.7 * total:
            continue
        g = gpus[0]
        out.append({
            "kind": "memory_far", "node": v.name, "pid": r.pid,
            "text": f"{v.name}: {_rank_name(r)} keeps {100 * most / total:.0f}% of its memory "
                    f"on NUMA node {home}, its GPUs sit on node(s) "
                    f"{', '.join(map(str, sorted(near)))}",
            "fix": f"srun --gpu-bind=closest --cpu-bind=ldoms --mem-bind=local <your command>"
                   f"   (or numactl --cpunodebind={g['numa']} --membind={g['numa']})",
            "confidence": "medium (the GPU a rank uses is not known: the node's GPUs' node)"})
    return out


def idle(nodes: Sequence[NodeView]) -> list[dict[str, Any]]:
    live = [v for v in nodes if v.status == LIVE and v.frames >= 2]
    if len(live) < 1:
        return []
    out = []
    cpu = [v.job_cpu_pct for v in live]
    busy = [c for c in cpu if c >= IDLE_MAX]
    if busy:
        top = max(busy)
        for v, c in zip(live, cpu):
            if c < IDLE_MAX:
                out.append({"kind": "idle_node", "node": v.name,
                            "text": f"{v.name}: the job used {c:.0f}% of one PU "
                                    f"there, {len(busy)} other node(s) up to {top:.0f}%",
                            "fix": "srun --nodes=<fewer> --ntasks-per-node=<more> "
                                   "<your command>   (or give that node its share of ranks)",
                            "confidence": "medium (over the last interval)"})
    return out


def idle_cores(v: NodeView, shared: bool) -> list[dict[str, Any]]:
    """Cores of the job's allocation on V where the job ran < IDLE_MAX % while its ranks ran
    there (and none of them shares a PU: that is ``oversubscribed``'s, with its fix). SHARED:
    whether ``oversubscribed`` found some on V (its result, not computed twice)."""
    if v.status != LIVE or v.frames < 2 or not v.alloc_cores or v.job_cpu_pct < 50.0:
        return []
    stats = thread_stats(v)
    used = stats.cores_used             # cores that ran the job IDLE_MAX % or more
    if used >= len(v.alloc_cores) or shared:
        return []
    on_core = stats.core_cpu
    idle = sorted(k for k in v.alloc_cores if on_core.get(k, 0.0) < IDLE_MAX)
    if not idle:
        return []
    ranks = len(rank_cpu(v)) or 1
    return [{"kind": "idle_cores", "node": v.name, "cores": idle,
             "text": f"{v.name}: {len(idle)} of the allocation's {len(v.alloc_cores)} cores "
                     f"(logical {format_cpulist(idle)}) ran the job < {IDLE_MAX:.0f}% while "
                     f"{used} ran it",
             "fix": f"srun --ntasks-per-node={ranks + len(idle)} <your command>   (or "
                    f"OMP_NUM_THREADS={max(1, (used + len(idle)) // ranks)} per rank, "
                    "or ask Slurm for fewer cores)",
             "confidence": "medium (over the last interval; the allocation is what Slurm "
                           "lets the sampler's step use there)"}]


def slow_node(nodes: Sequence[NodeView]) -> list[dict[str, Any]]:
    per = {}
    for v in nodes:
        if v.status != LIVE:
            continue
        cpus = rank_cpu(v)
        if cpus:
            per[v.name] = sum(cpus) / len(cpus)
    if len(per) < 3:
        return []
    out = []
    ref = statistics.median(per.values())       # once: a node's own mean barely moves it
    for name, mean in per.items():
        if ref > 50.0 and mean < SLOW_RATIO * ref:
            out.append({"kind": "slow_node", "node": name,
                        "text": f"{name}: its ranks got {mean:.0f}% CPU each, the other nodes' "
                                f"{ref:.0f}% (median): the others wait for it, or it waits",
                        "fix": f"scontrol show node {name}; srun --exclude={name} "
                               "<your command>",
                        "confidence": "low (CPU share only; a rank waiting in MPI is busy too)"})
    return out


def live_findings(nodes: Sequence[NodeView], launch: str | None = None
                  ) -> list[dict[str, Any]]:
    """Every finding of the job's nodes now. LAUNCH: the srun line that started the ranks,
    when known (the fix rewrites it); else each node's own (``NodeView.launch``)."""
    out: list[dict[str, Any]] = []
    launch = launch or next((v.launch for v in nodes if v.launch), None)
    for v in nodes:
        over = oversubscribed(v, launch)
        out += over
        out += numa_spread(v)
        out += memory_far(v)
        out += idle_cores(v, bool(over))
    out += idle(nodes)
    out += slow_node(nodes)
    return out


def recording_nodes(rec: Any, report: dict[str, Any], job: dict[str, Any]) -> list[NodeView]:
    """A job recording (one node's, or merged) as the findings' NodeViews: each rank's
    threads with the share of the recording they ran on each PU, the node's PUs as its
    allocation, the job's srun line when the recording saw one."""
    from snumap_tui.jobview.aggregate import ThreadView

    topo = rec.topology
    table = getattr(rec, "nodes", None)
    names = [n["node"] for n in job.get("nodes", [])] or ["?"]
    bases = [int(b) for b in table.cpu_bases()] if table is not None else [0]
    dur = max(float(report.get("duration_s") or 0.0), 1e-9)
    from snumap_tui.analysis.jobreport import job_processes

    procs = {int(p["pid"]): p for p in job_processes(rec)}
    # each process's memory per NUMA node, its high-water mark (report's process memory)
    memory = {int(p["pid"]): {int(n): int(b) for n, b in
                              ((p.get("memory") or {}).get("nodes") or {}).items()}
              for p in report.get("processes", [])}
    node_pus: dict[str, list[int]] = {n: [] for n in names}
    for pu in topo.pus:
        if pu.os_index is None:
            continue
        k = table.node_of_cpu(pu.os_index) if table is not None else 0
        node_pus.setdefault(names[k] if k is not None and k < len(names) else "?",
                            []).append(pu.os_index)
    ranks: dict[str, dict[int, RankView]] = {n: {} for n in names}
    on_pu: dict[str, dict[int, float]] = {n: {} for n in names}
    for t in report.get("tasks", []):
        jp = procs.get(int(t["pid"]))
        if jp is None:
            continue
        node = str(jp["node"])
        on_pu.setdefault(node, {})
        rv = ranks.setdefault(node, {}).get(int(t["pid"]))
        if rv is None:
            rv = ranks[node][int(t["pid"])] = RankView(
                node=node, rank=jp["rank"], pid=int(t["pid"]), comm=str(jp["comm"]),
                step=str(jp["step"]), cpu_pct=0.0, threads=[], affinity=t.get("pus", ""),
                numa_mem=memory.get(int(t["pid"]), {}), rss=None, run_numa=[])
        # the NUMA nodes it ran on for a tenth of its time or more
        run = t.get("numa", {})
        total = sum(float(x) for x in run.values()) or 1.0
        rv.run_numa = sorted(set(rv.run_numa) | {int(n) for n, x in run.items()
                                                  if float(x) >= 0.1 * total})
        for cpu, sec in t.get("cpus", {}).items():
            rv.threads.append(ThreadView(int(t["tid"]), int(cpu), float(sec)))
            on_pu[node][int(cpu)] = on_pu[node].get(int(cpu), 0.0) + float(sec)
        rv.cpu_pct = (rv.cpu_pct or 0.0) + 100.0 * float(t.get("runtime_s", 0.0)) / dur
    # A thread's share is of the node's busiest PU's job time: a rank runs only part of a
    # recording (which starts before the step and may share the node), so the shares say
    # how the job's own time was spread, whatever else the PUs did.
    for node, by_rank in ranks.items():
        ref = max(on_pu[node].values(), default=0.0)
        for rv in by_rank.values():
            for tv in rv.threads:
                tv.cpu_pct = 100.0 * (tv.cpu_pct or 0.0) / ref if ref > 0 else None
    out = []
    for i, name in enumerate(names):
        alloc = format_cpulist(node_pus.get(name, []))
        v = NodeView(i, name, LIVE, topology=topo, frames=2, alloc=alloc,
                     pu_base=bases[i] if i < len(bases) else 0, affinity_known=False)
        v.pu_core, v.alloc_cores = core_maps(topo, alloc)
        v.ranks = sorted(ranks.get(name, {}).values(),
                         key=lambda r: (r.rank is None, r.rank or 0, r.pid))
        out.append(v)
    return out


def report_findings(rec: Any, report: dict[str, Any], job: dict[str, Any]
                    ) -> list[dict[str, Any]]:
    """`report`'s job findings: the live ones, on the whole recording."""
    return live_findings(recording_nodes(rec, report, job), launch=job.get("launch"))
