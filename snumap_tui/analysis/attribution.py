"""Counters attributed to threads, processes, regions and phases (docs/attribution.md).

The unit is a run interval: what a thread did between its switch-in and switch-out on one PU,
with the deltas of every counted event (store/counters.py). A thread's or a process's figures
are sums of its intervals; a region instance (a thread inside an OpenMP body, an MPI call, a
probed function) gets, of each of that thread's intervals, the share of the interval's time
that lies inside it; a phase (a marker pair) gets that share of every traced interval on every
PU (of the marker's process where it is known). Counts are spread evenly over an interval's
time: exact for whole intervals, an estimate for the parts of intervals a region boundary
cuts (regions usually hold many intervals, or exactly one run of a thread).

A multiplexed event (running < enabled in some interval) is scaled by enabled/running per
interval, as perf stat does, and flagged. Ratios are computed from the sums (IPC = Σinstructions
/ Σcycles), never averaged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from snumap_tui.analysis.caps import MAX_ROWS, ranked
from snumap_tui.analysis.cumulative import Cumulative
from snumap_tui.analysis.regions import instances, recording_bounds
from snumap_tui.store.counters import ThreadCounters
from snumap_tui.store.regions import Regions
from snumap_tui.trace.events import OUTSIDE

# Event names as perf(1) spells them, for the derived figures.
CYCLES = ("cycles", "cpu-cycles")
INSTRUCTIONS = ("instructions",)
LLC_MISSES = ("LLC-load-misses", "cache-misses")
LLC_REFS = ("LLC-loads", "cache-references")
FAULTS = ("page-faults", "faults")
TASK_CLOCK = ("task-clock",)


@dataclass
class Scaled:
    """Rows of a counters table with each event's value scaled for multiplexing."""

    events: list[str]
    tid: np.ndarray
    pid: np.ndarray
    cpu: np.ndarray
    start: np.ndarray        # int64 ns
    end: np.ndarray
    values: np.ndarray       # float64 (rows, events)
    multiplexed: np.ndarray  # bool (events,): some interval ran part of its enabled time
    unmeasured: np.ndarray   # bool (events,): some interval never ran it


def scaled(tc: ThreadCounters) -> Scaled:
    """Each value times enabled / running, computed only for the rows the kernel multiplexed
    (running < enabled): software events and a PMU with counters to spare have none, and a
    float copy of both time columns per row was most of report's memory on long recordings."""
    r = tc.rows
    n = len(tc.events)
    val = r["value"].reshape(len(r), n).astype(np.float64)
    en = r["enabled"].reshape(len(r), n)
    run = r["running"].reshape(len(r), n)
    short = run < en
    rows = np.flatnonzero(short.any(axis=1)) if len(r) else np.zeros(0, np.int64)
    if len(rows):
        e, u = en[rows].astype(np.float64), run[rows].astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            val[rows] *= np.where(u > 0, e / np.where(u > 0, u, 1), 1.0)
    return Scaled(list(tc.events), r["tid"].astype(np.int64), r["pid"].astype(np.int64),
                  r["cpu"].astype(np.int64), r["t_start"].astype(np.int64),
                  r["t_end"].astype(np.int64), val,
                  np.asarray(short.any(axis=0)) if len(r) else np.zeros(n, bool),
                  np.asarray(((run == 0) & (en > 0)).any(axis=0)) if len(r)
                  else np.zeros(n, bool))


def event_index(events: list[str], names: tuple[str, ...]) -> int | None:
    """The column of EVENTS holding the first of NAMES counted (any case), or None: one
    matching of event names for attribution, energy, replay's figures and top's panel."""
    low = [e.lower() for e in events]
    for n in names:
        if n.lower() in low:
            return low.index(n.lower())
    return None


