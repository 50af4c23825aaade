"""The few things a user wants to know first about a recording, each as a one-line finding.

- threads migrating across NUMA nodes (their memory stays behind: remote accesses);
- oversubscribed PUs: nearly always busy, time-shared by several threads that preempt each other
  (preemptions by traced tasks only: a recording of a command or --pid blames only what it
  traced; preemptions by tasks outside the traced tree are "untraced load", said as such);
- idle PUs while threads waited in a run queue (wakeup to switch-in) for a millisecond or more:
  the load balancer or an affinity mask kept work from an idle PU;
- events lost by the tracer, and /proc polling's coarseness.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from snumap_tui.analysis.load import LONG_WAIT_NS, Loaded
from snumap_tui.analysis.stats import TaskStats, idle_pus_during
from snumap_tui.topology.render import format_cpulist

MAX_WAITS = 10_000              # the longest waits examined for idle PUs
BUSY_OVERSUB = 0.90
SHARE_OVERSUB = 0.10
UNTRACED_SHARE = 0.10      # untraced tasks ran >= 10 % of the recording on that PU


def _comm(report: dict[str, Any], tid: int) -> str:
    """A thread as findings name it: its comm and tid, ``node:tid`` in a merged job."""
    for t in report["tasks"]:
        if t["tid"] == tid:
            return f"{t['comm']} (tid {t.get('label') or tid})"
    return f"tid {tid}"


def findings(report: dict[str, Any], ld: Loaded, stats: dict[int, TaskStats],
             lat_end: np.ndarray, lat: np.ndarray, limit: int = 8,
             lat_tid: np.ndarray | None = None, nodes: Any = None) -> list[dict[str, Any]]:
    """NODES: a merged job's node table (store/nodes.py), with LAT_TID the waiting threads:
    an idle PU counts only for a thread of its own node."""
    out: list[dict[str, Any]] = []
    dur = max(report["duration_s"], 1e-9)
    if report["lost_events"]:
        out.append({"kind": "lost_events", "text": f"{report['lost_events']} scheduling events "
                    f"were lost by the tracer: figures below undercount"})
    if report["approximate"]:
        out.append({"kind": "approximate", "text": "scheduling came from /proc polling: run "
                    "intervals are approximate, no wakeups, migrations only between polls"})
    movers = sorted((s for s in stats.values() if s.numa_migrations), key=lambda s:
                    -s.numa_migrations)
    for s in movers[:3]:
        main = max(s.numa.items(), key=lambda kv: kv[1]) if s.numa else (None, 0)
        away = 100.0 * (1 - main[1] / s.runtime_ns) if s.runtime_ns else 0.0
        out.append({"kind": "numa_migration", "tid": s.tid, "count": s.numa_migrations,
                    "text": f"{_comm(report, s.tid)} moved between NUMA nodes "
                            f"{s.numa_migrations} times; {away:.0f}% of its run time was away "
                            f"from node {main[0]}"})
    if len(movers) > 3:
        out.append({"kind": "numa_migration", "text": f"{len(movers) - 3} more threads moved "
                    f"between NUMA nodes"})
    # Oversubscribed PUs: busy nearly all the time, shared by >= 2 threads with a real share.
    # Only PUs busy enough and with preemptions can be: their threads' shares are looked up.
    cand = {c["cpu"]: c for c in report["cpus"]
            if c["busy_s"] / dur >= BUSY_OVERSUB and c["preemptions"]}
    big_n = dict.fromkeys(cand, 0)
    for s in stats.values():
        for cpu, c in cand.items():
            if s.cpus.get(cpu, 0) >= SHARE_OVERSUB * c["busy_s"] * 1e9:
                big_n[cpu] += 1
    over = [(cpu, big_n[cpu], c["preemptions"], c["busy_s"] / dur) for cpu, c in cand.items()
            if big_n[cpu] >= 2]
    if over:
        pus = ", ".join(f"PU {_pu(nodes, c)} ({n} threads, {p} preemptions)"
                        for c, n, p, _ in over[:4])
        more = f" and {len(over) - 4} more" if len(over) > 4 else ""
        out.append({"kind": "oversubscribed", "cpus": [o[0] for o in over],
                    "text": f"oversubscribed: {pus}{more}"})
    # Traced threads preempted by tasks outside the traced tree: load the recording did not
    # trace, not the traced threads' oversubscription (only what was traced is blamed).
    other = [c for c in report["cpus"] if c.get("preemptions_untraced", 0)
             and c.get("untraced_s", 0) / dur >= UNTRACED_SHARE and c["cpu"] not in
             {o[0] for o in over}]
    if other:
        pus = ", ".join(f"PU {_pu(nodes, c['cpu'])} ({c['preemptions_untraced']} preemptions, "
                        f"{c['untraced_s']:.1f} s)" for c in other[:4])
        more = f" and {len(other) - 4} more" if len(other) > 4 else ""
        out.append({"kind": "untraced_load", "cpus": [c["cpu"] for c in other],
                    "text": f"untraced load: tasks outside the traced tree preempted traced "
                            f"threads on {pus}{more} (see 'other' under Threads)"})
    # Idle PUs while threads waited in a run queue.
    long = np.flatnonzero(lat >= LONG_WAIT_NS)
    if len(long) and len(ld.intervals.cpus) > 1:
        capped = len(long) > MAX_WAITS
        if capped:
            long = long[_longest(lat[long], MAX_WAITS)]
        ends = lat_end[long]
        starts = ends - lat[long]
        same = None
        if nodes is not None and nodes.nodes and lat_tid is not None \
                and len(lat_tid) == len(lat):
            row_node = np.searchsorted(nodes.cpu_bases(), ld.intervals.cpus, "right") - 1
            wait_node = np.searchsorted(nodes.tid_bases(), lat_tid[long], "right") - 1
            same = (row_node, wait_node)
        idle_pus = idle_pus_during(ld.intervals, starts, ends, nodes=same)
        hit = idle_pus > 0
        if hit.any():
            tot_ms = float(lat[long][hit].sum()) / 1e6
            n, most = int(hit.sum()), int(idle_pus.max())
            of = f" (of the {MAX_WAITS} longest)" if capped else ""
            out.append({"kind": "idle_while_waiting", "waits": n,
                        "text": f"{n} {_plural(n, 'wait')} of >= {LONG_WAIT_NS // 1000} us{of} "
                                f"(total {tot_ms:.1f} ms) happened while a PU was mostly idle "
                                f"(up to {most} idle {_plural(most, 'PU')})"})
    busy = np.array([c["busy_s"] / dur for c in report["cpus"]])
    # A PU is idle "while others were busy" on its own node (a merged job's PUs of another
    # node could not have taken its threads' work).
    node_of = np.zeros(len(busy), dtype=np.int64)
    if nodes is not None and nodes.nodes and len(busy):
        node_of = np.searchsorted(nodes.cpu_bases(),
                                  [c["cpu"] for c in report["cpus"]], "right") - 1
    if len(busy) > 1 and busy.max() > 0.5:
        top = {int(k): float(busy[node_of == k].max()) for k in np.unique(node_of).tolist()}
        idle = [c["cpu"] for c, b, k in zip(report["cpus"], busy, node_of.tolist())
                if b < 0.05 and top[int(k)] > 0.5]
        if idle:
            out.append({"kind": "idle_pus", "cpus": idle,
                        "text": f"PUs {_pus(nodes, idle)} stayed idle (< 5% busy) while others were "
                                f"up to {100 * busy.max():.0f}% busy"})
    return out[:limit]


def _pu(nodes: Any, cpu: int) -> str:
    """A PU as findings name it: ``node:PU`` (its own number there) in a merged job."""
    if nodes is None or not nodes.nodes:
        return str(cpu)
    k = nodes.node_of_cpu(int(cpu))
    return f"{nodes.names[k]}:{int(cpu) - int(nodes.cpu_bases()[k])}" if k is not None \
        and k >= 0 else str(cpu)


def _pus(nodes: Any, cpus: list[int]) -> str:
    if nodes is None or not nodes.nodes:
        return format_cpulist(cpus)
    return ", ".join(_pu(nodes, c) for c in cpus)


def _longest(values: np.ndarray, k: int) -> np.ndarray:
    """Indexes (ascending) of the k largest values, the later ones among equals at the cut: a
    partition, not a sort of them all."""
    cut = values[np.argpartition(values, len(values) - k)[len(values) - k]]
    keep = values > cut
    ties = np.flatnonzero(values == cut)
    keep[ties[len(ties) - (k - int(keep.sum())):]] = True
    return np.flatnonzero(keep)


def _plural(n: int, word: str) -> str:
    return word if n == 1 else word + "s"
