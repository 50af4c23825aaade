"""What `snumap replay` keeps of a recording: run intervals, row labels, names, colouring keys
and the few per-sample series the metric strips draw. No textual or rich here (the Gantt
benchmark and the tests use it directly).

Rows are the PUs in topology order (package > NUMA node > core > PU, hwloc's logical order),
which is the order the Gantt draws; ``row_iv[i]`` is the Intervals row of display row i.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from snumap_tui.analysis.binning import KeyMap
from snumap_tui.analysis.intervals import Intervals
from snumap_tui.analysis.load import load
from snumap_tui.analysis.noderows import node_rows
from snumap_tui.analysis.region_timeline import RegionTimeline, region_timeline
from snumap_tui.textsafe import safe_text
from snumap_tui.topology.model import Topology

MODES = ("process", "thread", "group")
REGION = "region"       # a fourth mode when the recording has regions (uprobes, markers)


@dataclass
class RowLabel:
    package: int | None
    numa: int | None
    core: int | None
    pu: int
    node: str | None = None               # a job's node (merged recordings)
    members: tuple[int, ...] = ()         # a folded node: the Intervals rows of its PUs


@dataclass
class Series:
    """One metric strip: values at sample times (NaN where unknown)."""

    name: str
    unit: str
    t: np.ndarray
    v: np.ndarray
    full: float | None = None      # what a full block means (a node's memory), else the max


@dataclass
class ReplayData:
    name: str
    header: dict[str, Any]
    topology: Topology
    intervals: Intervals
    row_iv: np.ndarray
    labels: list[RowLabel]
    names: dict[int, str]                         # tid -> comm
    keymaps: dict[str, KeyMap | None]
    key_names: dict[str, dict[int, str]]
    markers: list[tuple[int, str]] = field(default_factory=list)
    series: list[Series] = field(default_factory=list)
    lost: int = 0
    recording: Any = None                         # kept open for samples at the cursor
    cache: dict[Any, Any] = field(default_factory=dict)   # the utilisation strip of a range
    regions: RegionTimeline | None = None         # run intervals keyed by region
    kept: dict[Any, Any] = field(default_factory=dict)    # counters, once per recording

    @property
    def modes(self) -> tuple[str, ...]:
        return (*MODES, REGION) if self.regions is not None else MODES

    @property
    def ticks(self) -> list[tuple[int, str]]:
        """Markers on the time axis: the recording's own (command start/exit) and the user's
        (mark lines, phase begins), in time order."""
        extra = self.regions.marks if self.regions is not None else []
        return sorted((t, safe_text(s)) for t, s in [*self.markers, *extra])

    def intervals_for(self, mode: str) -> Intervals:
        if mode == REGION and self.regions is not None:
            return self.regions.intervals
        return self.intervals

    def owners_for(self, mode: str) -> list[np.ndarray] | None:
        """Who ran each interval of ``intervals_for(mode)`` when its tid column holds other
        keys (by region: region keys), for the typed filter; None: the tid column."""
        if mode == REGION and self.regions is not None:
            return self.regions.tids
        return None
    folded: set[str] = field(default_factory=set)         # nodes shown as one row
    all_rows: tuple[list[RowLabel], np.ndarray] | None = None   # unfolded labels, row_iv
    pending: int = 0            # nodes of a merged job whose events are still being read

    def adopt(self, full: ReplayData) -> None:
        """Take the events of the whole job (``full``: the same recording, every node read)
        in place of the first nodes', keeping what the user set (folded nodes, rows). The
        intervals' rows are the same: every PU of the job has its row in both."""
        assert np.array_equal(full.intervals.cpus, self.intervals.cpus)
        self.intervals, self.names = full.intervals, full.names
        self.keymaps, self.key_names = full.keymaps, full.key_names
        self.regions = full.regions
        self.cache.clear()
        self.kept.clear()
        self.pending = 0

    @property
    def nodes(self) -> list[str]:
        return list(dict.fromkeys(lab.node for lab in (self.all_rows or (self.labels,))[0]
                                  if lab.node is not None))

    def fold(self, node: str | None, *, fold: bool | None = None) -> None:
        """Fold (or unfold, or toggle with ``fold=None``) NODE's PU rows into one row; None:
        every node, following the first."""
        from snumap_tui.analysis.noderows import NodeRow, display

        if self.all_rows is None:
            self.all_rows = (list(self.labels), self.row_iv.copy())
        labels, row_iv = self.all_rows
        names = self.nodes if node is None else [node]
        if not names:
            return
        on = fold if fold is not None else names[0] not in self.folded
        self.folded = (self.folded | set(names)) if on else (self.folded - set(names))
        rows = [NodeRow(lab.node, lab.package, lab.numa, lab.core, lab.pu) for lab in labels]
        shown, idx = display(rows, self.folded)
        self.labels = [labels[i] if i >= 0 else
                       RowLabel(None, None, None, -1, r.node,
                                tuple(int(row_iv[m]) for m in r.members))
                       for r, i in zip(shown, idx)]
        self.row_iv = np.array([int(row_iv[i]) if i >= 0 else -1 for i in idx], dtype=np.int64)

    @property
    def t0(self) -> int:
        return self.intervals.t0

    @property
    def t1(self) -> int:
        return max(self.intervals.t1, self.intervals.t0 + 1)

    @property
    def approximate(self) -> bool:
        return self.intervals.approximate or bool(self.header.get("approximate"))

    @property
    def host(self) -> str:
        return safe_text(self.header.get("host") or self.header.get("hostname")
                         or self.topology.meta.get("HostName") or "?")

    def key_name(self, mode: str, key: int) -> str:
        if mode == REGION and self.regions is not None:
            return safe_text(self.regions.key_name(key))
        table = getattr(self.recording, "nodes", None)
        shown = table.label(key) if table is not None else key   # node:tid in a merged job
        if mode == "thread":
            return f"{self.names.get(key, '?')} {shown}"
        return f"{self.key_names[mode].get(key, '?')} {shown}"


