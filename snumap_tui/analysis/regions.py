"""Regions of a recording: instances paired from enter/leave records, and per region its count,
wall time, each thread's time inside, load imbalance and waiting time.

- An instance is a BEGIN and the next END of the same region on the same thread (a region
  re-entered recursively on one thread keeps only its innermost instance). An instance open
  at the recording's start (its thread's first record of it is an END: entered before the
  probes were attached) or end (its last is a BEGIN) counts clipped to the recording, and
  its region says so (``clipped``; "<" and ">" in the text form): only with the recording's
  bounds given (``instances``, which the report, the exports and replay's region view all
  take); ``pair`` alone keeps whole instances.
- A parallel region (an OpenMP ``span``) counts its master's GOMP_parallel calls; each thread's
  time inside is its time running the region's outlined body; imbalance is max/mean of those
  per-thread times; its waiting time is, per thread, the span's wall time not spent in the
  body (the implicit barrier at the region's end, SnuMAP's gap at a synchronisation point).
- A call (barrier, MPI function, ``--probe``) or a marker pair counts its instances; a thread's
  time inside is the sum of its instances; a wait-class call's time inside is waiting time.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from snumap_tui.analysis.textcols import fit_name, wrapped
from snumap_tui.store.regions import Regions
from snumap_tui.textsafe import safe_text
from snumap_tui.trace.region_catalog import BEGIN, END, MARK, RegionName

IMBALANCED = 1.2            # max/mean above which a region is reported as imbalanced
MIN_WASTE_S = 1e-3          # ... when its threads lost at least this much waiting for the slowest


@dataclass
class Instances:
    """Paired instances: parallel arrays, one row per instance."""

    rid: np.ndarray
    tid: np.ndarray
    pid: np.ndarray
    start: np.ndarray
    end: np.ndarray

    def __len__(self) -> int:
        return len(self.rid)


def pair(rows: np.ndarray) -> Instances:
    """Instances from REGION_DTYPE rows (any order): vectorised, a BEGIN followed, among the
    rows of its (tid, rid), directly by an END."""
    r = rows[(rows["op"] == BEGIN) | (rows["op"] == END)]
    order = np.lexsort((r["t_ns"], r["rid"], r["tid"]))
    r = r[order]
    if len(r) < 2:
        z = np.zeros(0, np.int64)
        return Instances(z, z, z, z, z)
    same = (r["tid"][1:] == r["tid"][:-1]) & (r["rid"][1:] == r["rid"][:-1])
    ok = same & (r["op"][:-1] == BEGIN) & (r["op"][1:] == END)
    i = np.flatnonzero(ok)
    return Instances(r["rid"][i].astype(np.int64), r["tid"][i].astype(np.int64),
                     r["pid"][i].astype(np.int64), r["t_ns"][i].astype(np.int64),
                     r["t_ns"][i + 1].astype(np.int64))


def open_ends(rows: np.ndarray, t0: int, t1: int) -> tuple[Instances, np.ndarray]:
    """Instances still open at the recording's start or end, clipped to it: a thread's first
    record of a (tid, rid) being an END (it entered before the recording began: [T0, end])
    and its last being a BEGIN (still inside when it ended: [begin, T1]); and per instance
    where it was cut (-1: at the start, 1: at the end)."""
    r = rows[(rows["op"] == BEGIN) | (rows["op"] == END)]
    z = np.zeros(0, np.int64)
    if not len(r):
        return Instances(z, z, z, z, z), z
    r = r[np.lexsort((r["t_ns"], r["rid"], r["tid"]))]
    key_new = np.ones(len(r), dtype=bool)
    key_new[1:] = (r["tid"][1:] != r["tid"][:-1]) | (r["rid"][1:] != r["rid"][:-1])
    key_last = np.append(key_new[1:], True)
    first_end = np.flatnonzero(key_new & (r["op"] == END))
    last_begin = np.flatnonzero(key_last & (r["op"] == BEGIN))
    i = np.concatenate([first_end, last_begin])
    t = r["t_ns"][i].astype(np.int64)
    cut = np.concatenate([np.full(len(first_end), -1), np.ones(len(last_begin), np.int64)])
    start = np.where(cut < 0, min(int(t0), int(t.min()) if len(t) else int(t0)), t)
    end = np.where(cut < 0, t, max(int(t1), int(t.max()) if len(t) else int(t1)))
    return Instances(r["rid"][i].astype(np.int64), r["tid"][i].astype(np.int64),
                     r["pid"][i].astype(np.int64), start.astype(np.int64),
                     end.astype(np.int64)), cut


def _joined(a: Instances, b: Instances) -> Instances:
    return Instances(*(np.concatenate([getattr(a, f), getattr(b, f)])
                       for f in ("rid", "tid", "pid", "start", "end")))


#: How ``instances`` says where an instance was cut, as the exports and views name it.
CUT_NAMES = {-1: "at_start", 1: "at_end"}


def recording_bounds(rec: Any) -> tuple[int, int] | None:
    """A recording's (start, end), to which ``instances`` clips (None: not a recording)."""
    t0, t1 = getattr(rec, "t_start", None), getattr(rec, "t_end", None)
    return (int(t0), int(t1)) if t0 is not None and t1 is not None else None


