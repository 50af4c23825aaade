"""The job part of `snumap report`: per node and per MPI rank, and how unequal they are.

Built on the report's per-process run times (analysis/report.py) and the recording's
``job processes`` info chunks (recording/job.py), which say for each process of the job
its node, job step and MPI rank. Imbalance is given two ways: ``max/mean`` of the run times and
the percent imbalance ``(max - mean) / max`` (how much of the slowest one's time the others
would save if the work were spread evenly), for nodes and for ranks.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from typing import Any

from snumap_tui.textsafe import safe_text


def _imbalance(values: list[float]) -> dict[str, float] | None:
    if len(values) < 2 or max(values) <= 0:
        return None
    mean = sum(values) / len(values)
    return {"max_over_mean": max(values) / mean if mean else float("inf"),
            "percent": 100.0 * (max(values) - mean) / max(values),
            "min_s": min(values), "max_s": max(values), "mean_s": mean}


def job_processes(rec: Any) -> list[dict[str, Any]]:
    """Every process of the job the recording knows: {pid (merged id), local_pid, node, step,
    rank, rank_var, comm}; the first time a pid was seen wins."""
    out: dict[int, dict[str, Any]] = {}
    default_node = str(rec.header.get("node") or rec.header.get("host") or "?")
    for info in getattr(rec, "infos", []):
        if info.get("what") != "job processes":
            continue
        cols = list(info.get("columns", []))
        for row in info.get("rows", []):
            d = dict(zip(cols, row))
            pid = int(d.get("pid", -1))
            if pid in out:
                continue
            rank = int(d.get("rank", -1))
            out[pid] = {"pid": pid, "local_pid": int(d.get("local_pid", pid)),
                        "node": str(d.get("node") or info.get("node") or default_node),
                        "step": str(d.get("step", "")), "comm": str(d.get("comm", "")),
                        "rank": rank if rank >= 0 else None,
                        "rank_var": d.get("rank_var") or None}
    return list(out.values())


def thread_namer(rec: Any) -> Callable[[int], str]:
    """How a report names a thread (or process) id: ``node:tid`` in a merged job (its own
    tid on its own node), else the id."""
    table = getattr(rec, "nodes", None)
    if table is None or not table.nodes:
        return str
    return table.label


def label_nodes(rec: Any, report: dict[str, Any]) -> None:
    """In a merged job, name each process and thread by its node: ``node``, its own
    ``local_pid``/``local_tid``, and ``label`` ("n2:1234", what the text form shows); the
    counters section's processes and threads, the waits and each region's threads too."""
    table = getattr(rec, "nodes", None)
    if table is None or not table.nodes:
        return
    counters = report.get("counters") or {}
    groups = [(report.get("processes", []), "pid"), (report.get("tasks", []), "tid"),
              (counters.get("processes") or [], "pid"), (counters.get("threads") or [], "tid"),
              (report.get("waits") or [], "tid")]
    groups += [(r.get("threads") or [], "tid") for r in report.get("regions") or []]
    for rows, field in groups:
        for row in rows:
            node, local = table.split_tid(int(row[field]))
            if node is not None:
                row["node"], row[f"local_{field}"] = node, local
                row["label"] = f"{node}:{local}"


def job_section(rec: Any, report: dict[str, Any]) -> dict[str, Any] | None:
    """The ``job`` key of the report, or None for a recording of no job and of one node."""
    table = getattr(rec, "nodes", None)
    procs = job_processes(rec)
    if table is None and not procs:
        return None
    names = table.names if table is not None else [
        str(rec.header.get("node") or rec.header.get("host") or "?")]
    runtime = {int(p["pid"]): float(p["runtime_s"]) for p in report.get("processes", [])}
    pus = {int(p["pid"]): p.get("pus", "") for p in report.get("processes", [])}

    def node_of_pid(pid: int) -> str:
        if table is None:
            return names[0]
        k = table.node_of_tid(pid)
        return names[k] if k is not None else "?"

    def node_of_cpu(cpu: int) -> str:
        if table is None:
            return names[0]
        k = table.node_of_cpu(cpu)
        return names[k] if k is not None else "?"

    nodes: dict[str, dict[str, Any]] = {n: {"node": n, "runtime_s": 0.0, "processes": 0,
                                            "ranks": 0, "busy": []} for n in names}
    for pid, rt in runtime.items():
        d = nodes.setdefault(node_of_pid(pid), {"node": node_of_pid(pid), "runtime_s": 0.0,
                                                "processes": 0, "ranks": 0, "busy": []})
        d["runtime_s"] += rt
        d["processes"] += 1
    for c in report.get("cpus", []):
        # busy_pct is None for a recording of no duration (cut short): unknown, not 0
        nodes.setdefault(node_of_cpu(int(c["cpu"])), {"node": node_of_cpu(int(c["cpu"])),
                         "runtime_s": 0.0, "processes": 0, "ranks": 0, "busy": []}
                         )["busy"].append(c.get("busy_pct"))
    # One row per rank of a step: a rank's children (a launcher's helper, a forked tool)
    # inherit its rank variable; their time is the rank's, its pid the busiest one's.
    by_rank: dict[tuple[str, int, str], dict[str, Any]] = {}
    for p in procs:
        if p["rank"] is None:
            continue
        rt = runtime.get(p["pid"], 0.0)
        key = (p["step"], p["rank"], p["node"])
        row = by_rank.get(key)
        if row is None:
            by_rank[key] = {**p, "runtime_s": rt, "pus": pus.get(p["pid"], ""),
                            "processes": 1, "_best": rt}
            if p["node"] in nodes:
                nodes[p["node"]]["ranks"] += 1
            continue
        row["runtime_s"] += rt
        row["processes"] += 1
        if rt > row["_best"]:
            row.update(pid=p["pid"], local_pid=p["local_pid"], comm=p["comm"],
                       pus=pus.get(p["pid"], ""), _best=rt)
    ranks = [{k: v for k, v in r.items() if k != "_best"} for r in by_rank.values()]
    ranks.sort(key=lambda r: (r["step"], r["rank"], r["node"]))
    node_rows = []
    entries = {str(n.get("node")): n for n in (table.nodes if table is not None else [])}
    for name, d in nodes.items():
        busy = d.pop("busy")
        e = entries.get(name, {})
        known = [float(b) for b in busy if b is not None]
        node_rows.append({**d, "busy_pct": sum(known) / len(known) if known else None,
                          "pus": len(busy), "align_error_ns": e.get("align_error_ns"),
                          "align_how": e.get("align_how"), "shift_ns": e.get("shift_ns", 0)})
    job = rec.header.get("job") or {}
    return {"id": job.get("id"), "system": job.get("system"), "nodes": node_rows,
            "ranks": ranks,
            "imbalance": {"nodes": _imbalance([n["runtime_s"] for n in node_rows]),
                          "ranks": _imbalance([r["runtime_s"] for r in ranks])}}


def _fmt_err(ns: Any) -> str:
    if ns is None:
        return "unknown"
    return f"±{ns / 1e3:.1f} us" if ns < 1e6 else f"±{ns / 1e6:.2f} ms"


def _fmt_imb(d: dict[str, float] | None) -> str:
    if not d:
        return "n/a (fewer than 2)"
    return (f"max/mean {d['max_over_mean']:.2f}, {d['percent']:.0f}% "
            f"(min {d['min_s']:.3f} s, max {d['max_s']:.3f} s)")


def format_job(j: dict[str, Any]) -> str:
    title = f"Job {safe_text(j['id'])}" if j.get("id") else "Job"
    lines = [f"{title}: {len(j['nodes'])} node(s), {len(j['ranks'])} rank(s)", "",
             "Nodes:",
             f"  {'NODE':<14}{'PUS':>4}{'BUSY%':>7}{'PROCS':>6}{'RANKS':>6}{'RUN s':>9}  ALIGN"]
    for n in j["nodes"]:
        busy = f"{n['busy_pct']:.1f}" if n["busy_pct"] is not None else "-"
        lines.append(f"  {safe_text(n['node']):<14}{n['pus']:>4}{busy:>7}{n['processes']:>6}"
                     f"{n['ranks']:>6}{n['runtime_s']:>9.3f}  {_fmt_err(n['align_error_ns'])}")
    lines.append(f"  imbalance across nodes: {_fmt_imb(j['imbalance']['nodes'])}")
    lines += ["", "Ranks:",
              f"  {'RANK':>5}  {'NODE':<14}{'PID':>8}  {'COMM':<14}{'RUN s':>9}  PUs  (from)"]
    for r in j["ranks"]:
        lines.append(f"  {r['rank']:>5}  {safe_text(r['node']):<14}{r['local_pid']:>8}  "
                     f"{safe_text(r['comm'])[:14]:<14}{r['runtime_s']:>9.3f}  {r['pus']}  "
                     f"({safe_text(r['rank_var'])})")
    if not j["ranks"]:
        lines.append("  (no process with PMI_RANK, OMPI_COMM_WORLD_RANK or SLURM_PROCID seen)")
    lines.append(f"  imbalance across ranks: {_fmt_imb(j['imbalance']['ranks'])}")
    if j.get("findings"):
        lines += ["", "Placement (as top --job finds it live):"]
        for f in j["findings"]:
            for text, first, rest in ((safe_text(f["text"]), "  ! ", "    "),
                                      (safe_text(f["fix"]), "    fix: ", "      "),
                                      (f"confidence {f['confidence']}", "    ", "      ")):
                lines += textwrap.wrap(text, 80, initial_indent=first, subsequent_indent=rest,
                                       break_on_hyphens=False, break_long_words=False)
    return "\n".join(lines) + "\n"