def row_labels(topology: Topology) -> tuple[list[int], list[RowLabel]]:
    """PU OS indexes in display order, with their package, NUMA node and core OS indexes."""
    pus, labels = [], []
    for pu in topology.pus:
        os_i = int(pu.os_index or 0)
        pkg = topology.package_of(os_i)
        node = topology.numa_of(os_i)
        core = topology.core_of(os_i)
        pus.append(os_i)
        labels.append(RowLabel(pkg.os_index if pkg else None, node.os_index if node else None,
                               core.os_index if core else None, os_i))
    return pus, labels


def _groups(tasks: dict[int, Any], pid_of: dict[int, int]) -> dict[int, int]:
    """tid -> process group: the oldest recorded ancestor process (the traced command, for a
    `snumap record -- CMD` recording), following ppid through the recorded processes."""
    ppid = {info.pid: info.ppid for info in tasks.values() if info.tid == info.pid}
    root: dict[int, int] = {}

    def find(p: int) -> int:
        seen = []
        while p in ppid and ppid[p] in ppid and ppid[p] != p and p not in root:
            seen.append(p)
            p = ppid[p]
            if len(seen) > 1000:
                break
        r = root.get(p, p)
        for s in seen:
            root[s] = r
        return r

    return {tid: find(pid) for tid, pid in pid_of.items()}


def used_without_cache(numa: dict[str, Any]) -> np.ndarray | None:
    """Bytes used per node as the topology tree shows them (what free(1) calls used): the
    catalogue's ``mem_used_bytes`` (MemUsed less FilePages, the page cache) on one sample's
    readings, MemUsed taken as MemTotal - MemFree where the sample lacks it (as derive does);
    None when the sample has neither MemUsed nor MemTotal and MemFree."""
    from snumap_tui.model.metrics import default_catalogue

    env = {k: np.asarray(v, dtype=np.float64) for k, v in numa.items()
           if k in ("mem_used", "mem_total", "mem_free", "file_pages") and v is not None}
    if "mem_used" not in env and "mem_total" in env and "mem_free" in env:
        env["mem_used"] = env["mem_total"] - env["mem_free"]
    if "mem_used" not in env:
        return None
    return default_catalogue()["mem_used_bytes"].evaluate(env, len(env["mem_used"]))


def _series(rec: Any, topology: Topology) -> list[Series]:
    """Power per package (RAPL, wrap-corrected) and used memory per NUMA node per sample
    (without the page cache, as the topology tree)."""
    t: list[int] = []
    power: dict[str, list[float]] = {}
    mem: dict[int, list[float]] = {}
    prev: dict[str, tuple[int, float]] = {}
    for n, s in enumerate(rec.samples()):
        t.append(s.t_ns)
        r = s.readings.get("rapl") or {}
        for i, dom in enumerate(r.get("domains", ())):
            if not str(dom).startswith("package"):
                continue
            e = float(r["energy_uj"][i])
            col = power.setdefault(dom, [math.nan] * n)
            w = math.nan
            if dom in prev and not math.isnan(e):
                d = e - prev[dom][1]
                if d < 0 and r.get("max_uj") is not None:
                    d += float(r["max_uj"][i])
                dt = (s.t_ns - prev[dom][0]) / 1e9
                w = d / 1e6 / dt if dt > 0 else math.nan
            col.append(w)
            if not math.isnan(e):
                prev[dom] = (s.t_ns, e)
        nm = s.readings.get("numa") or {}
        used = used_without_cache(nm)
        for j, node in enumerate(np.asarray(nm.get("nodes", ()), dtype=np.int64).tolist()):
            col2 = mem.setdefault(node, [math.nan] * n)
            col2.append(float(used[j]) if used is not None else math.nan)
        for col in (*power.values(), *mem.values()):
            if len(col) < n + 1:
                col.append(math.nan)
    ts = np.array(t, dtype=np.int64)
    out = [Series(f"pwr {dom.replace('package-', 'P')}", "W", ts, np.array(v))
           for dom, v in sorted(power.items())]
    size = {n.os_index: n.local_memory for n in topology.numa_nodes}
    out += [Series(f"mem N{node}", "B", ts, np.array(v), size.get(node))
            for node, v in sorted(mem.items())]
    return out