def instances(rows: np.ndarray, bounds: tuple[int, int] | None) -> tuple[Instances, np.ndarray]:
    """Every instance of ROWS and per instance where it was cut (0: whole; -1, 1: at the
    recording's start or end, ``CUT_NAMES``): the whole ones (``pair``) and, with the
    recording's BOUNDS (start, end), those still open at either, clipped to it
    (``open_ends``). The report, the exports and replay's region view all count the same."""
    inst = pair(rows)
    cut = np.zeros(len(inst), np.int64)
    if bounds is None:
        return inst, cut
    opened, where = open_ends(rows, *bounds)
    return _joined(inst, opened), np.concatenate([cut, where])


def union_ns(start: np.ndarray, end: np.ndarray) -> int:
    """Length of the union of intervals."""
    if not len(start):
        return 0
    o = np.argsort(start, kind="stable")
    s, e = start[o], np.maximum.accumulate(end[o])
    # A new run starts where an interval begins after every earlier one ended.
    new = np.concatenate([[True], s[1:] > e[:-1]])
    idx = np.flatnonzero(new)
    run_end = np.concatenate([e[idx[1:] - 1], [e[-1]]])
    return int((run_end - s[idx]).sum())


def _per_thread(tid: np.ndarray, pid: np.ndarray, dur: np.ndarray) -> dict[int, tuple[int, int]]:
    out: dict[int, tuple[int, int]] = {}
    if not len(tid):
        return out
    u, inv = np.unique(tid, return_inverse=True)
    tot = np.bincount(inv, weights=dur)
    first = np.zeros(len(u), np.int64)
    first[inv[::-1]] = np.arange(len(inv))[::-1]
    for k, t in enumerate(u.tolist()):
        out[int(t)] = (int(pid[first[k]]), int(tot[k]))
    return out


