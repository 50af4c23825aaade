"""Process rows of a Frame from two "tasks" readings (threads folded into processes).

CPU time is per thread in /proc/PID/task/TID/stat (utime, stime: fields 14 and 15 of proc(5),
in USER_HZ ticks); a process's CPU % is the sum of its threads' tick deltas over the interval,
as a percentage of one PU. A thread that was not there at the previous sample started during
the interval, so all its ticks belong to it. Without a previous "tasks" reading there is no
interval: CPU % is None, not 0.

The per-process numbers are computed for all processes at once with numpy; the TaskRow objects
(the Python part, a few microseconds per process) are only built when a reader looks at the
rows (``TaskRows``): the topology and heatmap views only ever look up the selected process.

A *partial* reading (the tasks source's ``"partial"`` key: the pids it was asked to read, see
``TasksSource.set_cadence``) covers only those processes; ``TaskTimeline`` pairs a full
reading with the previous full one (its CPU % is over that longer interval) and lays the fresh
rows of a partial one over the last full rows.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, overload

import numpy as np

from snumap_tui.model.frame import TaskRow
from snumap_tui.model.threadcounts import ThreadDeltas
from snumap_tui.model.threadcounts import thread_deltas as thread_counts

# The unit of /proc's utime/stime for readings that do not say (recordings made before the
# tasks source carried ``hz``, sysconf(_SC_CLK_TCK)): USER_HZ is 100 on every mainstream arch.
LEGACY_USER_HZ = 100.0


def reading_hz(reading: Mapping[str, Any] | None, hz: float | None = None) -> float:
    """The tick rate of a tasks reading: its own ``hz``, else the caller's, else 100."""
    got = reading.get("hz") if reading else None
    return float(got or hz or LEGACY_USER_HZ)


def counter_rates(prev: Mapping[str, Any] | None, cur: Mapping[str, Any], dt: float
                  ) -> dict[int, dict[str, float]]:
    """Per process with ``counters`` in both readings (TasksSource.want_counters): each perf
    event's increase per second. A counter that went backwards (the pid is a new process)
    has no rate."""
    out: dict[int, dict[str, float]] = {}
    procs = cur.get("processes") or {}
    before = (prev.get("processes") or {}) if prev else {}
    if not (dt > 0) or not procs or not before:
        return out
    for pid, info in procs.items():
        c = info.get("counters")
        pc = before.get(pid, _NO_INFO).get("counters")
        if not c or not pc:
            continue
        was = dict(zip(pc["events"], pc["value"]))
        rates = {}
        for ev, v in zip(c["events"], c["value"]):
            d = float(v) - float(was.get(ev, math.nan))
            if d >= 0:
                rates[ev] = d / dt
        if rates:
            out[int(pid)] = rates
    return out


def _ticks(threads: Mapping[str, Any], fields: tuple[str, ...] = ("utime", "stime")
           ) -> tuple[np.ndarray, np.ndarray]:
    tid = np.asarray(threads.get("tid", ()), dtype=np.int64)
    ticks = np.zeros(tid.shape)
    for f in fields:
        col = threads.get(f)
        if col is not None:
            ticks = ticks + np.asarray(col, dtype=np.float64)
    return tid, ticks


def thread_deltas(prev: Mapping[str, Any] | None, cur: Mapping[str, Any],
                  covered: np.ndarray | None = None) -> np.ndarray:
    """Ticks each of cur's threads ran during the interval (NaN without a previous reading).
    ``covered``: when the previous reading was partial, the pids it read; a thread of any
    other process is unknown there (NaN), not new."""
    return thread_deltas_split(prev, cur, covered)[0]


