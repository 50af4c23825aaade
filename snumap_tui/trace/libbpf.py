"""The libbpf eBPF backend: bpf/sched.bpf.o, compiled ahead of time (CO-RE), loaded through the
system's libbpf.so.1 (snumap_tui.native.libbpf), attached as tp_btf programs.

Needs a kernel with BTF (/sys/kernel/btf/vmlinux) and the BPF ring buffer (Linux >= 5.8),
libbpf >= 1.0, and root or CAP_BPF + CAP_PERFMON -- no kernel headers, no compiler, no tracefs.
The records, filter and user-space finishing are bcc's (bpf_common.py); the program differs in
reading the tracepoints' task_struct arguments through BTF (so a switch's next task comes with
its process id) instead of a copied trace record.
"""

from __future__ import annotations

import os
import platform
import re
import struct
import threading
import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from snumap_tui.errors import SnumapError
from snumap_tui.native import libbpf, perf_spec
from snumap_tui.native.perf_event import (
    PERF_COUNT_SW_CONTEXT_SWITCHES,
    PERF_COUNT_SW_CPU_MIGRATIONS,
    PERF_TYPE_SOFTWARE,
)
from snumap_tui.sources.base import SourceStatus
from snumap_tui.sources.freq import online_cpus
from snumap_tui.sources.privileges import has_caps
from snumap_tui.trace import events as ev
from snumap_tui.trace.bpf_common import BpfTracer, ring_bytes_per_cpu
from snumap_tui.trace.bpf_layout import bpf_dir, load_layout
from snumap_tui.trace.bpf_ring import WAKE_FRACTION, BpfRingSet
from snumap_tui.trace.counters import (
    MAX_COUNTERS,
    CpuCounters,
    counter_dtype,
    ring_dtype,
    timed_first,
    widen,
)
from snumap_tui.trace.tasks import seed_tree

OBJECT = "sched.bpf.o"
NAME = "trace:libbpf"
# sched_switch's TP_PROTO gained prev_state in 5.18; sched.bpf.c has a program for each.
SWITCH_PROGRAMS = ("sched_switch", "sched_switch_pre518")


def kernel_release_tuple(release: str) -> tuple[int, int]:
    """(major, minor) of a kernel release string like "6.18.44-fc-v769" ((0, 0) if odd)."""
    m = re.match(r"(\d+)\.(\d+)", release)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def unused_switch_program(release: str) -> str:
    """The sched_switch program this kernel must not load: the pre-5.18 one on 5.18 and
    later (its TP_PROTO passes prev_state; re-reading prev->__state can see a concurrent
    wakeup's TASK_RUNNING), the other one before."""
    return SWITCH_PROGRAMS[int(kernel_release_tuple(release) >= (5, 18))]


# A bare tracepoint at the end of __schedule(), in the task switched in (Linux >= 6.16):
# where a thread's own counts start, and where a switch-in the kernel's sched_switch did not
# report is seen (bpf/sched.bpf.c).
SWITCHED_IN = "sched_exit_tp"


def kernel_has_tracepoint(name: str, btf: Path = Path("/sys/kernel/btf/vmlinux")) -> bool:
    """Whether the running kernel has tracepoint NAME: its BTF holds the type tp_btf programs
    attach by, ``btf_trace_NAME`` (a name in the BTF's string table, NUL on both sides)."""
    try:
        data = btf.read_bytes()
    except OSError:
        return False
    return b"\0btf_trace_" + name.encode() + b"\0" in data


def switch_slot(specs: list[perf_spec.EventSpec]) -> int:
    """The index of the context-switches event among SPECS (0xff: none). The switch program
    counts one per switch-out for it instead of reading the counter, whose increment comes in
    the switch path after the read (perf_event_task_sched_out)."""
    for i, sp in enumerate(specs):
        if sp.type == PERF_TYPE_SOFTWARE and sp.config == PERF_COUNT_SW_CONTEXT_SWITCHES:
            return i
    return 0xFF


def switched_in_mask(specs: list[perf_spec.EventSpec]) -> int:
    """Bit i set: what event i counts in the switch path belongs to the task switched in
    (cpu-migrations: perf counts a migration when the migrated task is scheduled in)."""
    return sum(1 << i for i, sp in enumerate(specs)
               if sp.type == PERF_TYPE_SOFTWARE and sp.config == PERF_COUNT_SW_CPU_MIGRATIONS)


