"""The text form of the report's ``counters`` section (analysis/attribution.py): one table per
process, thread, region and phase, "n/a (why)" where a figure cannot be had."""

from __future__ import annotations

from typing import Any

from snumap_tui.textsafe import safe_text

MAX_EVENT_COLUMNS = 4


def _num(v: float | None) -> str:
    if v is None:
        return "n/a"
    a = abs(v)
    for div, suf in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if a >= div:
            return f"{v / div:.3g}{suf}"
    return f"{v:.3g}" if v != int(v) else f"{int(v)}"


def _ratio(v: float | None, digits: int = 2) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}"


def _table(title: str, rows: list[dict[str, Any]], label: Any, events: list[str],
           top: int) -> list[str]:
    if not rows:
        return []
    shown = events[:MAX_EVENT_COLUMNS]
    head = f"  {'':<26} {'on-CPU s':>9} " + " ".join(f"{e.removeprefix('proc:')[:12]:>12}" for e in shown) + \
        f" {'IPC':>5} {'GHz':>5} {'MPKI':>6} {'faults':>7} {'migr':>5}"
    lines = [title, head]
    for r in rows[:top]:
        lines.append(f"  {safe_text(label(r))[:26]:<26} {r['on_cpu_s']:>9.3f} "
                     + " ".join(f"{_num(r['events'].get(e)):>12}" for e in shown)
                     + f" {_ratio(r.get('ipc')):>5} {_ratio(r.get('ghz')):>5}"
                     f" {_ratio(r.get('mpki'), 1):>6} {_num(r.get('faults')):>7}"
                     f" {_num(r.get('migrations')):>5}")
    if len(rows) > top:
        lines.append(f"  ... {len(rows) - top} more")
    return lines


def format_counters(c: dict[str, Any] | None, top: int = 20) -> list[str]:
    if not c:
        return []
    if not c.get("available"):
        return ["", f"Counters per run interval: n/a ({safe_text(c.get('why', '?'))})"]
    ev = list(c["events"])
    lines = ["", f"Counters per run interval ({safe_text(c.get('source') or '?')}): "
             + ", ".join(safe_text(e) for e in ev)]
    for d in c.get("dropped") or []:
        lines.append(f"  not counted: {safe_text(d)}")
    if c.get("multiplexed"):
        lines.append("  multiplexed (scaled by enabled/running): "
                     + ", ".join(safe_text(e) for e in c["multiplexed"]))
    na: dict[str, str] = {}
    for group in ("threads", "processes", "regions", "phases"):
        for r in c.get(group) or []:
            na.update(r.get("na") or {})
    for key, why in sorted(na.items()):
        lines.append(f"  {key}: n/a ({why})")
    lines += _table("  per process", c.get("processes") or [],
                    lambda r: f"{r['pid']} {r['comm']}", ev, top)
    lines += _table("  per thread", c.get("threads") or [],
                    lambda r: f"{r['tid']} {r['comm']}", ev, top)
    lines += _table("  per region (share of each thread's run intervals inside)",
                    c.get("regions") or [], lambda r: r["name"], ev, top)
    lines += _table("  per phase (markers: every traced interval in its time)",
                    c.get("phases") or [], lambda r: r["name"], ev, top)
    return lines