def _columns(threads: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """tid, utime + stime, and stime (None when the reading has none), each converted once."""
    tid = np.asarray(threads.get("tid", ()), dtype=np.int64)
    ut = threads.get("utime")
    ticks = np.asarray(ut, dtype=np.float64) if ut is not None else np.zeros(tid.shape)
    st = threads.get("stime")
    if st is None:
        return tid, ticks, None
    sys_ticks = np.asarray(st, dtype=np.float64)
    return tid, ticks + sys_ticks, sys_ticks


def thread_deltas_split(prev: Mapping[str, Any] | None, cur: Mapping[str, Any],
                        covered: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``thread_deltas`` and, paired the same way, the ticks in the kernel (stime) among
    them; NaN where the readings carry no stime (a thread's user ticks are the rest)."""
    tid, ticks, sys_now = _columns(cur)
    if prev is None or "tid" not in prev:
        nan = np.full(tid.shape, np.nan)
        return nan, nan.copy()
    ptid, pticks, psys = _columns(prev)
    order = np.argsort(ptid, kind="stable")
    stid = ptid[order]
    at = np.searchsorted(stid, tid)
    at_c = np.minimum(at, max(len(stid) - 1, 0))
    seen = (at < len(stid)) & (stid[at_c] == tid) if len(stid) else np.zeros(tid.shape, bool)
    idx = order[at_c] if len(stid) else at_c          # each thread's row in prev
    before = np.where(seen, pticks[idx], 0.0) if len(stid) else np.zeros(tid.shape)
    d = ticks - before
    # A recycled TID with fewer ticks than its predecessor is a new thread.
    fresh = d < 0
    d = np.where(fresh, ticks, d)
    if sys_now is None or psys is None:
        d_sys = np.full(tid.shape, np.nan)
    elif len(stid):
        d_sys = np.maximum(np.where(seen & ~fresh, sys_now - psys[idx], sys_now), 0.0)
    else:
        d_sys = sys_now.copy()
    if covered is not None:
        pid = np.asarray(cur.get("pid", ()), dtype=np.int64)
        unknown = ~(seen | np.isin(pid, covered))
        d[unknown] = np.nan
        d_sys[unknown] = np.nan
    return d, d_sys


class LazyRows(Sequence[TaskRow]):
    """A read-only sequence of TaskRow built on first use, with ``find(pid)`` that need not
    build the others. Compares equal to any sequence with the same rows."""

    _rows: list[TaskRow] | None = None

    def _build(self) -> list[TaskRow]:
        raise NotImplementedError

    def rows(self) -> list[TaskRow]:
        if self._rows is None:
            self._rows = self._build()
        return self._rows

    def find(self, pid: int) -> TaskRow | None:
        return next((t for t in self.rows() if t.pid == pid), None)

    @overload
    def __getitem__(self, i: int) -> TaskRow: ...

    @overload
    def __getitem__(self, i: slice) -> list[TaskRow]: ...

    def __getitem__(self, i: int | slice) -> TaskRow | list[TaskRow]:
        return self.rows()[i]

    def __len__(self) -> int:
        return len(self.rows())

    def __iter__(self) -> Iterator[TaskRow]:
        return iter(self.rows())

    def __bool__(self) -> bool:
        return len(self) > 0

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes)):
            return self.rows() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self)} processes)"


