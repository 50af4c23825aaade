"""`snumap merge`: the recordings of a job's nodes as one recording (format version 2).

Design (docs/architecture.md, "Jobs"; docs/format.md, version 2):

- **One topology**: a System root with each node's Machine under it (topology/combine.py); PU,
  NUMA node, package and core OS indexes get a per-node base so they stay unique.
- **One time base**: node k's CLOCK_MONOTONIC is mapped onto the first node's by
  ``shift_ns = offset_k - offset_0``, ``offset = wall - monotonic`` as the recorder measured it
  at the start and the end (sources/clocksync.py; the mean of the two, their difference is the
  drift). The alignment error kept per node: the read uncertainties when both recordings come
  from the same boot of the same kernel (one clock), else the sum of both nodes' NTP maxerror,
  or None ("unknown") when a clock was not synchronised.
- **Task ids qualified by node**: ``tid_base[k] + tid`` (store/nodes.py).
- **Streamed, bounded memory**: members are opened twice, one at a time: for their metadata,
  then for their small chunks and chunk headers; every events and samples chunk is copied byte for byte (its
  payload CRC checked, its header's times moved), interleaved across nodes by start time, so a
  reader seeking by time touches few chunks. Memory: one chunk plus the chunk headers, however
  many files are merged; no event is decoded unless a member lacks ``pid_max`` (then its task
  ids are scanned once for their largest value).
"""

from __future__ import annotations

import heapq
import os
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from snumap_tui.errors import SnumapError
from snumap_tui.safeout import SafeOutput, check_output
from snumap_tui.sources.clocksync import wall_error_ns
from snumap_tui.store import chunks as C
from snumap_tui.store import codec
from snumap_tui.store.mergeattr import copy_attribution, counter_events, header_entries
from snumap_tui.store.nodes import TASK_FIELDS
from snumap_tui.store.reader import open_recording
from snumap_tui.store.writer import MERGED_VERSION, Writer
from snumap_tui.topology.combine import combine
from snumap_tui.topology.model import Topology
from snumap_tui.trace.events import EventBatch, TaskInfo

TID_LIMIT = (1 << 31) - 1
DEFAULT_PID_MAX = 1 << 22      # PID_MAX_LIMIT on 64-bit kernels


@dataclass
class Member:
    path: Path
    node: str
    host: str
    job: str | None
    n_pus: int
    topology: Topology
    header: dict[str, Any]
    offset_ns: int                  # wall - monotonic
    offset_unc_ns: int | None
    drift_ns: int | None
    tid_span: int
    damaged: list[str] = field(default_factory=list)
    boot_id: str | None = None


@dataclass
class MergeResult:
    nodes: list[dict[str, Any]]
    skipped: list[str]
    damaged: list[str]
    events: int
    out: Path


def _offset(header: dict[str, Any], infos: list[dict[str, Any]]
            ) -> tuple[int, int | None, int | None, dict[str, Any] | None]:
    """(wall - monotonic, its uncertainty, the drift start->end, the start reading)."""
    start = header.get("clock_start")
    end = next((i.get("clock") for i in infos if i.get("what") == "clock end"), None)
    readings = [r for r in (start, end) if isinstance(r, dict)]
    if readings:
        offs = [int(r["wall_minus_monotonic_ns"]) for r in readings]
        unc = max(int(r.get("uncertainty_ns", 0)) for r in readings)
        drift = offs[-1] - offs[0] if len(offs) == 2 else None
        return sum(offs) // len(offs), unc, drift, start if isinstance(start, dict) else end
    if "start_wall_ns" in header and "start_monotonic_ns" in header:
        return int(header["start_wall_ns"]) - int(header["start_monotonic_ns"]), None, None, None
    raise ValueError("no wall-clock time in its header")


def _job_of(header: dict[str, Any]) -> str | None:
    job = header.get("job")
    if isinstance(job, dict) and job.get("id") is not None:
        return f"{job.get('system', 'slurm')}:{job['id']}"
    return None


