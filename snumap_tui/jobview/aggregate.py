"""The login node's side of `top --job`: N nodes' frame streams -> one job snapshot (pure).

``JobAggregator.feed(node_index, line)`` takes one line of one node's stream (wire.py) and
keeps, per node, its topology (the ``T`` record; nodes of the same hardware share one, with
what is derived from it alone) and its last frame (``F``), still encoded as arrays: nothing
is derived per line. ``snapshot()`` turns each node whose frame changed
since the last call into a ``NodeView`` (per PU, core, NUMA node and package utilisation, memory
per NUMA node, GPUs, the job's ranks with their threads on the node's PUs) and keeps the others'
as they were, so a tick at 1,000 nodes costs the nodes that moved, each a few numpy operations.

``node_frame()`` rebuilds a node's last frame as a model Frame (metric arrays on its topology,
the job's processes as rows), which the node's full `top` view draws.
"""

from __future__ import annotations

import functools
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from snumap_tui.jobview import wire
from snumap_tui.jobview.threadstats import ThreadStats, prime, rank_cpu, thread_stats
from snumap_tui.jobview.wire import Assembler, Record
from snumap_tui.topology.model import Topology

#: The states of a node's stream.
WAITING, LIVE, ENDED, LOST = "waiting", "live", "ended", "lost"


@dataclass
class ThreadView:
    tid: int
    pu: int              # OS index of the PU it last ran on (-1: unknown)
    cpu_pct: float | None


@dataclass
class RankView:
    node: str
    rank: int | None
    pid: int
    comm: str
    step: str
    cpu_pct: float | None
    threads: list[ThreadView]
    affinity: str                       # of its first thread, as a cpulist
    numa_mem: dict[int, int]            # NUMA node OS index -> bytes
    rss: int | None
    run_numa: list[int]                 # NUMA nodes its threads last ran on

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "rank": self.rank, "pid": self.pid, "comm": self.comm,
                "step": self.step, "cpu_pct": _num(self.cpu_pct), "affinity": self.affinity,
                "rss": self.rss, "numa_mem": {str(k): v for k, v in self.numa_mem.items()},
                "run_numa": self.run_numa,
                "threads": [{"tid": t.tid, "pu": t.pu, "cpu_pct": _num(t.cpu_pct)}
                            for t in self.threads]}


