"""A study's numbers: one measurement per run × region, and per region and configuration the
time over repeats with speedup, parallel efficiency, Karp–Flatt serial fraction, energy and
energy-delay product.

A series is a region's configurations that differ only in their parallelism p (threads ×
ranks): same placement, input and frequency. Its baseline is its smallest p; at p:

- speedup S = T(p0) / T(p), on median times;
- efficiency E = S / (p / p0);
- Karp–Flatt serial fraction e = (1/S − p0/p) / (1 − p0/p), undefined at the baseline;
- time lost = T(p) − T(p0)·p0/p, the time above perfect scaling.

Each run also ran the command untraced (study/runner.py): the program's row carries that time,
and per configuration the recorder's perturbation is median(recorded) / median(untraced) − 1.
Where it passes PERTURBED in any configuration of the program's series, the program's
speedup, efficiency, serial fraction and lost time are computed from the untraced medians
(``basis`` "untraced"), and the regions measured in those configurations are marked
``perturbed`` (their times exist only as recorded).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

PROGRAM = "(program)"     # the whole program's row, the root of the regions' tree
CONFIG_KEYS = ("threads", "ranks", "places", "input", "input_value", "freq")
PERTURBED = 0.03          # the recorder's slowdown of the program beyond which it is said
MEASURES = ("median", "mean")   # a time's figure over its repeats (--measure; Extra-P's too)


def untraced_time(state: dict[str, Any]) -> float | None:
    """A run's untraced program time in s (its state's ``untraced``), None where there is
    none usable: an older study's run, a failed or interrupted untraced run."""
    u = state.get("untraced")
    if not isinstance(u, dict) or u.get("exit_status") != 0:
        return None
    t = u.get("time_s")
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
        return None
    return float(t)


def measurements(study: Any, states: dict[str, dict[str, Any]] | None = None
                 ) -> list[dict[str, Any]]:
    """Every finished run's rows: its whole program, then each region (failed runs: their
    program row, status "failed", with what was measured). A stored energy of 0 J (a counter
    that never advanced, as on a virtual machine's power PMU) is no measurement: None."""
    from snumap_tui.analysis.energy import advanced

    if states is None:
        states = study.run_states()
    out: list[dict[str, Any]] = []
    for p in study.plan():
        st = states.get(p.id)
        if not st or st.get("status") not in ("ok", "failed"):
            continue
        c = p.config
        base = {"threads": c.threads, "ranks": c.ranks, "places": c.places, "input": c.input,
                "input_value": c.input_value, "freq": c.freq, "repeat": p.repeat,
                "status": st["status"], "recording": st.get("recording"), "run": p.id,
                "config": c.key}
        m = st.get("measurements") or {}
        prog = m.get("program") or {}
        out.append({"region": PROGRAM, "parent": None, "kind": "program", "wait": False,
                    **base, "time_s": prog.get("time_s"),
                    "energy_j": prog["energy_j"] if advanced(prog.get("energy_j")) else None,
                    "calls": 1, "untraced_s": untraced_time(st), **_figures(prog)})
        for r in m.get("regions") or []:
            out.append({"region": r["region"], "parent": r.get("parent") or PROGRAM,
                        "kind": r.get("kind"), "wait": bool(r.get("wait")), **base,
                        "time_s": r.get("time_s"), "energy_j": None,
                        # every thread's calls (a parallel region: its runs), as report's CALLS
                        "calls": r.get("count"), **_figures(r)})
    return out


def _figures(m: dict[str, Any]) -> dict[str, Any]:
    """A measurement's counters and memory (study/figures.py; an older run's: why none)."""
    from snumap_tui.study.figures import OLD_RUN

    return {k: m.get(k) if isinstance(m.get(k), dict) else {"why": OLD_RUN}
            for k in ("counters", "memory")}


def parallelism(row: dict[str, Any]) -> int:
    return int(row["threads"]) * int(row.get("ranks") or 1)