def _scan_tid_max(rec: Any) -> int:
    top = max([t.tid for t in rec.task_history] + [t.pid for t in rec.task_history] + [0])
    for cols in rec.iter_event_columns(TASK_FIELDS):
        for f in TASK_FIELDS:
            if cols[f].size:
                top = max(top, int(cols[f].max()))
    return top


def _inspect(path: Path) -> Member:
    with open_recording(path) as rec:
        if rec.version >= MERGED_VERSION:
            raise ValueError("is already a merged recording")
        h = rec.header
        if not h or "topology" not in h:
            raise ValueError("has no readable header (topology, host)")
        topo = rec.topology
        off, unc, drift, _ = _offset(h, rec.infos)
        node = str(h.get("node") or h.get("host") or topo.meta.get("HostName") or path.stem)
        end = next((i for i in rec.infos if i.get("what") == "clock end"), {})
        if end.get("tid_max") is not None and rec.complete:
            named = max([0, *(max(t.tid, t.pid, t.ppid) for t in rec.task_history)])
            span = max(int(end["tid_max"]), named) + 1
        elif h.get("pid_max"):
            span = int(h["pid_max"]) + 1
        else:
            span = _scan_tid_max(rec) + 1
        small = {k: v for k, v in h.items() if k not in ("topology", "sources")}
        return Member(path, node, str(h.get("hostname") or h.get("host") or node), _job_of(h),
                      len(topo.pus), topo, small, off, unc, drift, span, list(rec.damaged),
                      h.get("boot_id"))


def _alignment(m: Member, ref: Member) -> tuple[int | None, str]:
    if m.boot_id and m.boot_id == ref.boot_id:
        return (m.offset_unc_ns or 0) + (ref.offset_unc_ns or 0), "same clock (one boot)"
    if m is ref:
        return 0, "reference"
    if m.offset_unc_ns is None or ref.offset_unc_ns is None:
        # Recorded without --job: each header's start wall time and monotonic time (read
        # together when the file was created) still align it by wall clock; only the wall
        # clocks' error is not known (no NTP state was recorded).
        return None, ("by each recording's start wall time; NTP state not recorded "
                      "(record --job keeps it)")
    errs = [wall_error_ns(x.header.get("clock_start")) for x in (m, ref)]
    if any(e is None for e in errs):
        return None, "wall clock not synchronised (NTP/PTP): error unknown"
    return int(sum(e for e in errs if e is not None)), "NTP maxerror of both nodes"


def plan(paths: Sequence[str | Path], *, force: bool = False,
         say: Callable[[str], None] = lambda s: None) -> tuple[list[Member], list[str]]:
    """Read every member's metadata (one file at a time); refuse what cannot be merged."""
    members: list[Member] = []
    skipped: list[str] = []
    for p in paths:
        try:
            members.append(_inspect(Path(p)))
        except (SnumapError, ValueError, KeyError, TypeError, OSError) as exc:
            skipped.append(f"{p}: {exc}")
            say(f"skipped {p}: {exc}")
    if not members:
        raise SnumapError("nothing to merge: " + ("; ".join(skipped[:3]) or "no files given"))
    seen: dict[str, Member] = {}
    for m in members:
        if m.node in seen:
            raise SnumapError(f"{seen[m.node].path} and {m.path} are both from node {m.node!r}: "
                              "a job has one recording per node (merge them separately)")
        seen[m.node] = m
    jobs = {m.job for m in members}
    if len(jobs) > 1 and not force:
        names = ", ".join(f"{m.path.name} ({m.job or 'no job'})" for m in members[:4])
        raise SnumapError(f"recordings of different jobs: {names}; --force merges them anyway")
    counter_events([m.path for m in members], [m.header for m in members])
    spans = [m.tid_span for m in members]
    if sum(spans) > TID_LIMIT:
        raise SnumapError(f"{len(members)} nodes' task ids do not fit in 32 bits once qualified "
                          "by node; merge fewer nodes at once")
    return members, skipped


