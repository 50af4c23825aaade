"""A study's counter and memory figures per region: what `snumap report` attributes to each
region of one recording (analysis/attribution.py: on-CPU time, every ``--events`` event summed
over the region's threads, IPC, GHz, MPKI, LLC miss ratio, faults; analysis/memory.py: the
high-water mark of the processes' memory while it ran), kept per run, then per configuration
over the repeats.

Per run, a region's events are its totals (over all its threads and instances), exactly as the
recording's report gives them. Per configuration, each total is the median over the repeats;
the ratios (IPC, GHz, MPKI, ...) are attribution's formulas applied to those median totals,
never medians of ratios; ``events_per_s`` is each median total per second of the region's
median time (its wall time, counted once where its threads overlap): a rate that stays flat
when a region scales and work is constant, and grows with the threads when work is added.
Where a figure cannot be had, ``why`` says so (no ``--events``, no traced process, a region
shorter than the memory sampling interval, a run measured by an older snumap).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any

import numpy as np

from snumap_tui.analysis.textcols import event_text

OLD_RUN = "measured by a snumap without per-region counters and memory (record it again)"
# Ratio keys attribution's ``derived`` computes, in the order the exports list them.
RATIOS = ("ipc", "ghz", "mpki", "llc_miss_ratio")
FLAT = ("on_cpu_s", *RATIOS, "faults", "mem_rss_max_bytes", "counters_why", "memory_why")


# ---- one run ----------------------------------------------------------------------------------

def run_figures(rec: Any, window: tuple[int, int], names: Iterable[str]
                ) -> dict[str, dict[str, Any]]:
    """Per region name of NAMES and for the whole program (``PROGRAM``): {"counters": ...,
    "memory": ...} of the recording REC, whose command ran over WINDOW (ns)."""
    from snumap_tui.study.aggregate import PROGRAM

    names = list(names)
    try:
        reg = rec.regions()
    except Exception:  # noqa: BLE001 - no region chunk: the program's figures only
        reg = None
    out: dict[str, dict[str, Any]] = {n: {} for n in [PROGRAM, *names]}
    for key, part in (("counters", lambda: _counters(rec, names)),
                      ("memory", lambda: _memory(rec, reg, window, names))):
        try:
            got = part()
        except Exception as exc:  # noqa: BLE001 - damaged data: this figure n/a, the run kept
            got = {n: {"why": f"{key} unreadable ({type(exc).__name__})"} for n in out}
        for n, figs in out.items():
            figs[key] = got[n]
    return out


def _counters(rec: Any, names: list[str]) -> dict[str, dict[str, Any]]:
    from snumap_tui.analysis.attribution import counter_section, derived
    from snumap_tui.study.aggregate import PROGRAM

    sec = counter_section(rec)
    if not sec.get("available"):
        text = str(sec.get("why")).replace("snumap record --events", "snumap scale --events")
        na = {"why": text, "dropped": sec.get("dropped") or []}
        return {n: dict(na) for n in [PROGRAM, *names]}
    events = list(sec["events"])
    flags = {"multiplexed": sec.get("multiplexed") or [], "dropped": sec.get("dropped") or []}
    out: dict[str, dict[str, Any]] = {}
    by_name = {r["name"]: r for r in [*sec.get("regions", []), *sec.get("phases", [])]}
    for n in names:
        r = by_name.get(n)
        out[n] = ({"why": "no counted run interval inside it"} if r is None else
                  {k: v for k, v in r.items() if k not in ("name", "kind")} | flags)
    procs = sec.get("processes") or []
    sums = np.array([sum(p["events"].get(e, 0.0) for p in procs) for e in events])
    on_cpu = sum(p["on_cpu_s"] for p in procs)
    mig = [p.get("migrations") for p in procs]
    figs, why = derived(events, sums, int(on_cpu * 1e9),
                        None if None in mig or not mig else int(sum(mig)))
    prog = {"on_cpu_s": on_cpu, "processes": len(procs), "threads": len(sec.get("threads") or []),
            "events": dict(zip(events, sums.tolist())), **figs, **flags}
    if why:
        prog["na"] = why
    out[PROGRAM] = prog
    return out


def _memory(rec: Any, reg: Any, window: tuple[int, int], names: list[str]
            ) -> dict[str, dict[str, Any]]:
    from snumap_tui.analysis.memory import (
        recording_memory,
        region_memory,
        region_windows,
        timelines,
        topology_nodes,
    )
    from snumap_tui.study.aggregate import PROGRAM

    rows, why = recording_memory(rec, rec.topology)
    if why:
        return {n: {"why": why} for n in [PROGRAM, *names]}
    tls = timelines(rows, topology_nodes(rec.topology))
    wins = region_windows(reg) if reg is not None and len(reg.rows) else {}
    out = {n: region_memory([(p, a, b) for p, _t, a, b in wins.get(n, [])], tls)
           for n in names}
    out[PROGRAM] = region_memory([(p, *window) for p in tls], tls)
    return out


# ---- over repeats -----------------------------------------------------------------------------

def combine(rows: list[dict[str, Any]], time_s: float) -> dict[str, Any]:
    """The ``counters`` and ``memory`` of one region and configuration from its runs' ROWS
    (medians over repeats; see the module's docstring), TIME_S its median time."""
    from snumap_tui.analysis.attribution import derived

    cs = [r["counters"] for r in rows if isinstance(r.get("counters"), dict)
          and "events" in r["counters"]]
    out: dict[str, Any] = {}
    if not cs:
        out["counters"] = {"why": _why(rows, "counters")}
    else:
        events = list(dict.fromkeys(e for c in cs for e in c["events"]))
        sums = np.array([_median([c["events"].get(e) for c in cs]) for e in events])
        on_cpu = _median([c.get("on_cpu_s") for c in cs])
        figs, why = derived(events, sums, int(on_cpu * 1e9), None)
        figs.pop("migrations", None)
        c: dict[str, Any] = {"n": len(cs), "on_cpu_s": on_cpu,
                             "events": dict(zip(events, sums.tolist())),
                             "events_per_s": {e: (v / time_s if time_s > 0 else None)
                                              for e, v in zip(events, sums.tolist())},
                             **figs}
        for k in ("multiplexed", "dropped"):
            c[k] = sorted({e for x in cs for e in x.get(k) or []})
        if why:
            c["na"] = why
        out["counters"] = c
    ms = [r["memory"] for r in rows if isinstance(r.get("memory"), dict)
          and r["memory"].get("samples")]
    if not ms:
        out["memory"] = {"why": _why(rows, "memory")}
    else:
        nodes = sorted({n for m in ms for n in m.get("nodes", {})}, key=str)
        out["memory"] = {"n": len(ms),
                         "rss_max_bytes": _median([m.get("rss_bytes") for m in ms]),
                         "nodes": {n: _median([m["nodes"].get(n) for m in ms]) for n in nodes}}
    return out


def _median(values: list[Any]) -> float:
    v = [float(x) for x in values if x is not None]
    return statistics.median(v) if v else 0.0


def _why(rows: list[dict[str, Any]], key: str) -> str:
    for r in rows:
        d = r.get(key)
        if isinstance(d, dict) and d.get("why"):
            return str(d["why"])
    return OLD_RUN


# ---- flat columns (exports) -------------------------------------------------------------------

def event_names(rows: Iterable[dict[str, Any]]) -> list[str]:
    """Every event counted in ROWS, in the order first seen."""
    seen: dict[str, None] = {}
    for r in rows:
        for e in ((r.get("counters") or {}).get("events") or {}):
            seen.setdefault(e, None)
    return list(seen)


def flat(row: dict[str, Any], events: list[str]) -> dict[str, Any]:
    """One measurement's figures as export columns: FLAT, then ``event:NAME`` per event."""
    c: dict[str, Any] = row["counters"] if isinstance(row.get("counters"), dict) else \
        {"why": OLD_RUN}
    m: dict[str, Any] = row["memory"] if isinstance(row.get("memory"), dict) else \
        {"why": OLD_RUN}
    out: dict[str, Any] = {k: c.get(k) for k in ("on_cpu_s", *RATIOS, "faults")}
    out["mem_rss_max_bytes"] = m.get("rss_bytes") if m.get("samples") else None
    out["counters_why"] = c.get("why")
    out["memory_why"] = m.get("why")
    ev = c.get("events") or {}
    out.update({f"event:{e}": ev.get(e) for e in events})
    return out


# ---- text -------------------------------------------------------------------------------------

def _event(e: str, v: Any) -> str:
    """An event's total: a time with its unit (task-clock), else an integer count."""
    return "-" if v is None else event_text(e, float(v))


def format_figures(regions: list[dict[str, Any]], keys: list[str], top: int = 30,
                   max_events: int = 4) -> list[str]:
    """The report's text section: per region (as the time table's tree) and configuration,
    on-CPU time, IPC, GHz, MPKI, each event's total and the memory high-water mark."""
    from snumap_tui.analysis.textcols import event_head
    from snumap_tui.textsafe import safe_text

    rows = [a for node in regions for a in node["rows"]]
    ew: list[int] = []
    if not rows:
        return []
    counted = [a["counters"] for a in rows if "events" in (a.get("counters") or {})]
    lines = ["", ("Counters and memory per region and configuration (median over repeats; "
                  "events: totals over the region's threads, /s in --json; IPC, GHz, MPKI of "
                  "those totals; MEM: RSS high-water mark, MiB):")]
    if not counted:
        lines.append(f"  counters: n/a ({safe_text(_why(rows, 'counters'))})"[:160])
    events = event_names(rows)
    shown = events[:max_events]
    head = "".join(f"{k.upper():<9}" for k in keys) + f"{'THR':>4}"
    if counted:
        head += f"{'ON-CPU s':>9}{'IPC':>6}{'GHz':>6}{'MPKI':>6}"
        ew = [max(len(event_head(safe_text(e))), 12) + 1 for e in shown]    # never cut
        head += "".join(f"{event_head(safe_text(e)):>{w}}" for e, w in zip(shown, ew))
    head += f"{'MEM':>8}"
    whys: dict[str, str] = {}
    for node in regions[:top]:
        ind = "  " * node["depth"]
        tag = " [wait]" if node.get("wait") else ""
        lines += [f"{ind}{safe_text(node['region'])}{tag}", f"{ind}  {head}"]
        for a in node["rows"]:
            c, m = a.get("counters") or {}, a.get("memory") or {}
            out = "".join(f"{str(a.get(k) if a.get(k) is not None else '-')[:8]:<9}"
                          for k in keys) + f"{a['threads']:>4}"
            if counted:
                if "events" in c:
                    out += (f"{c['on_cpu_s']:>9.3f}{_f(c.get('ipc'), 6, '.2f')}"
                            f"{_f(c.get('ghz'), 6, '.2f')}{_f(c.get('mpki'), 6, '.1f')}")
                    out += "".join(f"{_event(e, c['events'].get(e)):>{w}}"
                                   for e, w in zip(shown, ew))
                    for k, why in (c.get("na") or {}).items():
                        if k in ("ipc", "ghz", "mpki"):
                            whys.setdefault(k.upper().replace("GHZ", "GHz"), why)
                else:
                    out += f"{'n/a':>9}" + " " * (18 + sum(ew))
                    whys.setdefault("counters", str(c.get("why")))
            if "rss_max_bytes" in m:
                out += f"{m['rss_max_bytes'] / (1 << 20):>8.1f}"
            else:
                out += f"{'n/a':>8}"
                whys.setdefault("memory", str(m.get("why")))
            lines.append(f"{ind}  {out}".rstrip())
    for d in sorted({d for c in counted for d in c.get("dropped") or []}):
        lines.append(f"  not counted: {safe_text(d)}"[:160])
    if len(events) > len(shown):
        lines.append(f"  ({len(events) - len(shown)} more events in --json and the exports)")
    for k, why in whys.items():
        lines.append(f"  {k} n/a: {safe_text(why)}"[:160])
    return lines


def _f(x: Any, width: int, fmt: str) -> str:
    return f"{format(x, fmt) if isinstance(x, (int, float)) else '-':>{width}}"


# ---- another figure than time for the models ---------------------------------------------------

#: ``scale report --metric`` names besides the events: the figure's place in an aggregated row.
METRICS = {"time": ("time_median_s",), "energy": ("energy_j",),
           "on_cpu_s": ("counters", "on_cpu_s"), "ipc": ("counters", "ipc"),
           "ghz": ("counters", "ghz"), "mpki": ("counters", "mpki"),
           "llc_miss_ratio": ("counters", "llc_miss_ratio"), "faults": ("counters", "faults"),
           "memory": ("memory", "rss_max_bytes")}
UNITS = {"time": "s", "energy": "J", "on_cpu_s": "s", "memory": "bytes"}


def metric_value(row: dict[str, Any], name: str) -> float | None:
    """The figure NAME (a METRICS key, else an event counted: its median total) of an
    aggregated row, None where it has none."""
    path = METRICS.get(name)
    v: Any = row
    for k in path or ("counters", "events", name):
        v = v.get(k) if isinstance(v, dict) else None
    return float(v) if isinstance(v, (int, float)) else None


def check_metric(name: str, agg: list[dict[str, Any]]) -> None:
    """SnumapError (one line) for a --metric that is neither a figure nor a counted event."""
    from snumap_tui.errors import SnumapError
    from snumap_tui.textsafe import safe_text

    events = event_names(agg)
    if name in METRICS or name in events:
        return
    raise SnumapError(f"--metric {safe_text(name)[:60]}: choose from "
                      f"{', '.join([*METRICS, *events])[:300]}")