def closing_barriers(inst: Instances, span: np.ndarray, body: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
    """The bodies (indexes into ``inst``) that ran inside a span of their process -- the
    latest span starting at or before the body -- and the end of that span: from the body's
    end to it the thread waits in the region's closing barrier. ``span`` and ``body``: one
    region's instances."""
    bodies, ends = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for pid in np.unique(inst.pid[span]).tolist():
        sp = span[inst.pid[span] == pid]
        sp = sp[np.argsort(inst.start[sp], kind="stable")]
        bo = body[inst.pid[body] == pid]
        if not len(bo):
            continue
        j = np.searchsorted(inst.start[sp], inst.start[bo], "right") - 1
        jc = sp[np.clip(j, 0, len(sp) - 1)]
        ok = (j >= 0) & (inst.end[bo] <= inst.end[jc])
        bodies.append(bo[ok])
        ends.append(inst.end[jc[ok]])
    return np.concatenate(bodies), np.concatenate(ends)


def _end_barrier_wait(inst: Instances, span: np.ndarray, body: np.ndarray) -> dict[int, int]:
    """Per thread, the time from the end of its body to the end of the span it ran in: the
    wait in the region's closing barrier (a thread that started late does not count its
    start-up as waiting). A body outside every span of its process counts nothing."""
    out: dict[int, int] = {}
    bo, span_end = closing_barriers(inst, span, body)
    for t, x in zip(inst.tid[bo].tolist(), (span_end - inst.end[bo]).tolist()):
        out[int(t)] = out.get(int(t), 0) + int(x)
    return out


def _most_per_thread(tid: np.ndarray) -> int:
    if not len(tid):
        return 0
    return int(np.unique(tid, return_counts=True)[1].max())


@dataclass
class Summed:
    """One region's calls summed in the kernel (SUM_DTYPE rows): per thread its calls and
    (pid, ns inside); the union over threads of their time inside."""

    calls: dict[int, int]
    inside: dict[int, tuple[int, int]]
    wall_ns: int

    @property
    def total(self) -> int:
        return sum(self.calls.values())


def summed(sums: np.ndarray, rids: list[int]) -> Summed | None:
    """What SUMS say of the regions RIDS (one name); None when nothing. A region's wall time
    is the latest running total of its summaries (each carries the union so far of every call,
    exact or summed; the recorder's last, of no call, the final one), summed over its rids
    (one per runtime file that has the name)."""
    s = sums[np.isin(sums["rid"], rids)] if len(sums) else sums
    if not len(s):
        return None
    calls: dict[int, int] = {}
    inside: dict[int, tuple[int, int]] = {}
    some = s[s["count"] > 0]
    for pid, tid, n, ns in zip(some["pid"].tolist(), some["tid"].tolist(),
                               some["count"].tolist(), some["sum_ns"].tolist()):
        calls[tid] = calls.get(tid, 0) + n
        inside[tid] = (pid, inside.get(tid, (pid, 0))[1] + ns)
    wall = sum(int(s["wall_ns"][s["rid"] == r].max()) for r in np.unique(s["rid"]).tolist())
    return Summed(calls, inside, wall)


def _with_summed(threads: dict[int, tuple[int, int]], own_tid: np.ndarray, agg: Summed | None
                 ) -> tuple[dict[int, tuple[int, int]], int]:
    """THREADS' time inside plus AGG's, and the most calls any thread made (its instances,
    OWN_TID, and its summed calls)."""
    if agg is None or not agg.total:
        return threads, _most_per_thread(own_tid)
    out = dict(threads)
    for tid, (pid, ns) in agg.inside.items():
        out[tid] = (out.get(tid, (pid, 0))[0], out.get(tid, (pid, 0))[1] + ns)
    per = dict(agg.calls)
    if len(own_tid):
        for t, c in zip(*np.unique(own_tid, return_counts=True)):
            per[int(t)] = per.get(int(t), 0) + int(c)
    return out, max(per.values())


# A recording whose region probes cost more than this share of the traced processes' CPU
# time says so (report's finding, record's last line); --probe-budget bounds each function.
WARN_SHARE = 0.05


def probe_costs(infos: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """The recording's "region probes" info chunk (recording/regions.py): per probed function
    ``hits`` (calls trapped), ``probe_ns`` (their estimated cost in all), ``call_ns`` (a call's) and
    ``detached_ns`` (when its probes were detached past the budget; 0: never). Rows that do
    not fit are skipped (a damaged or foreign chunk says nothing)."""
    out: dict[str, dict[str, int]] = {}
    for info in infos:
        if info.get("what") != "region probes":
            continue
        cols = info.get("columns") or []
        for row in info.get("rows") or []:
            if len(row) != len(cols) or "name" not in cols:
                continue
            d = dict(zip(cols, row))
            nums = {k: d.get(k) for k in ("hits", "probe_ns", "call_ns", "detached_ns")}
            if not all(isinstance(v, int) and v >= 0 for v in nums.values()):
                continue
            out[safe_text(str(d["name"]))] = {k: int(v) for k, v in nums.items()
                                              if isinstance(v, int)}
    return out


def probe_section(costs: dict[str, dict[str, int]], program_cpu_s: float | None,
                  budget: float | None) -> dict[str, Any] | None:
    """What the region probes cost the program (JSON-ready): per function and in all, the
    estimated time and its share of the traced processes' CPU time PROGRAM_CPU_S, the
    functions detached past the budget, and whether the whole is above BUDGET (a share)."""
    if not costs:
        return None
    total = sum(c["probe_ns"] for c in costs.values()) / 1e9
    share = total / program_cpu_s if program_cpu_s else None
    return {"probe_s": total, "share": share, "budget": budget,
            "over_budget": bool(share is not None and share > WARN_SHARE),
            "detached": sorted(n for n, c in costs.items() if c["detached_ns"]),
            "functions": [{"name": n, **c, "probe_s": c["probe_ns"] / 1e9}
                          for n, c in sorted(costs.items(), key=lambda kv: -kv[1]["probe_ns"])]}


def probe_findings(p: dict[str, Any] | None) -> list[dict[str, Any]]:
    """A finding when the region probes cost more than the budget's share of the program."""
    if not p or not p.get("over_budget"):
        return []
    return [{"kind": "probe_cost", "share": p["share"],
             "text": f"the region probes cost ~{100 * p['share']:.2g}% of the traced "
                     f"processes' CPU time (above {100 * WARN_SHARE:g}%): the program ran "
                     "slower by about as much (--regions none or a lower --probe-budget)"}]


def _less_probes(threads: dict[int, tuple[int, int]], per_tid: dict[int, int], call_ns: int
                 ) -> dict[int, tuple[int, int]]:
    """THREADS' time inside without what the probes added to each of their calls (PER_TID
    calls of CALL_NS each): a probed call's clock readings take in most of both traps, so a
    critical section at one thread looked like ~1.6 us of waiting a call."""
    return {t: (pid, max(0, ns - per_tid.get(t, 0) * call_ns)) for t, (pid, ns) in
            threads.items()}


def most_calls(reg: Regions, name: str) -> int:
    """The most calls of function NAME any one thread made (its begin rows and the calls the
    kernel summed): what a call's probe cost is taken out of the function's wall time for."""
    rids = [i for i, n in enumerate(reg.names) if n.name == name]
    per: dict[int, int] = {}
    rows = reg.rows[np.isin(reg.rows["rid"], rids) & (reg.rows["op"] == BEGIN)]
    for t, c in zip(*np.unique(rows["tid"], return_counts=True)):
        per[int(t)] = int(c)
    agg = summed(getattr(reg, "sums", np.zeros(0)), rids)
    for t, c in (agg.calls.items() if agg is not None else ()):
        per[t] = per.get(t, 0) + c
    return max(per.values(), default=0)


def region_stats(reg: Regions, comm: dict[int, str] | None = None,
                 probes: dict[str, dict[str, int]] | None = None,
                 bounds: tuple[int, int] | None = None) -> list[dict[str, Any]]:
    """One dict per region name (JSON-ready), by wall time, longest first. PROBES (the
    ``probe_costs`` of the recording): a call's probe cost is taken out of the time inside
    runtime and user functions (not parallel regions), and functions detached past the
    budget are marked ``partial``. BOUNDS: the recording's (start, end): an instance open at
    either (entered before the recording began, still inside when it ended) counts clipped
    to it, and its region says how many were (``clipped``: {"at_start", "at_end"})."""
    comm = comm or {}
    probes = probes or {}
    inst, cut = instances(reg.rows, bounds)
    names: list[RegionName] = reg.names
    by_name: dict[str, list[int]] = {}
    for rid, n in enumerate(names):
        by_name.setdefault(n.name, []).append(rid)
    marks = reg.rows[reg.rows["op"] == MARK]
    mark_n = np.bincount(marks["rid"].astype(np.int64), minlength=len(names)) if len(marks) \
        else np.zeros(len(names), np.int64)
    # Marks grouped by rid once too: a scan of every mark per name was quadratic (200 000
    # distinct marker names took 78 s).
    m_order = np.argsort(marks["rid"], kind="stable")
    m_cuts = np.searchsorted(marks["rid"][m_order], np.arange(len(names) + 1))
    # The most marks any one thread made, per rid, in one pass (a name of one rid, the
    # common case, needs nothing more).
    mark_most = np.zeros(len(names), np.int64)
    if len(marks):
        key = (marks["rid"].astype(np.int64) << 32) | (marks["tid"].astype(np.int64)
                                                        & 0xFFFFFFFF)
        u, c = np.unique(key, return_counts=True)
        np.maximum.at(mark_most, u >> 32, c)
    # Each rid's instances, grouped once (not a scan of every instance per rid).
    order = np.argsort(inst.rid, kind="stable")
    cuts = np.searchsorted(inst.rid[order], np.arange(len(names) + 1))
    dur = inst.end - inst.start
    inst_n = np.diff(cuts)
    out: list[dict[str, Any]] = []
    for name, rids in by_name.items():
        role = {names[r].role: r for r in rids}
        kind = names[rids[0]].kind
        wait = any(names[r].wait for r in rids)
        agg = summed(getattr(reg, "sums", np.zeros(0)), rids)
        if not any(inst_n[r] for r in rids) and agg is None:
            # Marks only (user markers: 200 000 distinct names are no rarity): no time
            # inside, no threads; counted without the per-name array work below.
            most = int(mark_most[rids[0]]) if len(rids) == 1 else _most_per_thread(
                marks[np.concatenate([m_order[m_cuts[r]:m_cuts[r + 1]] for r in rids])]["tid"])
            out.append({"name": name, "kind": kind, "wait": wait,
                        "role": "marker" if kind == "marker" else "call", "count": most,
                        "calls": int(sum(mark_n[r] for r in rids)), "wall_s": 0.0,
                        "imbalance": None, "wait_s": 0.0, "imbalance_waste_s": 0.0,
                        "threads": []})
            continue

        def sel(r: int | None) -> np.ndarray:
            return order[cuts[r]:cuts[r + 1]] if r is not None else np.zeros(0, np.int64)

        mine = np.concatenate([sel(r) for r in rids])
        clipped = {"at_start": int((cut[mine] < 0).sum()), "at_end": int((cut[mine] > 0).sum())}

        span, body = sel(role.get("span")), sel(role.get("body"))
        rest = np.concatenate([sel(role.get("call")), sel(role.get("marker"))])
        inside = body if len(body) else (rest if len(rest) else span)
        main = span if len(span) else (rest if len(rest) else body)
        threads = _per_thread(inst.tid[inside], inst.pid[inside], dur[inside])
        # How many times the program ran it: a parallel region's master calls; a call or a
        # phase made by several threads (both ranks in MPI_Barrier) counts per thread, the
        # most any thread made; ``calls`` counts them all. Calls summed in the kernel count
        # as their instances would.
        calls = len(span) + len(rest) + int(sum(mark_n[r] for r in rids)) + \
            (agg.total if agg is not None else 0)
        cost = probes.get(name)
        if len(span):
            count = len(span)
        else:
            own = rest if len(rest) else body
            threads, count = _with_summed(threads, inst.tid[own], agg)
            if cost is not None and not len(body):
                per_tid = dict(agg.calls) if agg is not None else {}
                for t, c in zip(*np.unique(inst.tid[own], return_counts=True)):
                    per_tid[int(t)] = per_tid.get(int(t), 0) + int(c)
                threads = _less_probes(threads, per_tid, cost["call_ns"])
            marks_r = marks[np.concatenate([m_order[m_cuts[r]:m_cuts[r + 1]] for r in rids])]
            count += _most_per_thread(marks_r["tid"])
            if not len(rest) and len(body):
                # a parallel region seen by its threads' bodies only (attached mid-run): its
                # runs are the most bodies a thread had, as CALLS counts a region's runs
                calls = max(calls, count)
        # The kernel's union covers the exact calls too (the same clock readings): the larger
        # is the whole (the smaller only when a recording lost its last summaries).
        wall_ns = max(union_ns(inst.start[main], inst.end[main]),
                      agg.wall_ns if agg is not None else 0)
        if cost is not None and not len(span) and not len(body):
            # The union holds at least the busiest thread's calls, one after the other.
            wall_ns = max(0, wall_ns - count * cost["call_ns"])
        per: list[dict[str, Any]] = []
        end_wait = _end_barrier_wait(inst, span, body) if len(span) and len(body) else {}
        for tid, (pid, ns) in sorted(threads.items()):
            w = ns if wait else end_wait.get(tid, 0)
            per.append({"tid": tid, "pid": pid, "comm": comm.get(tid, "?"),
                        "inside_s": ns / 1e9, "wait_s": w / 1e9})
        busy = np.array([p["inside_s"] for p in per])
        imb = float(busy.max() / busy.mean()) if len(busy) > 1 and busy.mean() > 0 else None
        waste = float((busy.max() - busy).sum()) if len(busy) > 1 else 0.0
        row: dict[str, Any] = {
            "name": name, "kind": kind, "wait": wait,
            "role": "parallel" if len(span) or len(body) else (
                "marker" if kind == "marker" else "call"),
            "count": count, "calls": calls, "wall_s": wall_ns / 1e9, "imbalance": imb,
            "wait_s": float(sum(p["wait_s"] for p in per)),
            "imbalance_waste_s": waste, "threads": per}
        if clipped["at_start"] or clipped["at_end"]:
            row["clipped"] = clipped
        if cost is not None and cost["detached_ns"]:
            # Probes detached past the budget: the figures stop there (partial).
            row["partial"] = True
            row["detached_ns"] = cost["detached_ns"]
        if cost is not None and not len(span) and not len(body):
            row["probe_ns_per_call_removed"] = cost["call_ns"]
        if agg is not None and agg.total:
            # Calls summed in the kernel: counted and timed, but without instances (windows)
            # for the per-region counters, memory and energy.
            row["summed_calls"] = agg.total
        out.append(row)
    out.sort(key=lambda r: -float(r["wall_s"]))
    return out


def thread_waits(regions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per thread (rank): time waiting in barriers, MPI calls and at the end of imbalanced
    parallel regions, and where most of it went."""
    acc: dict[int, dict[str, Any]] = {}
    for r in regions:
        for p in r["threads"]:
            if p["wait_s"] <= 0:
                continue
            a = acc.setdefault(p["tid"], {"tid": p["tid"], "pid": p["pid"], "comm": p["comm"],
                                          "wait_s": 0.0, "mpi_s": 0.0, "where": {}})
            a["wait_s"] += p["wait_s"]
            if r["kind"] == "mpi":
                a["mpi_s"] += p["wait_s"]
            a["where"][r["name"]] = a["where"].get(r["name"], 0.0) + p["wait_s"]
    return sorted(acc.values(), key=lambda a: -a["wait_s"])


def region_findings(regions: list[dict[str, Any]], limit: int = 3,
                    name: Callable[[int], str] = str) -> list[dict[str, Any]]:
    """The most imbalanced regions (by the time their threads lost waiting for the slowest):
    parallel regions, --probe functions and phases. Not MPI calls: ranks reaching MPI_Init
    at different times is startup, and their waits are the "waiting" finding."""
    bad = [r for r in regions if r["imbalance"] is not None and r["imbalance"] >= IMBALANCED
           and r["imbalance_waste_s"] >= MIN_WASTE_S and not r["wait"] and r["kind"] != "mpi"]
    bad.sort(key=lambda r: -r["imbalance_waste_s"])
    out = []
    for r in bad[:limit]:
        busy = [p["inside_s"] for p in r["threads"]]
        slow = max(r["threads"], key=lambda p: p["inside_s"])
        out.append({"kind": "imbalanced_region", "region": r["name"],
                    "imbalance": r["imbalance"],
                    "text": f"{_what(r)} {r['name']} is imbalanced: max/mean "
                            f"{r['imbalance']:.2f} over {len(busy)} threads "
                            f"({r.get('calls', r['count'])} "
                            f"{'runs' if r['role'] == 'parallel' else 'calls'}); the slowest "
                            f"(tid {name(slow['tid'])}) was inside "
                            f"{1e3 * max(busy):.1f} ms, the mean {1e3 * sum(busy) / len(busy):.1f}"
                            f" ms; the others waited {1e3 * r['imbalance_waste_s']:.1f} ms"})
    return out


def wait_findings(waits: list[dict[str, Any]], duration_s: float,
                  name: Callable[[int], str] = str) -> list[dict[str, Any]]:
    """The thread (rank) that waited most, when that is a real share of the recording."""
    if not waits or duration_s <= 0:
        return []
    w = waits[0]
    share = w["wait_s"] / duration_s
    if share < 0.1:
        return []
    where = max(w["where"].items(), key=lambda kv: kv[1])
    return [{"kind": "waiting", "tid": w["tid"],
             "text": f"{w['comm']} (tid {name(w['tid'])}) waited {w['wait_s']:.3f} s "
                     f"({100 * share:.0f}% of the recording), most in {where[0]} "
                     f"({where[1]:.3f} s)"}]


def _clip_mark(g: dict[str, Any]) -> str:
    c = g.get("clipped") or {}
    return (" " + ("<" if c.get("at_start") else "") + (">" if c.get("at_end") else "")) \
        if c else ""


def _wrap(text: str) -> list[str]:
    return textwrap.wrap(text, 78, initial_indent="  ", subsequent_indent="  ")


def _what(r: dict[str, Any]) -> str:
    if r["role"] == "parallel":
        return "parallel region"
    return {"mpi": "MPI call", "marker": "phase", "user": "function"}.get(r["kind"], "region")


def _calls(n: int) -> str:
    """A call count in 9 columns (16 M calls: '16000000'; beyond: '1.2e+10')."""
    return str(n) if n < 10 ** 9 else f"{n:.2g}"


def format_regions(r: dict[str, Any], top: int = 20, width: int = 80) -> list[str]:
    """The report's text section: the NAME column as wide as the longest name within WIDTH
    (textcols.output_width), a name past that cut in the middle, its (file:line) kept."""
    regs = r.get("regions") or []
    lines = ["", ("Regions (by wall time; CALLS = by all threads, a parallel region's = its "
                  "runs;"), "  IMBAL = max/mean of threads' time inside):"]
    if r.get("attached") and r.get("regions_info"):
        lines += _wrap("attached to running processes (--pid): a region entered before the "
                       "recording began shows from its first record, clipped (<); one that "
                       "neither began nor ended while recording has no record to show")
    if not regs:
        info = r.get("regions_info") or {}
        why = "; ".join(info.get("problems") or []) or "none recorded"
        lines.append(f"  {safe_text(why)}"[:80])
        return lines
    names = [safe_text(g["name"]) for g in regs[:top]]
    nw = max(36, min(max(len(n) + 2 * bool(g.get("partial")) for n, g in zip(names, regs)),
                     width - 2 - 40 - 3))
    lines.append(f"  {'NAME':<{nw}} {'KIND':<6} {'CALLS':>9} {'WALL s':>7} {'IMBAL':>5} "
                 f"{'WAIT s':>7}")
    for g, name in zip(regs[:top], names):
        imb = f"{g['imbalance']:.2f}" if g["imbalance"] is not None else "-"
        star = " *" if g.get("partial") else ""
        shown = fit_name(name, nw - len(star)) + star
        lines.append(f"  {shown:<{nw}} {g['kind']:<6} {_calls(g.get('calls', g['count'])):>9} "
                     f"{g['wall_s']:>7.3f} {imb:>5} {g['wait_s']:>7.3f}{_clip_mark(g)}")
    clipped = [g for g in regs if g.get("clipped")]
    if clipped:
        lines += _wrap("< entered before the recording began, > still inside when it ended: "
                       "shown clipped to the recording (its CALLS and WALL are what was "
                       "recorded)")
    if len(regs) > top:
        lines.append(f"  ... {len(regs) - top} more regions (--json has all)")
    if any(g.get("partial") for g in regs[:top]):
        lines.append("  * partial: probes detached past the budget (figures up to then)")
    lines += format_probes(r.get("region_probes"))
    lost = r.get("regions_lost") or {}
    if lost:
        lines.append(f"  records lost (ring full): {sum(lost.values()):,}; short by as many "
                     "calls (enter or leave):")
        for name, n in sorted(lost.items(), key=lambda kv: -kv[1])[:top]:
            lines.append(f"    {safe_text(name)[:60]:<60} {n:>12,}")
    waits = r.get("waits") or []
    if waits:
        lines += ["", "Waiting per thread/rank (barriers, MPI, end of parallel regions):"]
        for w in waits[:top]:
            where = safe_text(max(w["where"].items(), key=lambda kv: kv[1])[0])
            who = safe_text(str(w.get("label") or w["tid"]))     # node:tid in a merged job
            lines.append(f"  {who:>7} {safe_text(w['comm'])[:15]:<15} {w['wait_s']:>8.3f} s  "
                         f"most in {where}"[:80])
    return lines


def format_probes(p: dict[str, Any] | None, top: int = 5) -> list[str]:
    """The report's lines on what the region probes cost (section ``region_probes``)."""
    if not p:
        return []
    share = p.get("share")
    said = f"{100 * share:.2g}% of the traced processes' CPU time" if share is not None \
        else "share unknown"
    over = f" (!) above {100 * WARN_SHARE:g}%" if p.get("over_budget") else ""
    lines = wrapped(f"region probes cost ~{1e3 * p['probe_s']:.1f} ms (estimated): {said}{over}")
    if p.get("budget"):
        lines += wrapped(f"(--probe-budget {100 * p['budget']:g}%: a function's probes are "
                      "detached past that share of a thread)")
    for f in p["functions"][:top]:
        off = " detached" if f["detached_ns"] else ""
        lines.append(f"    {safe_text(f['name'])[:36]:<36} {f['hits']:>11,} hits "
                     f"~{f['call_ns']:,} ns{off}"[:80])
    if any(f["detached_ns"] for f in p["functions"][:top]):
        # The kernel cuts a function's records at the budget; its probes come off a drain
        # later, and every call trapped until then is a hit (and a cost), not a count.
        lines += wrapped("(hits: every call trapped until the probes came off; the regions' "
                      "CALLS stop at the budget, so they are fewer)")
    return lines