def _node_entries(members: list[Member], bases: list[dict[str, int]]) -> list[dict[str, Any]]:
    ref = members[0]
    out = []
    tid_base = 0
    for m, b in zip(members, bases):
        err, how = _alignment(m, ref)
        h = m.header
        out.append({
            "node": m.node, "host": m.host, "file": m.path.name, "job": m.job,
            "cpu_base": int(b.get("PU", 0)), "n_pus": m.n_pus, "tid_base": tid_base,
            "shift_ns": m.offset_ns - ref.offset_ns, "align_error_ns": err, "align_how": how,
            "clock_drift_ns": m.drift_ns, "kernel": h.get("kernel"),
            "cpu_model": h.get("cpu_model"), "backend": h.get("backend"),
            "approximate": bool(h.get("approximate")), "interval_ns": h.get("interval_ns"),
            "start_monotonic_ns": int(h.get("start_monotonic_ns", 0)) + m.offset_ns
            - ref.offset_ns, "damaged": m.damaged})
        tid_base += m.tid_span
    return out


def _qualify(v: int, base: int) -> int:
    return v + base if v > 0 else v


def _small_chunks(rec: Any, node: dict[str, Any], w: Writer) -> None:
    """Tasks, markers, lost counts and infos of node k, re-encoded onto the merged ids."""
    tb, shift, name = int(node["tid_base"]), int(node["shift_ns"]), node["node"]
    tasks = [TaskInfo(tid=_qualify(t.tid, tb), pid=_qualify(t.pid, tb), comm=t.comm,
                      ppid=_qualify(t.ppid, tb), t_ns=max(0, t.t_ns + shift))
             for t in rec.task_history]
    lost = {int(c) + int(node["cpu_base"]): n for c, n in rec.lost.items()}
    w.add_events(EventBatch(tasks=tasks, lost=lost))
    for t, text in rec.markers:
        w.add_marker(max(0, t + shift), f"{name}: {text}")
    for info in rec.infos:
        v = dict(info)
        what = str(v.pop("what", "?"))
        t = max(0, int(v.pop("t_ns", 0)) + shift)
        v["node"] = name
        if what == "job processes" and "rows" in v:
            cols = list(v.get("columns", []))
            if "pid" in cols:
                i = cols.index("pid")
                v["columns"] = [*cols, "local_pid"]
                v["rows"] = [[*r[:i], _qualify(int(r[i]), tb), *r[i + 1:], r[i]]
                             for r in v["rows"]]
        w.add_info(t, what, v)
    w.flush()


def _chunk_stream(k: int, rec: Any, shift: int) -> Iterator[tuple[int, int, C.ChunkHeader]]:
    """Node k's events and samples chunk headers, by their start on the merged time base."""
    for h in rec._chunks:
        if h.kind in (C.K_EVENTS, C.K_SAMPLES):
            yield max(0, int(h.t_min) + shift), k, h


