"""One run's measurements from its recording: the whole program's time and energy, and each
region's time -- counted once where its threads overlap (the union of its instances'
intervals, as `snumap report`'s wall time: a parallel region by its master's span, a call or
a phase by its instances on every thread), never summed over threads.

A region's parent is the innermost other region whose intervals hold (nearly) all of its
instances, so nested regions (a phase around parallel regions, critical sections inside a
parallel region) form a tree under ``(program)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from snumap_tui.study.aggregate import PROGRAM

EXIT_LAG_NS = 2_000_000_000   # how long before the "command exit" marker its exit is looked for first
CONTAINED = 0.9          # share of a region's instances inside another for it to be the parent


def command_window(rec: Any) -> tuple[int, int]:
    """The command's run in the recording: from its start marker to the program's exit --
    the last exit event of the command's process (``command_pid`` in the header; in an older
    recording, of any traced thread) before the ``command exit`` marker, which is written
    later, once the recorder has noticed the exit and reaped it (70-150 ms later under
    load). Without those markers, the recording's span."""
    t0, t1 = int(rec.t_start), int(rec.t_end)
    exit_mark = None
    for t, text in rec.markers:
        if text.startswith("command start:"):
            t0 = int(t)
        elif text.startswith("command exit:"):
            t1 = exit_mark = int(t)
    if exit_mark is not None:
        t1 = program_exit(rec, t0, exit_mark) or t1
    return t0, t1


def program_exit(rec: Any, t0: int, t1: int) -> int | None:
    """The time of the command's last thread's exit event in [T0, T1], or None (none seen:
    the proc backend misses short threads; a recording without the exit events)."""
    from snumap_tui.trace import events as ev

    pid = rec.header.get("command_pid")
    # The exit is a moment before the marker: the last seconds are read first, the rest of
    # the run only where they hold none.
    for lo in (max(t0, t1 - EXIT_LAG_NS), t0):
        last: int | None = None
        for cols in rec.iter_event_columns(("kind", "pid"), lo, t1 + 1):
            sel = cols["kind"] == ev.EXIT
            if isinstance(pid, int) and not isinstance(pid, bool):
                sel &= cols["pid"] == pid
            if sel.any():
                t = int(cols["t_ns"][sel].max())
                last = t if last is None else max(last, t)
        if last is not None or lo == t0:
            return last
    return None


def energy_j(rec: Any, t0: int, t1: int) -> tuple[float | None, str | None]:
    """Package (else whole-machine) RAPL energy over the command's run, or None and why."""
    from snumap_tui.analysis.report import rapl_energy

    try:
        topo = rec.topology
        doms = rapl_energy(rec.samples(t0, t1), topo)
    except Exception as exc:  # noqa: BLE001 - a damaged sample stream: energy n/a, time kept
        return None, f"energy unreadable ({type(exc).__name__})"
    for kind in ("package", "psys"):
        mine = [d for d in doms if d["domain"].startswith(kind)]
        if not mine:
            continue
        if any(d["energy_j"] is None for d in mine):    # a counter that never advanced
            return None, next(d["why"] for d in mine if d["energy_j"] is None)
        return float(sum(d["energy_j"] for d in mine)), None
    return None, "no RAPL energy in the recording (no RAPL here, or not readable)"


def main_intervals(reg: Any) -> dict[str, tuple[np.ndarray, np.ndarray, str, bool]]:
    """Per region name: (starts, ends, kind, wait) of the instances its wall time is the union
    of -- a parallel region's spans, else its calls and phases, else its threads' bodies."""
    from snumap_tui.analysis.regions import pair

    inst = pair(reg.rows)
    names = reg.names
    by_name: dict[str, dict[str, list[int]]] = {}
    for rid, n in enumerate(names):
        by_name.setdefault(n.name, {}).setdefault(n.role, []).append(rid)
    order = np.argsort(inst.rid, kind="stable")
    cuts = np.searchsorted(inst.rid[order], np.arange(len(names) + 1))
    out = {}
    for name, roles in by_name.items():
        def sel(rs: list[int]) -> np.ndarray:
            parts = [order[cuts[r]:cuts[r + 1]] for r in rs]
            return np.concatenate(parts) if parts else np.zeros(0, np.int64)

        span = sel(roles.get("span", []))
        rest = sel(roles.get("call", []) + roles.get("marker", []))
        body = sel(roles.get("body", []))
        main = span if len(span) else (rest if len(rest) else body)
        if not len(main):
            continue
        first = names[next(iter(roles.values()))[0]]
        wait = any(names[r].wait for rs in roles.values() for r in rs)
        out[name] = (inst.start[main], inst.end[main], first.kind, wait)
    return out


SUMMED = "n/a: summed in the kernel (per-call figures not kept)"