def series_key(row: dict[str, Any]) -> tuple[Any, ...]:
    return (row["region"], row["places"], row["input"], row["freq"])


def aggregate(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (region, configuration): median/min/max time over the ok runs, n, speedup,
    efficiency, Karp–Flatt, lost time, energy (median) and EDP."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("status") != "ok" or r.get("time_s") is None:
            continue
        groups.setdefault((r["region"], *(r[k] for k in CONFIG_KEYS)), []).append(r)
    from snumap_tui.study.figures import combine

    out = []
    for rs in groups.values():
        times = [float(r["time_s"]) for r in rs]
        energies = [float(r["energy_j"]) for r in rs if r.get("energy_j") is not None]
        t = statistics.median(times)
        e = statistics.median(energies) if energies else None
        first = rs[0]
        out.append({"region": first["region"], "parent": first.get("parent"),
                    "kind": first.get("kind"), "wait": first.get("wait", False),
                    **{k: first[k] for k in CONFIG_KEYS},
                    "time_median_s": t, "time_mean_s": statistics.fmean(times),
                    "time_min_s": min(times), "time_max_s": max(times),
                    "n": len(times), "energy_j": e, "edp": e * t if e is not None else None,
                    "speedup": None, "efficiency": None, "karp_flatt": None, "lost_s": None,
                    **_untraced(rs, t), **combine(rs, t)})
    series: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for a in out:
        series.setdefault(series_key(a), []).append(a)
    perturbed = {(a["places"], a["input"], a["freq"], a["threads"], a["ranks"]): a["perturbation"]
                 for a in out if a["region"] == PROGRAM and finite(a.get("perturbation"))
                 and a["perturbation"] > PERTURBED}
    for rs in series.values():
        rs.sort(key=parallelism)
        key = "time_median_s"
        if rs[0]["region"] == PROGRAM and all(finite(a.get("untraced_median_s")) for a in rs) \
                and any(a.get("perturbation", 0) > PERTURBED for a in rs):
            key = "untraced_median_s"
        for a in rs:
            if a["region"] == PROGRAM:
                a["basis"] = "untraced" if key == "untraced_median_s" else "recorded"
            else:
                a["perturbed"] = perturbed.get((a["places"], a["input"], a["freq"],
                                                a["threads"], a["ranks"]))
        base = rs[0]
        p0, t0 = parallelism(base), base[key]
        for a in rs:
            q = parallelism(a) / p0
            t = a[key]
            if t <= 0 or t0 <= 0:
                continue
            s = t0 / t
            a["speedup"] = s
            a["efficiency"] = s / q
            a["lost_s"] = max(0.0, t - t0 / q)
            if q > 1:
                a["karp_flatt"] = (1 / s - 1 / q) / (1 - 1 / q)
    out.sort(key=lambda a: (a["region"] != PROGRAM, a["region"], str(a["places"]),
                            str(a["input"]), str(a["freq"]), parallelism(a)))
    return out


def _untraced(rs: list[dict[str, Any]], t: float) -> dict[str, Any]:
    """The program's untraced median over RS's runs and the recorder's perturbation of its
    median recorded time T (regions: nothing)."""
    if rs[0]["region"] != PROGRAM:
        return {}
    u = [float(r["untraced_s"]) for r in rs if finite(r.get("untraced_s"))]
    if not u:
        return {"untraced_median_s": None, "untraced_mean_s": None, "untraced_n": 0,
                "perturbation": None}
    m = statistics.median(u)
    return {"untraced_median_s": m, "untraced_mean_s": statistics.fmean(u),
            "untraced_n": len(u), "perturbation": t / m - 1}


def serial_text(x: Any) -> str:
    """Karp-Flatt's serial fraction as report and view show it: two decimals; above 1
    (slower than with fewer threads: a wait region, contention) it is no fraction of
    anything, '>1'; '-' where undefined (the baseline)."""
    if not finite(x):
        return "-"
    return ">1" if x > 1 else f"{x:.2f}"


def finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)
