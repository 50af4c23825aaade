"""Whose command lines a recording keeps.

A command line can hold a secret (``--password=...``), and a recording made as root is often
read by others later. The tasks source reads every process's command line; a recording keeps
it only for the processes of the user who records, and for the traced tree (the command, a
job's processes and everything they fork) whoever runs it. Every other process keeps its
name (comm), user, CPU times and affinity; ``record --keep-cmdlines`` keeps them all.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from snumap_tui.model.sample import Sample


def _parents(threads: dict[str, Any]) -> tuple[dict[int, int], dict[int, int]]:
    """pid -> ppid and pid -> uid, from the thread table's leader rows."""
    ppid: dict[int, int] = {}
    uid: dict[int, int] = {}
    cols = [threads.get(k) for k in ("pid", "tid", "ppid", "uid")]
    if any(c is None for c in cols):
        return ppid, uid
    for p, t, pp, u in zip(*(list(c) for c in cols)):    # type: ignore[arg-type]
        if p == t:
            ppid[int(p)] = int(pp)
            uid[int(p)] = int(u)
    return ppid, uid


def _in_tree(pid: int, roots: set[int], ppid: dict[int, int], memo: dict[int, bool]) -> bool:
    path: list[int] = []
    ans = False
    while pid > 0 and len(path) < 4096:
        if pid in memo:
            ans = memo[pid]
            break
        if pid in roots:
            ans = True
            break
        path.append(pid)
        nxt = ppid.get(pid, 0)
        if nxt == pid:
            break
        pid = nxt
    for p in path:
        memo[p] = ans
    return ans


def drop_other_cmdlines(sample: Sample, own_uids: Iterable[int], roots: Iterable[int]) -> Sample:
    """The sample with ``cmdline`` set to None for every process that neither runs as one
    of ``own_uids`` nor descends from (or is) one of ``roots``. The sample's dicts are not
    changed in place (the tasks source caches them): the changed ones are copies."""
    tasks = sample.readings.get("tasks")
    if not isinstance(tasks, dict) or not tasks.get("processes"):
        return sample
    procs = tasks["processes"]
    own = set(own_uids)
    root_set = set(roots)
    ppid, uid = _parents(tasks.get("threads") or {})
    memo: dict[int, bool] = {}
    out = dict(procs)
    changed = False
    for pid, info in procs.items():
        if not isinstance(info, dict) or info.get("cmdline") is None:
            continue
        if uid.get(int(pid), -1) in own or _in_tree(int(pid), root_set, ppid, memo):
            continue
        out[pid] = {**info, "cmdline": None}
        changed = True
    if not changed:
        return sample
    readings = dict(sample.readings)
    readings["tasks"] = {**tasks, "processes": out}
    return Sample(t_ns=sample.t_ns, wall_ns=sample.wall_ns, readings=readings)
