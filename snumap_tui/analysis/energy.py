"""Energy attributed to processes, threads, regions and phases: an estimate, by busy time.

The rule (what the report prints under "Energy attributed"): RAPL measures a domain (a
package, its DRAM, or the whole machine) and nothing finer. In each interval between two
samples, the domain's measured energy E is spread evenly over its PUs' time: every
nanosecond a PU of the domain spent during that interval is worth E / (PUs x interval). A
thread gets the worth of the nanoseconds it ran on the domain's PUs; the tasks outside the
traced tree get theirs as "other tasks"; the nanoseconds no task ran are "idle". So the parts
always add up to the measured energy, and two threads that ran equally long on a package in
the same interval get the same share, whatever the instructions they ran (weighting by cycles
needs per-interval counters). A region's (or phase's) energy is the worth of its threads' run
time inside its instances.

Computed with one cumulative "joules per PU-nanosecond" curve per domain (piecewise linear in
time): a run interval [s, e) is worth C(e) - C(s), so every interval of the recording is
priced with one ``np.interp``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from snumap_tui.analysis.intervals import UNTRACED, Intervals
from snumap_tui.model.derive import counters
from snumap_tui.model.sample import Sample
from snumap_tui.topology.model import Topology

RULE = ("estimate: each sample interval's measured energy of a RAPL domain is spread evenly "
        "over its PUs' time; a task gets the share of the time it ran on them, tasks outside "
        "the traced tree are 'other', time no task ran is 'idle'; the parts sum to the "
        "measured energy. A task's total adds its package and DRAM domains")


def rapl_steps(samples: Iterable[Sample], topology: Topology
               ) -> Iterator[tuple[int, int, dict[tuple[int, str], float]]]:
    """(t0, t1, {(object id, counter): joules}) of each pair of consecutive samples with RAPL
    readings, through the model's ``derive.counters`` (wrap-around corrected as the live view
    does)."""
    prev: Sample | None = None
    for s in samples:
        r = s.readings.get("rapl")
        if not r:
            continue
        cur = Sample(t_ns=s.t_ns, wall_ns=s.wall_ns, readings={"rapl": r})
        if prev is not None:
            got = {}
            for counter, arr in counters(prev, cur, topology).obj.items():
                for oid in np.flatnonzero(~np.isnan(arr)).tolist():
                    got[oid, counter] = float(arr[oid]) / 1e6
            yield prev.t_ns, cur.t_ns, got
        prev = cur


# The domains whose sum is a task's energy: packages and their DRAM do not overlap; cores,
# uncore (parts of a package) and psys (the whole platform) do.
SUMMED = ("package", "dram")


def summed(domains: Iterable[str]) -> set[str]:
    """The domains a total adds up: package-N and dram-N, else (neither measured) all."""
    ds = list(domains)
    got = {d for d in ds if d.split("-")[0] in SUMMED}
    return got or set(ds)


def domain_name(obj: Any, counter: str) -> str:
    kind = counter.removeprefix("energy_")
    return kind if obj.type == "Machine" else f"{kind}-{obj.os_index}"


@dataclass
class Curve:
    """A domain's cumulative joules per PU-nanosecond at the knots (sample times)."""

    domain: str
    cpus: frozenset[int]
    knots: np.ndarray
    cum: np.ndarray
    energy_j: float

    def worth(self, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Joules of each PU-time interval [start, end) (0 outside the sampled span)."""
        return np.interp(end, self.knots, self.cum) - np.interp(start, self.knots, self.cum)


def curves(samples: Iterable[Sample], topology: Topology) -> list[Curve]:
    objs = list(topology)
    steps: dict[tuple[int, str], list[tuple[int, int, float]]] = {}
    order: list[tuple[int, str]] = []
    for t0, t1, got in rapl_steps(samples, topology):
        for key, j in got.items():
            if key not in steps:
                order.append(key)
            steps.setdefault(key, []).append((t0, t1, j))
    out = []
    for key in sorted(order, key=lambda k: (k[0], order.index(k))):
        oid, counter = key
        obj = objs[oid]
        n = max(len(obj.cpuset), 1)
        rows = steps[key]
        knots, cum, total = [rows[0][0]], [0.0], 0.0
        for t0, t1, j in rows:
            if t0 != knots[-1]:          # a gap (a sample without RAPL): nothing in it
                knots.append(t0)
                cum.append(cum[-1])
            if t1 <= t0:
                continue
            knots.append(t1)
            cum.append(cum[-1] + j / n)
            total += j
        out.append(Curve(domain_name(obj, counter), frozenset(obj.cpuset),
                         np.array(knots, dtype=np.float64), np.array(cum), total))
    return out


def _on(iv: Intervals, cpus: frozenset[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, end, tid) of the run intervals on these PUs."""
    rows = [r for r, c in enumerate(iv.cpus.tolist()) if c in cpus]
    cat = (lambda arrs, dt: np.concatenate(arrs) if arrs else np.zeros(0, dt))
    return (cat([iv.start[r] for r in rows], np.int64), cat([iv.end[r] for r in rows], np.int64),
            cat([iv.tid[r] for r in rows], np.int32))


def attribute(iv: Intervals, cs: list[Curve]) -> list[dict[str, Any]]:
    """Per domain: measured energy, joules per tid, other (untraced) and idle."""
    out = []
    for c in cs:
        s, e, tid = _on(iv, c.cpus)
        j = c.worth(s.astype(np.float64), e.astype(np.float64))
        u, inv = np.unique(tid, return_inverse=True)
        per = np.zeros(len(u))
        np.add.at(per, inv, j)
        tids = {int(t): float(v) for t, v in zip(u.tolist(), per.tolist())}
        other = tids.pop(UNTRACED, 0.0)
        out.append({"domain": c.domain, "energy_j": c.energy_j, "tids": tids,
                    "other_j": other, "idle_j": c.energy_j - other - sum(tids.values())})
    return out


def _before(c: Curve, ts: np.ndarray, te: np.ndarray, cum: np.ndarray, x: np.ndarray
            ) -> np.ndarray:
    """Joules of one thread's run intervals (sorted, disjoint) before each time x."""
    prev = np.searchsorted(ts, x, "right") - 1
    ok = prev >= 0
    p = np.maximum(prev, 0)
    cut = np.clip(x, ts[p], te[p]).astype(np.float64)
    part = c.worth(ts[p].astype(np.float64), cut)
    return np.where(ok, cum[p] + part, 0.0)


def window_energy(iv: Intervals, cs: list[Curve], windows: list[tuple[int, int, int]]) -> float:
    """Joules of threads' run time inside windows ((tid, start, end): a region's instances),
    over every domain: per thread, a prefix sum of its intervals' worth."""
    if not windows:
        return 0.0
    total = 0.0
    w = np.array(windows, dtype=np.int64).reshape(-1, 3)
    for c in cs:
        s, e, tid = _on(iv, c.cpus)
        for t in np.unique(w[:, 0]).tolist():
            sel = tid == t
            if not sel.any():
                continue
            ts, te = s[sel], e[sel]
            o = np.argsort(ts, kind="stable")
            ts, te = ts[o], te[o]
            j = c.worth(ts.astype(np.float64), te.astype(np.float64))
            cum = np.concatenate([[0.0], np.cumsum(j)[:-1]])
            mine = w[w[:, 0] == t]
            total += float((_before(c, ts, te, cum, mine[:, 2])
                            - _before(c, ts, te, cum, mine[:, 1])).sum())
    return total


def add_energy(report: dict[str, Any], iv: Intervals, samples: list[Sample], topology: Topology,
               rec: Any) -> None:
    """The attributed energy into the report: ``energy_attribution`` (rule, per domain
    measured / traced / other / idle, or why none), each task's, process's and region's
    ``energy_j`` (None where no energy was recorded)."""
    cs = curves(samples, topology)
    if not cs:
        report["energy_attribution"] = {"why": "no RAPL energy recorded (see Energy)"}
        for row in (*report.get("tasks", []), *report.get("processes", []),
                    *(report.get("regions") or [])):
            row["energy_j"] = None
        return
    doms = attribute(iv, cs)
    counted = summed(d["domain"] for d in doms)
    per_tid: dict[int, dict[str, float]] = {}
    for d in doms:
        for tid, j in d["tids"].items():
            per_tid.setdefault(tid, {})[d["domain"]] = j
    per_pid: dict[int, dict[str, float]] = {}
    for t in report.get("tasks", []):
        mine = per_tid.get(t["tid"], {})
        t["energy_j"] = sum(v for k, v in mine.items() if k in counted)
        t["energy"] = mine
        acc = per_pid.setdefault(t["pid"], {})
        for k, v in mine.items():
            acc[k] = acc.get(k, 0.0) + v
    for p in report.get("processes", []):
        p["energy"] = per_pid.get(p["pid"], {})
        p["energy_j"] = sum(v for k, v in p["energy"].items() if k in counted)
    if report.get("regions") and hasattr(rec, "regions"):
        from snumap_tui.analysis.memory import region_windows

        wins = region_windows(rec.regions())
        mine_cs = [c for c in cs if c.domain in counted]
        for r in report["regions"]:
            w = [(t, a, b) for _, t, a, b in wins.get(r["name"], [])]
            # Calls summed in the kernel have no window: n/a, not the exact calls' share.
            r["energy_j"] = None if r.get("summed_calls") else \
                window_energy(iv, mine_cs, w)
    report["energy_attribution"] = {
        "estimate": True, "rule": RULE, "summed": sorted(counted),
        "domains": [{"domain": d["domain"], "energy_j": d["energy_j"],
                     "traced_j": sum(d["tids"].values()), "other_j": d["other_j"],
                     "idle_j": d["idle_j"]} for d in doms]}


def format_energy(r: dict[str, Any], top: int = 20) -> list[str]:
    """The report's text section "Energy attributed"."""
    import textwrap

    from snumap_tui.textsafe import safe_text

    a = r.get("energy_attribution") or {}
    lines = ["", "Energy attributed (estimate, J; by busy time, rule below):"]
    if a.get("why"):
        return [*lines, f"  n/a ({a['why']})"[:80]]
    lines.append(f"  {'DOMAIN':<14} {'MEASURED':>10} {'TRACED':>10} {'OTHER':>10} {'IDLE':>10}")
    for d in a["domains"]:
        lines.append(f"  {d['domain']:<14} {d['energy_j']:>10.2f} {d['traced_j']:>10.2f} "
                     f"{d['other_j']:>10.2f} {d['idle_j']:>10.2f}")
    lines.append(f"  {'PID':>7} {'COMM':<16} {'J':>9}  = " + " + ".join(a["summed"]))
    for p in sorted(r.get("processes", []), key=lambda p: -(p.get("energy_j") or 0))[:top]:
        per = "  ".join(f"{k} {v:.2f}" for k, v in p.get("energy", {}).items()
                        if k in a["summed"])
        lines.append(f"  {p['pid']:>7} {safe_text(p['comm'])[:16]:<16} "
                     f"{p.get('energy_j') or 0:>9.2f}  {per}"[:80])
    threads = sorted((t for t in r.get("tasks", []) if t.get("energy_j")),
                     key=lambda t: -t["energy_j"])
    if len(threads) > 1:
        lines.append(f"  {'TID':>7} {'COMM':<16} {'J':>9}")
        for t in threads[:top]:
            lines.append(f"  {t['tid']:>7} {safe_text(t['comm'])[:16]:<16} "
                         f"{t['energy_j']:>9.2f}")
    regs = [g for g in r.get("regions") or [] if g.get("energy_j") is not None]
    if regs:
        lines.append(f"  {'REGION / PHASE':<28} {'J':>9}")
        for g in sorted(regs, key=lambda g: -g["energy_j"])[:top]:
            lines.append(f"  {safe_text(g['name'])[:28]:<28} {g['energy_j']:>9.2f}")
    lines += textwrap.wrap("Rule: " + a["rule"], 78, initial_indent="  ",
                           subsequent_indent="  ")
    return lines