LAZY_MIN_NODES = 4          # a merged job of more nodes shows its first nodes first
LAZY_FIRST_ROWS = 80        # ... as many as fill this many PU rows (a tall terminal)


def first_nodes(rec: Any, rows: int = LAZY_FIRST_ROWS) -> set[int] | None:
    """For a merged job of many nodes, the nodes whose PU rows open the core-vs-time chart
    (the first ``rows`` rows): the replay reads their events first and the others while
    the first screen is up. None: read everything at once."""
    table = getattr(rec, "nodes", None)
    if table is None or len(table.nodes) < LAZY_MIN_NODES:
        return None
    out: set[int] = set()
    covered = 0
    for k, n in enumerate(table.nodes):
        out.add(k)
        covered += int(n.get("n_pus") or 0)
        if covered >= rows:
            break
    return out if len(out) < len(table.nodes) else None


def load_replay(rec: Any, nodes: set[int] | None = None) -> ReplayData:
    """Read a recording once into what the replay draws (the recording stays open).
    ``nodes``: of a merged job, only these nodes' events (``ReplayData.pending`` then
    says which are still to read, and ``adopt`` takes the whole job's data later)."""
    ld = load(rec, nodes=nodes)
    iv = ld.intervals
    topo = ld.topology
    pus, labels = row_labels(topo)
    per_node = node_rows(topo)
    if per_node is not None:
        labels = [RowLabel(r.package, r.numa, r.core, r.pu, r.node) for r in per_node]
    row_iv = np.searchsorted(iv.cpus, np.array(pus, dtype=np.int64))
    tasks = dict(getattr(rec, "tasks", {}) or {})
    # Names are the traced processes' own: escaped here, once, for every view that shows them.
    names = {tid: safe_text(info.comm) for tid, info in tasks.items()}
    pid_names = {info.pid: safe_text(info.comm) for info in tasks.values()
                 if info.tid == info.pid}
    for info in tasks.values():
        pid_names.setdefault(info.pid, safe_text(info.comm))
    groups = _groups(tasks, iv.pid_of_tid)
    keymaps: dict[str, KeyMap | None] = {"thread": None,
                                         "process": KeyMap.from_dict(iv.pid_of_tid),
                                         "group": KeyMap.from_dict(groups)}
    key_names = {"thread": names, "process": pid_names, "group": pid_names}
    return ReplayData(
        name=str(getattr(rec, "name", "?")), header=dict(getattr(rec, "header", {}) or {}),
        topology=topo, intervals=iv, row_iv=row_iv, labels=labels, names=names,
        keymaps=keymaps, key_names=key_names, markers=list(getattr(rec, "markers", []) or []),
        series=_series(rec, topo) if hasattr(rec, "samples") else [],
        lost=int(sum((getattr(rec, "lost", {}) or {}).values())), recording=rec,
        regions=region_timeline(iv, rec.regions()) if hasattr(rec, "regions") else None,
        pending=len(rec.nodes.nodes) - len(nodes) if nodes is not None else 0)


def matching_tids(data: ReplayData, query: str) -> np.ndarray:
    """The threads a typed filter keeps: every word must match (AND); a number is a PID or
    a thread id, ``pid:N`` a PID, other words are found in the thread's or its process's
    name (case-insensitive). A recording has no user names, so ``user:`` matches nothing."""
    pid_of = data.intervals.pid_of_tid
    procs = data.key_names.get("process", {})
    keep = []
    words = query.split()
    for tid, comm in data.names.items():
        pid = pid_of.get(tid, tid)
        text = f"{comm} {procs.get(pid, '')}".lower()
        ok = True
        for w in words:
            k, sep, v = w.partition(":")
            if sep and k == "pid":
                ok = v.isdigit() and int(v) == pid
            elif sep and k == "user":
                ok = False
            elif w.isdigit():
                ok = int(w) in (tid, pid) or w in text
            else:
                ok = w.lower() in text
            if not ok:
                break
        if ok:
            keep.append(tid)
    return np.array(sorted(keep), dtype=np.int64)


def next_run(data: ReplayData, tids: np.ndarray, after: int,
             running: bool = False) -> tuple[int, int] | None:
    """F3's answer: the first run of one of ``tids`` that starts at or after ``after`` (ns)
    (``running``: or is still running then), as (the time the cursor goes to, the chart's row
    that shows it), the top row on a tie; None when there is none. A folded node's row
    stands for each of its PUs. A row's runs do not overlap: starts and ends are sorted."""
    if tids.size == 0:
        return None
    iv = data.intervals
    best: tuple[int, int] | None = None
    for row, lab in enumerate(data.labels):
        for r in lab.members or (int(data.row_iv[row]),):
            start = iv.start[r]
            i = int(np.searchsorted(iv.end[r], after, "right") if running
                    else np.searchsorted(start, after, "left"))
            hit = np.nonzero(np.isin(iv.tid[r][i:], tids))[0]
            if hit.size:
                t = max(int(start[i + hit[0]]), after)
                if best is None or t < best[0]:
                    best = (t, row)
    return best