class TaskRows(LazyRows):
    """One process per group of threads of a "tasks" reading, busiest first: the per-process
    numbers as arrays, each TaskRow made when first needed."""

    def __init__(self, cur: Mapping[str, Any], pids: np.ndarray, cpu_pct: np.ndarray,
                 main: np.ndarray, busiest: np.ndarray, nthreads: np.ndarray,
                 running: np.ndarray, rates: Mapping[int, dict[str, float]] | None = None,
                 time_s: np.ndarray | None = None, sys_pct: np.ndarray | None = None,
                 threads: Mapping[int, ThreadDeltas] | None = None) -> None:
        # Busiest first, ties by pid (what every reader of Frame.tasks expects).
        order = np.lexsort((pids, -np.nan_to_num(cpu_pct, nan=0.0)))
        self._th = cur["threads"]
        self._procs: Mapping[int, Mapping[str, Any]] = cur.get("processes") or {}
        self._pids = pids[order]
        self._cpu = cpu_pct[order]
        self._main, self._busiest = main[order], busiest[order]
        self._nthreads, self._running = nthreads[order], running[order]
        self._time = (time_s if time_s is not None else np.full(pids.shape, np.nan))[order]
        self._sys = (sys_pct if sys_pct is not None else np.full(pids.shape, np.nan))[order]
        self._by_pid: dict[int, int] | None = None
        self._rates: Mapping[int, dict[str, float]] = rates or {}
        self._threads: Mapping[int, ThreadDeltas] = threads or {}
        self._made: dict[int, TaskRow] = {}      # rows built one at a time (``[i]``)

    def __len__(self) -> int:
        return int(self._pids.size)

    def __bool__(self) -> bool:
        return self._pids.size > 0

    def pids(self) -> np.ndarray:
        """The processes' pids in row order (without building any row)."""
        return self._pids

    def top(self, n: int, by: str = "cpu", decimals: int = 1) -> TaskRows:
        """The first ``n`` processes in the order a process list shows them, as another lazy
        TaskRows (no row is built here: a view formats only the rows on screen).

        ``by="cpu"``: busiest first by CPU % rounded half up to ``decimals`` (what the list
        shows: rows the eye sees as equal sort as equal), ties by pid; ``by="pid"``: by pid.
        The rounding is ``floor(x * 10**decimals + 0.5) / 10**decimals``, so a Python sort
        key computed the same way orders rows exactly as this does."""
        if by == "pid":
            order = np.argsort(self._pids, kind="stable")
        elif by == "time":
            order = np.lexsort((self._pids, -np.nan_to_num(self._time, nan=-1.0)))
        elif by == "cpu":
            scale = 10.0 ** decimals
            shown = np.floor(np.nan_to_num(self._cpu, nan=0.0) * scale + 0.5) / scale
            order = np.lexsort((self._pids, -shown))
        else:
            raise ValueError(f"top: cannot order by {by!r} without building the rows")
        return self._subset(order[:max(0, n)])

    def _subset(self, idx: np.ndarray) -> TaskRows:
        """These rows (indexes into this one's order), in that order, sharing the reading."""
        sub = object.__new__(TaskRows)
        sub._th, sub._procs, sub._rates = self._th, self._procs, self._rates
        sub._threads = self._threads
        sub._pids, sub._cpu = self._pids[idx], self._cpu[idx]
        sub._main, sub._busiest = self._main[idx], self._busiest[idx]
        sub._nthreads, sub._running = self._nthreads[idx], self._running[idx]
        sub._time, sub._sys = self._time[idx], self._sys[idx]
        sub._by_pid, sub._rows, sub._made = None, None, {}
        return sub

    @overload
    def __getitem__(self, i: int) -> TaskRow: ...

    @overload
    def __getitem__(self, i: slice) -> list[TaskRow]: ...

    def __getitem__(self, i: int | slice) -> TaskRow | list[TaskRow]:
        """One row builds only that row (a table asks for the rows it draws)."""
        if isinstance(i, slice) or self._rows is not None:
            return self.rows()[i]
        n = int(self._pids.size)
        if not -n <= i < n:
            raise IndexError(i)
        return self._at(i % n if n else i)

    def _at(self, g: int) -> TaskRow:
        row = self._made.get(g)
        if row is None:
            row = self._made[g] = self._row(g)
        return row

    def find(self, pid: int) -> TaskRow | None:
        if self._rows is not None:
            if self._by_pid is None:
                self._by_pid = {t.pid: i for i, t in enumerate(self._rows)}
            i = self._by_pid.get(pid)
            return None if i is None else self._rows[i]
        hit = np.nonzero(self._pids == pid)[0]
        return self._at(int(hit[0])) if hit.size else None

    def _build(self) -> list[TaskRow]:
        return [self._at(g) for g in range(self._pids.size)]

    def shown_key(self, i: int) -> tuple[object, ...]:
        """Row I's raw values that a process list's cells are made of (pid, user, job, CPU
        and system %, RSS, threads, CPU time, the PU, affinity, command), without building
        the row: two rows of equal keys show the same cells, so a list whose processes did
        not change (most of them, most frames) builds no row to find that out."""
        th = self._th
        p = int(self._pids[i])
        info = self._procs.get(p, _NO_INFO)
        m = int(self._main[i])
        last_cpu, comm, uid = th.get("last_cpu", ()), th.get("comm", ()), th.get("uid", ())
        aff = info.get("affinity") or ()
        # NaN (not measured) as None: a NaN equals nothing, not even itself
        nums = [None if isinstance(x, float) and math.isnan(x) else x for x in (
            float(self._cpu[i]), float(self._sys[i]), float(self._time[i]),
            last_cpu[int(self._busiest[i])] if len(last_cpu) else None)]
        # as the row has them (text, the shared set): a recording's odd values stay hashable
        return (p, _user(info, uid, m), info.get("job"), *nums, info.get("rss_bytes"),
                int(self._nthreads[i]), aff if isinstance(aff, frozenset) else _affinity(aff),
                info.get("cmdline"), str(comm[m]) if len(comm) else "")

    def _row(self, g: int) -> TaskRow:
        th = self._th
        comm, state, last_cpu = th.get("comm", ()), th.get("state", ()), th.get("last_cpu", ())
        p = int(self._pids[g])
        info = self._procs.get(p, _NO_INFO)
        m = int(self._main[g])
        lc = last_cpu[int(self._busiest[g])] if len(last_cpu) else None
        lc = None if lc is None or (isinstance(lc, float) and math.isnan(lc)) else int(lc)
        pct, sys_pct = float(self._cpu[g]), float(self._sys[g])
        numa = info.get("numa_pages")
        aff = info.get("affinity") or ()
        rss = info.get("rss_bytes")
        rates = self._rates.get(p)
        ppid = th.get("ppid", ())
        secs = float(self._time[g])
        ipc = None
        if rates and rates.get("cycles"):
            ipc = rates.get("instructions", math.nan) / rates["cycles"]
            ipc = None if math.isnan(ipc) else ipc
        return TaskRow(
            p, p, str(comm[m]) if len(comm) else "", _user(info, th.get("uid", ()), m),
            "R" if self._running[g] else (str(state[m]) if len(state) else "?"),
            None if math.isnan(pct) else pct, lc,
            aff if isinstance(aff, frozenset) else _affinity(aff),
            info.get("cgroup"), info.get("job"), info.get("cmdline"),
            {int(k): int(v) for k, v in numa.items()} if numa else None,
            int(self._nthreads[g]), int(rss) if rss is not None else None,
            rates, rates.get("context-switches") if rates else None, ipc,
            int(ppid[m]) if len(ppid) else None, None if math.isnan(secs) else secs,
            None if math.isnan(sys_pct) or math.isnan(pct) else sys_pct,
            threads=self._threads.get(p), memory_nodes=info.get("memory_nodes"),
            memory_exact=info.get("memory_exact"), memory_error=info.get("memory_error"))