def add_summed(reg: Any, iv: dict[str, tuple[np.ndarray, np.ndarray, str, bool]],
               times: dict[str, int], counts: dict[str, int]) -> None:
    """The calls the kernel summed (``reg.sums``) added to IV, TIMES and COUNTS in place: the
    time is the union over threads of every call the summaries carry, the count every call,
    and the intervals (to find the parent region) each summary's first entry to last
    return."""
    from snumap_tui.analysis.regions import summed

    sums = getattr(reg, "sums", None)
    if sums is None or not len(sums):
        return
    by_name: dict[str, list[int]] = {}
    for rid in np.unique(sums["rid"]).tolist():
        by_name.setdefault(reg.names[rid].name, []).append(rid)
    for name, rids in by_name.items():
        agg = summed(sums, rids)
        if agg is None:
            continue
        s = sums[np.isin(sums["rid"], rids) & (sums["count"] > 0)]
        if not len(s):          # exact calls only: their records say it all
            continue
        start, end = s["t_first"].astype(np.int64), s["t_last"].astype(np.int64)
        first = reg.names[rids[0]]
        if name in iv:
            old = iv[name]
            start, end = np.concatenate([old[0], start]), np.concatenate([old[1], end])
        iv[name] = (start, end, first.kind, first.wait or (name in iv and iv[name][3]))
        times[name] = max(times.get(name, 0), agg.wall_ns)     # the kernel's covers all
        counts[name] = counts.get(name, 0) + agg.total


def _merged(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals as disjoint sorted runs."""
    o = np.argsort(start, kind="stable")
    s, e = start[o], np.maximum.accumulate(end[o])
    new = np.concatenate([[True], s[1:] > e[:-1]])
    idx = np.flatnonzero(new)
    return s[idx], np.concatenate([e[idx[1:] - 1], e[-1:]])


def parents(iv: dict[str, tuple[np.ndarray, np.ndarray, str, bool]],
            times: dict[str, int]) -> dict[str, str]:
    """Each region's innermost container (PROGRAM when none)."""
    runs = {n: _merged(s, e) for n, (s, e, _k, _w) in iv.items()}
    out = {}
    for b, (bs, be, _k, _w) in iv.items():
        best: str | None = None
        for a, (rs, re_) in runs.items():
            if a == b:
                continue
            # A region that holds B's intervals while B holds A's (same extent): the longer
            # (then the first by name) is the parent, so the tree has no cycle.
            if (times[a], a) <= (times[b], b):
                continue
            j = np.searchsorted(rs, bs, "right") - 1
            jc = np.clip(j, 0, len(rs) - 1)
            inside = (j >= 0) & (be <= re_[jc])
            if inside.mean() >= CONTAINED and (best is None or times[a] < times[best]):
                best = a
        out[b] = best or PROGRAM
    return out


def _less_probes(infos: list[dict[str, Any]], reg: Any,
                 iv: dict[str, tuple[np.ndarray, np.ndarray, str, bool]],
                 times: dict[str, int]) -> set[str]:
    """A call's probe cost taken out of each probed runtime or user function's time (in
    place: a critical section at one thread looked like ~1.6 us of waiting a call); the
    names whose probes were detached past the budget (their figures are partial)."""
    from snumap_tui.analysis.regions import most_calls, probe_costs

    costs = probe_costs(infos)
    if reg is None or not costs:
        return set()
    roles = {n.name: n.role for n in reg.names}
    for name, c in costs.items():
        if name in times and roles.get(name) == "call":
            times[name] = max(0, times[name] - most_calls(reg, name) * c["call_ns"])
    return {n for n, c in costs.items() if c["detached_ns"] and n in iv}


def measure(path: Path) -> dict[str, Any]:
    """The run's measurements: ``program`` (time_s, energy_j, energy note) and ``regions``
    (name, parent, kind, wait, time_s, count); each with its ``counters`` and ``memory``
    (study/figures.py)."""
    from snumap_tui import store
    from snumap_tui.analysis.regions import union_ns
    from snumap_tui.study.figures import run_figures

    with store.open(path) as rec:
        t0, t1 = command_window(rec)
        energy, why = energy_j(rec, t0, t1)
        try:
            reg = rec.regions()
        except Exception:  # noqa: BLE001 - no region chunk: no regions, the program's time kept
            reg = None
        header = dict(rec.header)
        rec_infos = list(getattr(rec, "infos", []) or [])
        iv = main_intervals(reg) if reg is not None and len(reg.rows) else {}
        figs = run_figures(rec, (t0, t1), iv)
    times = {n: union_ns(s, e) for n, (s, e, _k, _w) in iv.items()}
    counts = {n: len(v[0]) for n, v in iv.items()}
    if reg is not None:
        before = dict(counts)
        add_summed(reg, iv, times, counts)
        for n, c in counts.items():
            if c != before.get(n):              # some calls only the kernel's sums carry
                figs[n] = {k: {"why": SUMMED} for k in ("counters", "memory")}
    partial = _less_probes(rec_infos, reg, iv, times)
    par = parents(iv, times)
    regions = [{"region": n, "parent": par[n], "kind": iv[n][2], "wait": iv[n][3],
                "time_s": times[n] / 1e9, "count": counts[n], **figs[n],
                **({"partial": True} if n in partial else {})}
               for n in sorted(iv, key=lambda n: -times[n])]
    return {"program": {"time_s": max(0, t1 - t0) / 1e9, "energy_j": energy,
                        "energy_note": why, **figs[PROGRAM]},
            "regions": regions, "host": header.get("host"), "cpus": header.get("cpus"),
            "backend": header.get("backend")}
