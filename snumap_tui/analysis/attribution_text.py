"""The text form of the report's ``counters`` section (analysis/attribution.py): one table per
process, thread, region and phase, "n/a (why)" where a figure cannot be had; names as wide as
the output allows (analysis/textcols.py: the terminal's width, unbounded when piped), times
with their unit, counts as integers (the first three events get columns, all of them are in
--json)."""

from __future__ import annotations

from typing import Any

from snumap_tui.analysis.textcols import (
    count_text,
    event_head,
    event_text,
    fit_name,
    wrapped,
)
from snumap_tui.textsafe import safe_text

EVENT_COLUMNS = 3
WIDTH = 80


def _num(v: float | None) -> str:
    return "n/a" if v is None else count_text(v)


def _ratio(v: float | None, digits: int = 2) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}"


LABEL_MIN = 18


def _table(title: str, rows: list[dict[str, Any]], label: Any, events: list[str],
           top: int, rest: dict[str, Any] | None = None, width: int = WIDTH) -> list[str]:
    """One table: a label column as wide as its longest label allows within WIDTH (cut in
    the middle past that, textcols.fit_name), a column per shown event as wide as its name,
    figures with their units (textcols.event_text)."""
    if not rows:
        return []
    shown = events[:EVENT_COLUMNS]
    heads = [event_head(e) for e in shown]
    cols = [max(len(h), 9) for h in heads]
    fixed = 2 + 9 + sum(c + 1 for c in cols) + 5 + 5 + 6 + 5
    labels = [safe_text(label(r)) for r in rows[:top]]
    lw = max(LABEL_MIN, min(max(len(x) for x in labels), max(width - fixed, LABEL_MIN)))
    head = (f"  {'':<{lw}} {'on-CPU s':>8}" + "".join(f" {h:>{c}}" for h, c in zip(heads, cols))
            + f" {'IPC':>4} {'GHz':>4} {'MPKI':>5} {'migr':>4}")
    lines = [title, head]
    for r, name in zip(rows[:top], labels):
        lines.append(f"  {fit_name(name, lw):<{lw}} {r['on_cpu_s']:>8.3f}"
                     + "".join(f" {event_text(e, r['events'].get(e)):>{c}}"
                               for e, c in zip(shown, cols))
                     + f" {_ratio(r.get('ipc')):>4} {_ratio(r.get('ghz')):>4}"
                     f" {_ratio(r.get('mpki'), 1):>5} {_num(r.get('migrations')):>4}")
    if len(rows) > top:
        lines.append(f"  ... {len(rows) - top} more")
    if rest:        # past the report's cap (caps.MAX_ROWS): counted and summed
        lines += wrapped(f"... and {rest['count']} more, not listed (--json neither): "
                          f"{rest['on_cpu_s']:.3f} s on-CPU together")
    return lines


def format_counters(c: dict[str, Any] | None, top: int = 20, width: int = WIDTH
                    ) -> list[str]:
    """The section; WIDTH: the columns the tables may take (textcols.output_width)."""
    if not c:
        return []
    if not c.get("available"):
        return ["", *wrapped(f"Counters per thread: n/a ({safe_text(c.get('why', '?'))})",
                              "")]
    ev = list(c["events"])
    lines = ["", "Counters per thread, region and phase:"]
    lines += wrapped("events: " + ", ".join(safe_text(e) for e in ev))
    lines += wrapped(f"source: {safe_text(c.get('source') or '?')}")
    if len(ev) > EVENT_COLUMNS:
        lines += wrapped(f"(columns for the first {EVENT_COLUMNS}; all in --json)")
    for d in c.get("dropped") or []:
        lines += wrapped(f"not counted: {safe_text(d)}")
    if c.get("multiplexed"):
        lines += wrapped("multiplexed (scaled by enabled/running): "
                          + ", ".join(safe_text(e) for e in c["multiplexed"]))
    na: dict[str, str] = {}
    for group in ("threads", "processes", "regions", "phases"):
        for r in c.get(group) or []:
            na.update(r.get("na") or {})
    for key, why in sorted(na.items()):
        lines += wrapped(f"{key}: n/a ({why})")
    lines += _table("  per process", c.get("processes") or [],
                    lambda r: f"{r.get('label') or r['pid']} {r['comm']}", ev, top,
                    c.get("processes_left_out"), width)
    lines += _table("  per thread", c.get("threads") or [],
                    lambda r: f"{r.get('label') or r['tid']} {r['comm']}", ev, top,
                    c.get("threads_left_out"), width)
    lines += _table("  per region (share of each thread's run intervals inside)",
                    c.get("regions") or [], lambda r: r["name"], ev, top, width=width)
    lines += _table("  per phase (markers: every traced interval in its time)",
                    c.get("phases") or [], lambda r: r["name"], ev, top, width=width)
    return lines
