"""What the recorder cost, as the recording keeps it (info chunks "recorder steady" and
"recorder cost", written by recording/selfcost.py; docs/format.md "Info chunk"), for
`snumap report` (text and JSON) and record's last line. Recordings made before these chunks
existed have none: ``recorder_cost`` is then None and nothing is printed."""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Mapping
from itertools import pairwise
from typing import Any

STEADY = "recorder steady"
COST = "recorder cost"


def recorder_cost(infos: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The report's ``recorder`` section: when the recorder was steady (and its set-up steps),
    its CPU time over its steady state as % of one core per recorded second, its threads,
    peak RSS, lost events, the CPU per part and the BPF programs' run time (when the kernel
    kept statistics). None without either chunk. A merged job's nodes each have theirs:
    the first node's steady time and the costs summed (a job's recorders together)."""
    steady: Mapping[str, Any] | None = None
    costs: list[Mapping[str, Any]] = []
    for info in infos:
        what = info.get("what")
        if what == STEADY and steady is None:
            steady = info
        elif what == COST:
            costs.append(info)
    if steady is None and not costs:
        return None
    out: dict[str, Any] = {}
    if steady is not None:
        out["steady_ns"] = int(steady.get("t_ns", 0))
        out["setup_steps"] = [[str(n), int(t)] for n, t in steady.get("steps", [])]
    if costs:
        rec_ns = max(int(c.get("recorded_ns", 0)) for c in costs)
        cpu_ns = sum(int(c.get("cpu_ns", 0)) for c in costs)
        by: dict[str, float] = {}
        bpf: dict[str, dict[str, float]] = {}
        for c in costs:
            for k, v in (c.get("cpu_by") or {}).items():
                by[str(k)] = by.get(str(k), 0.0) + int(v) / 1e9
            for k, (calls, ns) in (c.get("bpf") or {}).items():
                b = bpf.setdefault(str(k), {"calls": 0, "run_s": 0.0})
                b["calls"] += int(calls)
                b["run_s"] += int(ns) / 1e9
        for b in bpf.values():
            b["ns_per_call"] = b["run_s"] * 1e9 / b["calls"] if b["calls"] else 0.0
        out.update({
            "recorded_s": rec_ns / 1e9, "cpu_s": cpu_ns / 1e9,
            "cpu_pct": 100.0 * cpu_ns / rec_ns if rec_ns else None,
            "setup_cpu_s": sum(int(c.get("setup_cpu_ns", 0)) for c in costs) / 1e9,
            "writer_s": sum(int(c.get("writer_ns", 0)) for c in costs) / 1e9,
            "threads": max(int(c.get("threads", 0)) for c in costs),
            "rss_peak_bytes": max(int(c.get("rss_peak_bytes", 0)) for c in costs),
            "lost": sum(int(c.get("lost", 0)) for c in costs),
            # the drain thread's wake-ups, where the recording kept them (older ones do not)
            "wakeups": (sum(int(c["wakeups"]) for c in costs if "wakeups" in c)
                        if any("wakeups" in c for c in costs) else None),
            "cpu_by_s": dict(sorted(by.items(), key=lambda kv: -kv[1])),
            "bpf": bpf})
    return out


def cost_line(c: Mapping[str, Any] | None) -> str:
    """``recorder 0.9 % of a core, 4 threads, 58 MiB peak`` (record's last line), or ''."""
    if not c or c.get("cpu_pct") is None:
        return ""
    return (f"recorder {c['cpu_pct']:.2g} % of a core, {c['threads']} threads, "
            f"{c['rss_peak_bytes'] / 2**20:.0f} MiB peak")


def steady_text(steady_ns: int, steps: list[list[Any]]) -> str:
    """When the recorder was steady (a command is held until then), said as what each set-up
    step took: a raw monotonic timestamp meant nothing to a reader (JSON keeps it)."""
    if not steps:
        return f"Steady at {steady_ns} ns (monotonic)."
    parts = [f"{n} {(int(t) - int(p)) / 1e9:.3f} s" for (_, p), (n, t) in pairwise(steps)]
    tail = f": {', '.join(parts)}" if parts else ""
    return (f"Set-up after {steps[0][0]}, until steady "
            f"({(steady_ns - int(steps[0][1])) / 1e9:.3f} s){tail}.")


def format_recorder_cost(r: Mapping[str, Any]) -> list[str]:
    """The report's text section (nothing for a recording without the chunks)."""
    c = r.get("recorder")
    if not c:
        return []
    text: list[str] = []
    if c.get("cpu_pct") is not None:
        text.append(f"CPU {c['cpu_s'] * 1e3:.0f} ms over {c['recorded_s']:.3f} s: "
                    f"{c['cpu_pct']:.2f} % of one core; set-up {c['setup_cpu_s']:.2f} s; "
                    f"{c['threads']} threads; peak RSS {c['rss_peak_bytes'] / 2**20:.0f} MiB; "
                    f"{c['lost']} events lost"
                    + (f"; the drain thread woke {c['wakeups']} times "
                       f"({c['wakeups'] / c['recorded_s']:.1f} a second)"
                       if c.get("wakeups") is not None and c["recorded_s"] else "") + ".")
        text.append("By part: " + "; ".join(f"{k} {v * 1e3:.1f} ms"
                                            for k, v in c["cpu_by_s"].items() if v > 0)
                    + f"; of all that, the store's encoding, compression and writes "
                      f"{c.get('writer_s', 0.0) * 1e3:.1f} ms.")
        for name, b in sorted(c.get("bpf", {}).items(), key=lambda kv: -kv[1]["run_s"]):
            text.append(f"BPF {name}: {b['calls']} calls, {b['ns_per_call']:.0f} ns a call, "
                        f"{b['run_s'] * 1e3:.1f} ms (in the traced tasks' time).")
    if c.get("steady_ns") is not None:
        text.append(steady_text(int(c["steady_ns"]), c.get("setup_steps") or []))
    lines = ["", "Recorder (its own cost while the command ran):"]
    for t in text:
        lines += textwrap.wrap(t, 78, initial_indent="  ", subsequent_indent="    ")
    return lines