_NO_INFO: Mapping[str, Any] = {}


def _user(info: Mapping[str, Any], uid: Any, m: int) -> str:
    """A process's user as its row shows it: the name the source found, else the main
    thread's uid, else ``?``."""
    user = info.get("user")
    if user is None and len(uid):
        user = uid[m]
    return str(user or "?")


@functools.lru_cache(maxsize=4096)
def _affinity_of(key: tuple[int, ...]) -> frozenset[int]:
    return frozenset(key)


def _affinity(cpus: Any) -> frozenset[int]:
    """The frozenset of an affinity list, shared between rows and frames (most processes
    may run anywhere: one set for all of them instead of one per process per frame)."""
    return _affinity_of(tuple(int(x) for x in cpus))


class OverlaidRows(LazyRows):
    """The last full rows with the processes a partial reading covered replaced by its fresh
    rows (and dropped when the partial reading found them gone)."""

    def __init__(self, base: Sequence[TaskRow], fresh: Sequence[TaskRow],
                 covered: Sequence[int]) -> None:
        self._base, self._fresh, self._covered = base, fresh, frozenset(int(p) for p in covered)

    @property
    def base(self) -> Sequence[TaskRow]:
        """The full reading these rows overlay: the same object until the next full read
        (what a list refreshed only at full reads can key on)."""
        return self._base

    def find(self, pid: int) -> TaskRow | None:
        if pid in self._covered:
            return next((t for t in self._fresh if t.pid == pid), None)
        finder = getattr(self._base, "find", None)
        if finder is not None:
            return finder(pid)
        return next((t for t in self._base if t.pid == pid), None)

    def _build(self) -> list[TaskRow]:
        rows = [t for t in self._base if t.pid not in self._covered] + list(self._fresh)
        rows.sort(key=lambda r: (-(r.cpu_pct or 0.0), r.pid))
        return rows


def _empty_columns() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                            np.ndarray]:
    z = np.zeros(0, dtype=np.int64)
    return z, np.zeros(0), z, z, z, np.zeros(0, dtype=bool)


EMPTY = TaskRows({"threads": {}}, *_empty_columns())


def _covered(reading: Mapping[str, Any] | None) -> np.ndarray | None:
    part = reading.get("partial") if reading else None
    return None if part is None else np.asarray(list(part), dtype=np.int64)


