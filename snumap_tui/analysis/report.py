"""`snumap report`: the summary of a recording a user pastes into a ticket, as a dict (for
``--json``) and as text that fits 80 columns.

Energy comes from the recorded RAPL samples: the counters are cumulative microjoules that wrap
at ``max_energy_range_uj`` (Documentation/power/powercap/powercap.rst); the model's
``derive.counters`` turns each pair of samples into the interval's energy, wrap included, the
same way the live view does, and the report sums those.
"""

from __future__ import annotations

import functools
import textwrap
from collections.abc import Iterable
from typing import Any

import numpy as np

from snumap_tui.analysis.attribution import counter_section
from snumap_tui.analysis.attribution_text import format_counters
from snumap_tui.analysis.energy import (
    add_energy,
    domain_name,
    format_domains,
    format_energy,
    mark_unmeasured,
    rapl_steps,
)
from snumap_tui.analysis.findings import findings
from snumap_tui.analysis.intervals import UNTRACED
from snumap_tui.analysis.io_report import format_io, io_findings, io_totals
from snumap_tui.analysis.jobreport import label_nodes, thread_namer
from snumap_tui.analysis.load import Loaded, load
from snumap_tui.analysis.memory import add_memory, format_memory
from snumap_tui.analysis.recorder_cost import format_recorder_cost, recorder_cost
from snumap_tui.analysis.regions import (
    format_regions,
    probe_costs,
    probe_findings,
    probe_section,
    region_findings,
    region_stats,
    thread_waits,
    wait_findings,
)
from snumap_tui.analysis.stats import percentiles
from snumap_tui.analysis.textcols import wrapped
from snumap_tui.model.iorates import IO_KINDS
from snumap_tui.model.sample import Sample
from snumap_tui.textsafe import safe_text
from snumap_tui.topology.model import Topology
from snumap_tui.topology.render import format_cpulist
from snumap_tui.trace.events import KIND_NAMES, MIGRATE, SWITCH

TOP_TASKS = 20


def rapl_energy(samples: Iterable[Sample], topology: Topology) -> list[dict[str, Any]]:
    """Energy (J) and average power (W) per RAPL domain over the recorded samples.

    Each pair of consecutive samples with RAPL readings goes through the model's
    ``derive.counters`` (the live view's own unwrapping of ``energy_uj`` at
    ``max_energy_range_uj``), so the report and ``snumap top`` count the same joules; a domain
    is the energy counter of one object: ``package-1`` is ``energy_package`` on Package 1. A
    domain that never advanced has ``energy_j`` None and ``why`` (energy.mark_unmeasured)."""
    acc: dict[tuple[int, str], dict[str, Any]] = {}
    first: dict[str, int] = {}        # counters in the order they first appear
    for t0, t1, got in rapl_steps(samples, topology):
        for (oid, counter), j in got.items():
            first.setdefault(counter, len(first))
            a = acc.get((oid, counter))
            if a is None:
                a = acc[oid, counter] = {"energy_j": 0.0, "t0": t0}
            a["energy_j"] += j
            a["t1"] = t1
    objs = list(topology)
    out = []
    for oid, counter in sorted(acc, key=lambda k: (k[0], first[k[1]])):
        a = acc[oid, counter]
        obj = objs[oid]
        dt = (a["t1"] - a["t0"]) / 1e9
        out.append({"domain": domain_name(obj, counter), "object": [obj.type, obj.os_index],
                    "energy_j": a["energy_j"], "avg_w": a["energy_j"] / dt if dt > 0 else None})
    return mark_unmeasured(out)


class _Names(dict[int, str]):
    """str(number), kept: a PU's key in each of thousands of threads' per-PU tables."""

    def __missing__(self, key: int) -> str:
        return str(key)