def merge(paths: Sequence[str | Path], out: str | Path, *, force: bool = False,
          overwrite: bool = False, say: Callable[[str], None] = lambda s: None,
          mode: int | None = None) -> MergeResult:
    """Written under a temporary name beside OUT and renamed at the end (safeout): an OUT
    that is one of the members is refused before anything is read."""
    check_output(Path(out), force=overwrite, inputs=paths)
    members, skipped = plan(paths, force=force, say=say)
    topo, bases = combine([m.topology for m in members], [m.node for m in members])
    nodes = _node_entries(members, bases)
    ref = members[0]
    jobs = sorted({m.job for m in members if m.job})
    header: dict[str, Any] = {
        "host": "+".join(m.node for m in members) if len(members) <= 4
        else f"{members[0].node}+{len(members) - 1} nodes",
        "nodes": nodes, "job": ref.header.get("job"), "jobs": jobs,
        "topology": topo.to_dict(), "kernel": ref.header.get("kernel"),
        "backend": "+".join(sorted({str(n["backend"]) for n in nodes})),
        "approximate": any(n["approximate"] for n in nodes),
        "system_wide": all(bool(m.header.get("system_wide")) for m in members),
        "interval_ns": ref.header.get("interval_ns"),
        "start_monotonic_ns": min(int(n["start_monotonic_ns"]) for n in nodes),
        "merged": {"members": len(members), "skipped": skipped},
    }
    header["start_wall_ns"] = header["start_monotonic_ns"] + ref.offset_ns
    counted = counter_events([m.path for m in members], [m.header for m in members])
    numa_bases = [int(b.get("NUMANode", 0)) for b in bases]
    header.update(header_entries([m.node for m in members], [m.header for m in members],
                                 numa_bases, counted))
    for n, m in zip(nodes, members):
        n.update({k: m.header[k] for k in ("counters", "regions", "process_memory")
                  if k in m.header})
    outp = Path(out)
    sink = SafeOutput(outp, force=overwrite, inputs=paths, mode=mode)
    try:
        w = Writer(outp, header, autoflush=False, version=MERGED_VERSION,
                   fd=os.dup(sink.fd))
    except BaseException:
        sink.discard()
        raise
    damaged: list[str] = []
    events = 0
    try:
        streams = []
        for k, m in enumerate(members):
            with open_recording(m.path) as rec:
                _small_chunks(rec, nodes[k], w)
                copy_attribution(rec, nodes[k], numa_bases[k], counted, w.add_value_chunk,
                                 damaged.append)
                # the chunk headers, listed now: the copy reads payloads by offset
                streams.append(list(_chunk_stream(k, rec, int(nodes[k]["shift_ns"]))))
        fds = [os.open(m.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)) for m in members]
        try:
            events = _copy(streams, fds, nodes, members, w, damaged)
        finally:
            for fd in fds:
                os.close(fd)
        w.close()
        sink.commit()
    except BaseException:
        w.close()
        sink.discard()
        raise
    return MergeResult(nodes, skipped, damaged, events, outp)


def _copy(streams: Sequence[Iterable[tuple[int, int, C.ChunkHeader]]], fds: list[int],
          nodes: list[dict[str, Any]], members: list[Member], w: Writer,
          damaged: list[str]) -> int:
    """Copy the events and samples chunks of every member, ordered by start time."""
    events = 0
    current: int | None = None
    for t_min, k, h in heapq.merge(*streams, key=lambda x: (x[0], x[1])):
        start = h.offset + C.CHUNK_HEADER_SIZE
        payload = os.pread(fds[k], h.payload_len, start)
        if len(payload) != h.payload_len or zlib.crc32(payload) != h.payload_crc:
            damaged.append(f"{members[k].path}: damaged {h.name} chunk at byte {h.offset} "
                           "skipped")
            continue
        if current != k:
            body = codec.encode({"node": k, "name": nodes[k]["node"]})
            w.add_raw_chunk(C.K_NODE, C.pack_chunk(C.K_NODE, body, count=1), count=1,
                            t_min=0, t_max=0)
            current = k
        shift = int(nodes[k]["shift_ns"])
        t0, t1 = max(0, int(h.t_min) + shift), max(0, int(h.t_max) + shift)
        kind = C.K_EVENTS if h.kind == C.K_EVENTS else C.K_NODE_SAMPLES
        blob = C.reheaded(h, t0, t1, kind) + payload
        n = h.count if kind == C.K_EVENTS else 0
        w.add_raw_chunk(kind, blob, count=h.count, t_min=t0, t_max=t1, events=n)
        events += n
    return events


def node_samples(rec: Any, k: int) -> Iterator[Any]:
    """Node k's metric samples in a merged recording, on the merged time base."""
    from snumap_tui.model.sample import Sample

    table = rec.nodes
    if table is None:
        return
    shift = int(table.nodes[k].get("shift_ns", 0))
    for h in rec._chunks:
        if h.kind == C.K_NODE_SAMPLES and table.chunk_node.get(h.offset) == k:
            for t, wall, readings in rec._payload(h) or []:
                yield Sample(t_ns=int(t) + shift, wall_ns=int(wall), readings=readings)
