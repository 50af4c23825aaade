"""A recording as a native Perfetto trace (``.pftrace``: the protobuf ``perfetto.protos.Trace``,
a sequence of TracePackets), so that ui.perfetto.dev and trace_processor show snumap's
scheduling as their own CPU and thread scheduling tracks.

What goes where (field numbers from Perfetto's protos/perfetto/trace/, checked against the
``perfetto`` PyPI package's descriptors in tests/test_export_perfetto.py):

| recording | Perfetto |
|---|---|
| sched_switch (kind 1) | ``FtraceEventBundle`` per CPU with ``CompactSched``: switch_timestamp (first absolute, then deltas), switch_prev_state (the kernel's bits as recorded), switch_next_pid (a tid), switch_next_prio (120: not recorded), switch_next_comm_index into the bundle's intern_table |
| sched_wakeup, sched_wakeup_new (2, 3) | the same bundles' waking_* arrays (CompactSched carries sched_waking only), in the bundle of the target CPU |
| task names (tasks chunks) | one ``ProcessTree`` packet: processes (pid, ppid, comm) and threads (tid, tgid, name) |
| samples | ``TrackDescriptor`` counter tracks (export/counters.py: utilisation and IPC per PU, power per package, memory per NUMA node) and ``TrackEvent`` TYPE_COUNTER values |
| markers | ``TrackEvent`` instants on a "snumap markers" track |
| header | ``SystemInfo`` (kernel release: the trace processor decodes prev_state by it; host) and a ``ClockSnapshot`` tying the trace clock to wall time |

A job merged from several nodes (`snumap merge`) is one Perfetto machine per node
(``TracePacket.machine_id`` k + 1 for node k) with that node's own PU numbers and tids; so
are its regions, counters per run interval (export/perfetto_counters.py) and process memory
(export/perfetto_memory.py), under the node's own thread and process ids. Its metric counters
and markers stay on the host machine. A /proc-polled recording (no switches,
approximate intervals) gets the switches that rebuild its intervals. Migrations, fork, exec and exit are not written (Perfetto derives its thread state from
switches and wakings). Regions and markers of later recordings become slices through
``PerfettoWriter.track`` / ``PerfettoWriter.slice``.

Time base: the recording's CLOCK_MONOTONIC nanoseconds, unchanged, as the trace's default clock
(Perfetto assumes BOOTTIME for ftrace data; it differs from MONOTONIC only by time suspended).

Edges, so that run time per thread per CPU is the report's: Perfetto drops the first compact
switch of each CPU (it lacks the prev task), so each CPU's first bundle starts with a switch at
the recording's start into the task the first real switch switches out (the task running when
the recording began). The last slice on each CPU stays open (``dur = -1`` in trace_processor)
and the UI draws it to the end of the trace, which an instant at the recording's end fixes.

Streamed: events are read a window of store chunks at a time and written as bundles of at most
``MAX_BUNDLE`` events, so memory is bounded by the window, whatever the recording's size.
Varints are encoded with numpy (export/protowire.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import IO, Any

import numpy as np

from snumap_tui.analysis.intervals import Intervals
from snumap_tui.analysis.load import load
from snumap_tui.export.counters import COUNTER_TRACKS, counter_values
from snumap_tui.export.perfetto_counters import write_thread_counters
from snumap_tui.export.perfetto_memory import write_memory
from snumap_tui.export.perfetto_regions import write_regions
from snumap_tui.export.protowire import (
    encode_varints,
    f_bytes,
    f_double,
    f_str,
    f_varint,
    packed,
)
from snumap_tui.trace.events import SWITCH, WAKEUP, WAKEUP_NEW, TaskInfo

# TracePacket (protos/perfetto/trace/trace_packet.proto)
PKT_FTRACE_EVENTS, PKT_PROCESS_TREE, PKT_CLOCK_SNAPSHOT = 1, 2, 6
PKT_TIMESTAMP, PKT_SEQUENCE_ID, PKT_TRACK_EVENT, PKT_SEQUENCE_FLAGS = 8, 10, 11, 13
PKT_SYSTEM_INFO, PKT_TRACK_DESCRIPTOR, PKT_MACHINE_ID = 45, 60, 98
TRACE_PACKET = 1                                   # Trace.packet
# FtraceEventBundle and its CompactSched (ftrace/ftrace_event_bundle.proto)
BUNDLE_CPU, BUNDLE_COMPACT_SCHED = 1, 4
CS_INTERN = 5
CS_SWITCH_TS, CS_SWITCH_PREV_STATE, CS_SWITCH_NEXT_PID, CS_SWITCH_NEXT_PRIO = 1, 2, 3, 4
CS_SWITCH_NEXT_COMM = 6
CS_WAKING_TS, CS_WAKING_PID, CS_WAKING_CPU, CS_WAKING_PRIO = 7, 8, 9, 10
CS_WAKING_COMM, CS_WAKING_FLAGS = 11, 12
# ProcessTree (ps/process_tree.proto)
PT_PROCESSES, PT_THREADS = 1, 2
PROC_PID, PROC_PPID, PROC_CMDLINE, PROC_CMDLINE_IS_COMM = 1, 2, 3, 9
THR_TID, THR_NAME, THR_TGID = 1, 2, 3
# TrackDescriptor, CounterDescriptor, TrackEvent (track_event/*.proto)
TD_UUID, TD_NAME, TD_PARENT, TD_COUNTER = 1, 2, 5, 8
TD_THREAD, TDT_PID, TDT_TID = 4, 1, 2          # TrackDescriptor.thread: ThreadDescriptor
TD_PROCESS, TDP_PID = 3, 1                      # TrackDescriptor.process: ProcessDescriptor
CD_UNIT_NAME = 6
TE_TYPE, TE_TRACK_UUID, TE_NAME, TE_DOUBLE_VALUE = 9, 11, 23, 44
TE_CATEGORIES, TE_DEBUG_ANNOTATIONS = 22, 4
DA_NAME, DA_STRING_VALUE = 10, 6                 # DebugAnnotation (debug_annotation.proto)
TYPE_SLICE_BEGIN, TYPE_SLICE_END, TYPE_INSTANT, TYPE_COUNTER = 1, 2, 3, 4
# ClockSnapshot (clock_snapshot.proto), SystemInfo (system_info.proto)
CS_CLOCKS, CLOCK_ID, CLOCK_TS = 1, 1, 2
CLOCK_REALTIME, CLOCK_BOOTTIME = 1, 6
SI_UTSNAME, SI_MACHINE_NAME = 1, 17
UTS_SYSNAME, UTS_RELEASE = 1, 3

SEQ_INCREMENTAL_STATE_CLEARED = 1
SEQUENCE_ID = 1                 # every TrackEvent of the trace is on this one sequence
DEFAULT_PRIO = 120              # nice 0: the recording has no priorities
MAX_BUNDLE = 65536              # events of a kind per bundle (Perfetto's limit: 64 MB)
WINDOW_EVENTS = 1 << 19         # events decoded at a time (~120 MB peak at 384 PUs)
SCHED_FIELDS = ("t_ns", "cpu", "kind", "tid", "tid2", "arg")
IDLE_COMM = "swapper"


class PerfettoWriter:
    """Writes TracePackets to a binary stream. ``machine_id`` (non-zero) tags every packet
    with ``TracePacket.machine_id``: one machine per node of a multi-node recording."""

    def __init__(self, out: IO[bytes], machine_id: int = 0) -> None:
        self.out = out
        self.machine_id = machine_id
        self.packets = 0
        self._seq_started = False
        self._next_uuid = 1

    def packet(self, body: bytes, machine_id: int | None = None) -> None:
        m = self.machine_id if machine_id is None else machine_id
        if m:
            body += f_varint(PKT_MACHINE_ID, m)
        self.out.write(f_bytes(TRACE_PACKET, body))
        self.packets += 1

    def _seq(self) -> bytes:
        """The sequence fields of a TrackEvent-sequence packet (the first one clears state)."""
        b = f_varint(PKT_SEQUENCE_ID, SEQUENCE_ID)
        if not self._seq_started:
            self._seq_started = True
            b += f_varint(PKT_SEQUENCE_FLAGS, SEQ_INCREMENTAL_STATE_CLEARED)
        return b

    def track(self, name: str, parent: int | None = None, unit: str | None = None,
              machine_id: int | None = None) -> int:
        """A new track (a counter track when ``unit`` is given), of MACHINE_ID (a merged job's
        node; the host by default); returns its uuid."""
        m = self.machine_id if machine_id is None else machine_id
        uuid = (m << 32) | self._next_uuid
        self._next_uuid += 1
        td = f_varint(TD_UUID, uuid) + f_str(TD_NAME, name)
        if parent is not None:
            td += f_varint(TD_PARENT, parent)
        if unit is not None:
            td += f_bytes(TD_COUNTER, f_str(CD_UNIT_NAME, unit))
        self.packet(self._seq() + f_bytes(PKT_TRACK_DESCRIPTOR, td), machine_id)
        return uuid

    def thread_track(self, pid: int, tid: int, machine_id: int | None = None) -> int:
        """A track of thread ``tid`` of process ``pid`` (shown under that thread); its uuid."""
        m = self.machine_id if machine_id is None else machine_id
        uuid = (m << 32) | self._next_uuid
        self._next_uuid += 1
        td = f_varint(TD_UUID, uuid) + f_bytes(TD_THREAD, f_varint(TDT_PID, max(pid, 0))
                                                + f_varint(TDT_TID, tid))
        self.packet(self._seq() + f_bytes(PKT_TRACK_DESCRIPTOR, td), machine_id)
        return uuid

    def process_track(self, pid: int, machine_id: int | None = None) -> int:
        """A track of process ``pid`` (counter tracks under it show under the process)."""
        m = self.machine_id if machine_id is None else machine_id
        uuid = (m << 32) | self._next_uuid
        self._next_uuid += 1
        td = f_varint(TD_UUID, uuid) + f_bytes(TD_PROCESS, f_varint(TDP_PID, max(pid, 0)))
        self.packet(self._seq() + f_bytes(PKT_TRACK_DESCRIPTOR, td), machine_id)
        return uuid

    def _track_event(self, t_ns: int, event: bytes, machine_id: int | None = None) -> None:
        self.packet(f_varint(PKT_TIMESTAMP, t_ns) + self._seq()
                    + f_bytes(PKT_TRACK_EVENT, event), machine_id)

    def counter(self, track: int, t_ns: int, value: float, machine_id: int | None = None
                ) -> None:
        self._track_event(t_ns, f_varint(TE_TYPE, TYPE_COUNTER) + f_varint(TE_TRACK_UUID, track)
                          + f_double(TE_DOUBLE_VALUE, value), machine_id)

    def instant(self, track: int, t_ns: int, name: str, categories: tuple[str, ...] = (),
                machine_id: int | None = None) -> None:
        self._track_event(t_ns, f_varint(TE_TYPE, TYPE_INSTANT) + f_varint(TE_TRACK_UUID, track)
                          + b"".join(f_str(TE_CATEGORIES, c) for c in categories)
                          + f_str(TE_NAME, name), machine_id)

    def slice(self, track: int, t0_ns: int, t1_ns: int, name: str,
              categories: tuple[str, ...] = (), machine_id: int | None = None,
              args: Mapping[str, str] | None = None) -> None:
        """A slice [t0, t1) on ``track`` (regions of a parallel program, for one); ARGS: its
        debug annotations (trace_processor's ``args``, ``debug.NAME``)."""
        self._track_event(t0_ns, f_varint(TE_TYPE, TYPE_SLICE_BEGIN)
                          + f_varint(TE_TRACK_UUID, track)
                          + b"".join(f_str(TE_CATEGORIES, c) for c in categories)
                          + f_str(TE_NAME, name)
                          + b"".join(f_bytes(TE_DEBUG_ANNOTATIONS, f_str(DA_NAME, k)
                                             + f_str(DA_STRING_VALUE, v))
                                     for k, v in (args or {}).items()), machine_id)
        self._track_event(t1_ns, f_varint(TE_TYPE, TYPE_SLICE_END)
                          + f_varint(TE_TRACK_UUID, track), machine_id)

    def header(self, hdr: Mapping[str, Any], t0_ns: int) -> None:
        """SystemInfo (kernel release, host) and a ClockSnapshot to wall time."""
        uts = f_str(UTS_SYSNAME, "Linux")
        if hdr.get("kernel"):
            uts += f_str(UTS_RELEASE, str(hdr["kernel"]))
        si = f_bytes(SI_UTSNAME, uts)
        if hdr.get("host"):
            si += f_str(SI_MACHINE_NAME, str(hdr["host"]))
        self.packet(f_bytes(PKT_SYSTEM_INFO, si))
        mono, wall = hdr.get("start_monotonic_ns"), hdr.get("start_wall_ns")
        if isinstance(mono, int) and isinstance(wall, int):
            clocks = (f_bytes(CS_CLOCKS, f_varint(CLOCK_ID, CLOCK_BOOTTIME) + f_varint(CLOCK_TS, mono))
                      + f_bytes(CS_CLOCKS, f_varint(CLOCK_ID, CLOCK_REALTIME)
                                + f_varint(CLOCK_TS, wall)))
            self.packet(f_varint(PKT_TIMESTAMP, mono) + f_bytes(PKT_CLOCK_SNAPSHOT, clocks))

    def process_tree(self, tasks: Mapping[int, TaskInfo], t_ns: int,
                     machine_id: int | None = None) -> None:
        """Processes (pid, ppid, comm) and threads (tid, tgid, name) of the task table."""
        procs: dict[int, TaskInfo] = {}
        for info in tasks.values():
            if info.pid > 0 and (info.pid not in procs or info.tid == info.pid):
                procs[info.pid] = info
        body = bytearray()
        for pid, info in sorted(procs.items()):
            p = f_varint(PROC_PID, pid) + f_varint(PROC_PPID, max(info.ppid, 0))
            p += f_str(PROC_CMDLINE, info.comm) + f_varint(PROC_CMDLINE_IS_COMM, 1)
            body += f_bytes(PT_PROCESSES, p)
        for tid, info in sorted(tasks.items()):
            if tid <= 0:
                continue
            t = f_varint(THR_TID, tid) + f_str(THR_NAME, info.comm)
            if info.pid > 0:
                t += f_varint(THR_TGID, info.pid)
            body += f_bytes(PT_THREADS, t)
        self.packet(f_varint(PKT_TIMESTAMP, t_ns) + f_bytes(PKT_PROCESS_TREE, bytes(body)),
                    machine_id)


class CommTable:
    """tid -> comm as small integers (a lookup array), and each comm's intern_table entry
    already encoded."""

    def __init__(self, tasks: Mapping[int, TaskInfo]) -> None:
        names = ["", IDLE_COMM]                   # 0: unknown, 1: the idle task
        ids: dict[str, int] = {n: i for i, n in enumerate(names)}
        top = max((t for t in tasks if t > 0), default=0)
        self.lut = np.zeros(top + 1, dtype=np.int64)
        self.lut[0] = 1
        for tid, info in tasks.items():
            if 0 < tid <= top:
                i = ids.setdefault(info.comm, len(names))
                if i == len(names):
                    names.append(info.comm)
                self.lut[tid] = i
        self.entries = [f_str(CS_INTERN, n) for n in names]

    def __len__(self) -> int:
        return len(self.entries)

    def of(self, tids: np.ndarray) -> np.ndarray:
        t = tids.astype(np.int64)
        ok = (t >= 0) & (t < len(self.lut))
        return np.where(ok, self.lut[np.where(ok, t, 0)], 0)


@dataclass
class _Kind:
    """Events of one kind (switches or wakings) of a window, sorted by (cpu, time): their
    timestamp and comm fields and the other packed columns of CompactSched."""

    cpu: np.ndarray
    t: np.ndarray
    comm: np.ndarray
    ts_field: int
    comm_field: int
    columns: list[tuple[int, np.ndarray]]

    def bundle_keys(self) -> np.ndarray:
        """(cpu, part) as one sortable integer: a CPU's events split every MAX_BUNDLE."""
        n = len(self.t)
        newcpu = np.ones(n, dtype=bool)
        newcpu[1:] = self.cpu[1:] != self.cpu[:-1]
        starts = np.flatnonzero(newcpu)
        pos = np.arange(n) - np.repeat(starts, np.diff(np.append(starts, n)))
        return (self.cpu << 20) + pos // MAX_BUNDLE


def _local_ids(key: np.ndarray, space: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values of ``key`` (sorted) and each key's index among them: a presence
    table when the key space is small (no sort), np.unique otherwise."""
    if space <= 1 << 24:
        present = np.zeros(space, dtype=bool)
        present[key] = True
        rank = np.cumsum(present) - 1
        return np.flatnonzero(present), rank[key]
    uniq, inv = np.unique(key, return_inverse=True)
    return uniq, inv.reshape(-1)


class Machines:
    """The nodes of a merged job (store/nodes.py) as Perfetto machines: node k is machine
    k + 1, with its own PU numbers and tids (a merged recording adds a base to both)."""

    def __init__(self, cpu_bases: np.ndarray, tid_bases: np.ndarray) -> None:
        self.cpu_bases = np.asarray(cpu_bases, dtype=np.int64)
        self.tid_bases = np.asarray(tid_bases, dtype=np.int64)

    def of_cpu(self, cpu: np.ndarray) -> np.ndarray:
        """Node index of each (merged) PU number."""
        return np.maximum(np.searchsorted(self.cpu_bases, cpu, side="right") - 1, 0)

    def local_tid(self, tid: np.ndarray, node: np.ndarray) -> np.ndarray:
        return np.where(tid > 0, tid - self.tid_bases[node], tid)

    def split_tid(self, tid: int) -> tuple[int, int]:
        """(node index, base subtracted from its tids and pids above 0) of a merged tid."""
        node = max(int(np.searchsorted(self.tid_bases, tid, side="right")) - 1, 0)
        return node, int(self.tid_bases[node])


def _bundles(kinds: list[_Kind], comms: CommTable, machines: Machines | None = None
             ) -> Iterator[tuple[int, bytes]]:
    """FtraceEventBundle payloads, one per CPU (and per MAX_BUNDLE events of a kind), each
    with its own intern table and timestamps delta-encoded from an absolute first one."""
    kinds = [k for k in kinds if len(k.t)]
    if not kinds:
        return
    keys = [k.bundle_keys() for k in kinds]
    bundles = np.unique(np.concatenate(keys))
    bidx = [np.searchsorted(bundles, kk) for kk in keys]
    g = len(comms)
    uniq, local = _local_ids(np.concatenate([b * g + k.comm for b, k in zip(bidx, kinds)]),
                             len(bundles) * g)
    first = np.searchsorted(uniq // g, np.arange(len(bundles) + 1))
    cut = 0
    enc, bounds = [], []
    for k, bi in zip(kinds, bidx):
        n = len(k.t)
        loc = local[cut:cut + n] - first[bi]
        cut += n
        starts = np.flatnonzero(np.append(True, bi[1:] != bi[:-1]))
        delta = k.t.copy()
        delta[1:] -= k.t[:-1]
        delta[starts] = k.t[starts]
        fields = [(k.ts_field, delta), (k.comm_field, loc), *k.columns]
        enc.append([(f, *encode_varints(v)) for f, v in fields])
        bounds.append(np.searchsorted(bi, np.arange(len(bundles) + 1)).tolist())
    ucomm = (uniq % g).tolist()
    first_l = first.tolist()
    cpu_arr = bundles >> 20
    if machines is not None:
        node = machines.of_cpu(cpu_arr)
        mids = (node + 1).tolist()
        cpus = (cpu_arr - machines.cpu_bases[node]).tolist()
    else:
        mids, cpus = [0] * len(cpu_arr), cpu_arr.tolist()
    for i, cpu in enumerate(cpus):
        parts = [comms.entries[x] for x in ucomm[first_l[i]:first_l[i + 1]]]
        for fields_enc, bd in zip(enc, bounds):
            a, b = bd[i], bd[i + 1]
            if a < b:
                parts += [packed(f, data[off[a]:off[b]]) for f, data, off in fields_enc]
        yield mids[i], f_varint(BUNDLE_CPU, cpu) + f_bytes(BUNDLE_COMPACT_SCHED,
                                                           b"".join(parts))


def _by_cpu(cpu: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The order that sorts events by CPU, keeping time order within a CPU."""
    key = cpu.astype(np.uint16) if len(cpu) and int(cpu.max()) < 65536 else cpu
    order = np.argsort(key, kind="stable")
    tc, cc = t[order], cpu[order]
    if len(tc) > 1 and ((tc[1:] < tc[:-1]) & (cc[1:] == cc[:-1])).any():
        order = np.lexsort((t, cpu))              # chunks delivered late: sort by time too
    return order


class SchedEncoder:
    """Turns windows of events into FtraceEventBundle payloads, carrying which CPUs have had
    their opening switch across windows."""

    def __init__(self, comms: CommTable, t_start: int, machines: Machines | None = None) -> None:
        self.comms = comms
        self.t_start = t_start
        self.machines = machines
        self.opened: set[int] = set()
        self.switches = 0
        self.wakings = 0

    def _switches(self, cols: Mapping[str, np.ndarray], sw: np.ndarray) -> _Kind:
        cpu = cols["cpu"][sw].astype(np.int64)
        t = cols["t_ns"][sw].astype(np.uint64)
        nxt = cols["tid2"][sw].astype(np.int64)
        state = np.maximum(cols["arg"][sw].astype(np.int64), 0)   # -1: reconstructed
        # Each CPU's opening switch: into the task its first recorded switch switches out.
        ucpu, first = np.unique(cpu, return_index=True)
        new = np.array([c not in self.opened for c in ucpu.tolist()], dtype=bool)
        if new.any():
            self.opened.update(ucpu[new].tolist())
            fi = first[new]
            cpu = np.concatenate([ucpu[new], cpu])
            t = np.concatenate([np.full(len(fi), min(self.t_start, int(t[fi].min())),
                                        dtype=np.uint64), t])
            nxt = np.concatenate([cols["tid"][sw][fi].astype(np.int64), nxt])
            state = np.concatenate([np.zeros(len(fi), dtype=np.int64), state])
        order = _by_cpu(cpu, t)
        cpu, t, nxt, state = cpu[order], t[order], nxt[order], state[order]
        return _Kind(cpu, t, self.comms.of(nxt), CS_SWITCH_TS, CS_SWITCH_NEXT_COMM,
                     [(CS_SWITCH_PREV_STATE, state), (CS_SWITCH_NEXT_PID, self._local(nxt, cpu)),
                      (CS_SWITCH_NEXT_PRIO, np.full(len(t), DEFAULT_PRIO))])

    def _wakings(self, cols: Mapping[str, np.ndarray], wk: np.ndarray) -> _Kind:
        cpu = cols["cpu"][wk].astype(np.int64)
        t = cols["t_ns"][wk].astype(np.uint64)
        order = _by_cpu(cpu, t)
        cpu, t, tid = cpu[order], t[order], cols["tid"][wk][order].astype(np.int64)
        local_cpu = cpu if self.machines is None \
            else cpu - self.machines.cpu_bases[self.machines.of_cpu(cpu)]
        return _Kind(cpu, t, self.comms.of(tid), CS_WAKING_TS, CS_WAKING_COMM,
                     [(CS_WAKING_PID, self._local(tid, cpu)), (CS_WAKING_CPU, local_cpu),
                      (CS_WAKING_PRIO, np.full(len(t), DEFAULT_PRIO)),
                      (CS_WAKING_FLAGS, np.zeros(len(t), dtype=np.int64))])

    def _local(self, tid: np.ndarray, cpu: np.ndarray) -> np.ndarray:
        """Tids as their node knows them (a merged job's are offset per node)."""
        if self.machines is None:
            return tid
        return self.machines.local_tid(tid, self.machines.of_cpu(cpu))

    def window(self, cols: Mapping[str, np.ndarray]) -> Iterator[tuple[int, bytes]]:
        kind = cols["kind"]
        sw = np.flatnonzero(kind == SWITCH)
        wk = np.flatnonzero((kind == WAKEUP) | (kind == WAKEUP_NEW))
        self.switches += len(sw)
        self.wakings += len(wk)
        yield from _bundles([self._switches(cols, sw), self._wakings(cols, wk)], self.comms,
                            self.machines)


def _windows(rec: Any, fields: tuple[str, ...], size: int) -> Iterator[dict[str, np.ndarray]]:
    """The recording's event columns in windows of about ``size`` events (whole chunks)."""
    buf: list[dict[str, np.ndarray]] = []
    n = 0
    for cols in rec.iter_event_columns(fields):
        buf.append(cols)
        n += len(cols["t_ns"])
        if n >= size:
            yield {f: np.concatenate([c[f] for c in buf]) for f in fields}
            buf, n = [], 0
    if buf:
        yield {f: np.concatenate([c[f] for c in buf]) for f in fields}


def switches_from_intervals(iv: Intervals) -> dict[str, np.ndarray]:
    """Switch events that rebuild ``iv`` exactly: a switch into each interval's task at its
    start, and into idle at its end unless the next interval on that PU starts there. For
    /proc-polled recordings, whose RUN events Perfetto has no form for (the intervals are
    approximate, as the report says)."""
    cpu, start, end, tid = iv.flat()
    nxt_start = np.append(start[1:], -1)
    same_row = np.append(cpu[1:] == cpu[:-1], False)
    gap = ~(same_row & (nxt_start == end))
    t = np.concatenate([start, end[gap]])
    c = np.concatenate([cpu, cpu[gap]])
    nxt = np.concatenate([tid.astype(np.int64), np.zeros(int(gap.sum()), np.int64)])
    order = np.lexsort((np.concatenate([np.ones(len(start)), np.zeros(int(gap.sum()))]), t))
    n = len(t)
    return {"t_ns": t[order].astype(np.uint64), "cpu": c[order], "kind": np.full(n, SWITCH),
            "tid": np.zeros(n, np.int64), "tid2": nxt[order], "arg": np.zeros(n, np.int64)}


def _tasks_by_node(tasks: Mapping[int, TaskInfo], machines: Machines
                   ) -> dict[int, dict[int, TaskInfo]]:
    """A merged job's task table split by node, with each node's own tids and pids."""
    out: dict[int, dict[int, TaskInfo]] = {}
    for tid, info in tasks.items():
        if tid <= 0:
            continue
        k, b = machines.split_tid(tid)
        out.setdefault(k, {})[tid - b] = TaskInfo(
            tid - b, info.pid - b if info.pid > 0 else info.pid, info.comm,
            info.ppid - b if info.ppid > 0 else info.ppid, info.t_ns)
    return out


def write_perfetto(out: IO[bytes], rec: Any, *, machine_id: int = 0,
                   window_events: int = WINDOW_EVENTS) -> dict[str, int]:
    """Write recording ``rec`` as a Perfetto trace; returns counts of what was written."""
    w = PerfettoWriter(out, machine_id)
    hdr = dict(getattr(rec, "header", {}) or {})
    t0, t1 = int(rec.t_start), int(rec.t_end)
    w.header(hdr, t0)
    tasks = getattr(rec, "tasks", {}) or {}
    table = getattr(rec, "nodes", None)            # a job merged from several nodes
    # A merged recording whose header lost its node table: one machine, merged numbers.
    machines = Machines(table.cpu_bases(), table.tid_bases()) \
        if table is not None and table.nodes else None
    if machines is None:
        w.process_tree(tasks, t0)
    else:
        for k, per_node in _tasks_by_node(tasks, machines).items():
            w.process_tree(per_node, t0, machine_id=k + 1)
    enc = SchedEncoder(CommTable(tasks), t0, machines)
    if "proc" in str(hdr.get("backend", "")):
        windows: Iterator[Mapping[str, np.ndarray]] = iter(
            [switches_from_intervals(load(rec).intervals)])
    else:
        windows = _windows(rec, SCHED_FIELDS, window_events)
    for cols in windows:
        for machine, bundle in enc.window(cols):
            w.packet(f_bytes(PKT_FTRACE_EVENTS, bundle), machine or None)
    n_counters = 0
    tracks, values = counter_values(rec, COUNTER_TRACKS)
    uuids: dict[int, int] = {}
    groups: dict[str, int] = {}
    for t_ns, idx, vals in values:
        for i, v in zip(idx.tolist(), vals.tolist()):
            u = uuids.get(i)
            if u is None:
                tr = tracks[i]
                g = groups.get(tr.spec.metric)
                if g is None:
                    g = groups[tr.spec.metric] = w.track(
                        f"snumap {tr.spec.label} per {tr.spec.object_type}")
                u = uuids[i] = w.track(tr.name, parent=g, unit=tr.spec.unit)
            w.counter(u, t_ns, v)
            n_counters += 1
    n_regions, n_marks, n_clipped = write_regions(w, rec, machines)
    # A merged job's (machines) tids and pids are node-qualified: their tracks go to the node.
    n_memory, n_memory_left = write_memory(w, rec, machines)
    n_tc, n_tc_tracks, n_tc_left = write_thread_counters(w, rec, machines)
    markers = list(getattr(rec, "markers", []) or [])
    mk = w.track("snumap markers")
    for t_ns, text in markers:
        w.instant(mk, t_ns, text)
    if not markers or max(t for t, _ in markers) < t1:
        w.instant(mk, t1, "end of recording")
    return {"packets": w.packets, "switches": enc.switches, "wakings": enc.wakings,
            "counter_values": n_counters, "counter_tracks": len(uuids),
            "markers": len(markers), "region_slices": n_regions, "region_marks": n_marks,
            "region_slices_clipped": n_clipped,
            "memory_values": n_memory, "memory_processes_left_out": n_memory_left,
            "thread_counter_values": n_tc, "thread_counter_tracks": n_tc_tracks,
            "thread_counter_owners_left_out": n_tc_left}
