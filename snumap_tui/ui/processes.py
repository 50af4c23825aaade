"""The process list's logic: filter, sort, group by user or batch job, place on the topology.

Why group by job: on a login or compute node the question is "whose job is on these cores?";
a Slurm step or PBS job has many processes, and their summed CPU and the union of their
affinities answer it. Affinity is named like hwloc-ps does: the smallest topology object that
contains it. Pure functions over TaskRows; headless (batch mode uses them too).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from snumap_tui.model.frame import TaskRow
from snumap_tui.topology.model import Topology

SORT_KEYS = ("cpu", "pid", "user", "name")
GROUP_MODES = ("none", "user", "job")


@dataclass(frozen=True)
class GroupRow:
    key: str
    nprocs: int
    nthreads: int
    cpu_pct: float
    affinity: frozenset[int]
    top: str                    # the busiest command of the group
    rss_bytes: int | None = None    # summed resident memory (None: not read for any member)
    members: tuple[TaskRow, ...] = ()   # its processes, busiest first (a group unfolds)


def affinity_label(topo: Topology, affinity: Iterable[int]) -> str:
    """``Package 1`` when the mask is exactly that object's PUs (hwloc-ps style), ``Package 1
    (12/96)`` when it is a part of it, ``none`` for an empty or foreign mask."""
    known = frozenset(affinity) & frozenset(topo.pu_os_indexes)
    if not known:
        return "none"
    obj = topo.smallest_covering(known)
    # Of the objects with exactly this cpuset (PU < Core < L1 < L2 ...), name the outermost
    # that is not a cache: "Package 0" rather than its only "L3 #0", "Core 3" rather than "L2 #3".
    same = [obj]
    parent = topo.parent_of(obj)
    while parent is not None and parent.cpuset == obj.cpuset and parent.type != "Machine":
        same.append(parent)
        parent = topo.parent_of(parent)
    named = [o for o in same if not o.is_cache]
    obj = named[-1] if named else same[-1]
    if obj.cpuset == known:
        return obj.label()
    return f"{obj.label()} ({len(known)}/{len(obj.cpuset)})"


def matches(t: TaskRow, query: str) -> bool:
    """Filter words: ``user:NAME``, ``job:TEXT`` or plain text found in the command or name;
    every word must match (AND)."""
    for word in query.split():
        k, sep, v = word.partition(":")
        if sep and k == "user":
            if t.user != v:
                return False
        elif sep and k == "job":
            if v not in (t.job or ""):
                return False
        elif word.lower() not in f"{t.comm} {t.cmdline or ''}".lower():
            return False
    return True


def _shown_cpu(t: TaskRow) -> float:
    """CPU % as the table shows it (one decimal): rows the eye sees as equal sort as equal,
    then by PID, so they keep their places instead of swapping (and repainting) on noise.
    Rounded half up as ``TaskRows.top`` does with numpy (same float operations: the two
    orders agree exactly)."""
    return math.floor((t.cpu_pct or 0.0) * 10.0 + 0.5) / 10.0


def sort_tasks(tasks: Iterable[TaskRow], key: str) -> list[TaskRow]:
    """One key per process (computed once, not per comparison), ties always by PID."""
    if key == "pid":
        return sorted(tasks, key=lambda t: t.pid)
    if key == "user":
        return sorted(tasks, key=lambda t: (t.user, -_shown_cpu(t), t.pid))
    if key == "name":
        return sorted(tasks, key=lambda t: (t.comm.lower(), t.pid))
    return sorted(tasks, key=lambda t: (-_shown_cpu(t), t.pid))


def group_tasks(tasks: Iterable[TaskRow], mode: str) -> list[GroupRow]:
    """Sum processes per user or per batch job (processes outside a job: "(no job)")."""
    acc: dict[str, list[TaskRow]] = {}
    for t in tasks:
        k = t.user if mode == "user" else (t.job or "(no job)")
        acc.setdefault(k, []).append(t)
    rows = []
    for k, ts in acc.items():
        busiest = max(ts, key=lambda t: t.cpu_pct or 0.0)
        aff: frozenset[int] = frozenset().union(*(t.affinity for t in ts))
        rss = [t.rss_bytes for t in ts if t.rss_bytes is not None]
        rows.append(GroupRow(k, len(ts), sum(t.nthreads for t in ts),
                             sum(t.cpu_pct or 0.0 for t in ts), aff, busiest.comm,
                             sum(rss) if rss else None, tuple(sort_tasks(ts, "cpu"))))
    return sorted(rows, key=lambda r: (-r.cpu_pct, r.key))


def numa_of_task(topo: Topology, t: TaskRow) -> set[int]:
    """NUMA nodes (OS indexes) a process touches: where it has pages, else the nodes local to
    its affinity."""
    if t.numa_pages:
        return {n for n, pages in t.numa_pages.items() if pages}
    return {n.os_index for n in topo.numa_nodes
            if n.os_index is not None and n.cpuset & t.affinity and
            n.cpuset != topo.root.cpuset}
