"""The I/O part of `snumap report`: per device, what went through it during the recording.

Each pair of consecutive samples with I/O readings goes through the model's
``iorates.device_rows`` (the live view's own rates, counter resets and saturated counters
unknown rather than 0), so the report and ``snumap top`` agree; totals are rate x interval
summed, peaks the highest interval's rate.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from snumap_tui.model.iorates import IO_KINDS, device_rows
from snumap_tui.model.sample import Sample
from snumap_tui.textsafe import safe_text
from snumap_tui.topology.model import Topology

DISK_BUSY_PCT = 90.0     # the catalogue's disk_util_pct warning threshold


def io_totals(samples: Iterable[Sample], topology: Topology) -> list[dict[str, Any]]:
    """Per physical device: kind, name, NUMA node, totals in and out (bytes), mean and peak
    rates (bytes/s), and for disks the mean and peak utilisation (%)."""
    acc: dict[tuple[str, str], dict[str, Any]] = {}
    prev: Sample | None = None
    for s in samples:
        io = {k: v for k, v in s.readings.items() if k in IO_KINDS}
        if not io:
            continue
        cur = Sample(t_ns=s.t_ns, wall_ns=s.wall_ns, readings=io)
        if prev is not None:
            dt = (cur.t_ns - prev.t_ns) / 1e9
            for r in device_rows(prev, cur, topology):
                if not r.physical or r.kind == "gpu":
                    continue
                a = acc.setdefault((r.kind, r.name), {
                    "kind": r.kind, "name": r.name, "numa": r.numa, "in_bytes": 0.0,
                    "out_bytes": 0.0, "seconds": 0.0, "in_peak": 0.0, "out_peak": 0.0,
                    "busy_s": 0.0, "util_peak": None})
                if r.rx_bps is None or r.tx_bps is None:
                    continue
                a["seconds"] += dt
                a["in_bytes"] += r.rx_bps * dt
                a["out_bytes"] += r.tx_bps * dt
                a["in_peak"] = max(a["in_peak"], r.rx_bps)
                a["out_peak"] = max(a["out_peak"], r.tx_bps)
                if r.util_pct is not None:
                    a["busy_s"] += r.util_pct / 100.0 * dt
                    a["util_peak"] = max(a["util_peak"] or 0.0, r.util_pct)
        prev = cur
    out = []
    for a in acc.values():
        t = a.pop("seconds")
        busy = a.pop("busy_s")
        a["in_avg"] = a["in_bytes"] / t if t > 0 else None
        a["out_avg"] = a["out_bytes"] / t if t > 0 else None
        a["util_avg"] = 100.0 * busy / t if a["kind"] == "disk" and t > 0 else None
        out.append(a)
    return out


def io_findings(io: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A finding for every disk busy over the threshold on average (I/O bound)."""
    out = []
    for d in io:
        u = d.get("util_avg")
        if d["kind"] == "disk" and u is not None and u > DISK_BUSY_PCT:
            where = f" (NUMA node {d['numa']})" if d.get("numa") is not None else ""
            out.append({"kind": "disk_busy", "level": "warn", "device": d["name"],
                        "text": f"disk {d['name']}{where} was busy {u:.0f} % of the "
                                "recording: the run was bound by its I/O"})
    return out


def _b(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, scale in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return f"{n:.0f}B"


def format_io(io: list[dict[str, Any]]) -> list[str]:
    """The report's I/O lines (80 columns)."""
    lines = ["", "I/O (per device: total, mean and peak rate):"]
    if not io:
        lines.append("  not recorded (no I/O sources in this recording)")
        return lines
    words = {"net": ("in", "out"), "ib": ("in", "out"), "disk": ("read", "written")}
    for d in io:
        a, b = words.get(d["kind"], ("in", "out"))
        where = f"NUMA {d['numa']}" if d.get("numa") is not None else ""
        lines.append(f"  {safe_text(d['name'])[:12]:<12} {d['kind']:<4} {where:<7} "
                     f"{a} {_b(d['in_bytes'])} ({_b(d['in_avg'])}/s, max {_b(d['in_peak'])}/s)"
                     f"  {b} {_b(d['out_bytes'])}"[:80])
        if d["kind"] == "disk" and d.get("util_avg") is not None:
            lines.append(f"  {'':<12} {'':<4} {'':<7} busy {d['util_avg']:.0f} % "
                         f"(max {d['util_peak'] or 0:.0f} %), {b} max {_b(d['out_peak'])}/s")
    return lines
