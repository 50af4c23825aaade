"""A study's numbers: one measurement per run × region, and per region and configuration the
time over repeats with speedup, parallel efficiency, Karp–Flatt serial fraction, energy and
energy-delay product.

A series is a region's configurations that differ only in their parallelism p (threads ×
ranks): same placement, input and frequency. Its baseline is its smallest p; at p:

- speedup S = T(p0) / T(p), on median times;
- efficiency E = S / (p / p0);
- Karp–Flatt serial fraction e = (1/S − p0/p) / (1 − p0/p), undefined at the baseline;
- time lost = T(p) − T(p0)·p0/p, the time above perfect scaling.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

PROGRAM = "(program)"     # the whole program's row, the root of the regions' tree
CONFIG_KEYS = ("threads", "ranks", "places", "input", "input_value", "freq")


def measurements(study: Any) -> list[dict[str, Any]]:
    """Every finished run's rows: its whole program, then each region (failed runs: their
    program row, status "failed", with what was measured). A stored energy of 0 J (a counter
    that never advanced, as on a virtual machine's power PMU) is no measurement: None."""
    from snumap_tui.analysis.energy import advanced

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
                    "count": 1, **_figures(prog)})
        for r in m.get("regions") or []:
            out.append({"region": r["region"], "parent": r.get("parent") or PROGRAM,
                        "kind": r.get("kind"), "wait": bool(r.get("wait")), **base,
                        "time_s": r.get("time_s"), "energy_j": None,
                        "count": r.get("count"), **_figures(r)})
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
                    **combine(rs, t)})
    series: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for a in out:
        series.setdefault(series_key(a), []).append(a)
    for rs in series.values():
        rs.sort(key=parallelism)
        base = rs[0]
        p0, t0 = parallelism(base), base["time_median_s"]
        for a in rs:
            q = parallelism(a) / p0
            t = a["time_median_s"]
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


def finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)