@dataclass
class NodeView:
    """One node as the view and ``--batch --json`` show it."""
    index: int
    name: str
    status: str
    why: str = ""
    host: str = ""
    topology: Topology | None = None
    wall_ns: int = 0
    dt_s: float = 0.0
    busy_pct: float | None = None
    gpus: list[dict[str, Any]] = field(default_factory=list)
    frames: int = 0
    bytes_in: int = 0
    launch: str | None = None           # the srun/mpirun line of the job's ranks seen there
    alloc: str = ""                     # the job's PUs there (the sampler's own affinity)
    pu_base: int = 0                    # a merged recording's first PU of this node
    affinity_known: bool = True         # False: a recording's "affinity" is where it ran
    pu_numa: dict[int, int] = field(default_factory=dict)
    pu_core: dict[int, int] = field(default_factory=dict)     # PU -> its core's logical index
    alloc_cores: frozenset[int] = frozenset()                 # cores whose PUs are all the job's
    # the rank rows, and what builds them when they are first asked for (at 1,000 nodes a
    # tick builds the rows of the nodes on screen only); the job's threads are the stream's
    # arrays (_tc)
    _ranks: list[RankView] | None = None
    _rank_src: tuple[str, dict[str, Any], dict[str, np.ndarray], dict[int, int]] | None = None
    _stats: ThreadStats | None = None
    _tc: tuple[np.ndarray, np.ndarray] | None = None          # the frame's "t" and "c"
    pu_lut: np.ndarray | None = None    # PU OS index -> its core's logical index (-1: none)
    # the frame's metrics per object and the rows of VIEW_METRICS in it (utilisation, used
    # and total memory), and the topology's (ids, OS indexes) per type: the strips and memory
    # rows are made from them when first asked for (once: a frame's view is drawn, its
    # findings made and its JSON written from them)
    _m: np.ndarray | None = None
    _m_rows: tuple[tuple[str, int], ...] = ()
    _index_of: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)

    @property
    def threads(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """The job's threads on the node: (pid, PU, CPU %, rank) arrays; None: a recording's
        node (its ranks carry their threads) or a frame without them."""
        if self._tc is None:
            return None
        t, c = self._tc
        return t[:, wire.T_PID], t[:, wire.T_PU], c, t[:, wire.T_RANK]

    def _row(self, name: str) -> np.ndarray | None:
        for k, i in self._m_rows:
            if k == name and self._m is not None:
                return self._m[i]
        return None

    @property
    def _util(self) -> np.ndarray | None:
        return self._row("util_pct")

    @property
    def _mem(self) -> tuple[np.ndarray | None, np.ndarray | None]:
        return self._row("mem_used_bytes"), self._row("mem_total_bytes")

    @functools.cached_property
    def strips(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Per object type ("PU", "Core", "NUMANode", "Package"): (OS indexes, util %)."""
        if self._util is None:
            return {}
        return {t: (os_, self._util[ids].astype(np.float64))
                for t, (ids, os_) in self._index_of.items() if len(ids)}

    @functools.cached_property
    def numa_mem(self) -> list[tuple[int, float | None, float | None]]:
        """(NUMA node OS index, used bytes, total bytes) per NUMA node."""
        ids, os_ = self._index_of.get("NUMANode", (np.empty(0, np.intp), np.empty(0, np.int64)))
        used, total = self._mem

        def col(a: np.ndarray | None) -> list[float | None]:
            if a is None or self._util is None or a.shape != self._util.shape:
                return [None] * len(ids)
            return [x if math.isfinite(x) else None for x in a[ids].tolist()]

        return list(zip(os_.tolist(), col(used), col(total)))

    @property
    def ranks(self) -> list[RankView]:
        if self._ranks is None:
            self._ranks = _ranks(*self._rank_src) if self._rank_src is not None else []
            self._rank_src = None
        return self._ranks

    @ranks.setter
    def ranks(self, rows: list[RankView]) -> None:
        self._ranks, self._rank_src = rows, None

    @property
    def job_cpu_pct(self) -> float:
        """The job's CPU on the node, in % of one PU."""
        return thread_stats(self).job_cpu

    def to_dict(self) -> dict[str, Any]:
        pu = self.strips.get("PU")
        return {"node": self.name, "index": self.index, "status": self.status,
                **({"why": self.why} if self.why else {}), "host": self.host,
                "wall_ns": self.wall_ns, "dt_s": self.dt_s, "busy_pct": _num(self.busy_pct),
                "job_cpu_pct": self.job_cpu_pct, "frames": self.frames, "alloc": self.alloc,
                "bytes": self.bytes_in,
                "pus": {} if pu is None else {str(int(o)): _num(float(v))
                                              for o, v in zip(pu[0], pu[1])},
                "numa": [{"node": n, "used": _num(u), "total": _num(t)}
                         for n, u, t in self.numa_mem],
                "gpus": self.gpus, "ranks": [r.to_dict() for r in self.ranks]}


def _int(v: Any) -> int:
    """A header's integer (another process wrote it): 0 unless it is one, in int64."""
    return v if isinstance(v, int) and not isinstance(v, bool) and -2**63 <= v < 2**63 else 0


def _float(v: Any) -> float:
    """A header's number: 0.0 unless it is a finite one."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) \
        and math.isfinite(v) else 0.0


def _num(v: float | None) -> float | None:
    return None if v is None or not math.isfinite(v) else round(float(v), 2)


@dataclass
class _Node:
    index: int
    name: str
    asm: Assembler = field(default_factory=Assembler)
    topology: Topology | None = None
    head: dict[str, Any] = field(default_factory=dict)
    last: Record | None = None
    status: str = WAITING
    why: str = ""
    frames: int = 0
    bytes_in: int = 0
    first_frame_at: float | None = None
    view: NodeView | None = None
    dirty: bool = True
    # the topology's (shared by the nodes of one shape, _Shape)
    index_of: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    pu_numa: dict[int, int] = field(default_factory=dict)
    pu_core: dict[int, int] = field(default_factory=dict)
    alloc_cores: frozenset[int] = frozenset()
    pu_lut: np.ndarray | None = None
    host: str = ""                      # the T header's, cut as the view shows them
    alloc: str = ""
    m_names: Any = None                 # the last frame's metric names (the list object) ...
    m_rows: tuple[tuple[str, int], ...] = ()    # ... and where VIEW_METRICS are in it
    m_util: int = -1                            # the row of util_pct (-1: none)


def _shape_key(raw: dict[str, Any]) -> str:
    """A T record's topology as a key that nodes of the same hardware share: all of it but
    what names the host (the tree's meta and its Machine's infos: HostName, serials), which
    the view takes from the T header (``node``, ``host``), never from the topology."""
    root = raw.get("root")
    if isinstance(root, dict):
        root = {k: v for k, v in root.items() if k != "infos"}
    return json.dumps({**raw, "meta": None, "root": root}, separators=(",", ":"))


@dataclass
class _Shape:
    """One hardware shape: its topology and what the views derive from it alone."""
    topology: Topology
    index_of: dict[str, tuple[np.ndarray, np.ndarray]]     # per type: (ids, OS indexes)
    pu_numa: dict[int, int]                                # PU OS index -> NUMA OS index
    pu_lut: np.ndarray                                     # PU OS index -> core (-1: none)

    @classmethod
    def of(cls, topo: Topology) -> _Shape:
        index_of = {t: (np.array([o.id for o in objs], dtype=np.intp),
                        np.array([-1 if o.os_index is None else o.os_index for o in objs],
                                 dtype=np.int64))
                    for t in ("PU", "Core", "NUMANode", "Package")
                    for objs in (topo.by_type(t),)}
        pu_numa = {}
        for pu in topo.pus:
            numa = topo.numa_of(pu.os_index) if pu.os_index is not None else None
            if pu.os_index is not None and numa is not None and numa.os_index is not None:
                pu_numa[pu.os_index] = numa.os_index
        pu_core, _ = core_maps(topo, "")
        # PU numbers are at most topology/validate.MAX_PU (65,535): a small table
        lut = np.full(max(pu_core, default=-1) + 1, -1, np.int64)
        lut[list(pu_core)] = list(pu_core.values())
        return cls(topo, index_of, pu_numa, lut)


class JobAggregator:
    """Frames of N node streams -> one snapshot of the job (module docstring)."""

    def __init__(self, names: list[str] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._nodes: dict[int, _Node] = {}
        self.clock = clock
        self.started = clock()
        self.events: list[str] = []           # one line per node lost or ended
        # The nodes' hardware, each shape once (_shape_key): a job's nodes are mostly alike,
        # and 1,000 copies of a topology were 430,000 objects for every full GC to walk.
        self._shapes: dict[str, _Shape] = {}
        self._reported = 0                    # nodes that sent a frame or ended (all_reported)
        for i, n in enumerate(names or []):
            self._nodes[i] = _Node(i, n)

    # ---- input -------------------------------------------------------------------------------
    def _node(self, index: int) -> _Node:
        n = self._nodes.get(index)
        if n is None:
            n = self._nodes[index] = _Node(index, f"task{index}")
        return n

    def feed(self, index: int, line: bytes) -> None:
        n = self._node(index)
        n.bytes_in += len(line)
        rec = n.asm.feed(line)
        if rec is None:
            return
        if rec.kind == "T":
            self._topology(n, rec)
        elif rec.kind == "F":
            if n.topology is None:
                return
            n.last, n.dirty = rec, True
            n.frames += 1
            if n.first_frame_at is None:
                n.first_frame_at = self.clock()
                self._reported += n.status == WAITING
            if n.status == WAITING:
                n.status = LIVE
        elif rec.kind == "E":
            self.end(index, str(rec.header.get("why", "ended"))[:200], ENDED)

    def _topology(self, n: _Node, rec: Record) -> None:
        raw = rec.header.get("topology")
        try:
            if not isinstance(raw, dict):
                raise TypeError("no topology")
            key = _shape_key(raw)
            shape = self._shapes.get(key)
            if shape is None:
                shape = self._shapes[key] = _Shape.of(Topology.from_dict(raw))
        except (ValueError, TypeError, KeyError, RecursionError) as exc:
            self.end(n.index, f"its topology does not load ({str(exc)[:120]})", LOST)
            return
        # the header without its topology (its parsed JSON is the shape's, once)
        n.head = {k: v for k, v in rec.header.items() if k != "topology"}
        n.host, n.alloc = str(n.head.get("host", ""))[:64], str(n.head.get("alloc", ""))[:1000]
        n.topology, n.dirty = shape.topology, True
        n.name = str(rec.header.get("node") or n.name)[:64]
        n.index_of, n.pu_numa, n.pu_lut = shape.index_of, shape.pu_numa, shape.pu_lut
        n.pu_core, n.alloc_cores = core_maps(shape.topology,
                                             str(rec.header.get("alloc", ""))[:1000])

    def end(self, index: int, why: str, status: str = LOST) -> None:
        """A node's stream ended (``E`` record, its sampler or srun's task gone)."""
        n = self._node(index)
        if n.status in (ENDED, LOST):
            return
        self._reported += n.frames == 0
        n.status, n.why, n.dirty = status, why, True
        self.events.append(f"{n.name}: {why}")

    def end_all(self, why: str, status: str = ENDED) -> None:
        """Every node's stream that has not ended ends (srun is gone)."""
        for i in sorted(self._nodes):
            self.end(i, why, status)

    # ---- output ------------------------------------------------------------------------------
    def nodes(self) -> list[NodeView]:
        """Every node's view, by index; only nodes with a new frame are recomputed."""
        out = []
        for i in sorted(self._nodes):
            n = self._nodes[i]
            if n.dirty or n.view is None:
                n.view = self._view(n)
                n.dirty = False
            else:
                n.view.status, n.view.bytes_in = n.status, n.bytes_in
            out.append(n.view)
        prime(out)          # every new view's thread sums, before any consumer asks one node
        return out

    def all_reported(self) -> bool:
        """Every node sent a frame (or ended)."""
        return bool(self._nodes) and self._reported >= len(self._nodes)

    def first_frame_s(self) -> float | None:
        """Seconds from the start to the first frame of the last node to send one."""
        times = [n.first_frame_at for n in self._nodes.values()]
        if not times or any(t is None for t in times):
            return None
        return max(t for t in times if t is not None) - self.started

    def frames_of(self, index: int) -> int:
        """How many frames node INDEX has sent (-1: no such node)."""
        n = self._nodes.get(index)
        return -1 if n is None else n.frames

    def topology(self, index: int) -> Topology | None:
        n = self._nodes.get(index)
        return None if n is None else n.topology

    def name(self, index: int) -> str:
        n = self._nodes.get(index)
        return "?" if n is None else n.name

    def _view(self, n: _Node) -> NodeView:
        rec = n.last
        if rec is None or n.topology is None:
            return NodeView(n.index, n.name, n.status, n.why, host=n.host, topology=n.topology,
                            frames=n.frames, bytes_in=n.bytes_in, alloc=n.alloc)
        h, a = rec.header, rec.arrays
        names = h.get("m")
        if names is not n.m_names:      # the static part's list, the same while it holds
            n.m_names, n.m_rows = names, _row_indexes(names, VIEW_METRICS)
            n.m_util = dict(n.m_rows).get("util_pct", -1)
        m = a.get("m")
        busy = None
        if m is not None and m.ndim == 2 and isinstance(names, list) \
                and m.shape == (len(names), len(n.topology)):
            if n.m_util >= 0:
                busy = float(m[n.m_util, n.topology.root.id])
        else:
            m = None
        gpus = h.get("gpus")
        tc = thread_arrays(a)
        launch = h.get("launch")
        # one constructor call with every field (no default lists and dicts made to be replaced)
        return NodeView(
            n.index, n.name, n.status, n.why, n.host, n.topology,
            _int(h.get("wall")), _float(h.get("dt")), busy,
            [g for g in gpus if isinstance(g, dict)][:64] if isinstance(gpus, list) else [],
            n.frames, n.bytes_in,
            launch[:1000] if isinstance(launch, str) and launch else None, n.alloc,
            pu_numa=n.pu_numa, pu_core=n.pu_core, alloc_cores=n.alloc_cores,
            _rank_src=(n.name, h, a, n.pu_numa), _tc=tc,
            pu_lut=n.pu_lut if tc is not None else None,
            _m=m, _m_rows=n.m_rows if m is not None else (), _index_of=n.index_of)

    def snapshot(self) -> dict[str, Any]:
        """The job as ``top --job --batch --json`` prints it (the findings are added there)."""
        nodes = self.nodes()
        return {"nodes": [v.to_dict() for v in nodes],
                "imbalance": imbalance(nodes), "events": list(self.events)}


#: The metrics a node's view reads (of the dozens a frame carries, for the node's `top`).
VIEW_METRICS = ("util_pct", "mem_used_bytes", "mem_total_bytes")


def metric_rows(h: dict[str, Any], a: dict[str, np.ndarray], nobj: int) -> dict[str, np.ndarray]:
    """The F record's metrics: name -> value per topology object (none when they do not fit
    the node's topology)."""
    m, names = a.get("m"), h.get("m")
    if m is None or not isinstance(names, list) or m.ndim != 2 \
            or m.shape != (len(names), nobj):
        return {}
    return {str(k): m[i] for i, k in enumerate(names)}


def _row_indexes(names: Any, only: tuple[str, ...]) -> tuple[tuple[str, int], ...]:
    """(metric, its row) of those of ONLY that a frame's metric names (``m``) hold."""
    if not isinstance(names, list):
        return ()
    return tuple((k, names.index(k)) for k in only if k in names)


def _strs(h: dict[str, Any], key: str, n: int, cut: int) -> list[str]:
    v = h.get(key)
    out = [str(x)[:cut] for x in v] if isinstance(v, list) else []
    return (out + [""] * n)[:n]


#: The most distinct affinities a frame's header may name (a node's threads have a few).
MAX_AFFS = 4096


def thread_arrays(a: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray] | None:
    """A frame's threads ("t": pid, tid, rank, PU, affinity per row) and their CPU % ("c"),
    when they are what the sampler writes: integer columns of at most 32 bits (wider or
    float PUs and pids would not fit the joined pass's 32-bit keys in threadstats, nor name
    a thread of the node)."""
    t, c = a.get("t"), a.get("c")
    if t is None or c is None or t.ndim != 2 or t.shape[1] != 5 or t.dtype.kind not in "iu" \
            or t.dtype.itemsize > 4 or c.shape != (len(t),):
        return None
    return t, c


def _ranks(node: str, h: dict[str, Any], a: dict[str, np.ndarray],
           pu_numa: dict[int, int]) -> list[RankView]:
    tc, p = thread_arrays(a), a.get("p")
    raw_affs = h.get("affs")
    # the affinities the threads' rows name, as sent (never padded to a number a row says)
    affs = [str(x)[:200] for x in raw_affs[:MAX_AFFS]] if isinstance(raw_affs, list) else []
    threads: dict[int, list[ThreadView]] = {}
    aff_of: dict[int, str] = {}
    if tc is not None:
        t, c = tc
        for (pid, tid, _rank, pu, aff), cpu in zip(t.tolist(), c.tolist()):
            threads.setdefault(pid, []).append(
                ThreadView(tid, pu, None if math.isnan(cpu) else cpu))
            if 0 <= aff < len(affs):
                aff_of.setdefault(pid, affs[aff])
    out: list[RankView] = []
    if p is None or p.ndim != 2 or p.shape[1] < 3:
        return out
    nodes = h.get("numa")
    nodes = [int(x) for x in nodes if isinstance(x, int)] if isinstance(nodes, list) else []
    if len(nodes) != p.shape[1] - 3:
        nodes = []
    comm, step = _strs(h, "comm", len(p), 64), _strs(h, "step", len(p), 32)
    for i, row in enumerate(p.tolist()):
        if math.isnan(row[wire.P_PID]):
            continue
        pid, rank = int(row[wire.P_PID]), row[wire.P_RANK]
        th = threads.get(pid, [])
        known = [x.cpu_pct for x in th if x.cpu_pct is not None]
        numa = {n: int(b) for n, b in zip(nodes, row[3:]) if not math.isnan(b)}
        out.append(RankView(node=node, rank=int(rank) if rank >= 0 else None, pid=pid,
                            comm=comm[i], step=step[i],
                            cpu_pct=sum(known) if known else None, threads=th,
                            affinity=aff_of.get(pid, ""), numa_mem=numa,
                            rss=None if math.isnan(row[wire.P_RSS]) else int(row[wire.P_RSS]),
                            run_numa=sorted({pu_numa[x.pu] for x in th if x.pu in pu_numa})))
    out.sort(key=lambda r: (r.rank is None, r.rank if r.rank is not None else 0, r.pid))
    return out


def imbalance(nodes: list[NodeView]) -> dict[str, Any]:
    """How unequal the job is: per node its job CPU %, per rank its CPU % (max/mean and the
    percent imbalance (max - mean) / max, as the report's job section)."""
    def one(values: list[float]) -> dict[str, float] | None:
        if len(values) < 2 or max(values) <= 0:
            return None
        mean = sum(values) / len(values)
        return {"max_over_mean": round(max(values) / mean, 3) if mean else float("inf"),
                "percent": round(100.0 * (max(values) - mean) / max(values), 1),
                "min": round(min(values), 1), "max": round(max(values), 1)}

    live = [v for v in nodes if v.status == LIVE]
    ranks: list[float] = []
    for v in live:
        ranks += rank_cpu(v)
    return {"nodes": one([v.job_cpu_pct for v in live]), "ranks": one(ranks)}


def node_frame(agg: JobAggregator, index: int) -> Any:
    """The node's last frame as a model Frame (its topology, every metric it sent, the job's
    processes as rows, its sources), for the node's full `top` view; None before its first."""
    from snumap_tui.model.frame import Frame, TaskRow
    from snumap_tui.sources.base import SourceStatus

    n = agg._nodes.get(index)
    if n is None or n.topology is None or n.last is None:
        return None
    rec, nobj = n.last, len(n.topology)
    values = {k: v.astype(np.float64)
              for k, v in metric_rows(rec.header, rec.arrays, nobj).items()}
    view = n.view if n.view is not None and not n.dirty else agg._view(n)
    rows = []
    for r in view.ranks:
        pus = [t.pu for t in r.threads if t.pu >= 0]
        rows.append(TaskRow(pid=r.pid, tid=r.pid, comm=r.comm, user="", state="R",
                            cpu_pct=r.cpu_pct, last_cpu=pus[0] if pus else None,
                            affinity=frozenset(cpus_of(r.affinity)), job=f"rank {r.rank}"
                            if r.rank is not None else None, nthreads=max(1, len(r.threads)),
                            rss_bytes=r.rss))
    rows.sort(key=lambda t: -(t.cpu_pct or 0.0))
    sources = {}
    for k, d in (n.head.get("sources") or {}).items():
        if isinstance(d, dict):
            sources[str(k)] = SourceStatus(str(k), bool(d.get("available")),
                                           str(d.get("reason") or "")[:300] or None)
    h = rec.header
    return Frame(t_ns=_int(h.get("t")), wall_ns=_int(h.get("wall")),
                 dt_s=_float(h.get("dt")), topology=n.topology, values=values,
                 tasks=rows, sources=sources)


def core_maps(topo: Topology, alloc: str) -> tuple[dict[int, int], frozenset[int]]:
    """(PU OS index -> its core's logical index, the cores whose PUs are all in ALLOC (a
    cpulist; every core when empty))."""
    pu_core: dict[int, int] = {}
    mine = set(cpus_of(alloc)) if alloc else None
    cores = set()
    for core in topo.by_type("Core"):
        pus = [p.os_index for p in topo.pus[core.pu_range[0]:core.pu_range[1]]
               if p.os_index is not None]
        for p in pus:
            pu_core[p] = core.logical_index
        if pus and (mine is None or all(p in mine for p in pus)):
            cores.add(core.logical_index)
    return pu_core, frozenset(cores)


def cpus_of(cl: str) -> list[int]:
    """A cpulist another process sent -> OS indexes ([] when it is not one)."""
    from snumap_tui.native.perf_pmu import parse_cpulist

    try:
        return parse_cpulist(cl)
    except ValueError:
        return []
