"""`snumap scale report`: per region (as a tree under the whole program) and configuration, the
times over repeats, speedup, efficiency, serial fraction, energy and EDP, the counters and
memory high-water mark (study/figures.py); where efficiency
first falls below 50 %; the region losing most time at the largest configuration; findings
in one line each; the fitted models when the model module is there.
"""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any

from snumap_tui.study.aggregate import (
    PERTURBED,
    PROGRAM,
    finite,
    parallelism,
    serial_text,
    series_key,
)
from snumap_tui.study.figures import format_figures
from snumap_tui.textsafe import safe_text

HALF = 0.5
NOT_SCALING = 0.6        # efficiency at the largest p below which a region "does not scale"
SCALING = 0.8
MIN_SHARE = 0.01         # regions under this share of the program's time get no finding
SLOWER = 0.95            # speedup under which more threads made a region slower
PLACE_GAP = 1.1          # best vs worst placement ratio worth a finding


def report_from(manifest: dict[str, Any], states: dict[str, dict[str, Any]],
                rows: list[dict[str, Any]], agg: list[dict[str, Any]],
                predict: int | None = None, metric: str = "time",
                measure: str = "median", damaged: dict[str, str] | None = None
                ) -> dict[str, Any]:
    """The report's content; DAMAGED: run files that could not be read (by run id: why),
    counted and named (their runs are redone on resume)."""
    status = Counter(s.get("status") for s in states.values())
    n_plan = len(manifest.get("plan", []))
    status["damaged"] = len(damaged or {})
    status["pending"] = n_plan - sum(status.values())
    parent = _parents(rows)
    by_region: dict[str, list[dict[str, Any]]] = {}
    for a in agg:
        by_region.setdefault(a["region"], []).append(a)
    tree = _tree(by_region, parent)
    unit = unit_of(agg)
    rep: dict[str, Any] = {
        "study": {k: manifest.get(k) for k in ("command", "host", "machine", "snumap_version",
                                               "actuators", "created", "updated")},
        "runs": {"planned": n_plan, **{k: v for k, v in status.items() if v}},
        "configurations": manifest.get("configurations", []),
        "failed": [{"id": i, "why": s.get("why")} for i, s in sorted(states.items())
                   if s.get("status") == "failed"],
        "damaged": [{"id": i, "why": why} for i, why in sorted((damaged or {}).items())],
        "unit": unit,
        "regions": tree,
        "energy": _energy_note(agg, states),
        "first_below_half": _below_half(by_region),
        "most_lost": _most_lost(agg),
    }
    rep["perturbation"] = perturbation(by_region.get(PROGRAM, []), unit)
    rep["findings"] = findings(by_region, tree, unit, manifest.get("configurations", []))
    rep["models"] = models(agg, manifest, predict, metric, measure, rows)
    rep["events"] = manifest.get("events")
    return rep


def _parents(rows: list[dict[str, Any]]) -> dict[str, str | None]:
    votes: dict[str, Counter[str | None]] = {}
    for r in rows:
        votes.setdefault(r["region"], Counter())[r.get("parent")] += 1
    return {k: v.most_common(1)[0][0] for k, v in votes.items()}


def _tree(by_region: dict[str, list[dict[str, Any]]], parent: dict[str, str | None]
          ) -> list[dict[str, Any]]:
    """Regions depth-first under the program, the longest first at each level."""
    kids: dict[str | None, list[str]] = {}
    for r in by_region:
        p = parent.get(r) if r != PROGRAM else None
        if p is not None and p not in by_region:
            p = PROGRAM
        kids.setdefault(p, []).append(r)
    weight = {r: max(a["time_median_s"] for a in rs) for r, rs in by_region.items()}
    out: list[dict[str, Any]] = []
    seen: set[str] = set()

    def visit(r: str, depth: int) -> None:
        if r in seen:
            return
        seen.add(r)
        rs = by_region[r]
        out.append({"region": r, "parent": parent.get(r) if r != PROGRAM else None,
                    "depth": depth, "kind": rs[0].get("kind"), "wait": rs[0].get("wait"),
                    "rows": rs})
        for k in sorted(kids.get(r, []), key=lambda k: -weight[k]):
            visit(k, depth + 1)

    for top in sorted(kids.get(None, []), key=lambda k: (k != PROGRAM, -weight[k])):
        visit(top, 0)
    for r in sorted(by_region, key=lambda k: -weight[k]):     # parents lost in a cycle
        visit(r, 1)
    return out