def derived(events: list[str], sums: np.ndarray, on_cpu_ns: int,
            migrations: int | None) -> tuple[dict[str, Any], dict[str, str]]:
    """IPC, GHz, MPKI, LLC miss ratio, faults and migrations of summed counters: (figures,
    why each missing one is n/a)."""
    out: dict[str, Any] = {}
    why: dict[str, str] = {}

    def get(names: tuple[str, ...]) -> float | None:
        i = event_index(events, names)
        return None if i is None else float(sums[i])

    cyc, ins = get(CYCLES), get(INSTRUCTIONS)
    miss, refs, faults = get(LLC_MISSES), get(LLC_REFS), get(FAULTS)
    minor, major = get(("minor-faults", "proc:minor-faults")), get(("major-faults",
                                                                     "proc:major-faults"))
    if faults is None and minor is not None:
        faults = minor + (major or 0.0)

    def ratio(key: str, a: float | None, b: float | None, need: str, k: float = 1.0) -> None:
        if a is None or b is None:
            out[key] = None
            why[key] = f"needs {need} (not counted)"
        elif b == 0:
            out[key] = None
            why[key] = "no " + need.split(" and ")[-1] + " counted here"
        else:
            out[key] = k * a / b

    ratio("ipc", ins, cyc, "instructions and cycles")
    ratio("ghz", cyc, float(on_cpu_ns) if on_cpu_ns else None, "cycles and on-CPU time")
    ratio("mpki", miss, ins, "LLC-load-misses and instructions", 1000.0)
    ratio("llc_miss_ratio", miss, refs, "LLC-load-misses and LLC-loads")
    out["faults"] = faults
    if faults is None:
        why["faults"] = "page-faults not counted (--events)"
    out["migrations"] = migrations
    return out, why


@dataclass
class Groups:
    """Sums per distinct key (sorted): intervals, on-CPU ns, event sums, migrations."""

    keys: np.ndarray
    intervals: np.ndarray
    on_cpu_ns: np.ndarray
    sums: np.ndarray                 # (keys, events)
    migrations: np.ndarray

    def one(self, i: int) -> dict[str, Any]:
        return {"intervals": int(self.intervals[i]), "on_cpu_ns": int(self.on_cpu_ns[i]),
                "sums": self.sums[i], "migrations": int(self.migrations[i])}

    def top(self, events: list[str], runs: bool, n: int = MAX_ROWS
            ) -> tuple[np.ndarray, dict[str, Any] | None]:
        """(indexes of the N keys with the most on-CPU time, in that order; the rest summed,
        or None). RUNS: as ``_row`` takes on-CPU time (the rows' lengths, or the counts)."""
        busy = self.on_cpu_ns if runs else counted_on_cpu(events, self.sums)
        order = ranked(self.keys, busy if busy is not None else np.zeros(len(self.keys)))
        if len(order) <= n:
            return order, None
        rest = order[n:]
        return order[:n], {"count": len(rest), "intervals": int(self.intervals[rest].sum()),
                           "on_cpu_ns": int(self.on_cpu_ns[rest].sum()),
                           "sums": self.sums[rest].sum(axis=0),
                           "migrations": int(self.migrations[rest].sum())}


def _group(keys: np.ndarray, s: Scaled, order_key: np.ndarray,
           moves: np.ndarray | None = None) -> Groups:
    """Sums per key, linear in rows but for one sort: migrations are a thread's consecutive
    intervals on different PUs (MOVES: per row, whether its thread moved to it; computed
    here when KEYS are tids)."""
    uk, inv = np.unique(keys, return_inverse=True)
    inv = inv.reshape(-1)
    dur = (s.end - s.start).clip(min=0)
    sums = np.zeros((len(uk), len(s.events)))
    np.add.at(sums, inv, s.values)
    ns = np.bincount(inv, weights=dur, minlength=len(uk))
    cnt = np.bincount(inv, minlength=len(uk))
    if moves is None:
        moves = _moves(s, order_key)
    mig = np.bincount(inv[moves], minlength=len(uk))
    return Groups(uk, cnt, ns, sums, mig)