def derive_tasks(prev: Mapping[str, Any] | None, cur: Mapping[str, Any] | None, dt: float,
                 hz: float | None = None) -> TaskRows:
    """One TaskRow per process, busiest first (built lazily: see TaskRows). CPU time is in
    the reading's own ``hz`` ticks (``hz`` here is only for readings that lack it)."""
    if cur is None or not cur.get("threads"):
        return TaskRows({"threads": {}}, *_empty_columns())
    hz = reading_hz(cur, hz)
    th = cur["threads"]
    pid = np.asarray(th.get("pid", ()), dtype=np.int64)
    tid = np.asarray(th.get("tid", ()), dtype=np.int64)
    if pid.size == 0:
        return TaskRows(cur, *_empty_columns())
    prev_threads = prev.get("threads") if prev else None
    delta, delta_sys = thread_deltas_split(prev_threads, th, _covered(prev))
    pids, inv = np.unique(pid, return_inverse=True)
    inv = inv.reshape(-1)
    ngroups = pids.size
    nthreads = np.bincount(inv, minlength=ngroups)
    if cur.get("folded"):       # one row per process (sources/tasks.py per_thread off)
        procs = cur.get("processes") or {}
        nthreads = np.array([int((procs.get(p) or {}).get("nthreads") or 1)
                             for p in pids.tolist()], dtype=np.int64)
    known = ~np.isnan(delta)
    if known.any() and dt > 0 and not math.isnan(dt) and hz > 0:
        cpu_ticks = np.bincount(inv, weights=np.where(known, delta, 0.0), minlength=ngroups)
        cpu_pct = cpu_ticks / hz / dt * 100.0
        # A process none of whose threads the previous reading knew has no interval.
        cpu_pct[np.bincount(inv, weights=known, minlength=ngroups) == 0] = np.nan
        # In the kernel (its user time is the rest); unknown where stime is not read.
        sys_known = ~np.isnan(delta_sys)
        sys_pct = np.bincount(inv, weights=np.where(sys_known, delta_sys, 0.0),
                              minlength=ngroups) / hz / dt * 100.0
        sys_pct[np.bincount(inv, weights=sys_known, minlength=ngroups) == 0] = np.nan
    else:
        cpu_pct = np.full(ngroups, np.nan)
        sys_pct = cpu_pct.copy()
    # Busiest thread of each process (ties go to the main thread): its last CPU is shown.
    is_main = tid == pid
    score = np.where(known, delta, -1.0) + 0.5 * is_main
    order = np.lexsort((-score, inv))
    busiest = order[np.searchsorted(inv[order], np.arange(ngroups))]
    main = busiest.copy()
    main[inv[is_main]] = np.nonzero(is_main)[0]
    state = th.get("state", ())
    running = np.zeros(ngroups, dtype=bool)
    if len(state):
        running[inv[np.asarray(state) == "R"]] = True
    _, ticks = _ticks(th)
    time_s = (np.bincount(inv, weights=ticks, minlength=ngroups) / hz
              if len(ticks) == len(pid) and "utime" in th else None)
    return TaskRows(cur, pids, cpu_pct, main, busiest, nthreads, running,
                    counter_rates(prev, cur, dt), time_s, sys_pct,
                    thread_counts(prev, cur, dt, delta, hz))


class TaskTimeline:
    """Frame.tasks across full and partial "tasks" readings (what the sampler keeps between
    sweeps). A full reading is measured against the last full one (after partial sweeps that
    is a longer interval than the frame's: the CPU % of the processes nobody was looking at is
    their average since then); a partial one gives fresh rows to the processes it read and
    leaves the others as the last full reading had them."""

    def __init__(self, hz: float | None = None) -> None:
        self.hz = hz          # only for readings without their own "hz" (old recordings)
        self._full: tuple[int, Mapping[str, Any]] | None = None   # (t_ns, reading)
        self._rows: Sequence[TaskRow] = EMPTY

    def rows(self, prev_t_ns: int, prev: Mapping[str, Any] | None, t_ns: int,
             cur: Mapping[str, Any] | None) -> Sequence[TaskRow]:
        if cur is None:
            return EMPTY
        if prev is not None and prev.get("partial") is None and (
                self._full is None or self._full[1] is not prev):
            self._take(prev_t_ns, prev)   # a full sweep this timeline did not see as a frame
        if cur.get("partial") is None:
            return self._take(t_ns, cur)
        fresh = derive_tasks(prev, cur, (t_ns - prev_t_ns) / 1e9, self.hz)
        return OverlaidRows(self._rows, fresh, cur["partial"])

    def _take(self, t_ns: int, full: Mapping[str, Any]) -> Sequence[TaskRow]:
        """A full reading: rows against the last full one, which it then replaces."""
        base_t, base = self._full if self._full is not None else (t_ns, None)
        self._rows = derive_tasks(base, full, (t_ns - base_t) / 1e9, self.hz)
        self._full = (t_ns, full)
        return self._rows

    def reset(self) -> None:
        """Forget the last full reading (a new run of the sampler)."""
        self._full, self._rows = None, EMPTY