def build_report(rec: Any, loaded: Loaded | None = None) -> dict[str, Any]:
    """Everything `snumap report` prints, as plain JSON-able data."""
    ld = loaded or load(rec, details=True)
    iv = ld.intervals
    topo = ld.topology
    hdr = dict(getattr(rec, "header", {}) or {})
    duration_ns = max(iv.t1 - iv.t0, 0)
    stats = ld.task_stats
    # Work outside the traced tree (a recording of a command): one line, never a task.
    untraced = stats.pop(UNTRACED, None)
    for tid, waits in ld.latency.items():
        if tid in stats:
            stats[tid].latency_ns = waits
    # A tracer of sched_migrate_task (bcc, perf: every exact backend) that saw none for a
    # task saw 0; only /proc polling cannot see migrations at all (null: unknown).
    exact = hdr.get("backend") not in (None, "proc") and not iv.approximate
    if ld.kinds.get(MIGRATE, 0) or exact:
        for ts in stats.values():
            ts.kernel_migrations = 0
    for tid, n in ld.kernel_migrations.items():
        if tid in stats:
            stats[tid].kernel_migrations = n
    tasks_info = getattr(rec, "tasks", {}) or {}
    cpulist = functools.lru_cache(maxsize=4096)(format_cpulist)   # threads share PU sets
    tasks: list[dict[str, Any]] = []
    name = _Names((c, str(c)) for c in iv.cpus.tolist())      # a PU's JSON key, made once
    for ts in sorted(stats.values(), key=lambda s: -s.runtime_ns):
        info = tasks_info.get(ts.tid)
        pid = ts.pid if ts.pid >= 0 else (info.pid if info else -1)
        tasks.append({
            "pid": pid, "tid": ts.tid, "comm": info.comm if info else "?",
            "runtime_s": ts.runtime_ns / 1e9,
            "cpus": {name[c]: ns / 1e9 for c, ns in sorted(ts.cpus.items())},
            "numa": {str(n): ns / 1e9 for n, ns in sorted(ts.numa.items())},
            "migrations": ts.migrations, "numa_migrations": ts.numa_migrations,
            "kernel_migrations": ts.kernel_migrations,
            "switch_ins": ts.switch_ins,
            # run time after switch-ins the kernel did not trace, inferred (events.py)
            "inferred_s": iv.inferred_ns.get(ts.tid, 0) / 1e9,
            "runqueue_latency_us": {k: v / 1e3 for k, v in percentiles(ts.latency_ns).items()},
            "pus": cpulist(tuple(ts.cpus)),
        })
    processes: dict[int, dict[str, Any]] = {}
    for t in tasks:
        # A process is named by its main thread (tid == pid), as ps names it, even when that
        # thread never ran in the recording (a runtime's workers did the work: PID 1's
        # busiest thread "tokio-rt-worker", the process "process_api"); the busiest
        # thread's name only when the recording never named the main thread.
        main = tasks_info.get(t["pid"])
        p = processes.setdefault(t["pid"], {"pid": t["pid"],
                                            "comm": main.comm if main else t["comm"],
                                            "threads": 0, "runtime_s": 0.0, "cpus": {},
                                            "numa": {}, "migrations": 0})
        if t["tid"] == t["pid"]:
            p["comm"] = t["comm"]
        p["threads"] += 1
        p["runtime_s"] += t["runtime_s"]
        p["migrations"] += t["migrations"]
        p.setdefault("_threads", []).append(stats[t["tid"]])
    for p in processes.values():
        # Per PU and per node: the threads' nanoseconds summed, in seconds.
        for k in ("cpus", "numa"):
            keys = np.array([c for ts in p["_threads"] for c in getattr(ts, k)], np.int64)
            ns = np.array([v for ts in p["_threads"] for v in getattr(ts, k).values()],
                          np.int64)
            u, inv = np.unique(keys, return_inverse=True)
            tot = np.zeros(len(u), dtype=np.int64)
            np.add.at(tot, inv, ns)
            p[k] = {str(c): v / 1e9 for c, v in zip(u.tolist(), tot.tolist())}
        del p["_threads"]
        p["pus"] = cpulist(tuple(int(c) for c in p["cpus"]))
    # The samples are decoded once for both energy and I/O, keeping only their readings.
    samples = [Sample(t_ns=s.t_ns, wall_ns=s.wall_ns,
                      readings={k: v for k, v in s.readings.items()
                                if k == "rapl" or k in IO_KINDS})
               for s in rec.samples()] if hasattr(rec, "samples") else []
    busy = iv.busy_ns()
    zeros = np.zeros(len(iv.cpus), dtype=np.int64)
    preempt = ld.preemptions if len(ld.preemptions) == len(iv.cpus) else zeros
    by_other = ld.preemptions_untraced if len(ld.preemptions_untraced) == len(iv.cpus) \
        else zeros
    other_ns = untraced.cpus if untraced else {}
    # preemptions: of a task by a traced one; preemptions_untraced: by a task outside the
    # traced tree (load the recording did not trace).
    cpus = [{"cpu": int(c), "busy_s": int(b) / 1e9,
             "busy_pct": 100.0 * int(b) / duration_ns if duration_ns else None,
             "untraced_s": other_ns.get(int(c), 0) / 1e9,
             "preemptions": int(p), "preemptions_untraced": int(q)}
            for c, b, p, q in zip(iv.cpus.tolist(), busy.tolist(), preempt.tolist(),
                                  by_other.tolist())]
    lost = {str(c): int(n) for c, n in sorted((getattr(rec, "lost", {}) or {}).items())}
    report: dict[str, Any] = {
        "file": getattr(rec, "name", None),
        "host": hdr.get("host") or hdr.get("hostname") or topo.meta.get("HostName"),
        "kernel": hdr.get("kernel") or topo.meta.get("OSRelease"),
        "backend": hdr.get("backend"),
        "approximate": bool(iv.approximate or hdr.get("approximate")),
        "command": hdr.get("command") or hdr.get("argv"),
        "start_wall_ns": hdr.get("start_wall_ns"),
        "duration_s": duration_ns / 1e9,
        "events": ld.events,
        "sched_events": int(ld.kinds.get(SWITCH, 0)),
        "event_kinds": {KIND_NAMES.get(k, str(k)): n for k, n in sorted(ld.kinds.items())},
        "lost_events": int(sum(lost.values())),
        "lost_per_cpu": lost,
        "complete": bool(getattr(rec, "complete", True)),
        "damaged": list(getattr(rec, "damaged", []) or []),
        "processes": sorted(processes.values(), key=lambda p: -p["runtime_s"]),
        "tasks": tasks,
        # Time on the PUs the traced tree used that went to tasks outside it (None when the
        # recording traced every task, or is older than the OUTSIDE marker).
        "untraced": None if untraced is None else {
            "runtime_s": untraced.runtime_ns / 1e9,
            "cpus": {str(c): ns / 1e9 for c, ns in sorted(untraced.cpus.items())},
            "pus": format_cpulist(untraced.cpus)},
        "cpus": cpus,
        "energy": rapl_energy(samples, topo),
        "io": io_totals(samples, topo),
    }
    comm = {int(t): i.comm for t, i in tasks_info.items()}
    regions = rec.regions() if hasattr(rec, "regions") else None
    costs = probe_costs(list(getattr(rec, "infos", []) or []))
    report["regions"] = region_stats(regions, comm, costs, (iv.t0, iv.t1)) \
        if regions is not None else []
    # What the probes cost, as a share of the traced processes' CPU time.
    budget = (hdr.get("regions") or {}).get("budget")
    report["region_probes"] = probe_section(
        costs, sum(float(p["runtime_s"]) for p in report["processes"]) or None,
        float(budget) if isinstance(budget, (int, float)) else None)
    # Records the kernel could not write (ring full), per region name: those regions' counts
    # and times are short by as many calls.
    report["regions_lost"] = dict(getattr(regions, "lost", {}) or {})
    report["waits"] = thread_waits(report["regions"])
    report["regions_info"] = hdr.get("regions")
    report["attached"] = bool(hdr.get("attached"))      # record --pid
    add_memory(report, rec, topo)
    add_energy(report, iv, samples, topo, rec)
    report["damaged"] = list(getattr(rec, "damaged", []) or [])   # regions' chunks too
    report["counters"] = counter_section(rec, comm)
    report["recorder"] = recorder_cost(getattr(rec, "infos", None) or [])
    label_nodes(rec, report)          # a merged job's threads named node:tid from here on
    # The most imbalanced regions first: they answer the question the program was traced for.
    label = thread_namer(rec)
    report["findings"] = (probe_findings(report["region_probes"])
                          + region_findings(report["regions"], name=label)
                          + wait_findings(report["waits"], report["duration_s"], name=label)
                          + findings(report, ld, stats, ld.long_wait_end, ld.long_wait,
                                     lat_tid=ld.long_wait_tid,
                                     nodes=getattr(rec, "nodes", None))
                          + io_findings(report["io"]))
    return report