def _moves(s: Scaled, order_key: np.ndarray) -> np.ndarray:
    """Per row: its thread ran its previous interval (by ORDER_KEY) on another PU."""
    o = np.lexsort((order_key, s.tid))
    moved = np.zeros(len(o), dtype=bool)
    moved[o[1:]] = (s.tid[o][1:] == s.tid[o][:-1]) & (s.cpu[o][1:] != s.cpu[o][:-1])
    return moved


def counted_on_cpu(events: list[str], sums: np.ndarray) -> np.ndarray | None:
    """On-CPU ns when the rows are reads, not runs (perf, /proc backends), from the event
    sums along SUMS' last axis (one row's, or a table's): task-clock, or /proc's utime +
    stime; None without either."""
    proc = [events.index(e) for e in ("proc:utime-ns", "proc:stime-ns") if e in events]
    if proc:            # both from /proc; a damaged header may name one (then that one)
        return sum((sums[..., j] for j in proc[1:]), start=sums[..., proc[0]])
    i = event_index(events, TASK_CLOCK)
    return None if i is None else sums[..., i]


def on_cpu_from_counts(events: list[str], sums: np.ndarray) -> int | None:
    """``counted_on_cpu`` of one row's sums, in whole ns."""
    v = counted_on_cpu(events, sums)
    return None if v is None else int(v)


def _row(events: list[str], g: dict[str, Any], runs: bool = True, **extra: Any
         ) -> dict[str, Any]:
    """One table row; RUNS: the rows were run intervals (their lengths are on-CPU time)."""
    if not runs:
        g = dict(g, on_cpu_ns=on_cpu_from_counts(events, g["sums"]) or 0)
    figs, why = derived(events, g["sums"], g["on_cpu_ns"], g.get("migrations"))
    row = {**extra, "intervals": g["intervals"], "on_cpu_s": g["on_cpu_ns"] / 1e9,
           "events": {e: float(v) for e, v in zip(events, g["sums"].tolist())}, **figs}
    if why:
        row["na"] = why
    return row


