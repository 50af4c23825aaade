"""The process list's logic: filter, sort, group by user or batch job, place on the topology.

Why group by job: on a login or compute node the question is "whose job is on these cores?";
a Slurm step or PBS job has many processes, and their summed CPU and the union of their
affinities answer it. Affinity is named like hwloc-ps does: the smallest topology object that
contains it. Pure functions over TaskRows; headless (batch mode uses them too).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from snumap_tui.model.frame import TaskRow
from snumap_tui.topology.model import Topology

# Every column of the process list, in its left-to-right order (``<`` ``>`` walk it; ``s``
# cycles through it); those whose biggest values matter sort descending by default.
SORT_KEYS = ("pid", "user", "job", "cpu", "mem", "thr", "time", "pu", "affinity", "name")
DESCENDING = frozenset({"cpu", "mem", "thr", "time"})
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


# Programs that run a script named by their first argument that is not an option.
INTERPRETER = re.compile(r"(python|perl|ruby|lua|php|tclsh|pypy)[\d.]*|node(js)?|"
                         r"(ba|da|z|k|tc|c)?sh|Rscript|julia|octave")
INLINE = frozenset({"-c", "-m", "-e", "-E", "-r"})      # code or a module follows, no script


def command_label(cmdline: str | None, comm: str) -> str:
    """What the COMMAND column shows: the program by its name, not its path, then its
    arguments; for an interpreter its script by name too (htop highlights the same part):
    ``/home/u/venv/bin/python3 /tmp/x/train.py --lr 1`` -> ``python3 train.py --lr 1``.
    Kernel threads and processes with no command line: their comm."""
    words = (cmdline or "").split()
    if not words:
        return comm
    prog = os.path.basename(words[0]) or words[0]
    rest = words[1:]
    if INTERPRETER.fullmatch(prog):
        for i, w in enumerate(rest):
            if w in INLINE:
                break
            if not w.startswith("-"):
                rest[i] = os.path.basename(w) or w
                break
    return " ".join([prog, *rest])


def matches(t: TaskRow, query: str) -> bool:
    """Filter words: ``user:NAME``, ``job:TEXT``, ``pid:N``, a number (that PID), or plain
    text found in the command or name; every word must match (AND)."""
    for word in query.split():
        k, sep, v = word.partition(":")
        if sep and k == "user":
            if t.user != v:
                return False
        elif sep and k == "job":
            if v not in (t.job or ""):
                return False
        elif sep and k == "pid":
            if str(t.pid) != v:
                return False
        elif word.isdigit():
            if str(t.pid) != word and word not in f"{t.comm} {t.cmdline or ''}":
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


def _sort_value(t: TaskRow, key: str) -> tuple[object, ...]:
    """The value a column sorts by, ascending; missing values (n/a) last."""
    if key == "pid":
        return (t.pid,)
    if key == "user":
        return (t.user, -_shown_cpu(t))
    if key == "job":
        return (t.job is None, t.job or "")
    if key == "mem":
        return (t.rss_bytes is None, t.rss_bytes or 0)
    if key == "thr":
        return (t.nthreads,)
    if key == "time":
        return (t.cpu_time_s is None, t.cpu_time_s or 0.0)
    if key == "pu":
        return (t.last_cpu is None, t.last_cpu or 0)
    if key == "affinity":
        return (len(t.affinity), min(t.affinity, default=0))
    if key == "name":
        return (command_label(t.cmdline, t.comm).lower(),)
    return (_shown_cpu(t),)


def sort_tasks(tasks: Iterable[TaskRow], key: str, invert: bool = False) -> list[TaskRow]:
    """One key per process (computed once, not per comparison), ties always by PID.
    CPU %, memory, threads and time sort biggest first, the others smallest first;
    ``invert`` turns that around (htop's I). Missing values stay last either way."""
    desc = (key in DESCENDING) != invert
    if key == "cpu" and not invert:        # the common case, kept cheap
        return sorted(tasks, key=lambda t: (-_shown_cpu(t), t.pid))

    def order(t: TaskRow) -> tuple[object, ...]:
        v = _sort_value(t, key)
        return (*v, t.pid)

    rows = sorted(tasks, key=order, reverse=desc)
    if desc and key in ("job", "mem", "time", "pu"):
        # reversed, the missing ones came first: put them back at the end
        rows = [t for t in rows if not _sort_value(t, key)[0]] + \
               [t for t in rows if _sort_value(t, key)[0]]
    return rows


def tree_order(tasks: Sequence[TaskRow]) -> list[tuple[TaskRow, str]]:
    """The processes as a tree (htop's F5): each under its parent, siblings in the given
    order, with the branch drawing to put before its command (``├─ ``, ``│  └─ ``). A process
    whose parent is not in the list is a root (its parent may be filtered out, or gone)."""
    by_pid = {t.pid: t for t in tasks}
    kids: dict[int, list[TaskRow]] = {}
    roots: list[TaskRow] = []
    for t in tasks:
        if t.ppid is not None and t.ppid in by_pid and t.ppid != t.pid:
            kids.setdefault(t.ppid, []).append(t)
        else:
            roots.append(t)
    out: list[tuple[TaskRow, str]] = []
    seen: set[int] = set()
    # Iterative depth-first walk (a deep chain of shells must not hit the recursion limit).
    stack: list[tuple[TaskRow, str, str]] = [(t, "", "") for t in reversed(roots)]
    while stack:
        t, lead, prefix = stack.pop()
        if t.pid in seen:
            continue
        seen.add(t.pid)
        out.append((t, prefix))
        children = kids.get(t.pid, [])
        for i in range(len(children) - 1, -1, -1):
            last = i == len(children) - 1
            stack.append((children[i], lead + ("   " if last else "│  "),
                          lead + ("└─ " if last else "├─ ")))
    # A cycle in ppid (pid reuse between reads) leaves processes unvisited: list them as roots.
    out += [(t, "") for t in tasks if t.pid not in seen]
    return out


def parse_pids(text: str) -> frozenset[int]:
    """``-p 12,34`` as htop takes it (a ValueError names what is not a PID)."""
    out = set()
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        if not part.isdigit() or int(part) <= 0:
            raise ValueError(part)
        out.add(int(part))
    if not out:
        raise ValueError(text)
    return frozenset(out)


def only(tasks: Iterable[TaskRow], pids: frozenset[int] | None,
         user: str | None) -> list[TaskRow]:
    """The processes of ``-p`` (None: any PID) and ``-u`` (None: any user)."""
    return [t for t in tasks
            if (pids is None or t.pid in pids) and (user is None or t.user == user)]


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