def _fmt_us(us: float) -> str:
    return f"{us:.0f}" if us >= 10 else f"{us:.2g}"


def _fmt_s(s: float) -> str:
    return f"{s:.3f}" if s < 100 else f"{s:.1f}"


def _fmt_pid(pid: Any) -> str:
    """A pid for the text form: the JSON's -1 (or null) means the recording never named the
    thread's process (a thread seen only in switch records); in text "-1" reads as a real
    pid, so it shows as "?", as the unknown comm does."""
    return "?" if pid is None or int(pid) < 0 else str(pid)


def format_report(r: dict[str, Any], top: int = TOP_TASKS, width: int = 80) -> str:
    """The text form: header, findings, processes, threads, PUs, energy (80 columns; the
    region and counter tables' names as wide as WIDTH allows, textcols.output_width)."""
    # Names, commands and labels come from the traced machine: escaped (textsafe) before
    # they are cut and aligned.
    lines = [f"snumap report: {safe_text(r.get('file') or '')}",
             (f"host {safe_text(r.get('host') or '?')}  kernel {safe_text(r.get('kernel') or '?')}  "
             f"backend {safe_text(r.get('backend') or '?')}{' (approximate: /proc polling)' if r['approximate'] else ''}"),
             f"duration {r['duration_s']:.3f} s  events {r['events']}  "
             f"sched_switch {r['sched_events']}  lost {r['lost_events']}"
             + ("" if r["complete"] else "  (recording was not closed cleanly)")]
    for d in r["damaged"]:
        lines.append(f"  damaged: {safe_text(d)}")
    if r.get("command"):
        cmd = r["command"]
        text = " ".join(cmd) if isinstance(cmd, list) else str(cmd)
        text = safe_text(" ".join(text.split()))
        lines.append(("command " + text)[:80] if len(text) < 72 else f"command {text[:69]}...")
    lines += ["", "Findings:"]
    for f in r["findings"]:
        lines += textwrap.wrap(safe_text(f["text"]), 78, initial_indent="  - ", subsequent_indent="    ")
    if not r["findings"]:
        lines.append("  (none)")
    lines += ["", "Processes (by run time):",
              f"  {'PID':>7} {'COMM':<16} {'THR':>4} {'RUN s':>9} {'MIGR':>6}  PUs"]
    for p in r["processes"][:top]:
        label = safe_text(p.get('label') or _fmt_pid(p['pid']))
        lines.append(f"  {label:>7} {safe_text(p['comm'])[:16]:<16} {p['threads']:>4} "
                     f"{_fmt_s(p['runtime_s']):>9} {p['migrations']:>6}  {p['pus'][:30]}")
    lines += ["", "Threads (by run time; run-queue latency wakeup->switch-in, us):",
              (f"  {'TID':>7} {'COMM':<15} {'RUN s':>8} {'MIGR':>5} {'XNUMA':>5} "
              f"{'p50':>7} {'p99':>8}  PUs")]
    for t in r["tasks"][:top]:
        lat = t["runqueue_latency_us"]
        p50 = _fmt_us(lat["p50"]) if lat else "-"
        p99 = _fmt_us(lat["p99"]) if lat else "-"
        label = safe_text(t.get('label') or t['tid'])
        lines.append(f"  {label:>7} {safe_text(t['comm'])[:15]:<15} {_fmt_s(t['runtime_s']):>8} "
                     f"{t['migrations']:>5} {t['numa_migrations']:>5} {p50:>7} {p99:>8}  "
                     f"{t['pus'][:22]}")
        if len(t["numa"]) > 1:
            per = "  ".join(f"node {n}: {_fmt_s(s)} s" for n, s in t["numa"].items())
            lines.append(f"  {'':>7} {per}"[:80])
    if len(r["tasks"]) > top:
        lines.append(f"  ... {len(r['tasks']) - top} more threads (--json has all)")
    inferred = [t for t in r["tasks"] if t.get("inferred_s")]
    if inferred:
        # wrapped, not cut: at [:80] the first line lost "threads," to "th" at any count
        lines += wrapped(f"RUN s includes time after switch-ins the kernel did not trace, "
                         f"inferred: {len(inferred)} threads, "
                         f"{sum(t['inferred_s'] for t in inferred):.6f} s in all "
                         "(--json: inferred_s per thread)")
    u = r.get("untraced")
    if u:
        lines.append(f"  {'':>7} {'other':<15} {_fmt_s(u['runtime_s']):>8}  "
                     f"(not traced: other tasks on PUs {u['pus']})"[:80])
    if r.get("regions") or (r.get("regions_info") or {}).get("problems") or \
            (r.get("attached") and r.get("regions_info")):
        lines += format_regions(r, top, width)
    lines += format_counters(r.get("counters"), top, width)
    lines += ["", "PUs (busy % of the recording):"]
    cells = [f"{c['cpu']:>4}:{c['busy_pct'] or 0:5.1f}%" for c in r["cpus"]]
    for i in range(0, len(cells), 7):
        lines.append("  " + " ".join(cells[i:i + 7]))
    lines += ["", "Energy (RAPL):"]
    if r["energy"]:
        lines += format_domains(r["energy"])
    else:
        lines.append("  not recorded (no RAPL on this machine or no permission to read it)")
    lines += format_energy(r, top)
    lines += format_memory(r, top)
    lines += format_io(r.get("io") or [])
    lines += format_recorder_cost(r)
    return "\n".join(lines) + "\n"