def _span_sums(cum: Cumulative, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    fa, na = cum.at(a)
    fb, nb = cum.at(b)
    return (fb - fa).sum(axis=0), np.array((nb - na).sum())


Inst = tuple[str, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _instances(reg: Regions, bounds: tuple[int, int] | None = None) -> dict[str, Inst]:
    """Per region name: (kind, tid, pid, start, end) of the instances that say where its
    threads were inside (a parallel region's bodies, else its calls or marker pairs, else
    its master's spans; as analysis/regions.py counts time inside, those open at the
    recording's BOUNDS clipped to them)."""
    inst, _cut = instances(reg.rows, bounds)
    by: dict[str, dict[str, list[int]]] = {}
    for rid, n in enumerate(reg.names):
        by.setdefault(n.name, {}).setdefault(n.role, []).append(rid)
    out: dict[str, Inst] = {}
    for name, roles in by.items():
        pick = roles.get("body") or (roles.get("call", []) + roles.get("marker", [])) or \
            roles.get("span", [])
        m = np.isin(inst.rid, pick)
        sums = getattr(reg, "sums", None)
        if sums is not None and (np.isin(sums["rid"], pick) & (sums["count"] > 0)).any():
            continue        # calls summed in the kernel: no instance, no run interval inside
        kind = reg.names[pick[0]].kind
        out[name] = (kind, inst.tid[m].astype(np.int64), inst.pid[m].astype(np.int64),
                     inst.start[m].astype(np.int64), inst.end[m].astype(np.int64))
    return out


def attribute(tc: ThreadCounters, reg: Regions | None = None,
              comm: dict[int, str] | None = None, runs: bool = True,
              bounds: tuple[int, int] | None = None) -> dict[str, Any]:
    """The report's ``counters`` section: per thread, process, region, phase and PU. RUNS:
    the rows are run intervals (libbpf); else reads between polls (perf, /proc), whose
    on-CPU time is task-clock's or /proc's, and whose migrations are not known. BOUNDS: the
    recording's, to which region instances open at either end are clipped."""
    comm = comm or {}
    s = scaled(tc)
    ev = s.events
    traced = (s.tid > 0) & (s.pid != OUTSIDE)
    ts = _sub(s, traced)            # one copy of the traced rows, for every table below
    moves = _moves(ts, ts.end)
    threads = _group(ts.tid, ts, ts.end, moves)
    procs = _group(ts.pid, ts, ts.end, moves)    # a process's migrations: its threads'
    # A thread's process: that of its last row (as the rows name it).
    last = np.lexsort((ts.end, ts.tid))
    tid_pid = np.zeros(len(threads.keys), dtype=np.int64)
    if len(last):
        tid_pid[np.searchsorted(threads.keys, ts.tid[last])] = ts.pid[last]
    t_idx, t_rest = threads.top(ev, runs)
    p_idx, p_rest = procs.top(ev, runs)
    out: dict[str, Any] = {
        "events": ev,
        "multiplexed": [e for e, m in zip(ev, s.multiplexed.tolist()) if m],
        "unmeasured": [e for e, m in zip(ev, s.unmeasured.tolist()) if m],
        "threads": [_row(ev, threads.one(i), runs, tid=int(threads.keys[i]),
                         pid=int(tid_pid[i]), comm=comm.get(int(threads.keys[i]), "?"))
                    for i in t_idx.tolist()],
        "processes": [_row(ev, procs.one(i), runs, pid=int(procs.keys[i]),
                           comm=comm.get(int(procs.keys[i]), "?")) for i in p_idx.tolist()],
        "cpus": _per_cpu(s),
        "regions": [], "phases": [],
    }
    # Past MAX_ROWS: counted and summed, never a row each.
    for key, rest in (("threads_left_out", t_rest), ("processes_left_out", p_rest)):
        if rest is not None:
            out[key] = {"count": rest["count"],
                        **_row(ev, rest, runs)}
    if reg is not None and len(reg.rows):
        out["regions"], out["phases"] = _regions(ts, reg, runs, bounds)
    if not runs:
        for r in (*out["threads"], *out["processes"]):
            r["migrations"] = None
    return out


def _sub(s: Scaled, m: np.ndarray) -> Scaled:
    return Scaled(s.events, s.tid[m], s.pid[m], s.cpu[m], s.start[m], s.end[m], s.values[m],
                  s.multiplexed, s.unmeasured)


def _per_cpu(s: Scaled, top: int = MAX_ROWS) -> list[dict[str, Any]]:
    """Per PU (the TOP PU numbers with the most rows; a crafted chunk may name 2^32): the
    traced threads' sums, the untraced tasks' (and idle's), and both."""
    if not len(s.cpu):
        return []
    cpus, inv, n = np.unique(s.cpu, return_inverse=True, return_counts=True)
    inv = inv.reshape(-1)
    tr = (s.tid > 0) & (s.pid != OUTSIDE)
    traced = np.zeros((len(cpus), len(s.events)))
    total = np.zeros((len(cpus), len(s.events)))
    np.add.at(traced, inv[tr], s.values[tr])
    np.add.at(total, inv, s.values)
    keep = np.sort(ranked(cpus, n)[:top])
    return [{"cpu": int(cpus[i]), "traced": dict(zip(s.events, traced[i].tolist())),
             "other": dict(zip(s.events, (total[i] - traced[i]).tolist())),
             "total": dict(zip(s.events, total[i].tolist()))} for i in keep.tolist()]


def _regions(ts: Scaled, reg: Regions, runs: bool = True,
             bounds: tuple[int, int] | None = None
             ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Per region and per phase, from TS: the traced rows only."""
    s = ts
    by_tid = _split(ts.tid)
    cum_tid: dict[int, Cumulative] = {}

    def of_tid(t: int) -> Cumulative | None:
        if t not in cum_tid and t in by_tid:
            i = by_tid[t]
            cum_tid[t] = Cumulative(ts.start[i], ts.end[i], ts.values[i])
        return cum_tid.get(t)

    by_pid = _split(ts.pid)
    of_pid: dict[int, tuple[list[int], list[Cumulative]]] = {}

    def pid_cums(p: int) -> tuple[list[int], list[Cumulative]]:
        """P's threads and its rows' sums per PU (every traced row where P <= 0: a phase
        of no known process); once per process, however many phases name it."""
        if p not in of_pid:
            rows = by_pid.get(p, np.zeros(0, np.int64)) if p > 0 else np.arange(len(ts.tid))
            of_pid[p] = (np.unique(ts.tid[rows]).tolist(),
                         [Cumulative(ts.start[rows[i]], ts.end[rows[i]], ts.values[rows[i]])
                          for i in _split(ts.cpu[rows]).values()])
        return of_pid[p]

    regions: list[dict[str, Any]] = []
    phases: list[dict[str, Any]] = []
    for name, (kind, tid, pid, a, b) in _instances(reg, bounds).items():
        sums = np.zeros(len(s.events))
        ns = 0.0
        threads: set[int] = set()
        if kind == "marker":
            # A phase: every traced interval in its time, of its process when known.
            for p, m in sorted(_split(pid).items()):
                tids, cums = pid_cums(p)
                threads.update(tids)
                for per_pu in cums:
                    v, n = _span_sums(per_pu, a[m], b[m])
                    sums += v
                    ns += float(n)
        else:
            for t, m in sorted(_split(tid).items()):
                cum = of_tid(t)
                if cum is None:
                    continue
                v, n = _span_sums(cum, a[m], b[m])
                sums += v
                ns += float(n)
                threads.add(t)
        row = _row(s.events, {"intervals": len(a), "on_cpu_ns": int(ns), "sums": sums,
                              "migrations": None}, runs,
                   name=name, kind=kind, threads=len(threads))
        row["instances"] = row.pop("intervals")
        row.pop("migrations", None)
        (phases if kind == "marker" else regions).append(row)
    return (sorted(regions, key=lambda r: -r["on_cpu_s"]),
            sorted(phases, key=lambda r: -r["on_cpu_s"]))


def _split(keys: np.ndarray) -> dict[int, np.ndarray]:
    """Key -> the indexes of its rows (in order): one sort, not one scan per key."""
    if not len(keys):
        return {}
    o = np.argsort(keys, kind="stable")
    uk, first = np.unique(keys[o], return_index=True)
    return {int(k): part for k, part in zip(uk.tolist(), np.split(o, first[1:]))}


def why_no_counters(info: dict[str, Any]) -> str:
    """Why a recording whose header says INFO (its ``counters``) has no counter rows."""
    dropped = [str(d) for d in info.get("dropped") or []]
    if not info:
        return "recorded without --events (snumap record --events task-clock,...)"
    if dropped and not info.get("events"):
        return "; ".join(dropped)
    return "no traced thread ran while counting"


def rows_are_runs(rec: Any) -> bool:
    """Whether REC's counter rows are run intervals, their lengths on-CPU time (libbpf), not
    reads at each poll (perf, /proc): ``attribute``'s RUNS."""
    info = dict((getattr(rec, "header", {}) or {}).get("counters") or {})
    return str(info.get("source") or "").startswith("libbpf")


def counter_section(rec: Any, comm: dict[int, str] | None = None) -> dict[str, Any]:
    """The report's ``counters``: ``available`` False with ``why`` when the recording has no
    counters per run interval, else ``attribute``'s tables with where they came from and the
    events this machine could not count."""
    info = dict((getattr(rec, "header", {}) or {}).get("counters") or {})
    tc = rec.thread_counters() if hasattr(rec, "thread_counters") else ThreadCounters()
    dropped = [str(d) for d in info.get("dropped") or []]
    if not len(tc):
        return {"available": False, "why": why_no_counters(info), "dropped": dropped}
    source = str(info.get("source") or "")
    out = attribute(tc, rec.regions() if hasattr(rec, "regions") else None, comm,
                    runs=rows_are_runs(rec), bounds=recording_bounds(rec))
    return {"available": True, "source": source, "dropped": dropped, **out}
