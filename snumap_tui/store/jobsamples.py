"""The metric samples of a job merged from several nodes (format version 2), as one sample
per step on the job's topology, so every reader of ``Recording.samples()`` -- the report's
energy and I/O, the CSV and Parquet samples, the replay's strips and tree, Perfetto's
counters -- reads a merged job as it reads one machine.

A merge keeps each node's samples as they were recorded (node samples chunks, kind 12: the
node's own clock, PU numbers, NUMA nodes and device names). Here they are put together:

- **Steps**: the samples of the node whose samples span the longest time (the reference)
  give the times; at each step every node contributes its sample nearest to it (the
  recorders of one job sample at the same interval, a little out of phase). A node that has not sampled yet, or
  whose latest sample is older than one and a half of its intervals, is absent from the step
  (its values: not available). Consecutive steps then hold consecutive samples of each node,
  so ``derive(prev, cur)`` gives each node's rates over its own interval, within the phase
  difference. What a node sampled outside the reference's span (its first or last interval
  when the recorders started a moment apart) is not in any step: a step led by another node
  would pair samples an interval apart with a step a fraction of it long (a false peak).
- **Places**: what a node's readings number is moved onto the job's numbering, as the merge
  moved the topology (topology/combine.py): PUs by the node's ``cpu_base``; NUMA nodes and
  packages by the bases ``type_bases`` recovers from the merged topology; I/O devices are
  named ``node:device`` (two nodes both have an ``eth0``); a RAPL domain is named after the
  job's object it measures (``package-3``: node 2's package 0 when node 1 has three).
- Per-task readings (``tasks``) are left out: a job's processes are in the events and the
  report; each node's own samples stay readable whole (``store.merge.node_samples``).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from snumap_tui.model.sample import Sample
from snumap_tui.store import chunks as C
from snumap_tui.topology.model import Topology

#: The field whose length is a source's number of items (PUs, nodes, domains, devices).
ITEMS = {"procstat": "cpus", "perf": "cpus", "freq": "cpus", "numa": "nodes",
         "rapl": "domains", "net": "names", "ib": "names", "disk": "names", "gpu": "names"}
LEFT_OUT = ("tasks",)
#: Machine-wide counts that add up over the nodes (the rest of a source's scalars: the first
#: node's, e.g. the tick rate).
ADDITIVE = {"procstat": ("ctxt", "procs_running", "procs_blocked")}
_PERF_TABLES = ("value", "enabled", "running")


def type_bases(topology: Topology) -> list[dict[str, int]]:
    """Per node (the merged topology's Machines, in order), what the merge added to each
    type's OS index: one more than the largest of that type in the nodes before it
    (topology/combine.py numbers each node's objects after the previous nodes')."""
    root = topology.root
    machines = [topology.objects[c] for c in root.children
                if topology.objects[c].type == "Machine"]
    out: list[dict[str, int]] = []
    running: dict[str, int] = {}
    for m in machines:
        out.append(dict(running))
        for o in topology.walk(m):
            if o.os_index is not None and not o.type.endswith("Cache") and o.type != "Machine":
                running[o.type] = max(running.get(o.type, 0), int(o.os_index) + 1)
    return out


def _moved(readings: dict[str, Any], node: str, cpu_base: int, bases: dict[str, int],
           only_numa: int | None = None) -> dict[str, dict[str, Any]]:
    """One node's readings on the job's numbering (see the module's docstring). A device
    whose NUMA node sysfs does not know (-1) is on ``only_numa``, the node's one NUMA node
    when it has one (as on the machine alone)."""
    out: dict[str, dict[str, Any]] = {}
    numa_base = bases.get("NUMANode", 0)
    for source, fields in readings.items():
        if source in LEFT_OUT or not isinstance(fields, dict):
            continue
        f = dict(fields)
        if "cpus" in f:
            f["cpus"] = np.asarray(f["cpus"], dtype=np.int64) + cpu_base
        if source == "numa" and "nodes" in f:
            f["nodes"] = np.asarray(f["nodes"], dtype=np.int64) + numa_base
        if ITEMS.get(source) == "names" and "names" in f:
            f["names"] = [f"{node}:{n}" for n in f["names"]]
            if "numa" in f:
                nm = np.asarray(f["numa"], dtype=np.int64)
                f["numa"] = np.where(nm >= 0, nm + numa_base,
                                     nm if only_numa is None else only_numa)
        if source == "rapl" and "domains" in f and "objects" in f:
            objs = [[str(t), int(i) + (0 if t == "Machine" else bases.get(str(t), 0))]
                    for t, i in f["objects"]]
            f["objects"] = objs
            f["domains"] = [f"{str(d).rpartition('-')[0] or d}-{i}" if t != "Machine"
                            else f"{d}-{node}" for d, (t, i) in zip(f["domains"], objs)]
        out[source] = f
    return out


def _items(fields: dict[str, Any], key: str) -> int | None:
    v = fields.get(key)
    return len(v) if v is not None else None


def _joined(source: str, parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The nodes' readings of one source as one: per-item fields end to end, other fields
    from the first node that has them, the ``ADDITIVE`` ones summed (a perf table's columns as
    the union of the events)."""
    if len(parts) == 1:
        return parts[0]
    key = ITEMS.get(source)
    parts = list(parts)
    if source == "perf":
        parts = _perf_columns(parts)
    out: dict[str, Any] = {}
    for name in dict.fromkeys(n for p in parts for n in p):
        vals = [p.get(name) for p in parts]
        if source == "perf" and name == "events":
            # the same list in every part by now; never per PU, even where a node has as
            # many events as PUs (it was once joined end to end there)
            out[name] = list(vals[0] or [])
            continue
        per_item = key is not None and all(
            v is not None and _items(p, key) is not None and hasattr(v, "__len__")
            and not isinstance(v, (str, dict)) and len(v) == _items(p, key)
            for v, p in zip(vals, parts))
        if per_item and any(isinstance(v, np.ndarray) for v in vals):
            out[name] = np.concatenate([np.asarray(v) for v in vals])
        elif per_item:
            out[name] = [x for v in vals for x in v]      # type: ignore[union-attr]
        elif name in ADDITIVE.get(source, ()) and all(
                isinstance(v, (int, float)) for v in vals):
            out[name] = sum(vals)
        else:
            out[name] = next(v for v in vals if v is not None)
    return out


def _perf_columns(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The nodes' perf readings with one column per event of any node (NaN where a node did
    not count it), so their tables can be stacked; the enabled and running times only when
    every node has them (a 1 ms recording's samples between sweeps leave them out where
    nothing was multiplexed: one node's table beside another's would not stack)."""
    events = list(dict.fromkeys(e for p in parts for e in p.get("events", ())))
    timed = all("enabled" in p and "running" in p for p in parts)
    out = []
    for p in parts:
        q = dict(p)
        if not timed:
            q.pop("enabled", None)
            q.pop("running", None)
        have = list(p.get("events", ()))
        if have != events:
            n = _items(p, "cpus") or 0
            for t in _PERF_TABLES:
                if t in q:
                    old = np.asarray(p[t], dtype=np.float64).reshape(n, len(have))
                    new = np.full((n, len(events)), np.nan)
                    for j, e in enumerate(have):
                        new[:, events.index(e)] = old[:, j]
                    q[t] = new
            q["events"] = events
        out.append(q)
    return out


def combine_readings(per_node: Sequence[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """The moved readings of several nodes at one step as one sample's readings."""
    sources: dict[str, list[dict[str, Any]]] = {}
    for readings in per_node:
        for source, fields in readings.items():
            sources.setdefault(source, []).append(fields)
    return {s: _joined(s, parts) for s, parts in sources.items()}


class JobSamples:
    """The job-wide samples of a merged recording (``rec``: its Recording)."""

    def __init__(self, rec: Any) -> None:
        self.rec = rec
        table = rec.nodes
        self.nodes: list[dict[str, Any]] = table.nodes
        self.names: list[str] = table.names
        self.bases = type_bases(rec.topology)
        topo = rec.topology
        machines = [topo.objects[c] for c in topo.root.children
                    if topo.objects[c].type == "Machine"]
        numas = [[o.os_index for o in topo.walk(m) if o.type == "NUMANode"] for m in machines]
        self.only_numa = [int(n[0]) if len(n) == 1 and n[0] is not None else None
                          for n in numas]
        self.chunks: list[list[Any]] = [[] for _ in self.nodes]
        for h in rec._chunks:
            k = table.chunk_node.get(h.offset)
            if h.kind == C.K_NODE_SAMPLES and k is not None:
                self.chunks[k].append(h)

    def _shift(self, k: int) -> int:
        return int(self.nodes[k].get("shift_ns", 0))

    def _node(self, k: int, start: int | None = None) -> Iterator[Sample]:
        """Node k's samples on the job's clock, from the chunk holding the last sample at
        or before ``start`` (from the first without it)."""
        chunks = self.chunks[k]
        shift = self._shift(k)
        first = 0
        if start is not None:
            before = [i for i, h in enumerate(chunks) if int(h.t_min) + shift <= start]
            first = before[-1] if before else 0
        for h in chunks[first:]:
            for t, wall, readings in self.rec._payload(h) or []:
                yield Sample(int(t) + shift, int(wall), readings)

    def _keyed(self, k: int, lo: int) -> Iterator[tuple[int, int, Sample]]:
        for smp in self._node(k, lo):
            yield smp.t_ns, k, smp

    def _spans(self) -> list[tuple[int, int] | None]:
        """Each node's first and last sample time on the job's clock (None: no samples)."""
        return [(min(int(h.t_min) for h in c) + self._shift(k),
                 max(int(h.t_max) for h in c) + self._shift(k)) if c else None
                for k, c in enumerate(self.chunks)]

    def _steps(self, lo: int, hi: int) -> Iterator[tuple[Sample, list[tuple[int, Sample]]]]:
        """(the step's sample, every node's sample at it) for the steps in [lo, hi): the
        samples of the node whose samples span the longest time (the reference). A node's
        sample at a step is the one nearest to it up to half its interval after it
        (recorders started together sample together), while at most one and a half of its
        intervals older than the step."""
        spans = self._spans()
        ref = max((k for k, sp in enumerate(spans) if sp is not None),
                  key=lambda k: (spans[k][1] - spans[k][0], -k),   # type: ignore[index]
                  default=None)
        interval = [int(n.get("interval_ns") or 0) for n in self.nodes]
        late = [i // 2 for i in interval]
        stale = [3 * i // 2 or None for i in interval]
        wait = max(late, default=0)
        streams = [self._keyed(k, lo - wait) for k in range(len(self.nodes)) if self.chunks[k]]
        history: dict[int, list[Sample]] = {}
        pending: list[Sample] = []

        def ready(step: Sample) -> tuple[Sample, list[tuple[int, Sample]]]:
            t = step.t_ns
            parts = []
            for j, h in sorted(history.items()):
                got = [step] if j == ref else [x for x in h if x.t_ns <= t + late[j]]
                near = min(got, key=lambda x: abs(x.t_ns - t), default=None)
                if near is not None and (stale[j] is None or t - near.t_ns <= stale[j]):  # type: ignore[operator]
                    parts.append((j, near))
            return step, parts

        for t, k, smp in heapq.merge(*streams, key=lambda x: (x[0], x[1])):
            while pending and pending[0].t_ns + wait < t:     # every node's is in by now
                yield ready(pending.pop(0))
            if t >= hi + wait:
                break
            h = history.setdefault(k, [])
            h.append(smp)
            # Keep what a pending or later step may still take: the last sample before it.
            oldest = pending[0].t_ns if pending else t
            while len(h) > 1 and h[1].t_ns <= oldest:
                h.pop(0)
            if k == ref and lo <= t < hi:
                pending.append(smp)
        for step in pending:
            yield ready(step)

    def times(self) -> np.ndarray:
        """The steps' times on the job's clock."""
        return np.array([s.t_ns for s, _ in self._steps(0, 1 << 64)], dtype=np.uint64)

    def samples(self, t0: int | None = None, t1: int | None = None) -> Iterator[Sample]:
        lo = 0 if t0 is None else int(t0)
        hi = (1 << 64) if t1 is None else int(t1)
        for step, parts in self._steps(lo, hi):
            moved = [_moved(x.readings, self.names[k], int(self.nodes[k].get("cpu_base", 0)),
                            self.bases[k] if k < len(self.bases) else {},
                            self.only_numa[k] if k < len(self.only_numa) else None)
                     for k, x in parts]
            yield Sample(step.t_ns, step.wall_ns, combine_readings(moved))