def ring_cpus(ncpu: int, root: Path = Path("/")) -> list[int]:
    """The CPUs that get a ring: the online ones below NCPU, the possible CPUs (all of them
    when that cannot be read). The kernel allocates a ring's pages when it is made, so a VM
    booted with room for 64 CPUs and 4 online would pin 64 rings; an event on a CPU brought
    online later finds no ring and is counted lost."""
    try:
        cpus = [c for c in online_cpus(root) if c < ncpu]
    except (ValueError, SnumapError):          # a cpulist that does not parse
        cpus = []
    return cpus or list(range(ncpu))


def fill_rings(obj: libbpf.BpfObject, cpus: list[int], size: int, fds: list[int]) -> None:
    """Create a ring (SIZE bytes) for each of CPUS and put it in the loaded object's array of
    rings; each new descriptor is appended to FDS at once, so the caller closes what was made
    even when a later one fails."""
    rings = obj.map("rings")
    for cpu in cpus:
        fd = libbpf.create_ringbuf(size)
        fds.append(fd)
        rings.update_u32(cpu, fd)


def load_sched(obj: libbpf.BpfObject, system_wide: bool, ncpu: int, cpus: list[int], size: int,
               fds: list[int], counters: CpuCounters | None = None,
               counter_fds: list[int] | None = None) -> None:
    """Configure and load an opened sched.bpf.o (every process or only the tracked ones, the
    sched_switch program this kernel takes, an array of NCPU rings) and give each of CPUS its
    ring of SIZE bytes (``fill_rings``: descriptors appended to FDS). With COUNTERS (opened),
    the program reads them at every switch: their descriptors go into its perf event array
    and each CPU gets a counter ring too (descriptors appended to COUNTER_FDS). Not
    attached."""
    n = len(counters.specs) if counters is not None else 0
    obj.set_global("snumap_system_wide", struct.pack("<I", int(system_wide)))
    # Every eighth of a ring written, the record that crosses it wakes the drain thread's
    # epoll: at 4 MiB a CPU, ~11,000 events; the rest of the ring holds the time the thread
    # takes to come. A power of two, as sched.bpf.c's mask wants (SIZE is one).
    obj.set_global("snumap_wake_bytes", struct.pack("<Q", size // WAKE_FRACTION))
    obj.set_global("snumap_ncounters", struct.pack("<I", n))
    timed = sum(sp.needs_pmu for sp in counters.specs) if counters is not None else 0
    obj.set_global("snumap_ntimed", struct.pack("<I", timed))
    specs = counters.specs if counters is not None else []
    obj.set_global("snumap_switch_slot", struct.pack("<I", switch_slot(specs)))
    obj.set_global("snumap_next_mask", struct.pack("<I", switched_in_mask(specs)))
    obj.program(unused_switch_program(platform.release())).set_autoload(False)
    has_exit = kernel_has_tracepoint(SWITCHED_IN)
    obj.set_global("snumap_has_exit", struct.pack("<I", int(has_exit)))
    if not has_exit:
        obj.program(SWITCHED_IN).set_autoload(False)
    obj.map("rings").set_max_entries(ncpu)
    obj.map("crings").set_max_entries(ncpu)
    obj.map("counters").set_max_entries(ncpu * MAX_COUNTERS)
    obj.load()
    fill_rings(obj, cpus, size, fds)
    if counters is not None and n:
        events = obj.map("counters")
        for (i, cpu), fd in counters.fds.items():
            events.update_u32(cpu * MAX_COUNTERS + i, fd)
        crings = obj.map("crings")
        for cpu in cpus:
            fd = libbpf.create_ringbuf(size)
            (counter_fds if counter_fds is not None else fds).append(fd)
            crings.update_u32(cpu, fd)


def object_path() -> os.PathLike[str]:
    return bpf_dir() / OBJECT


class LibbpfTracer(BpfTracer):
    """Scheduling events through a CO-RE eBPF program (bpf/sched.bpf.c)."""

    name = "libbpf"
    approximate = False
    counts_intervals = True
    counter_source = "libbpf sched_switch: exact per run interval"

    def __init__(self, object_file: os.PathLike[str] | None = None) -> None:
        """``object_file``: another build of bpf/sched.bpf.c with the same maps and programs
        (bench/sched_floor.py's stripped-down variants); the shipped object by default."""
        super().__init__()
        self._object_file = object_file
        self._obj: libbpf.BpfObject | None = None
        self._names_dtype: np.dtype | None = None
        self._ring_fds: list[int] = []
        self._ring_cpus: list[int] = []         # the CPU of each ring, in ring order
        self._counters: CpuCounters | None = None
        self._cring: BpfRingSet | None = None
        self._cring_fds: list[int] = []
        self._cdrained: list[np.ndarray] = []
        self._cbytes = 0                # bytes of records in _cdrained
        self._clock = threading.Lock()
        self.counter_specs = []
        self.counter_dropped = []
        self.counter_lost_total = 0
        self.load_s = 0.0

    @classmethod
    def status(cls) -> SourceStatus:
        missing = has_caps(("CAP_BPF", "CAP_PERFMON"), alternative="CAP_SYS_ADMIN")
        if missing:
            return SourceStatus(NAME, False, f"no {missing} (not root)",
                                "run as root, or give CAP_BPF and CAP_PERFMON")
        no_btf = libbpf.kernel_btf_missing()
        if no_btf:
            return SourceStatus(NAME, False, no_btf,
                                "a kernel built with CONFIG_DEBUG_INFO_BTF=y (most distribution "
                                "kernels since 2020); else the bcc backend")
        try:
            libbpf.lib()
        except OSError as exc:
            return SourceStatus(NAME, False, str(exc), f"install {libbpf.DEBIAN_PACKAGE}")
        obj = bpf_dir() / OBJECT
        if not obj.exists():
            return SourceStatus(NAME, False, f"{OBJECT} is missing from this installation",
                                "reinstall snumap (or python3 scripts/build_bpf.py)")
        if not libbpf.probe_map_type(libbpf.MAP_RINGBUF):
            return SourceStatus(NAME, False, "the kernel has no BPF ring buffer (Linux >= 5.8)",
                                "a newer kernel; else the perf backend")
        path = libbpf.library_path()
        return SourceStatus(NAME, True, f"libbpf {libbpf.version()} ({path}), CO-RE program "
                            f"{OBJECT}: needs no kernel headers", None,
                            {"libbpf": libbpf.version(), "library": path, "object": str(obj)})

    def start(self, pids: Iterable[int] | None = None) -> None:
        """Open, configure and load the object, seed the tracked tree, attach, map the ring.
        Anything failing closes the object (detaching what was attached) before the error
        goes on."""
        rec_dtype, self._names_dtype, _ = load_layout()
        roots = list(pids) if pids is not None else None
        self._system_wide = roots is None
        ncpu = libbpf.num_possible_cpus()
        cpus = ring_cpus(ncpu)
        size = ring_bytes_per_cpu(self.buffer_bytes, len(cpus))
        self._ring_cpus = cpus
        t0 = time.monotonic()
        if self.counter_specs:
            self._counters = CpuCounters(timed_first(self.counter_specs), cpus)
            try:
                self._counters.open()
            except BaseException:
                self._release()
                raise
            self.counter_dropped = list(self._counters.dropped)
            self.counter_specs = list(self._counters.specs)
        self._obj = libbpf.BpfObject.open(self._object_file or object_path())
        try:
            load_sched(self._obj, self._system_wide, ncpu, cpus, size, self._ring_fds,
                       self._counters, self._cring_fds)
            if self._cring_fds:
                self._cring = BpfRingSet(self._cring_fds, size, ring_dtype(
                    len(self.counter_specs), sum(s.needs_pmu for s in self.counter_specs)))
            if roots is not None:
                for tid, pid in seed_tree(roots, self._tasks):
                    self._track(tid, pid)
            self._obj.attach_all()
            self._ring = BpfRingSet(self._ring_fds, size, rec_dtype)
        except BaseException:
            self._release()
            raise
        self.load_s = time.monotonic() - t0

    def _release(self) -> None:
        """Unmap the rings, detach and close the object, close the rings; each step on its own.
        Safe twice."""
        ring, self._ring = self._ring, None
        cring, self._cring = self._cring, None
        obj, self._obj = self._obj, None
        fds, self._ring_fds = self._ring_fds, []
        fds += self._cring_fds
        self._cring_fds = []
        for r in (ring, cring):
            if r is not None:
                try:
                    r.close()
                except (OSError, ValueError, BufferError):
                    pass
        if obj is not None:
            obj.close()
        if self._counters is not None:
            self._counters.close()
            self._counters = None
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass

    def _lost(self) -> dict[int, int]:
        if self._obj is None:
            return {}
        raw = self._obj.map("lost").lookup(b"\0\0\0\0")
        return self._lost_since(np.frombuffer(raw, dtype="<u8").tolist() if raw else [])

    def _loaded(self) -> bool:
        return self._obj is not None

    def drain(self) -> np.ndarray | None:
        """The scheduling records (as the other eBPF tracer); the counter records drained with
        them wait for the next ``decode`` (they go to their own chunk, in no order with the
        events)."""
        events = super().drain()          # the scheduling events first: they are the trace
        cring = self._cring
        # Bounded as the events' backlog is (recording/runtime.Drainer): past
        # COUNTER_BACKLOG the rings keep them, and when those fill the program counts what it
        # drops ("counter records lost") instead of the recorder's memory growing.
        if cring is not None and self._cbytes < self.COUNTER_BACKLOG:
            recs = cring.read(self.DRAIN_MAX)
            if len(recs):
                rows = self._widen(recs)        # here, off the thread that writes them
                del recs
                with self._clock:
                    self._cdrained.append(rows)
                    self._cbytes += rows.nbytes
        return events

    COUNTER_BACKLOG = 8 << 20
    DECODE_COUNTERS = 1 << 20     # bytes of counter records widened by one decode

    def drain_capped(self) -> bool:
        return super().drain_capped() or (self._cring is not None and self._cring.capped)

    def wait_fds(self) -> list[int]:
        """Every ring's descriptor: readable (edge-triggered) when the program woke it, which
        it does every eighth of the ring written (``snumap_wake_bytes``)."""
        return list(self._ring_fds) + list(self._cring_fds)

    def decode(self, recs: np.ndarray | None) -> ev.EventBatch:
        batch = super().decode(recs)
        if self._cring is not None or self._cdrained:
            # At most DECODE_COUNTERS per decode (one events batch): widening a whole backlog
            # at once (rows twice the ring's size, and a joined copy) was the recorder's peak
            # under a switch storm; what is left goes with the next batch.
            parts: list[np.ndarray] = []
            with self._clock:
                size = 0
                while self._cdrained and (not parts or size + self._cdrained[0].nbytes
                                          <= self.DECODE_COUNTERS):
                    part = self._cdrained.pop(0)
                    parts.append(part)
                    size += part.nbytes
                self._cbytes -= size
            batch.counters = (parts[0] if len(parts) == 1 else np.concatenate(parts)) \
                if parts else np.zeros(0, counter_dtype(len(self.counter_specs)))
        return batch

    def _widen(self, recs: np.ndarray) -> np.ndarray:
        return widen(recs, len(self.counter_specs),
                     sum(s.needs_pmu for s in self.counter_specs))

    def counters_lost(self) -> int:
        """Counter records the program could not write (its rings were full), in all."""
        if self._obj is None or self._cring is None:
            return 0
        raw = self._obj.map("clost").lookup(b"\0\0\0\0")
        return int(np.frombuffer(raw, dtype="<u8").sum()) if raw else 0

    def _track(self, tid: int, tgid: int) -> None:
        if self._obj is not None:
            self._obj.map("tracked").update_u32(tid, tgid)

    def _untrack(self, tids: list[int]) -> None:
        if self._obj is None:
            return
        tracked = self._obj.map("tracked")
        for tid in tids:
            tracked.delete(struct.pack("<I", tid))

    def _names(self) -> None:
        if self._obj is None or self._names_dtype is None:
            return
        names = self._obj.map("names")
        for key, val in list(names.items()):
            n = np.frombuffer(val, dtype=self._names_dtype)[0]
            tid = struct.unpack("<I", key)[0]
            # The names themselves come as records with their times (events.COMM).
            self._tasks.learn(tid, tgid=int(n["tgid"]) or None, ppid=int(n["ppid"]) or None)
            names.delete(key)

    def stop(self) -> ev.EventBatch:
        """Detach the programs, read what the ring still holds, free everything -- the
        freeing even when the last read raised."""
        if self._obj is None:
            return ev.EventBatch()
        try:
            self._obj.detach()
            self.counter_lost_total = self.counters_lost()
            batch = self.read()
            with self._clock:       # what decodes had left for later batches
                rest, self._cdrained, self._cbytes = self._cdrained, [], 0
            while self._cring is not None:      # and every record the rings still hold
                more = self._cring.read(self.DRAIN_MAX)
                if not len(more):
                    break
                rest.append(self._widen(more))
            if rest:
                more = np.concatenate(rest)
                batch.counters = more if batch.counters is None else \
                    np.concatenate([batch.counters, more])
            return batch
        finally:
            self._release()
