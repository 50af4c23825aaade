"""Memory per process and NUMA node over a recording (the process memory chunk): timelines,
high-water marks per process and node, and per region or phase.

A region's (or phase's) high-water mark is the largest memory of the processes that ran it,
over the samples taken while one of its instances was running (samples come every
``--interval``: a region shorter than that may hold none, and then it has no figure, with the
reason). Memory belongs to a process, so a thread shows its process's figures.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from snumap_tui.analysis.caps import MAX_ROWS, ranked
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


# Bounds a crafted or damaged chunk cannot push past (issue 30): memory per node only for the
# nodes the recording's topology has, timelines for at most MAX_ROWS processes (caps.py: those
# with the largest memory), at most MAX_NODES_PER_PROCESS nodes each; what is left out is
# counted (``Bounded.notes``), never allocated.
MAX_NODES_PER_PROCESS = 64


@dataclass
class Bounded:
    """Rows of at most ``max_pids`` processes on known nodes, and what was left out: rows
    naming a node the topology lacks, processes past the cap."""

    rows: np.ndarray
    rows_unknown_node: int = 0
    processes_left_out: int = 0

    def notes(self) -> list[str]:
        out = []
        if self.rows_unknown_node:
            out.append(f"{self.rows_unknown_node} rows naming a NUMA node the topology "
                       "lacks: left out")
        if self.processes_left_out:
            out.append(f"{self.processes_left_out} more processes past the first "
                       f"{MAX_ROWS} (by memory): left out")
        return out


def bounded(rows: np.ndarray, nodes: Iterable[int] | None,
            max_pids: int = MAX_ROWS, keep: Iterable[int] = ()) -> Bounded:
    """ROWS on NODES (and the RSS row; None: any node) of the MAX_PIDS processes with the most
    memory at any sample, the processes in KEEP first (those a report lists); linear in
    rows (one sort)."""
    out = Bounded(rows)
    if nodes is not None and len(rows):
        known = np.array(sorted({RSS_NODE, *nodes}), dtype=np.int64)
        ok = np.isin(rows["node"], known)
        if not ok.all():
            out.rows_unknown_node = int((~ok).sum())
            rows = rows[ok]
    if len(rows):
        pids, inv = np.unique(rows["pid"], return_inverse=True)
        if len(pids) > max_pids:
            peak = np.zeros(len(pids), dtype=np.float64)
            np.maximum.at(peak, inv.reshape(-1), rows["bytes"].astype(np.float64))
            peak[np.isin(pids, np.fromiter(keep, dtype=np.int64))] = np.inf
            kept = np.zeros(len(pids), dtype=bool)
            kept[ranked(pids, peak)[:max_pids]] = True
            out.processes_left_out = int(len(pids) - max_pids)
            rows = rows[kept[inv.reshape(-1)]]
    out.rows = rows
    return out


def timelines(rows: np.ndarray, nodes: Iterable[int] | None = None,
              max_pids: int = MAX_ROWS) -> dict[int, MemoryTimeline]:
    """MEMORY_DTYPE rows (time ordered) -> a timeline per process, for the processes and
    nodes ``bounded`` keeps (NODES: the topology's NUMA nodes); one sort, then each
    process's own rows."""
    return bounded_timelines(bounded(rows, nodes, max_pids).rows)


def bounded_timelines(rows: np.ndarray) -> dict[int, MemoryTimeline]:
    """``timelines`` of rows ``bounded`` already kept (not bounded again)."""
    out: dict[int, MemoryTimeline] = {}
    if not len(rows):
        return out
    order = np.argsort(rows["pid"], kind="stable")       # time order kept within a pid
    rows = rows[order]
    pids, first = np.unique(rows["pid"], return_index=True)
    last = np.append(first[1:], len(rows))
    for pid, a, b in zip(pids.tolist(), first.tolist(), last.tolist()):
        r = rows[a:b]
        t, inv = np.unique(r["t_ns"], return_inverse=True)
        inv = inv.reshape(-1)
        node_ids, node_inv = np.unique(r["node"], return_inverse=True)
        node_inv = node_inv.reshape(-1)
        if len(node_ids) > MAX_NODES_PER_PROCESS:      # RSS (-1, the smallest) kept first
            keep = node_inv < MAX_NODES_PER_PROCESS
            node_ids = node_ids[:MAX_NODES_PER_PROCESS]
            r, inv, node_inv = r[keep], inv[keep], node_inv[keep]
        dense = np.zeros((len(node_ids), len(t)), dtype=np.int64)
        dense[node_inv, inv] = r["bytes"].astype(np.int64)
        exact = np.ones(len(t), dtype=bool)
        np.logical_and.at(exact, inv, r["exact"])
        out[int(pid)] = MemoryTimeline(int(pid), t.astype(np.int64),
                                       {int(n): dense[i] for i, n in
                                        enumerate(node_ids.tolist())}, exact)
    return out


def node_kinds(topology: Topology) -> dict[int, str]:
    """NUMA node OS index -> its memory kind as hwloc names it (subtype: DRAM, HBM, ...,
    else MemoryTier/DAXType), "DRAM" where hwloc says nothing (ordinary memory)."""
    out = {}
    for o in topology:
        if o.type == "NUMANode" and o.os_index is not None:
            out[o.os_index] = memory_kind(o) or "DRAM"
    return out


def topology_nodes(topology: Topology) -> list[int]:
    """The NUMA nodes memory rows may name: the topology's (node 0 when it lists none)."""
    return sorted(node_kinds(topology)) or [0]


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
                   tls: dict[int, MemoryTimeline] | None = None,
                   peaks: dict[int, int] | None = None) -> dict[int, dict[str, Any]]:
    """pid -> {"samples", "rss_bytes" (the largest sampled RSS), "peak_bytes" (the kernel's
    VmHWM: the true peak, None where not recorded), "nodes": {node: largest sampled bytes},
    "last": {node: bytes at the last sample}, "kinds", "exact"} (TLS: the rows' timelines,
    when already built)."""
    kinds = node_kinds(topology)
    out = {}
    if tls is None:
        tls = timelines(rows, topology_nodes(topology))
    for pid, tl in tls.items():
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
        # The samples inside any instance: +1 at each start, -1 past each end (linear in
        # instances plus samples, however many samples each instance holds).
        edge = np.zeros(len(tl.t_ns) + 1, dtype=np.int64)
        np.add.at(edge, lo, 1)
        np.add.at(edge, hi, -1)
        idx = np.flatnonzero(np.cumsum(edge[:-1]) > 0)
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


def region_windows(reg: Any, bounds: tuple[int, int] | None = None
                   ) -> dict[str, list[tuple[int, int, int, int]]]:
    """Region (or phase) name -> (pid, tid, start, end) of each of its instances on any
    thread; with the recording's BOUNDS, those open at either end clipped to it."""
    from snumap_tui.analysis.regions import instances

    inst, _cut = instances(reg.rows, bounds)
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
    b = bounded(rows, topology_nodes(topology),
                keep=[int(p["pid"]) for p in report.get("processes", [])])
    report["memory"] = {"source": hdr.get("source"), "why": why,
                        "kinds": {str(k): v for k, v in sorted(node_kinds(topology).items())},
                        "left_out": b.notes()}
    tls = bounded_timelines(b.rows)
    per = process_memory(b.rows, topology, tls, kernel_peaks(rec))
    for p in report.get("processes", []):
        p["memory"] = per.get(p["pid"]) or {"why": why or "no sample: it exited before one, "
                                                          "or was unreadable"}
    if not report.get("regions"):
        return
    from snumap_tui.analysis.regions import recording_bounds

    wins = region_windows(rec.regions(), recording_bounds(rec))
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
    for note in m.get("left_out") or []:
        lines.append(f"  {note}")
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
