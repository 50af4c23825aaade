"""Which task is which: tid -> tgid and name, shared by the tracers, learned in bulk.

Tracepoint records name tasks by tid, and only sometimes carry the process id (tgid) and the
name (comm). The tracers hand over ``TaskInfo`` once per task (and again when exec renames it),
and fill the ``pid``/``pid2`` fields of events whose tracepoint did not say, from what earlier
events taught and, for live tasks, from /proc/TID/status (proc(5): ``Tgid:``, ``PPid:``) and
/proc/TID/comm.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np

from snumap_tui.sources._io import c_string, read_name_text
from snumap_tui.trace import events as ev


def read_task(tid: int, proc: Path = Path("/proc")) -> tuple[int, int, str] | None:
    """(tgid, ppid, comm) of a live task, or None once it is gone."""
    try:
        status = read_name_text(proc / str(tid) / "status")
    except OSError:
        return None
    return parse_status(status)


def parse_status(text: str) -> tuple[int, int, str] | None:
    """(tgid, ppid, name) from /proc/PID/status text (proc(5))."""
    vals: dict[str, str] = {}
    for line in text.splitlines():
        key, _, val = line.partition(":")
        if key in ("Name", "Tgid", "PPid"):
            vals[key] = val.strip()
    try:
        return int(vals["Tgid"]), int(vals["PPid"]), vals.get("Name", "")
    except (KeyError, ValueError):
        return None


def threads_of(pid: int, proc: Path = Path("/proc")) -> list[int]:
    """The tids of process PID (empty if it is gone)."""
    try:
        return sorted(int(p.name) for p in (proc / str(pid) / "task").iterdir()
                      if p.name.isdigit())
    except OSError:
        return []


def children_map(proc: Path = Path("/proc")) -> dict[int, list[int]]:
    """ppid -> child pids of every live process (one scan of /proc)."""
    out: dict[int, list[int]] = {}
    for p in proc.iterdir():
        if not p.name.isdigit():
            continue
        try:
            stat = read_name_text(p / "stat")
        except OSError:
            continue
        # proc(5): "pid (comm) state ppid ..."; comm may hold spaces and parentheses.
        rest = stat[stat.rfind(")") + 2:].split()
        if len(rest) > 1:
            out.setdefault(int(rest[1]), []).append(int(p.name))
    return out


def tree_of(pids: Iterable[int], proc: Path = Path("/proc")) -> list[int]:
    """PIDS and every live descendant process."""
    kids = children_map(proc)
    seen: list[int] = []
    todo = list(pids)
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.append(p)
        todo.extend(kids.get(p, []))
    return seen


# PID_MAX_LIMIT on 64-bit (include/linux/threads.h: 4 * 1024 * 1024): every tid a kernel
# reports is below it, so an array indexed by tid stays bounded.
PID_LIMIT = 1 << 22


def tid_table(table: np.ndarray, top: int) -> np.ndarray:
    """TABLE (an array indexed by tid) long enough to index TOP (< PID_LIMIT), grown
    zero-filled: np.zeros maps zeroed pages lazily, so memory is used only where tids are."""
    if top < len(table):
        return table
    grown = np.zeros(min(PID_LIMIT, max(top + 1, 2 * len(table))), dtype=table.dtype)
    grown[:len(table)] = table
    return grown


def distinct_ids(ids: np.ndarray) -> np.ndarray:
    """``np.unique(ids)`` for integer ids: marked in a table spanning their range when that
    range is small against their number (the tids of a batch: 4x faster than np.unique's
    sort on 40 000 of them), else sorted."""
    if ids.size == 0:
        return np.unique(ids)
    lo, hi = int(ids.min()), int(ids.max())
    if hi - lo > max(4 * ids.size, 1 << 16):
        return np.unique(ids)
    mark = np.zeros(hi - lo + 1, dtype=bool)
    mark[ids - lo] = True
    return (np.flatnonzero(mark) + lo).astype(ids.dtype)


def take_names(events: np.ndarray) -> tuple[np.ndarray, list[ev.TaskInfo]]:
    """EVENTS without the eBPF tracers' name records (kind COMM), and those records as
    TaskInfo (tid, tgid, the name, its time), in the events' order. The 16 bytes of a name
    are arg's 8, tid2's 4 and pid2's 4 (bpf/sched_event.h)."""
    at = np.flatnonzero(events["kind"] == ev.COMM)
    if not len(at):
        return events, []
    rec = events[at]
    raw = np.empty((len(at), 16), dtype=np.uint8)
    raw[:, :8] = rec["arg"].astype("<i8").view(np.uint8).reshape(-1, 8)
    raw[:, 8:12] = rec["tid2"].astype("<i4").view(np.uint8).reshape(-1, 4)
    raw[:, 12:] = rec["pid2"].astype("<i4").view(np.uint8).reshape(-1, 4)
    infos = [ev.TaskInfo(tid=tid, pid=pid, comm=c_string(bytes(name)), t_ns=t)
             for tid, pid, name, t in zip(rec["tid"].tolist(), rec["pid"].tolist(), raw,
                                          rec["t_ns"].tolist())]
    keep = np.ones(len(events), dtype=bool)
    keep[at] = False
    return events[keep], infos


