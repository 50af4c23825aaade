"""Memory per process and NUMA node over a recording (the process memory chunk): timelines,
high-water marks per process and node, and per region or phase.

A region's (or phase's) high-water mark is the largest memory of the processes that ran it,
over the samples taken while one of its instances was running (samples come every
``--interval``: a region shorter than that may hold none, and then it has no figure, with the
reason). Memory belongs to a process, so a thread shows its process's figures.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Any

import numpy as np

from snumap_tui.store.procmem import empty
from snumap_tui.topology.model import Topology
from snumap_tui.topology.render import memory_kind

RSS_NODE = -1


@dataclass
class MemoryTimeline:
    """One process's memory over time: ``t_ns`` (sample times) and, per node (-1: its RSS),
    the bytes at each of them (0 where the node had none of its pages)."""

    pid: int
    t_ns: np.ndarray
    nodes: dict[int, np.ndarray]
    exact: np.ndarray              # False where any node's figure was scaled, not walked

    def at(self, t_ns: int) -> dict[int, int]:
        """Bytes per node at the last sample at or before ``t_ns`` (empty before the first)."""
        i = int(np.searchsorted(self.t_ns, t_ns, "right")) - 1
        if i < 0:
            return {}
        return {n: int(v[i]) for n, v in self.nodes.items()}


def timelines(rows: np.ndarray) -> dict[int, MemoryTimeline]:
    """MEMORY_DTYPE rows (time ordered) -> a timeline per process."""
    out: dict[int, MemoryTimeline] = {}
    for pid in np.unique(rows["pid"]).tolist():
        r = rows[rows["pid"] == pid]
        t, inv = np.unique(r["t_ns"], return_inverse=True)
        nodes: dict[int, np.ndarray] = {}
        for node in np.unique(r["node"]).tolist():
            sel = r["node"] == node
            v = np.zeros(len(t), dtype=np.int64)
            v[inv[sel]] = r["bytes"][sel].astype(np.int64)
            nodes[int(node)] = v
        exact = np.ones(len(t), dtype=bool)
        np.logical_and.at(exact, inv, r["exact"])
        out[int(pid)] = MemoryTimeline(int(pid), t.astype(np.int64), nodes, exact)
    return out


def node_kinds(topology: Topology) -> dict[int, str]:
    """NUMA node OS index -> its memory kind as hwloc names it (subtype: DRAM, HBM, ...,
    else MemoryTier/DAXType), "DRAM" where hwloc says nothing (ordinary memory)."""
    out = {}
    for o in topology:
        if o.type == "NUMANode" and o.os_index is not None:
            out[o.os_index] = memory_kind(o) or "DRAM"
    return out


def _high(tl: MemoryTimeline, sel: np.ndarray | slice) -> dict[str, Any]:
    per = {str(n): int(v[sel].max()) for n, v in sorted(tl.nodes.items())
           if n != RSS_NODE and len(v[sel])}
    rss = tl.nodes.get(RSS_NODE)
    return {"rss_bytes": int(rss[sel].max()) if rss is not None and len(rss[sel]) else None,
            "nodes": per}


def kernel_peaks(rec: Any) -> dict[int, int]:
    """pid -> the kernel's peak resident memory (VmHWM, bytes) as the recorder last read it
    (recording/memory.py's "process peaks" info chunk; none in older recordings)."""
    out: dict[int, int] = {}
    for info in getattr(rec, "infos", []) or []:
        if info.get("what") != "process peaks":
            continue
        for pid, b in zip(info.get("pids") or [], info.get("bytes") or []):
            if isinstance(pid, int) and isinstance(b, int) and b >= 0:
                out[pid] = max(b, out.get(pid, 0))
    return out


def process_memory(rows: np.ndarray, topology: Topology,
                   peaks: dict[int, int] | None = None) -> dict[int, dict[str, Any]]:
    """pid -> {"samples", "rss_bytes" (the largest sampled RSS), "peak_bytes" (the kernel's
    VmHWM: the true peak, None where not recorded), "nodes": {node: largest sampled bytes},
    "last": {node: bytes at the last sample}, "kinds", "exact"}."""
    kinds = node_kinds(topology)
    out = {}
    for pid, tl in timelines(rows).items():
        hw = _high(tl, slice(None))
        out[pid] = {"samples": len(tl.t_ns), "rss_bytes": hw["rss_bytes"],
                    "peak_bytes": (peaks or {}).get(pid), "nodes": hw["nodes"],
                    "last": {str(n): int(v[-1]) for n, v in sorted(tl.nodes.items())
                             if n != RSS_NODE},
                    "kinds": {str(n): kinds.get(n, "DRAM") for n in tl.nodes if n != RSS_NODE},
                    "exact": bool(tl.exact.all())}
    return out


def region_memory(windows: list[tuple[int, int, int]], tls: dict[int, MemoryTimeline]
                  ) -> dict[str, Any]:
    """High-water marks over the samples inside WINDOWS ((pid, start, end) of a region's
    instances): {"samples": n, "rss_bytes", "nodes"} summed over its processes at each
    sample, or {"samples": 0, "why": ...}."""
    per_pid: dict[int, list[tuple[int, int]]] = {}
    for pid, s, e in windows:
        per_pid.setdefault(pid, []).append((s, e))
    best: dict[str, Any] = {"samples": 0, "rss_bytes": None, "nodes": {}}
    for pid, spans in per_pid.items():
        tl = tls.get(pid)
        if tl is None:
            continue
        starts = np.array([a for a, _ in spans], dtype=np.int64)
        ends = np.array([b for _, b in spans], dtype=np.int64)
        lo = np.searchsorted(tl.t_ns, starts, "left")
        hi = np.searchsorted(tl.t_ns, ends, "right")
        idx = np.unique(np.concatenate([np.arange(a, b) for a, b in zip(lo.tolist(),
                                                                         hi.tolist())]
                                       or [np.zeros(0, np.int64)])).astype(np.int64)
        if not len(idx):
            continue
        hw = _high(tl, idx)
        best["samples"] += len(idx)
        best["rss_bytes"] = (best["rss_bytes"] or 0) + (hw["rss_bytes"] or 0)
        for n, b in hw["nodes"].items():
            best["nodes"][n] = best["nodes"].get(n, 0) + b
    if not best["samples"]:
        return {"samples": 0, "why": "no memory sample inside it (shorter than the interval, "
                                     "or no process memory recorded)"}
    return best


def recording_memory(rec: Any, topology: Topology) -> tuple[np.ndarray, str | None]:
    """(rows, why none) of a recording: older recordings and system-wide ones have none."""
    rows = rec.process_memory() if hasattr(rec, "process_memory") else empty()
    if len(rows):
        return rows, None
    hdr = getattr(rec, "header", {}) or {}
    if "process_memory" not in hdr:
        return rows, "not recorded (a recording from before process memory was kept)"
    return rows, "no traced process (a system-wide recording has no traced tree)"


# A region whose calls the kernel summed (critical sections): no instance, so no window.
SUMMED_WHY = "calls summed in the kernel: no instance to attribute to"


def region_windows(reg: Any) -> dict[str, list[tuple[int, int, int, int]]]:
    """Region (or phase) name -> (pid, tid, start, end) of each of its instances on any
    thread."""
    from snumap_tui.analysis.regions import pair

    inst = pair(reg.rows)
    out: dict[str, list[tuple[int, int, int, int]]] = {}
    for rid, pid, tid, s, e in zip(inst.rid.tolist(), inst.pid.tolist(), inst.tid.tolist(),
                                   inst.start.tolist(), inst.end.tolist()):
        out.setdefault(reg.names[rid].name, []).append((pid, tid, s, e))
    return out


def add_memory(report: dict[str, Any], rec: Any, topology: Topology) -> None:
    """Memory per node and its high-water marks into the report: ``memory`` (source, kinds,
    or why none) and each process's and region's ``memory``."""
    rows, why = recording_memory(rec, topology)
    hdr = (getattr(rec, "header", {}) or {}).get("process_memory") or {}
    report["memory"] = {"source": hdr.get("source"), "why": why,
                        "kinds": {str(k): v for k, v in sorted(node_kinds(topology).items())}}
    per = process_memory(rows, topology, kernel_peaks(rec))
    for p in report.get("processes", []):
        p["memory"] = per.get(p["pid"]) or {"why": why or "no sample: it exited before one, "
                                                          "or was unreadable"}
    if not report.get("regions"):
        return
    tls = timelines(rows)
    wins = region_windows(rec.regions())
    for r in report["regions"]:
        spans = [(p, a, b) for p, _, a, b in wins.get(r["name"], [])]
        if r.get("summed_calls") and not why:     # its windows are a few exact calls
            r["memory"] = {"samples": 0, "why": SUMMED_WHY}
            continue
        r["memory"] = region_memory(spans, tls) if not why else \
            {"samples": 0, "why": why}


def _mib(b: int | None) -> str:
    return "-" if b is None else f"{b / (1 << 20):.1f}"


def format_memory(r: dict[str, Any], top: int = 20) -> list[str]:
    """The report's text section: per process and per region, high-water marks per node."""
    from snumap_tui.textsafe import safe_text

    m = r.get("memory") or {}
    lines = ["", "Memory (MiB; per process: threads share it):",
             "  peak: the kernel's high-water mark (VmHWM); sampled: the largest sample"]
    if m.get("why"):
        return [*lines, *textwrap.wrap(f"n/a ({m['why']})", 78, initial_indent="  ",
                                       subsequent_indent="  ")]
    if m.get("source"):
        lines.append(f"  source: {safe_text(m['source'])}"[:80])
    kinds = m.get("kinds") or {}
    lines.append(f"  {'PID':>7} {'COMM':<16} {'RSS peak':>8} {'sampled':>8}  "
                 "per node (kind): sampled max / at end")
    for p in r.get("processes", [])[:top]:
        pm = p.get("memory") or {}
        who = safe_text(str(p.get("label") or p["pid"]))     # node:pid in a merged job
        if "nodes" not in pm:
            lines.append(f"  {who:>7} {safe_text(p['comm'])[:16]:<16} n/a ({pm.get('why')})"[:80])
            continue
        nodes = "  ".join(f"N{n} ({kinds.get(n, 'DRAM')}): {_mib(b)} / {_mib(pm['last'].get(n))}"
                          for n, b in pm["nodes"].items())
        est = "" if pm.get("exact") else " ~"
        lines.append(f"  {who:>7} {safe_text(p['comm'])[:16]:<16} "
                     f"{_mib(pm.get('peak_bytes')):>8} {_mib(pm['rss_bytes']):>8}{est}  "
                     f"{nodes}"[:80])
    regs = [g for g in r.get("regions") or [] if "memory" in g]
    if regs:
        lines.append(f"  {'REGION / PHASE':<28} {'SAMPLES':>7} {'sampled':>8}  "
                     "per node sampled max")
        for g in regs[:top]:
            gm = g["memory"]
            if not gm.get("samples"):
                what = "summed in the kernel" if gm.get("why") == SUMMED_WHY else \
                    "no sample inside"
                lines.append(f"  {safe_text(g['name'])[:28]:<28} {0:>7} n/a ({what})")
                continue
            nodes = "  ".join(f"N{n}: {_mib(b)}" for n, b in gm["nodes"].items())
            lines.append(f"  {safe_text(g['name'])[:28]:<28} {gm['samples']:>7} "
                         f"{_mib(gm['rss_bytes']):>8}  {nodes}"[:80])
    return lines
