"""Energy attributed to processes, threads, regions and phases: an estimate, by busy time or,
where the recording counted them per run interval, by cycles (DRAM: by LLC misses).

The rule (what the report prints under "Energy attributed"): RAPL measures a domain (a
package, its DRAM, or the whole machine) and nothing finer. In each interval between two
samples, the domain's measured energy E is spread evenly over its PUs' time: every
nanosecond a PU of the domain spent during that interval is worth E / (PUs x interval). A
thread gets the worth of the nanoseconds it ran on the domain's PUs; the tasks outside the
traced tree get theirs as "other tasks"; the nanoseconds no task ran are "idle". So the parts
always add up to the measured energy, and two threads that ran equally long on a package in
the same interval get the same share, whatever the instructions they ran.

Weighted by an event (``WEIGHTS``): when the recording has counters per run interval
(libbpf, store kind 16) that include the domain's event -- cycles for a package or its cores,
LLC misses for its DRAM (the traffic DRAM energy follows; busy time when they were not
counted) -- "idle" and "other" stay as above, and what the traced threads' time was worth in
each sample interval (the pool) is shared among the threads that ran there by their counts of
the event on the domain's PUs in that interval. A thread's run time is then priced by its own
curve: the domain's, scaled per sample interval by its weighted share / its busy-time share.
Counts are spread evenly over their run interval (as analysis/attribution.py does); a sample
interval in which no traced thread counted the event keeps the busy-time shares. The parts
still add up to the measured energy exactly.

A domain whose counter never advanced over the recording (0 J) is no measurement: a virtual
machine's power PMU reads 0 throughout, as does an uncore domain without a GPU. It is shown as
"n/a (why)", gets no attribution, and the scaling studies show no energy for it.

A region's (or phase's) energy is the worth of its threads' run time inside its instances.
Computed with one cumulative "joules per PU-nanosecond" curve per domain (piecewise linear in
time): a run interval [s, e) is worth C(e) - C(s), so every interval of the recording is
priced with one ``np.interp``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from snumap_tui.analysis.attribution import CYCLES, LLC_MISSES, Scaled, event_index, scaled
from snumap_tui.analysis.intervals import UNTRACED, Intervals
from snumap_tui.model.derive import counters
from snumap_tui.model.sample import Sample
from snumap_tui.topology.model import Topology
from snumap_tui.trace.events import OUTSIDE

RULE = ("estimate: each sample interval's measured energy of a RAPL domain is spread evenly "
        "over its PUs' time; a task gets the share of the time it ran on them, tasks outside "
        "the traced tree are 'other', time no task ran is 'idle'. Where a domain's rule (BY) "
        "names an event counted per run interval, the traced tasks' part of each sample "
        "interval is shared by their counts of that event there instead (packages and cores: "
        "cycles; DRAM: LLC misses). The parts sum to the measured energy. A task's total adds "
        "its package and DRAM domains")
BUSY = "busy time"
# The event whose counts weigh a domain's energy among the traced threads, per domain kind
# (the part of its name before "-"), in order of preference; kinds not named: busy time.
WEIGHTS: dict[str, tuple[str, ...]] = {"package": CYCLES, "core": CYCLES, "dram": LLC_MISSES}


def unmeasured_why(domain: str, every_domain: bool) -> str:
    """Why a domain whose counter never advanced is n/a: on a machine where no domain
    advanced, no real RAPL (a virtual machine's power PMU reads 0); else only that domain
    (an uncore domain without a GPU)."""
    if every_domain:
        return f"{domain} reads 0 throughout: no real RAPL here, e.g. a virtual machine"
    return f"{domain} reads 0 throughout: not measured on this machine"


def advanced(energy_j: float | None) -> bool:
    """Whether a domain's (or a run's) energy is a measurement: a counter that never
    advanced (0 J over a whole recording or run) is not one."""
    return energy_j is not None and energy_j > 0


def unmeasured_domains(samples: Iterable[Sample], topology: Topology) -> set[str]:
    """The RAPL domains (``package-0``, ``dram-0``, ``psys``) recorded in SAMPLES whose
    counter never advanced: their power is no measurement (the exports leave it out)."""
    total: dict[str, float] = {}
    objs = list(topology)
    for _, _, got in rapl_steps(samples, topology):
        for (oid, counter), j in got.items():
            name = domain_name(objs[oid], counter)
            total[name] = total.get(name, 0.0) + j
    return {d for d, j in total.items() if not advanced(j)}


def unmeasured_at_ends(rec: Any) -> set[str]:
    """``unmeasured_domains`` from the recording's first and last sample only: a cumulative
    counter that never advanced reads the same at both ends, so two samples are decoded
    instead of all of them (the exports' counter tracks; the report has them all anyway)."""
    times = getattr(rec, "sample_times", None)
    if times is None or len(times) < 2:
        return set()
    ends: list[Sample] = [s for t in (times[0], times[-1])
                          for s in itertools.islice(rec.samples(int(t), int(t) + 1), 1)]
    return unmeasured_domains(ends, rec.topology) if len(ends) == 2 else set()


def mark_unmeasured(domains: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per-domain rows (``domain``, ``energy_j``, maybe ``avg_w``): those that never advanced
    get ``energy_j`` and ``avg_w`` None and ``why``. Returns the rows, changed in place."""
    every = not any(advanced(d["energy_j"]) for d in domains)
    for d in domains:
        if not advanced(d["energy_j"]):
            d.update(energy_j=None, avg_w=None, why=unmeasured_why(d["domain"], every))
    return domains


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
    """A domain's cumulative joules per PU-nanosecond at the knots (sample times); with
    ``per_tid``, the curves of the threads whose share an event weighed (``rule``)."""

    domain: str
    cpus: frozenset[int]
    knots: np.ndarray
    cum: np.ndarray
    energy_j: float
    rule: str = BUSY
    per_tid: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    def worth(self, start: np.ndarray, end: np.ndarray, tid: int | None = None) -> np.ndarray:
        """Joules of each PU-time interval [start, end) (0 outside the sampled span), of
        thread TID's run time when given (its own curve where its share was weighed)."""
        knots, cum = self.per_tid.get(tid, (self.knots, self.cum)) if tid is not None \
            else (self.knots, self.cum)
        return np.interp(end, knots, cum) - np.interp(start, knots, cum)


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


def _pieces(knots: np.ndarray, s: np.ndarray, e: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Intervals [s, e) cut at the knots: (row, segment, piece start, piece end) of every
    non-empty piece inside the knots' span (segment k is [knots[k], knots[k+1]))."""
    if len(knots) < 2 or not len(s):
        z = np.zeros(0, np.int64)
        return z, z, z.astype(np.float64), z.astype(np.float64)
    s = np.clip(s.astype(np.float64), knots[0], knots[-1])
    e = np.clip(e.astype(np.float64), knots[0], knots[-1])
    rows = np.flatnonzero(e > s)
    a = np.searchsorted(knots, s[rows], "right") - 1
    b = np.searchsorted(knots, e[rows], "left") - 1
    n = b - a + 1
    row = np.repeat(rows, n)
    seg = np.repeat(a, n) + (np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n))
    return row, seg, np.maximum(s[row], knots[seg]), np.minimum(e[row], knots[seg + 1])


def _weigh(c: Curve, iv: Intervals, sc: Scaled, col: int, event: str) -> None:
    """Thread curves of domain C whose traced pool is shared by the event in column COL of the
    counter rows (module docstring); C unchanged where no traced thread counted it. Sparse:
    one entry per (thread, sample interval) in which the thread ran."""
    k = len(c.knots) - 1
    s, e, tid = _on(iv, c.cpus)
    mine = tid != UNTRACED
    s, e, tid = s[mine], e[mine], tid[mine].astype(np.int64)
    on = np.isin(sc.cpu, np.array(sorted(c.cpus), dtype=np.int64)) & (sc.tid > 0) & \
        (sc.pid != OUTSIDE)
    if k < 1 or not len(tid) or not on.any():
        return
    tids = np.unique(tid)
    row, seg, ps, pe = _pieces(c.knots, s, e)
    worth = c.worth(ps, pe)
    ran = worth > 0
    keys, inv = np.unique(np.searchsorted(tids, tid[row][ran]) * k + seg[ran],
                          return_inverse=True)
    busy = np.bincount(inv, weights=worth[ran], minlength=len(keys))
    # The event's counts per (thread, sample interval), spread evenly over each run interval.
    cs, ce = sc.start[on], sc.end[on]
    crow, cseg, cps, cpe = _pieces(c.knots, cs, ce)
    ctid = sc.tid[on][crow]
    ti = np.minimum(np.searchsorted(tids, ctid), len(tids) - 1)
    ck = ti * k + cseg
    at = np.minimum(np.searchsorted(keys, ck), len(keys) - 1)
    hit = (tids[ti] == ctid) & (keys[at] == ck)   # a count where its thread ran (not edges)
    share = (cpe - cps) / np.maximum((ce - cs)[crow], 1).astype(np.float64)
    counts = np.bincount(at[hit], weights=(sc.values[on][crow, col] * share)[hit],
                         minlength=len(keys))
    kseg = keys % k
    total = np.bincount(kseg, weights=counts, minlength=k)
    if not (total > 0).any():
        return
    pool = np.bincount(kseg, weights=busy, minlength=k)
    weighed = total[kseg] > 0
    joules = np.where(weighed, pool[kseg] * counts / np.where(weighed, total[kseg], 1.0), busy)
    factor = joules / busy
    gain = np.diff(c.cum)[kseg] * factor
    ktid = keys // k
    cuts = np.flatnonzero(np.diff(ktid)) + 1
    for lo, hi in zip(np.concatenate([[0], cuts]).tolist(),
                      np.concatenate([cuts, [len(keys)]]).tolist()):
        segs = kseg[lo:hi]
        got = np.cumsum(gain[lo:hi])
        c.per_tid[int(tids[ktid[lo]])] = (
            np.column_stack([c.knots[segs], c.knots[segs + 1]]).ravel(),
            np.column_stack([np.concatenate([[0.0], got[:-1]]), got]).ravel())
    c.rule = event


def weigh(cs: list[Curve], iv: Intervals, rec: Any) -> None:
    """Give each curve its domain's event weighting (``WEIGHTS``) where the recording has
    counters per run interval (libbpf) that include the event; else busy time, as built."""
    info = (getattr(rec, "header", {}) or {}).get("counters") or {}
    if not str(info.get("source") or "").startswith("libbpf") \
            or not hasattr(rec, "thread_counters"):
        return
    tc = rec.thread_counters()
    if not len(tc):
        return
    sc = scaled(tc)
    for c in cs:
        names = WEIGHTS.get(c.domain.split("-")[0])
        col = event_index(sc.events, names) if names else None
        if col is not None:
            _weigh(c, iv, sc, col, sc.events[col])


def attribute(iv: Intervals, cs: list[Curve]) -> list[dict[str, Any]]:
    """Per domain: measured energy, joules per tid, other (untraced) and idle, and the rule."""
    out = []
    for c in cs:
        s, e, tid = _on(iv, c.cpus)
        j = c.worth(s.astype(np.float64), e.astype(np.float64))
        u, inv = np.unique(tid, return_inverse=True)
        if c.per_tid:                      # weighed threads: each priced by its own curve
            o = np.argsort(inv, kind="stable")
            cuts = np.searchsorted(inv[o], np.arange(len(u) + 1))
            for i, t in enumerate(u.tolist()):
                if t in c.per_tid:
                    m = o[cuts[i]:cuts[i + 1]]
                    j[m] = c.worth(s[m].astype(np.float64), e[m].astype(np.float64), t)
        per = np.zeros(len(u))
        np.add.at(per, inv, j)
        tids = {int(t): float(v) for t, v in zip(u.tolist(), per.tolist())}
        other = tids.pop(UNTRACED, 0.0)
        out.append({"domain": c.domain, "energy_j": c.energy_j, "tids": tids, "rule": c.rule,
                    "other_j": other, "idle_j": c.energy_j - other - sum(tids.values())})
    return out


def _before(c: Curve, tid: int, ts: np.ndarray, te: np.ndarray, cum: np.ndarray,
            x: np.ndarray) -> np.ndarray:
    """Joules of thread TID's run intervals (sorted, disjoint) before each time x."""
    prev = np.searchsorted(ts, x, "right") - 1
    ok = prev >= 0
    p = np.maximum(prev, 0)
    cut = np.clip(x, ts[p], te[p]).astype(np.float64)
    part = c.worth(ts[p].astype(np.float64), cut, tid)
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
            j = c.worth(ts.astype(np.float64), te.astype(np.float64), t)
            cum = np.concatenate([[0.0], np.cumsum(j)[:-1]])
            mine = w[w[:, 0] == t]
            total += float((_before(c, t, ts, te, cum, mine[:, 2])
                            - _before(c, t, ts, te, cum, mine[:, 1])).sum())
    return total


def add_energy(report: dict[str, Any], iv: Intervals, samples: list[Sample], topology: Topology,
               rec: Any) -> None:
    """The attributed energy into the report: ``energy_attribution`` (rule, per domain
    measured / traced / other / idle and the rule used, the domains that never advanced with
    why, or why none), each task's, process's and region's ``energy_j`` (None where no
    energy was measured)."""
    every = curves(samples, topology)
    cs = [c for c in every if advanced(c.energy_j)]
    unmeasured = [{"domain": c.domain, "why": unmeasured_why(c.domain, not cs)}
                  for c in every if not advanced(c.energy_j)]
    if not cs:
        why = ("; ".join(u["why"] for u in unmeasured) if unmeasured
               else "no RAPL energy recorded (see Energy)")
        report["energy_attribution"] = {"why": why, "unmeasured": unmeasured}
        for row in (*report.get("tasks", []), *report.get("processes", []),
                    *(report.get("regions") or [])):
            row["energy_j"] = None
        return
    weigh(cs, iv, rec)
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
        from snumap_tui.analysis.regions import recording_bounds

        wins = region_windows(rec.regions(), recording_bounds(rec))
        mine_cs = [c for c in cs if c.domain in counted]
        for r in report["regions"]:
            w = [(t, a, b) for _, t, a, b in wins.get(r["name"], [])]
            # Calls summed in the kernel have no window: n/a, not the exact calls' share.
            r["energy_j"] = None if r.get("summed_calls") else \
                window_energy(iv, mine_cs, w)
    report["energy_attribution"] = {
        "estimate": True, "rule": RULE, "summed": sorted(counted), "unmeasured": unmeasured,
        "domains": [{"domain": d["domain"], "energy_j": d["energy_j"], "rule": d["rule"],
                     "traced_j": sum(d["tids"].values()), "other_j": d["other_j"],
                     "idle_j": d["idle_j"]} for d in doms]}


def _na(name: str, why: str) -> list[str]:
    """A domain's "n/a (why)" line, wrapped to 80 columns under its value column."""
    import textwrap

    return textwrap.wrap(f"{name:<14} n/a ({why})", 78, initial_indent="  ",
                         subsequent_indent=" " * 17)


def format_domains(domains: list[dict[str, Any]]) -> list[str]:
    """The report's "Energy (RAPL)" lines: J and average W per domain, or n/a and why."""
    lines = []
    for e in domains:
        if e.get("energy_j") is None:
            lines += _na(e["domain"], e.get("why") or "not measured")
            continue
        w = f"{e['avg_w']:.1f} W" if e.get("avg_w") is not None else "-"
        lines.append(f"  {e['domain']:<14} {e['energy_j']:10.2f} J  avg {w}")
    return lines


def format_energy(r: dict[str, Any], top: int = 20) -> list[str]:
    """The report's text section "Energy attributed"."""
    import textwrap

    from snumap_tui.textsafe import safe_text

    a = r.get("energy_attribution") or {}
    lines = ["", "Energy attributed (estimate, J; rule per domain under BY, and below):"]
    if a.get("why"):
        if a.get("unmeasured"):     # each domain's why is under "Energy (RAPL)" just above
            return [*lines, "  n/a (no RAPL domain's counter advanced: see Energy (RAPL))"]
        return [*lines, f"  n/a ({a['why']})"[:80]]
    lines.append(f"  {'DOMAIN':<14} {'MEASURED':>10} {'TRACED':>10} {'OTHER':>10} {'IDLE':>10}"
                 "  BY")
    for d in a["domains"]:
        lines.append(f"  {d['domain']:<14} {d['energy_j']:>10.2f} {d['traced_j']:>10.2f} "
                     f"{d['other_j']:>10.2f} {d['idle_j']:>10.2f}  {d.get('rule', BUSY)}"[:80])
    for u in a.get("unmeasured") or []:
        lines += _na(u["domain"], u["why"])
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