class TaskTable:
    """tid -> (tgid, comm) as learned so far, and which TaskInfo were already handed over.

    The dicts are mirrored in arrays indexed by tid (``tgid_by_tid``: 0 = not known;
    ``named``: has a comm), so that the per-event questions of a batch (fill in the tgid,
    which tids have no name yet) are numpy gathers, not a lookup per event."""

    def __init__(self, proc: Path = Path("/proc")) -> None:
        self.proc = proc
        self.tgid: dict[int, int] = {0: 0}
        self.comm: dict[int, str] = {}
        self.ppid: dict[int, int] = {}
        self._pending: dict[int, ev.TaskInfo] = {}
        self._earlier: list[ev.TaskInfo] = []     # names a task had before its pending one
        self._reported: set[int] = {0}
        self.tgid_by_tid = np.zeros(0, dtype=np.int32)
        self.named = np.zeros(0, dtype=bool)

    def _set_tgid(self, tid: int, tgid: int) -> None:
        self.tgid[tid] = tgid
        if 0 <= tid < PID_LIMIT:
            self.tgid_by_tid = tid_table(self.tgid_by_tid, tid)
            self.tgid_by_tid[tid] = tgid

    def unnamed(self, tids: np.ndarray) -> np.ndarray:
        """The distinct (sorted) tids > 0 among TIDS that have no comm yet."""
        tids = np.ascontiguousarray(tids)
        if len(tids) and 0 <= int(tids.min()) and int(tids.max()) < PID_LIMIT:
            self.named = tid_table(self.named, int(tids.max()))
            tids = tids[~self.named[tids]]
        return np.array([t for t in np.unique(tids).tolist()
                         if t > 0 and self.comm.get(t) is None], dtype=np.int64)

    def learn(self, tid: int, tgid: int | None = None, comm: str | None = None,
              ppid: int | None = None, t_ns: int = 0) -> None:
        """Record what an event or /proc said; a new name is reported again (exec)."""
        changed = tid not in self._reported
        if tgid is not None and tgid > 0:
            self._set_tgid(tid, tgid)
        if ppid is not None and ppid > 0:
            self.ppid[tid] = ppid
        if comm is not None and comm != self.comm.get(tid):
            changed = changed or tid in self.comm
            self.comm[tid] = comm
            if 0 <= tid < PID_LIMIT:
                self.named = tid_table(self.named, tid)
                self.named[tid] = True
        if changed and tid in self.comm:
            before = self._pending.get(tid)
            if before is not None and before.comm != self.comm[tid]:
                self._earlier.append(before)
            self._pending[tid] = ev.TaskInfo(tid=tid, pid=self.tgid.get(tid, -1),
                                             comm=self.comm[tid],
                                             ppid=self.ppid.get(tid, -1), t_ns=t_ns)

    def learn_names(self, infos: Iterable[ev.TaskInfo]) -> None:
        """Names as the kernel gave them, in time order (a rename, an exec, a fork's
        inherited name): each is handed over with its time, so a report can name a task by
        its last name and an export by its name at each moment."""
        for i in infos:
            self.learn(i.tid, tgid=i.pid if i.pid > 0 else None, comm=i.comm, t_ns=i.t_ns)

    def learn_pairs(self, tids: np.ndarray, tgids: np.ndarray) -> None:
        """Bulk: every (tid, tgid) pair with tgid > 0 that is new."""
        ok = tgids > 0
        if not ok.any():
            return
        top = int(tids.max()) if len(tids) else 0
        if 0 <= int(tids.min()) and top < PID_LIMIT:
            # Pairs already known (nearly all, after the first batches) change nothing.
            self.tgid_by_tid = tid_table(self.tgid_by_tid, top)
            if not (self.tgid_by_tid[tids[ok]] != tgids[ok]).any():
                return
        # One int64 key per pair (tid high, tgid low: both are positive pids below 2^31):
        # np.unique of a plain integer array hashes; over (n, 2) rows it sorts, which was
        # most of the bcc backend's per-event cost.
        key = (tids[ok].astype(np.int64) << 32) | tgids[ok].astype(np.int64)
        for k in np.unique(key).tolist():
            tid, tgid = k >> 32, k & 0xFFFFFFFF
            if self.tgid.get(tid) != tgid:
                self._set_tgid(tid, tgid)

    def lookup_live(self, tids: Iterable[int], t_ns: int = 0) -> None:
        """Ask /proc about tids never seen (those still alive answer), and about the main
        thread of their process: a process is named by it (tid == pid, as ps names it) even
        when only its other threads ran while recording (PID 1's "tokio-rt-worker" threads
        are process_api's)."""
        for tid in tids:
            if tid in self._reported or tid in self._pending or tid <= 0:
                continue
            got = read_task(tid, self.proc)
            if got is None:
                if tid in self.comm or tid in self.tgid:
                    self.learn(tid, t_ns=t_ns)
                continue
            tgid, ppid, comm = got
            self.learn(tid, tgid=tgid, ppid=ppid, comm=self.comm.get(tid, comm), t_ns=t_ns)
            if tgid != tid and tgid > 0 and tgid not in self.comm:
                main = read_task(tgid, self.proc)
                if main is not None:
                    self.learn(tgid, tgid=main[0], ppid=main[1], comm=main[2], t_ns=t_ns)

    def fill(self, events: np.ndarray) -> None:
        """Set pid (of tid) and pid2 (of tid2) where the tracepoint left them unknown (-1);
        ``ev.OUTSIDE`` (a partner outside the traced tree) stays as it is."""
        for tid_f, pid_f in (("tid", "pid"), ("tid2", "pid2")):
            miss = np.flatnonzero(events[pid_f] == -1)
            if not len(miss):
                continue
            if pid_f == "pid2":   # tid2 means a task only for SWITCH and FORK
                kinds = events["kind"][miss]
                miss = miss[(kinds == ev.SWITCH) | (kinds == ev.FORK)]
            if not len(miss):
                continue
            want = events[tid_f][miss].astype(np.int64)
            if int(want.min()) >= 0 and int(want.max()) < PID_LIMIT:
                self.tgid_by_tid = tid_table(self.tgid_by_tid, int(want.max()))
                got = self.tgid_by_tid[want]
                hit = (got > 0) | (want == 0)          # tid 0 (idle) is its own tgid 0
                events[pid_f][miss[hit]] = got[hit]
                continue
            keys = np.fromiter(self.tgid.keys(), dtype=np.int64, count=len(self.tgid))
            vals = np.fromiter(self.tgid.values(), dtype=np.int64, count=len(self.tgid))
            order = np.argsort(keys)
            keys, vals = keys[order], vals[order]
            pos = np.clip(np.searchsorted(keys, want), 0, len(keys) - 1)
            hit = keys[pos] == want
            events[pid_f][miss[hit]] = vals[pos[hit]]

    def seen_tids(self, events: np.ndarray) -> np.ndarray:
        """Distinct task ids named by EVENTS (tid always; tid2 for switch and fork), except
        switch partners outside the traced tree (no names are kept for those)."""
        two = (events["kind"] == ev.SWITCH) | (events["kind"] == ev.FORK)
        one = events["pid"] != ev.OUTSIDE
        two &= events["pid2"] != ev.OUTSIDE
        return distinct_ids(np.concatenate([events["tid"][one], events["tid2"][two]]))

    def take_infos(self) -> list[ev.TaskInfo]:
        """TaskInfo not handed over yet (new tasks, renamed tasks)."""
        out, self._earlier = self._earlier, []
        for info in out:
            info.pid = self.tgid.get(info.tid, info.pid)
        for tid, info in self._pending.items():
            info.pid = self.tgid.get(tid, info.pid)
            info.ppid = self.ppid.get(tid, info.ppid)
            out.append(info)
            self._reported.add(tid)
        self._pending.clear()
        return out


def seed_tree(roots: list[int], tasks: TaskTable) -> list[tuple[int, int]]:
    """(tid, tgid) of every thread of the ROOTS' process trees, to put in the tracked map;
    the task table learns them and looks the roots' threads up."""
    out = []
    for pid in tree_of(roots):
        for tid in threads_of(pid) or [pid]:
            out.append((tid, pid))
            tasks.learn(tid, tgid=pid)
    tasks.lookup_live([t for p in roots for t in (threads_of(p) or [p])])
    return out
