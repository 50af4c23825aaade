"""The perf tracepoint backend: no compiler, no headers, only perf_event_open(2).

One tracepoint event per (tracepoint, CPU), all of a CPU's events redirected into one ring
(PERF_EVENT_IOC_SET_OUTPUT), records with sample_type TID|TIME|CPU|RAW on CLOCK_MONOTONIC
(use_clockid). The RAW part is the tracepoint's record, laid out as its tracefs ``format``
file says (snumap_tui/trace/tracefs.py); PERF_RECORD_LOST says how many records a full ring
dropped. The kernel cannot filter to a process tree here, so the tree is followed in user
space from sched_process_fork records, and the rest is dropped after decoding.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from snumap_tui.native import perf_event as pe
from snumap_tui.native.perf_ring import PerfRing, gather, split_records
from snumap_tui.sources._io import c_string
from snumap_tui.sources.base import SourceStatus
from snumap_tui.sources.freq import online_cpus
from snumap_tui.sources.privileges import has_caps
from snumap_tui.trace import events as ev
from snumap_tui.trace.base import Tracer
from snumap_tui.trace.counters import CpuCounters
from snumap_tui.trace.perf_counters import SOURCE, ThreadReads
from snumap_tui.trace.reconstruct import NotRunning, missed_switch_ins
from snumap_tui.trace.rows import concat_rows, insert_rows, take_rows
from snumap_tui.trace.tasks import TaskTable, seed_tree
from snumap_tui.trace.tracefs import EventFormat, read_format, tracefs_missing, tracefs_root

TRACEPOINTS = ("sched_switch", "sched_wakeup", "sched_wakeup_new", "sched_migrate_task",
               "sched_process_fork", "sched_process_exec", "sched_process_exit")
# task:task_rename (include/trace/events/task.h): prctl(PR_SET_NAME), pthread_setname_np and
# exec rename a task; its new name from then on (decoded into names, never an event).
RENAME = ("task", "task_rename")
SAMPLE_TYPE = pe.PERF_SAMPLE_TID | pe.PERF_SAMPLE_TIME | pe.PERF_SAMPLE_CPU | pe.PERF_SAMPLE_RAW
CLOCK_MONOTONIC = 1
# Fixed part of a PERF_RECORD_SAMPLE with SAMPLE_TYPE (perf_event_open(2), in this order):
# header(8) | u32 pid, u32 tid | u64 time | u32 cpu, u32 res | u32 raw size | raw data...
RAW_AT = 36
SAMPLE_HEAD = [("s_pid", "<i4", 8), ("s_tid", "<i4", 12), ("s_time", "<u8", 16),
               ("s_cpu", "<u4", 24)]


def default_buffer_bytes(ncpu: int | None = None) -> int:
    """Kernel buffer per CPU: 8 MiB (~80k perf samples, ~170k bcc records: 0.2-0.4 s of this
    machine's ceiling), less on many CPUs so that all of them stay within 256 MiB, at least
    1 MiB."""
    n = ncpu or os.cpu_count() or 1
    return max(1 << 20, min(8 << 20, (256 << 20) // n))


def ring_pages_per_cpu(buffer_bytes: int | None) -> int:
    """Data pages of one CPU's perf ring: BUFFER_BYTES (default ``default_buffer_bytes``)
    rounded down to a power of two pages (perf_event_open(2) wants 2^n), at least 8."""
    page = os.sysconf("SC_PAGE_SIZE")
    pages = max(8, (buffer_bytes or default_buffer_bytes()) // page)
    return 1 << (pages.bit_length() - 1)


def sample_dtype(fmt: EventFormat, names: list[str]) -> np.dtype:
    """One dtype for the sample head plus the tracepoint fields NAMES at their format offsets."""
    fields: list[tuple[str, str | np.dtype, int]] = [(n, t, o) for n, t, o in SAMPLE_HEAD]
    for n in names:
        f = fmt.fields[n]
        t = fmt.numpy_dtype([n]).fields[n][0]    # type: ignore[index]
        fields.append((n, t, RAW_AT + f.offset))
    size = max(o + np.dtype(t).itemsize for _, t, o in fields)
    return np.dtype({"names": [f[0] for f in fields], "formats": [f[1] for f in fields],
                     "offsets": [f[2] for f in fields], "itemsize": size})


#: What `record --job`'s hold-back (PerfTracer._hold_back) keeps at most: 262,144 events of
#: 37 bytes, a tenth of a second of a 3 M events/s storm.
HOLD_MAX = 1 << 18


def _time_sorted(events: np.ndarray) -> np.ndarray:
    """EVENTS in time order (stable: equal times keep their order); the array itself when it
    already is, which costs one comparison pass."""
    t = events["t_ns"]
    if len(t) < 2 or bool(np.all(t[1:] >= t[:-1])):
        return events
    return take_rows(events, np.argsort(t, kind="stable"))


def data_loc_str(buf: bytes, raw_start: int, loc: int) -> str:
    """A ``__data_loc char[]`` field: u32 = length << 16 | offset from the record start
    (Documentation/trace/events.rst)."""
    off, length = loc & 0xFFFF, loc >> 16
    return c_string(buf[raw_start + off:raw_start + off + length])


@dataclass
class _Decoder:
    """How to turn one tracepoint's samples into events."""

    name: str
    id: int
    dtype: np.dtype
    system: str = "sched"       # the tracepoint's group in tracefs (perf's "sched:NAME")


class PerfTracer(Tracer):
    """Scheduling events from perf tracepoints, one mmap ring per CPU."""

    name = "perf"
    approximate = False
    counts_intervals = True
    counter_source = SOURCE

    def __init__(self, pages_per_cpu: int | None = None) -> None:
        self.pages = pages_per_cpu or 0
        self._fds: list[int] = []
        self._rings: dict[int, PerfRing] = {}
        self._dec: dict[int, _Decoder] = {}
        self._tasks = TaskTable()
        self._tracked: set[int] | None = None
        self._threads: ThreadReads | None = None
        self._exited: list[int] = []
        self._exited_before: list[int] = []
        self._used_from = np.zeros(0, dtype=np.int64)    # cpu -> first traced switch (ns)
        self._last_switch: dict[int, tuple[int, int]] = {}
        self._not_running = NotRunning()
        # Per read: names from fork/exec records (t_ns, tid, tgid, comm, ppid), applied in time
        # order once all CPUs are merged (rings are decoded CPU by CPU, so a child's exec on one
        # CPU can be decoded before its fork on another); and the comms switch records give.
        self._seen_names: list[tuple[int, int, int | None, str, int | None]] = []
        self._switch_comm: dict[int, bytes] = {}
        # `record --job`: the tree filter runs on events older than follow_lag_ns only, the
        # newer ones held back for the next read (hold_back), so that a process the job's
        # rescan finds late still has its events (and its parent's fork) from its start
        self._held: np.ndarray | None = None
        self._final = False
        # Ring overruns (PerfRing.lost_bytes) seen by drain() and not yet reported by decode(),
        # per CPU; drain() may run on another thread.
        self._overrun: dict[int, int] = {}
        self._overrun_seen: dict[int, int] = {}
        self._overrun_lock = threading.Lock()
        self._record_max = 0       # bytes of the largest fixed-size sample record opened

    @classmethod
    def status(cls) -> SourceStatus:
        root = tracefs_root()
        if root is None:
            return tracefs_missing("trace:perf")
        if not os.access(root / "events" / "sched" / "sched_switch" / "id", os.R_OK):
            return SourceStatus("trace:perf", False, f"cannot read {root}/events (not root)",
                                "run as root")
        paranoid = pe.read_paranoid()
        missing = has_caps(("CAP_PERFMON",), alternative="CAP_SYS_ADMIN")
        if missing and (paranoid is None or paranoid > -1):
            return SourceStatus("trace:perf", False,
                                f"system-wide tracepoints need CAP_PERFMON "
                                f"(kernel.perf_event_paranoid={paranoid})",
                                "run as root, or sysctl kernel.perf_event_paranoid=-1")
        return SourceStatus("trace:perf", True, None, None, {"tracefs": str(root)})

    def _decoders(self) -> None:
        want = {
            "sched_switch": ["prev_comm", "prev_pid", "prev_state", "next_comm", "next_pid"],
            "sched_wakeup": ["pid", "target_cpu"],
            "sched_wakeup_new": ["pid", "target_cpu"],
            "sched_migrate_task": ["pid", "orig_cpu", "dest_cpu"],
            "sched_process_fork": ["parent_pid", "child_pid", "child_comm"],
            "sched_process_exec": ["pid", "filename"],
            "sched_process_exit": ["pid", "comm"],
            "task_rename": ["pid", "newcomm"],
        }
        for system, tp in [*(("sched", t) for t in TRACEPOINTS), RENAME]:
            try:
                fmt = read_format(system, tp)
            except (OSError, ValueError):
                if tp in TRACEPOINTS:
                    raise
                continue                    # a kernel without it: names from fork/exec only
            names = [n for n in want[tp] if n in fmt.fields]
            self._dec[fmt.id] = _Decoder(tp, fmt.id, sample_dtype(fmt, names), system)
            raw = max((f.offset + f.size for f in fmt.fields.values()), default=0)
            self._record_max = max(self._record_max, (RAW_AT + raw + 7) & ~7)

    def start(self, pids: Iterable[int] | None = None) -> None:
        """Open one event per (tracepoint, CPU), map each CPU's ring, enable them all. On any
        failure what was opened is closed and unmapped again before the error goes on, so a
        tracer that did not start holds nothing (select.start_tracer then tries the next)."""
        if not self.pages:
            self.pages = ring_pages_per_cpu(self.buffer_bytes)
        self._decoders()
        cpus = online_cpus(Path("/")) or list(range(os.cpu_count() or 1))
        try:
            self._open(cpus)
            if pids is not None:
                roots = list(pids)
                seeded = seed_tree(roots, self._tasks)
                self._tracked = {tid for tid, _ in seeded}
                self._tasks.lookup_live(sorted(self._tracked))
                if self.counter_specs:
                    self._probe_counters(cpus[:1])
                    self._threads = ThreadReads(list(self.counter_specs))
                    for tid, pid in seeded:
                        self._threads.add(tid, pid, time.monotonic_ns())
            elif self.counter_specs:     # a counter on every thread of the machine: no
                self.counter_dropped = [f"{sp.name} not counted: the perf backend counts per "
                                        "thread of a traced command, not system-wide"
                                        for sp in self.counter_specs]
                self.counter_specs = []
            for fd in self._fds:
                pe.ioctl(fd, pe.PERF_EVENT_IOC_ENABLE)
        except BaseException:
            self._close()
            raise

    def _probe_counters(self, cpus: list[int]) -> None:
        """Leave out the events this machine cannot count (one line each, as libbpf's)."""
        probe = CpuCounters(list(self.counter_specs), cpus)
        try:
            probe.open()
        finally:
            probe.close()
        self.counter_dropped = list(probe.dropped)
        self.counter_specs = list(probe.specs)

    def follow(self, pids: Iterable[int]) -> bool:
        if self._tracked is None:
            return True
        self._tracked.update(tid for tid, _ in seed_tree(list(pids), self._tasks))
        return True

    def _open(self, cpus: list[int]) -> None:
        """The events of CPUS, disabled, each CPU's redirected into its first one's ring."""
        for cpu in cpus:
            leader = -1
            for tp_id in self._dec:
                attr = pe.make_attr(pe.PERF_TYPE_TRACEPOINT, tp_id, sample_period=1,
                                    sample_type=SAMPLE_TYPE, disabled=True)
                attr.use_clockid = 1
                attr.clockid = CLOCK_MONOTONIC
                attr.watermark = 1
                attr.wakeup_watermark = self.pages * os.sysconf("SC_PAGE_SIZE") // 2
                dec = self._dec[tp_id]
                fd = pe.perf_event_open(attr, pid=-1, cpu=cpu, event=f"{dec.system}:{dec.name}")
                self._fds.append(fd)
                if leader < 0:
                    leader = fd
                    self._rings[cpu] = PerfRing(fd, self.pages)
                else:
                    pe.ioctl(fd, pe.PERF_EVENT_IOC_SET_OUTPUT, leader)

    def _decode_rings(self, raw: dict[int, bytes], lost: dict[int, int]) -> list[np.ndarray]:
        """All CPUs' ring bytes, decoded as one buffer: each ring hands over whole records
        (PerfRing.read), so their concatenation is a sequence of records too, and the numpy
        passes run once per read instead of once per CPU (with many CPUs and short polls
        the per-call costs were most of the decoding). The result is one time-sorted part:
        the stable sort of the concatenation is what sorting each ring and merging gave."""
        cpus = list(raw)
        if len(cpus) == 1:
            return self._decode_ring(raw[cpus[0]], lost, cpus[0])
        bufs = [raw[c] for c in cpus]
        if any(len(b) % 8 for b in bufs):       # not whole records: each ring on its own
            return [p for c, b in zip(cpus, bufs) for p in self._decode_ring(b, lost, c)]
        starts = np.cumsum([0] + [len(b) for b in bufs[:-1]])
        return self._decode_ring(b"".join(bufs), lost, cpus, starts)

    def _decode_ring(self, buf: bytes, lost: dict[int, int], cpu: int | list[int],
                     starts: np.ndarray | None = None) -> list[np.ndarray]:
        """BUF's records as one time-sorted array of events. CPU: the ring's CPU, or, for
        rings joined into BUF, the CPU of each, starting at the offsets STARTS (for the
        PERF_RECORD_LOST records, which do not say; samples carry their CPU)."""
        types, offs, _sizes = split_records(buf)
        lost_at = offs[types == pe.PERF_RECORD_LOST]
        ring_cpus = [cpu] if isinstance(cpu, int) else cpu
        ring_starts = np.zeros(1, dtype=np.int64) if starts is None else starts
        for o in lost_at.tolist():
            c = ring_cpus[int(np.searchsorted(ring_starts, o, side="right")) - 1]
            lost[c] = lost.get(c, 0) + int.from_bytes(buf[o + 16:o + 24], "little")
        samples = offs[types == pe.PERF_RECORD_SAMPLE]
        if not len(samples):
            return []
        raw = np.frombuffer(buf, dtype=np.uint8)
        common = raw[samples + RAW_AT].astype(np.uint16) | (
            raw[samples + RAW_AT + 1].astype(np.uint16) << 8)
        # One array in ring order: the kernel writes a CPU's records in the order it takes
        # their timestamps, so one ring is (nearly always) already time-sorted, and joined
        # rings are sorted runs, which numpy's stable sort (a timsort here) merges.
        conv, where = [], []
        for tp_id, dec in self._dec.items():
            sel = np.flatnonzero(common == tp_id)
            if len(sel):
                at = samples[sel]
                conv.append(self._convert(dec, gather(buf, at, dec.dtype), buf, at))
                where.append(sel)
        if not conv:
            return []
        # Back into ring order: concatenated by tracepoint, then put where each record was
        # (rows copied as bytes, rows.py). Records of unknown tracepoints are left out.
        pos = np.concatenate(where)
        back = np.empty(len(pos), dtype=np.intp)     # the inverse permutation, no sort needed
        back[pos] = np.arange(len(pos))
        return [_time_sorted(take_rows(concat_rows(conv), back))]

    def _convert(self, dec: _Decoder, s: np.ndarray, buf: bytes, at: np.ndarray) -> np.ndarray:
        e = np.zeros(len(s), dtype=ev.EVENT_DTYPE)
        e["t_ns"] = s["s_time"]
        e["cpu"] = s["s_cpu"]
        e["pid"] = s["s_pid"]
        e["pid2"] = -1
        tasks = self._tasks
        name = dec.name
        if name == "sched_switch":
            e["kind"] = ev.SWITCH
            e["tid"], e["tid2"], e["arg"] = s["prev_pid"], s["next_pid"], s["prev_state"]
            e["pid"][e["tid"] == 0] = 0
            e["pid2"][e["tid2"] == 0] = 0
            # Names of switch partners, used only for tasks that survive the filter.
            for tid_f, comm_f in (("prev_pid", "prev_comm"), ("next_pid", "next_comm")):
                # Tids without a name first (the task table answers for all at once), and the
                # comm bytes only of those, which after the first reads are rarely any:
                # finding each one's first record (return_index) needs a sort, so only then.
                col = s[tid_f]
                new = [t for t in tasks.unnamed(col).tolist() if t not in self._switch_comm]
                if not new:
                    continue
                tids, first = np.unique(col, return_index=True)
                want = set(new)
                for tid, i in zip(tids.tolist(), first.tolist()):
                    if tid in want:
                        self._switch_comm[tid] = bytes(s[comm_f][i])
        elif name in ("sched_wakeup", "sched_wakeup_new"):
            e["kind"] = ev.WAKEUP if name == "sched_wakeup" else ev.WAKEUP_NEW
            e["tid"], e["cpu"], e["pid"] = s["pid"], s["target_cpu"], -1
        elif name == "sched_migrate_task":
            e["kind"] = ev.MIGRATE
            e["tid"], e["cpu"], e["arg"], e["pid"] = s["pid"], s["dest_cpu"], s["orig_cpu"], -1
        elif name == "sched_process_fork":
            e["kind"] = ev.FORK
            e["tid"], e["tid2"] = s["parent_pid"], s["child_pid"]
            for i, o in enumerate(at.tolist()):
                loc = int(s["child_comm"][i]) if "child_comm" in (s.dtype.names or ()) else 0
                comm = data_loc_str(buf, o + RAW_AT, loc) if loc else tasks.comm.get(
                    int(s["parent_pid"][i]), "")
                self._seen_names.append((int(s["s_time"][i]), int(s["child_pid"][i]),
                                         None, comm, int(s["s_pid"][i])))
        elif name == "sched_process_exec":
            e["kind"] = ev.EXEC
            e["tid"] = s["pid"]
            for i, o in enumerate(at.tolist()):
                path = data_loc_str(buf, o + RAW_AT, int(s["filename"][i]))
                # fs/exec.c: the new comm is the basename of the file name, cut to 15 bytes.
                self._seen_names.append((int(s["s_time"][i]), int(s["pid"][i]),
                                         int(s["pid"][i]), path.rsplit("/", 1)[-1][:15], None))
        elif name == "sched_process_exit":
            e["kind"] = ev.EXIT
            e["tid"] = s["pid"]
        elif name == RENAME[1]:
            e["kind"] = ev.COMM
            e["tid"] = s["pid"]
            for i in range(len(s)):
                self._seen_names.append((int(s["s_time"][i]), int(s["pid"][i]), None,
                                         c_string(bytes(s["newcomm"][i])), None))
        return e

    def _follow(self, events: np.ndarray) -> np.ndarray:
        """Keep the traced tree: forks of tracked threads (in time order) join it.

        Kept: events of tracked tasks, switches with a tracked task on either side, and, on
        CPUs the tree has run on, switches into and out of idle (so that untraced work there
        ends when the CPU goes idle). Switch partners outside the tree get pid/pid2 =
        ``ev.OUTSIDE`` (events.py): analysis counts their time as "other", not as a task's."""
        tracked = self._tracked
        if tracked is None:
            return events
        # Exits of two reads ago: a task's last sched_switch comes after its exit event and
        # may land in the next read.
        for tid in self._exited_before:
            tracked.discard(tid)
        self._exited_before = self._exited
        forks = events[events["kind"] == ev.FORK]
        for parent, child in zip(forks["tid"].tolist(), forks["tid2"].tolist()):
            if parent in tracked:
                tracked.add(child)
        arr = np.fromiter(tracked, dtype=np.int32, count=len(tracked))
        in1 = np.isin(events["tid"], arr)
        sw = events["kind"] == ev.SWITCH
        in2 = sw & np.isin(events["tid2"], arr)
        keep = in1 | in2
        idle1, idle2 = events["tid"] == 0, events["tid2"] == 0
        cpu = events["cpu"].astype(np.int64)
        t = events["t_ns"].view(np.int64)
        traced = sw & keep
        if traced.any():
            self._mark_used(cpu[traced], t[traced])
        edge = sw & ~keep & (idle1 != idle2)
        if edge.any() and len(self._used_from):
            c = np.minimum(cpu, len(self._used_from) - 1)
            edge &= (cpu < len(self._used_from)) & (t >= self._used_from[c])
            keep |= edge
        out = take_rows(events, keep)
        osw = sw[keep]
        out["pid"][osw & ~in1[keep] & ~idle1[keep]] = ev.OUTSIDE
        out["pid2"][osw & ~in2[keep] & ~idle2[keep]] = ev.OUTSIDE
        return out

    def _mark_used(self, cpu: np.ndarray, t: np.ndarray) -> None:
        """Remember the first time the tree ran on each CPU (idle edges are kept from then)."""
        top = int(cpu.max()) + 1
        if top > len(self._used_from):
            grown = np.full(top, np.iinfo(np.int64).max, dtype=np.int64)
            grown[:len(self._used_from)] = self._used_from
            self._used_from = grown
        np.minimum.at(self._used_from, cpu, t)

    def drain(self) -> dict[int, bytes]:
        """Each CPU's ring bytes since the last drain (copies; the space is given back)."""
        out = {}
        for cpu, ring in self._rings.items():
            buf = ring.read()
            if buf:
                out[cpu] = buf
            if ring.lost_bytes != self._overrun_seen.get(cpu, 0):
                with self._overrun_lock:
                    self._overrun[cpu] = self._overrun.get(cpu, 0) + \
                        ring.lost_bytes - self._overrun_seen.get(cpu, 0)
                self._overrun_seen[cpu] = ring.lost_bytes
        return out

    def _take_overruns(self, lost: dict[int, int]) -> None:
        """Add the ring overruns since the last decode to LOST, in events: at least one per
        largest sample record the bytes could have held (the records themselves are gone)."""
        if not self._overrun:
            return
        with self._overrun_lock:
            over, self._overrun = self._overrun, {}
        size = self._record_max or 8
        for cpu, nbytes in over.items():
            lost[cpu] = lost.get(cpu, 0) + max(1, nbytes // size)

    def decode(self, raw: dict[int, bytes] | None) -> ev.EventBatch:
        if raw is None:
            raw = self.drain()
        lost: dict[int, int] = {}
        self._take_overruns(lost)
        return self._batch(self._decode_rings(raw, lost) if raw else [], lost)

    def read(self) -> ev.EventBatch:
        return self.decode(self.drain())

    def _batch(self, parts: list[np.ndarray], lost: dict[int, int]) -> ev.EventBatch:
        """Decoded parts of all CPUs -> one time-sorted, filtered batch with task names
        (also what bench/tracer_pipeline.py drives with synthetic ring bytes)."""
        # Each part is time-sorted (_decode_ring; one for all CPUs from _decode_rings): a
        # stable sort of their concatenation is a merge of sorted runs (numpy's stable sort
        # is a timsort for these keys), not a full sort.
        events = concat_rows(parts) if len(parts) > 1 else (
            parts[0] if parts else ev.empty_events())
        if len(parts) > 1:
            events = _time_sorted(events)
        events, held_names, held_comm = self._hold_back(events)
        renamed = events["kind"] == ev.COMM     # their names are in _seen_names already
        if renamed.any():
            events = take_rows(events, ~renamed)
        # Switch-ins the kernel did not trace (reconstruct.py), on all CPUs at once: what
        # bounds one CPU's missing switch-in may have been recorded on another.
        self._not_running.forget(self._exited_before)
        missed = missed_switch_ins(events, self._last_switch, self._not_running)
        if len(missed):
            # Each goes after the events of its time (where a stable sort would put it):
            # an insert into the sorted array, not a new sort.
            at = np.searchsorted(events["t_ns"], missed["t_ns"], side="right")
            events = insert_rows(events, at, missed)
        events = self._follow(events)
        tasks = self._tasks
        seen = tasks.seen_tids(events)
        self._learn_names(seen)
        self._seen_names, self._switch_comm = held_names, held_comm
        known = np.isin(events["kind"], (ev.SWITCH, ev.FORK, ev.EXEC, ev.EXIT))
        tasks.learn_pairs(events["tid"][known], events["pid"][known])
        tasks.fill(events)
        now = int(events["t_ns"][-1]) if len(events) else time.monotonic_ns()
        tasks.lookup_live(seen.tolist(), t_ns=now)    # fill() leaves pid == OUTSIDE as is
        self._exited = events["tid"][events["kind"] == ev.EXIT].tolist()
        batch = ev.EventBatch(events=events, tasks=tasks.take_infos(), lost=lost)
        if self._threads is not None:       # record --events: per thread, at each read
            self._threads.see(events, self._tracked)
            batch.counters = self._threads.rows(time.monotonic_ns())
        return batch

    def _hold_back(self, events: np.ndarray) -> tuple[
            np.ndarray, list[tuple[int, int, int | None, str, int | None]], dict[int, bytes]]:
        """Of EVENTS (and the events held back by the last read): those older than
        follow_lag_ns, in time order, for this read; the rest held back for the next one,
        with the task names their records gave (what _learn_names keeps for them)."""
        held, self._held = self._held, None
        if held is not None and len(held):
            events = _time_sorted(concat_rows([held, events]))
        if not self.follow_lag_ns or self._tracked is None or self._final or not len(events):
            return events, [], {}
        cut = time.monotonic_ns() - self.follow_lag_ns
        k = int(np.searchsorted(events["t_ns"].view(np.int64), cut, side="right"))
        # a storm holds at most HOLD_MAX events back (~10 MB): the older ones go through now,
        # with every event of the same time (a name at that time then goes with its event)
        if len(events) - k > HOLD_MAX:
            k = len(events) - HOLD_MAX
            k = int(np.searchsorted(events["t_ns"].view(np.int64),
                                    int(events["t_ns"][k - 1]), side="right"))
        if k == len(events):
            return events, [], {}
        cut = int(events["t_ns"][k - 1]) if k else cut
        self._held = events[k:].copy()
        self._open_counters_early(self._held)
        later = [x for x in self._seen_names if x[0] > cut]
        self._seen_names = [x for x in self._seen_names if x[0] <= cut]
        tids = set(self._held["tid"].tolist()) | set(self._held["tid2"].tolist())
        return events[:k], later, {t: c for t, c in self._switch_comm.items() if t in tids}

    def _open_counters_early(self, held: np.ndarray) -> None:
        """`record --events`: the held events' threads of the tree (and the children its
        forks there make) get their counters now, not when the events go through: a counter
        counts from its open."""
        if self._threads is None or self._tracked is None:
            return
        tree = set(self._tracked)
        forks = held[held["kind"] == ev.FORK]
        for parent, child in zip(forks["tid"].tolist(), forks["tid2"].tolist()):
            if parent in tree:
                tree.add(child)
        self._threads.see(held[held["kind"] != ev.EXIT], tree)   # exits: when they go through

    def _learn_names(self, seen: np.ndarray) -> None:
        """Names of the tasks the kept events name: fork/exec names in time order (the last
        one wins, as in the kernel), then switch records' comm for the others."""
        keep = set(seen.tolist())
        for t_ns, tid, tgid, comm, ppid in sorted(self._seen_names, key=lambda x: x[0]):
            if tid in keep:
                self._tasks.learn(tid, tgid=tgid, comm=comm, ppid=ppid, t_ns=t_ns)
        for tid, raw in self._switch_comm.items():
            if tid in keep and self._tasks.comm.get(tid) is None:
                self._tasks.learn(tid, comm=c_string(raw))
        self._seen_names = []
        self._switch_comm = {}

    def _close(self) -> None:
        """Unmap every ring and close every fd (each on its own: one failing does not keep
        the others open); safe to call twice."""
        rings, self._rings = self._rings, {}
        fds, self._fds = self._fds, []
        threads, self._threads = self._threads, None
        if threads is not None:
            threads.close()
        for ring in rings.values():
            try:
                ring.close()
            except (OSError, ValueError, BufferError):
                pass
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass

    def stop(self) -> ev.EventBatch:
        """Disable the events, read what the rings still hold, close everything -- the closing
        even when the disable or the last read raised."""
        try:
            for fd in self._fds:
                pe.ioctl(fd, pe.PERF_EVENT_IOC_DISABLE)
            self._final = True                  # nothing held back from the last read
            return self.read()
        finally:
            self._close()