def unit_of(agg: list[dict[str, Any]]) -> str:
    """What the parallelism is counted in: threads, ranks, or p (threads x ranks)."""
    ranks = {a.get("ranks") for a in agg}
    threads = {a["threads"] for a in agg}
    if ranks == {None}:
        return "threads"
    if len(threads) == 1 and threads == {1}:
        return "ranks"
    return "p"


def _series(rs: list[dict[str, Any]]) -> dict[tuple[Any, ...], list[dict[str, Any]]]:
    out: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for a in rs:
        out.setdefault(series_key(a), []).append(a)
    for v in out.values():
        v.sort(key=parallelism)
    return out


def _label(a: dict[str, Any]) -> str:
    parts = [a["places"]] + [str(a[k]) for k in ("input", "freq") if a.get(k) is not None]
    return ", ".join(parts)


def _below_half(by_region: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    out = []
    for r, rs in by_region.items():
        for ser in _series(rs).values():
            hit = next((a for a in ser if finite(a["efficiency"]) and a["efficiency"] < HALF),
                       None)
            if hit is not None and not hit.get("wait"):
                out.append({"region": r, "places": hit["places"], "input": hit["input"],
                            "freq": hit["freq"], "threads": hit["threads"],
                            "ranks": hit.get("ranks"), "efficiency": hit["efficiency"]})
    return out


def _most_lost(agg: list[dict[str, Any]]) -> dict[str, Any] | None:
    """At the largest parallelism, the region (not a wait call: they are inside one) with the
    most time above perfect scaling, and the wait call inside it that waited longest."""
    regs = [a for a in agg if a["region"] != PROGRAM and finite(a["lost_s"])]
    work = [a for a in regs if not a.get("wait")] or regs
    if not work:
        return None
    top_p = max(parallelism(a) for a in work)
    a = max((a for a in work if parallelism(a) == top_p), key=lambda a: a["lost_s"])
    out = {"region": a["region"], "threads": a["threads"], "ranks": a.get("ranks"),
           "places": a["places"], "input": a["input"], "freq": a["freq"],
           "lost_s": a["lost_s"], "time_median_s": a["time_median_s"],
           "efficiency": a["efficiency"], "wait_inside": None}
    same = [w for w in regs if w.get("wait") and w.get("parent") == a["region"]
            and parallelism(w) == top_p and series_key(w)[1:] == series_key(a)[1:]]
    if same:
        # The wait call's time is when at least one thread waited in it: a part of the
        # region's time (clipped to it), not of the time above perfect scaling.
        w = max(same, key=lambda w: w["time_median_s"])
        out["wait_inside"] = {"region": w["region"],
                              "time_s": min(w["time_median_s"], a["time_median_s"]),
                              "of": "region time"}
    return out


def perturbation(prog: list[dict[str, Any]], unit: str) -> dict[str, Any]:
    """The recorder's perturbation of the program per configuration: its median time
    recorded and untraced (study/runner.py runs each configuration both ways), the ratio
    minus 1, and a warning where it passes PERTURBED."""
    rows = [a for a in prog if a.get("untraced_n")]
    if not rows:
        return {"available": False, "threshold": PERTURBED,
                "why": "no run of this study was also run untraced (made before snumap scale "
                       "did that)"}
    confs = [{"places": a["places"], "input": a["input"], "freq": a["freq"],
              "threads": a["threads"], "ranks": a.get("ranks"),
              "recorded_s": a["time_median_s"], "untraced_s": a["untraced_median_s"],
              "n": a["untraced_n"], "perturbation": a["perturbation"],
              "over": a["perturbation"] > PERTURBED} for a in rows]
    over = [c for c in confs if c["over"]]
    warning = None
    if over:
        w = max(over, key=lambda c: c["perturbation"])
        warning = (f"the recorder slowed the program by more than {100 * PERTURBED:.0f} % in "
                   f"{len(over)} of {len(confs)} configurations (up to "
                   f"{100 * w['perturbation']:.1f} % at {_count(w, unit)} {unit}, {_label(w)}): "
                   "the program's speedup, efficiency and serial fraction are computed from "
                   "its untraced times; region times there are as recorded (marked *)")
    return {"available": True, "threshold": PERTURBED, "configurations": confs,
            "program_basis": "untraced" if any(a.get("basis") == "untraced" for a in prog)
            else "recorded", "warning": warning}


def _energy_note(agg: list[dict[str, Any]], states: dict[str, dict[str, Any]]
                 ) -> dict[str, Any]:
    if any(a.get("energy_j") is not None for a in agg):
        return {"available": True}
    from snumap_tui.analysis.energy import unmeasured_why

    progs = [(s.get("measurements") or {}).get("program") or {} for s in states.values()]
    whys = [p.get("energy_note") for p in progs]
    # Runs measured before a counter that never advanced was told apart stored 0 J, no note.
    stuck = any(p.get("energy_j") == 0 for p in progs)
    why = next((w for w in whys if w),
               unmeasured_why("energy", True) if stuck else "no run measured energy")
    return {"available": False, "why": why}


def _finding_series(rs: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The series a region's finding speaks of: its only one, else the one fastest at the
    largest parallelism it reached (its placement, input and frequency are named, so each
    figure is a row of the table)."""
    sers = [v for v in _series(rs).values() if len(v) > 1]
    if not sers:
        return None
    top = max(parallelism(v[-1]) for v in sers)
    return min((v for v in sers if parallelism(v[-1]) == top),
               key=lambda v: v[-1]["time_median_s"])


def _by_p(rs: list[dict[str, Any]], key: str) -> dict[int, float]:
    """Per parallelism, KEY of one series' rows (or the median of several)."""
    acc: dict[int, list[float]] = {}
    for a in rs:
        if finite(a.get(key)):
            acc.setdefault(parallelism(a), []).append(float(a[key]))
    return {p: statistics.median(v) for p, v in sorted(acc.items())}


def findings(by_region: dict[str, list[dict[str, Any]]], tree: list[dict[str, Any]],
             unit: str, configs: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    prog = by_region.get(PROGRAM, [])
    prog_t = max((a["time_median_s"] for a in prog), default=0.0)
    out: list[dict[str, Any]] = []
    for node in tree:
        r, rs = node["region"], node["rows"]
        share = max(a["time_median_s"] for a in rs) / prog_t if prog_t > 0 else 1.0
        if (r != PROGRAM and share < MIN_SHARE) or node.get("wait"):
            continue
        ser = _finding_series(rs)
        if ser is None:
            continue
        label, several = _label(ser[-1]), len(_series(rs)) > 1
        eff, sp, kf = (_by_p(ser, k) for k in ("efficiency", "speedup", "karp_flatt"))
        ps = [p for p in eff if p != min(eff)]
        if not ps:
            continue
        top = ps[-1]
        effs = ", ".join(f"{eff[p]:.2f} at {p} {unit}" if i == 0 else f"{eff[p]:.2f} at {p}"
                         for i, p in enumerate(ps))
        serial = f"; serial fraction {serial_text(kf[top])}" if top in kf else ""
        basis = "; from its untraced times" if ser[-1].get("basis") == "untraced" else ""
        where = f" [{label}{', its fastest placement' if several else ''}{basis}]"
        base = {"region": r, "efficiency": eff[top], "series": label, "p": top,
                "speedup": sp.get(top)}
        if eff[top] < NOT_SCALING:
            slower = (f" (slower at {top} {unit} than at {min(eff)}: speedup {sp[top]:.2f})"
                      if sp.get(top, 1.0) < SLOWER else "")
            out.append({"kind": "does_not_scale", **base,
                        "text": f"{r}{where} does not scale{slower}: efficiency {effs}{serial}"})
        else:
            kind, how = ("scales", "scales") if eff[top] >= SCALING else \
                ("scales_partly", "scales partly")
            out.append({"kind": kind, **base,
                        "text": f"{r}{where} {how}: efficiency {effs}{serial}"})
        out.extend(_placement_finding(r, rs, unit, configs or []))
    return out


def _placement_finding(region: str, rs: list[dict[str, Any]], unit: str,
                       configs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    top = max(parallelism(a) for a in rs)
    acc: dict[str, list[float]] = {}
    for a in rs:
        if parallelism(a) == top:
            acc.setdefault(a["places"], []).append(a["time_median_s"])
    if len(acc) < 2:
        return []
    med = {k: statistics.median(v) for k, v in acc.items()}
    best, worst = min(med, key=med.__getitem__), max(med, key=med.__getitem__)
    if med[best] <= 0 or med[worst] / med[best] < PLACE_GAP:
        return []
    cpus = {c["places"]: c.get("cpuset") for c in configs
            if c["threads"] * (c.get("ranks") or 1) == top}
    same = (f"; both on CPUs {cpus[best]}: only the OpenMP binding differs"
            if cpus.get(best) and cpus.get(best) == cpus.get(worst) else "")
    return [{"kind": "placement", "region": region, "best": best, "worst": worst,
             "text": f"{region}: --places {best} is {med[worst] / med[best]:.2f}x faster than "
                     f"{worst} at {top} {unit} ({med[best]:.3f} s vs {med[worst]:.3f} s{same})"}]


def models(agg: list[dict[str, Any]], manifest: dict[str, Any], predict: int | None,
           metric: str = "time", measure: str = "median",
           runs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """PMNF models of each region's time (or METRIC: study/figures.py) (snumap_tui.study.pmnf)
    as a function of the thread count, at the series with the most configurations (its
    placement, input and frequency named), extrapolated to the machine's cores and to PREDICT;
    where the inputs are numbers (three values at least), also of threads and input size
    together. MEASURE: a time's median or mean over the repeats (other figures: medians).
    A time is fitted to RUNS (the measurements: each repeat, so that the noise they show
    decides whether a term is needed); the program's, where the recorder perturbed it (its
    series' ``basis``), to its untraced times."""
    from snumap_tui.study import pmnf
    from snumap_tui.study.figures import UNITS, metric_value

    untraced = {series_key(a) for a in agg if a.get("basis") == "untraced"}

    def raw(r: dict[str, Any]) -> Any:
        return r.get("untraced_s") if series_key(r) in untraced else r.get("time_s")

    if metric == "time" and runs is not None:
        rows = [{**r, "value": raw(r)} for r in runs if r.get("status") == "ok"]
    else:
        rows = [{**a, "value": metric_value(a, metric) if metric != "time" else
                 a.get(f"{'untraced' if series_key(a) in untraced else 'time'}_{measure}_s")}
                for a in agg]
    rows = [a for a in rows if finite(a["value"])]
    if not rows:
        return {"available": False, "metric": metric,
                "why": f"no configuration has a figure for {metric}"}
    try:
        series = pmnf.fit_series(rows, params=("threads",), value="value", measure=measure)
        sizes = {a.get("input_value") for a in rows}
        numeric = len(sizes) >= pmnf.MIN_POINTS and all(
            isinstance(v, (int, float)) for v in sizes)
        with_input = {r: (fx, m) for r, fx, m in reversed(
            pmnf.fit_series(rows, params=("threads", "input_value"), value="value",
                            measure=measure))} \
            if numeric else {}
    except ValueError as exc:
        return {"available": False, "metric": metric, "why": f"no model fitted: {exc}"}
    key = "time_s" if metric == "time" else "value"
    cores = int((manifest.get("machine") or {}).get("cores") or 0)
    untraced_fits = {_as_text(k) for k in untraced}     # as fit_series names its series
    out: dict[str, Any] = {}
    for region, fixed, m in series:
        if region in out:
            continue
        item: dict[str, Any] = {"formula": m.formula, "cv_smape_pct": m.cv_smape,
                                "points": m.points,
                                "series": {k: v for k, v in fixed.items() if v}}
        if m.note:      # two thread counts: c0 + c1/p, Amdahl's law only for a time
            item["note"] = m.note if metric == "time" else \
                m.note.replace("Amdahl's law", "c0 + c1 * threads^(-1)")
        if metric == "time" and _as_text(series_key({"region": region, **fixed})) in \
                untraced_fits:
            item["note"] = "; ".join(x for x in (item.get("note"), "of its untraced times") if x)
        for label, p in (("at_cores", cores), ("at_predict", predict)):
            if p:
                item[label] = {"p": p, key: float(m.predict(p))}
        if region in with_input:
            fx, m2 = with_input[region]
            big = max(float(v) for v in sizes if isinstance(v, (int, float)))
            item["with_input"] = {"formula": m2.formula, "cv_smape_pct": m2.cv_smape,
                                  "series": {k: v for k, v in fx.items() if v}}
            if cores:
                item["with_input"]["at_cores_largest_input"] = {
                    "p": cores, "input": big, key: float(m2.predict(cores, big))}
        out[region] = item
    return {"available": True, "metric": metric, "unit": UNITS.get(metric, ""),
            "measure": measure if metric == "time" else "median", "models": out}


def _as_text(key: tuple[Any, ...]) -> tuple[str, ...]:
    """A series key as pmnf.fit_series gives its settings: strings, '' for None."""
    return tuple("" if v is None else str(v) for v in key)


# ---- text -------------------------------------------------------------------------------------

def _f(x: Any, fmt: str) -> str:
    return format(x, fmt) if finite(x) else "-"


def _escaped(v: Any) -> Any:
    """V with every string in it (keys too) through textsafe: a region, marker, host or
    command name is another user's text, and this is for a terminal (``--json`` keeps the
    exact strings)."""
    if isinstance(v, str):
        return safe_text(v)
    if isinstance(v, dict):
        return {(safe_text(k) if isinstance(k, str) else k): _escaped(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_escaped(x) for x in v]
    return v


def format_report(rep: dict[str, Any], top: int = 30) -> str:
    rep = _escaped(rep)
    st = rep["study"]
    runs = rep["runs"]
    m = st.get("machine") or {}
    counts = ", ".join(f"{v} {k}" for k, v in runs.items() if k != "planned")
    lines = [f"Study of: {' '.join(st.get('command') or [])}"[:200],
             (f"  on {st.get('host')} ({m.get('pus', '?')} PUs, {m.get('cores', '?')} cores, "
             f"{m.get('packages', '?')} packages), snumap {st.get('snumap_version')}"),
             f"  {len(rep['configurations'])} configurations, {runs['planned']} runs: {counts}"]
    for f in rep["failed"][:5]:
        lines.append(f"  failed: {f['id']}: {f.get('why') or '?'}"[:120])
    for f in rep.get("damaged", [])[:5]:
        lines.append(f"  damaged (redone on resume): {f['why']}"[:200])
    unit = rep["unit"]
    energy = rep["energy"]["available"]
    cols = _columns(rep)
    head = "".join(f"{h:>{w}}" if i >= len(cols["keys"]) else f"{h:<{w}}"
                   for i, (h, w) in enumerate(cols["head"]))
    lines += ["", "Time per region and configuration (s, median [min-max] over repeats);",
              f"speedup, efficiency and serial fraction (Karp-Flatt) vs the fewest {unit}:"]
    pert = rep.get("perturbation") or {}
    for node in rep["regions"][:top]:
        ind = "  " * node["depth"]
        tag = " [wait]" if node.get("wait") else ""
        lines.append(f"{ind}{node['region']}{tag}")
        if node["region"] == PROGRAM and pert.get("program_basis") == "untraced":
            lines.append(f"{ind}  (speedup, efficiency, serial fraction from its untraced "
                         "times: the recorder's perturbation, below)")
        lines.append(f"{ind}  {head}".rstrip())
        for a in node["rows"]:
            mark = " *" if a.get("perturbed") else ""
            lines.append(f"{ind}  {_row(a, cols, energy)}{mark}".rstrip())
    if len(rep["regions"]) > top:
        lines.append(f"... {len(rep['regions']) - top} more regions (--json has all)")
    if not energy:
        lines.append(f"Energy and EDP: n/a: {rep['energy']['why']}")
    lines += _perturbation_lines(pert, cols["keys"], unit)
    lines += format_figures(rep["regions"], cols["keys"], top)
    lines += ["", "Efficiency first below 50 %:"]
    below = rep["first_below_half"]
    if not below:
        lines.append("  nowhere")
    for b in below[:top]:
        where = ", ".join(str(b[k]) for k in ("places", "input", "freq") if b.get(k))
        lines.append(f"  {b['region']}: at {_count(b, unit)} {unit} ({where}): "
                     f"{b['efficiency']:.2f}"[:120])
    ml = rep["most_lost"]
    if ml:
        where = ", ".join(str(ml[k]) for k in ("places", "input", "freq") if ml.get(k))
        lines += ["", (f"Most time lost at the largest configuration ({_count(ml, unit)} {unit}, "
                      f"{where}): {ml['region']}: {ml['lost_s']:.3f} s above perfect scaling "
                      f"({ml['time_median_s']:.3f} s, efficiency {_f(ml['efficiency'], '.2f')})")]
        if ml.get("wait_inside"):
            w = ml["wait_inside"]
            lines.append(f"  of its {ml['time_median_s']:.3f} s, some thread was waiting in "
                         f"{w['region']} during {w['time_s']:.3f} s")
    lines += ["", "Findings:"]
    lines += [f"  - {f['text']}" for f in rep["findings"]] or ["  none"]
    mo = rep["models"]
    if mo.get("available"):
        what = {"time": "time in s"}.get(mo.get("metric", "time"),
                                         f"{safe_text(mo.get('metric'))} {mo.get('unit', '')}")
        lines += ["", (f"Models (PMNF, {what.rstrip()}, {mo.get('measure', 'median')} over "
                       "repeats, as a function of the thread count; chosen as Extra-P "
                       "chooses with --options allow_negative_exponents=True, a term kept "
                       "only where the noise cannot explain it):")]
        for r, item in mo["models"].items():
            extra = "".join(f"; {_pred(v)} at {v['p']}" for k, v in item.items()
                            if k.startswith("at_"))
            note = f" ({item['note']})" if item.get("note") else ""
            where = ", ".join(str(v) for v in item.get("series", {}).values())
            where = f" [{where}]" if where else ""
            lines.append(f"  {r}{where}: {item['formula']}{extra}{note}"[:240])
            wi = item.get("with_input")
            if wi:
                lines.append(f"    with the input size n: {wi['formula']}"[:240])
    else:
        lines += ["", f"Models: n/a: {mo.get('why')}"]
    return "\n".join(lines)


def _perturbation_lines(pert: dict[str, Any], keys: list[str], unit: str) -> list[str]:
    """The recorder's perturbation per configuration, and its warning."""
    if not pert:
        return []
    if not pert.get("available"):
        return ["", f"The recorder's perturbation: n/a: {pert.get('why')}"]
    lines = ["", (f"The recorder's perturbation (the program's time recorded and run untraced, "
                  f"median s over repeats; over {100 * pert['threshold']:.0f} % marked !):"),
             "  " + "".join(f"{k.upper():<9}" for k in keys)
             + f"{'THR' if unit == 'threads' else unit.upper()[:4]:>4}{'RECORDED':>10}{'UNTRACED':>10}{'PERTURB':>9}"]
    for c in pert["configurations"]:
        lines.append("  " + "".join(f"{str(c.get(k) if c.get(k) is not None else '-')[:8]:<9}"
                                    for k in keys)
                     + f"{_count(c, unit):>4}{c['recorded_s']:>10.4f}{c['untraced_s']:>10.4f}"
                     + f"{100 * c['perturbation']:>+8.1f}%" + (" !" if c["over"] else ""))
    if pert.get("warning"):
        lines.append(f"warning: {pert['warning']}")
    return lines


def _pred(v: dict[str, Any]) -> str:
    """A model's extrapolated figure: a time in s, else the metric's value."""
    return f"{v['time_s']:.3f} s" if "time_s" in v else f"{v['value']:.4g}"


def _count(row: dict[str, Any], unit: str) -> int:
    """The parallelism of ROW in the report's unit (threads, ranks or threads x ranks)."""
    return {"threads": int(row["threads"]), "ranks": int(row.get("ranks") or 1)}.get(
        unit, parallelism(row))


def _columns(rep: dict[str, Any]) -> dict[str, Any]:
    confs = rep["configurations"]
    keys = ["places"]
    if any(c.get("input") is not None for c in confs):
        keys.append("input")
    if any(c.get("freq") is not None for c in confs):
        keys.append("freq")
    head = [(k.upper(), 9) for k in keys]
    head += [("THR", 4)] + ([("RANKS", 6)] if rep["unit"] != "threads" else [])
    head += [("MEDIAN", 9), ("MIN", 8), ("MAX", 8), ("N", 3), ("SPEEDUP", 8), ("EFF", 6),
             ("SERIAL", 8)]
    if rep["energy"]["available"]:
        head += [("ENERGY J", 10), ("EDP J*s", 10)]
    return {"keys": keys, "head": head}


def _serial(x: Any, width: int) -> str:
    """Karp-Flatt's serial fraction in WIDTH columns (aggregate.serial_text)."""
    return f"{serial_text(x):>{width}}"


def _num(x: Any, width: int) -> str:
    """X in WIDTH columns, two decimals, or '>' and the largest that fits."""
    if not finite(x):
        return f"{'-':>{width}}"
    text = f"{x:.2f}"
    if len(text) > width - 1:
        text = ">" + "9" * (width - 5) + ".99" if x > 0 else "<-" + "9" * (width - 6) + ".99"
    return f"{text:>{width}}"


def _row(a: dict[str, Any], cols: dict[str, Any], energy: bool) -> str:
    out = "".join(f"{str(a.get(k) if a.get(k) is not None else '-')[:8]:<9}"
                  for k in cols["keys"])
    out += f"{a['threads']:>4}"
    if any(h == "RANKS" for h, _ in cols["head"]):
        out += f"{a.get('ranks') or 1:>6}"
    out += (f"{a['time_median_s']:>9.4f}{a['time_min_s']:>8.4f}{a['time_max_s']:>8.4f}"
            f"{a['n']:>3}{_num(a['speedup'], 8)}{_num(a['efficiency'], 6)}"
            f"{_serial(a['karp_flatt'], 8)}")
    if energy:
        out += f"{_f(a.get('energy_j'), '10.2f'):>10}{_f(a.get('edp'), '10.3f'):>10}"
    return out
