"""What the two eBPF tracers (bcc, libbpf) share once the kernel handed the records over.

Both run the same program logic (bpf/sched.c for bcc, bpf/sched.bpf.c for libbpf), emit the
same record (bpf/sched_event.h) into BPF ring buffers (bcc: one; libbpf: one per CPU) that
user space maps and decodes in bulk (bpf_ring.py), and finish the records the same way here:
time order, the switch-ins the kernel never traced placed by reconstruct.py, tids resolved to
processes and names. What differs -- how the maps are reached -- is the subclasses' ``_lost``,
``_names`` and ``_untrack``.
"""

from __future__ import annotations

import os
import time
from abc import abstractmethod
from collections.abc import Iterable

import numpy as np

from snumap_tui.trace import events as ev
from snumap_tui.trace.base import Tracer
from snumap_tui.trace.bpf_layout import to_events
from snumap_tui.trace.bpf_ring import BpfRingReader, BpfRingSet
from snumap_tui.trace.reconstruct import NotRunning, place_kernel_switch_ins
from snumap_tui.trace.rows import take_rows
from snumap_tui.trace.tasks import TaskTable, seed_tree, take_names

# The BPF ring's default share per CPU. The drain thread empties it every 10 ms, but on a
# full machine it can be kept from running for a few hundred ms (the recorder's own main
# thread behind, other work): under a switch storm with counters a CPU writes ~15 MB/s of
# events and interval records, which filled 1 MiB in 70 ms. 4 MiB holds ~270 ms of that
# (with the recorder at nice -10, recording/priority.py: docs/benchmarks.md, "Counters
# per run interval", has the storms with and without). Every byte counts in the
# recorder's RSS once the ring has wrapped (the RSS target is "the rings plus 60 MB").
DEFAULT_BYTES_PER_CPU = 4 << 20


def ring_pages(buffer_bytes: int | None = None, ncpu: int | None = None) -> int:
    """Pages of the bcc tracer's one BPF ring all CPUs share: BUFFER_BYTES per CPU (default
    ``DEFAULT_BYTES_PER_CPU``) times the CPUs, rounded up to a power of two (the kernel wants
    one), between 1024 pages (4 MiB: 87k events) and 256 MiB."""
    n = ncpu or os.cpu_count() or 1
    page = os.sysconf("SC_PAGE_SIZE")
    pages = max(1024, (buffer_bytes or DEFAULT_BYTES_PER_CPU) * n // page)
    return min((256 << 20) // page, 1 << (pages - 1).bit_length())


def ring_bytes_per_cpu(buffer_bytes: int | None = None, ncpu: int | None = None) -> int:
    """Bytes of each CPU's BPF ring (the CO-RE tracer): BUFFER_BYTES (default
    ``DEFAULT_BYTES_PER_CPU``) rounded up to a power of two pages (the kernel wants one), at
    most 256 MiB over all CPUs. A bigger default bought little here: 2 MiB per CPU instead of
    1 lost 58-315 k instead of 273-553 k of ~22 M events under a switch storm that left the
    recorder no idle CPU, and cost 3-5 MB more peak RSS (every ring page is mapped)."""
    n = ncpu or os.cpu_count() or 1
    page = os.sysconf("SC_PAGE_SIZE")
    want = buffer_bytes or DEFAULT_BYTES_PER_CPU
    pages = 1 << (max(1, -(-want // page)) - 1).bit_length()
    cap = max(1, (256 << 20) // page // n)
    return min(pages, 1 << (cap.bit_length() - 1)) * page


class BpfTracer(Tracer):
    """The user-space half of the eBPF scheduling tracers."""

    def __init__(self) -> None:
        self._ring: BpfRingReader | BpfRingSet | None = None
        self._tasks = TaskTable()
        self._lost_seen: dict[int, int] = {}
        self._exited: list[int] = []
        self._exited_before: list[int] = []
        self._not_running = NotRunning()
        self._system_wide = True

    @abstractmethod
    def _lost(self) -> dict[int, int]:
        """Events lost per CPU since the last call (the program's per-CPU counter)."""

    @abstractmethod
    def _names(self) -> None:
        """Move the names the program recorded at fork/exec into the task table."""

    @abstractmethod
    def _untrack(self, tids: list[int]) -> None:
        """Remove exited TIDS from the program's tracked map."""

    @abstractmethod
    def _track(self, tid: int, tgid: int) -> None:
        """Put TID (of process TGID) into the program's tracked map."""

    @abstractmethod
    def _loaded(self) -> bool:
        """Whether the program is loaded (started, not stopped)."""

    def follow(self, pids: Iterable[int]) -> bool:
        """Add PIDS' trees to the tracked map (a system-wide tracer sees them anyway)."""
        if not self._loaded():
            return False
        if not self._system_wide:
            for tid, pid in seed_tree(list(pids), self._tasks):
                self._track(tid, pid)
        return True

    def _lost_since(self, per_cpu: Iterable[int]) -> dict[int, int]:
        """Per-CPU totals of the lost counter -> what is new since the last call."""
        out = {}
        for cpu, n in enumerate(per_cpu):
            n = int(n)
            d = n - self._lost_seen.get(cpu, 0)
            if d:
                out[cpu] = d
                self._lost_seen[cpu] = n
        return out

    # At most this much of the ring per drain: the drain thread comes back at once after a
    # big one, and the main thread decodes (and copies) smaller batches.
    DRAIN_MAX = 1 << 20

    def drain(self) -> np.ndarray | None:
        """The ring's records since the last drain (a copy; the space is given back). A ring
        per CPU is decoded here, on the drain thread, into time-ordered events
        (``BpfRingSet.read_events``); bcc's one ring hands its records over as they are."""
        ring = self._ring
        if ring is None:
            return None
        if isinstance(ring, BpfRingSet):
            return ring.read_events(self.DRAIN_MAX)
        return ring.read(self.DRAIN_MAX)

    def drain_capped(self) -> bool:
        return self._ring is not None and self._ring.capped

    def read(self) -> ev.EventBatch:
        return self.decode(self.drain())

    def decode(self, recs: np.ndarray | None) -> ev.EventBatch:
        if recs is None:
            recs = self.drain()
            if recs is None:
                return ev.EventBatch()
        if self._exited and not self._system_wide:
            self._untrack(self._exited)
        self._exited = []
        events = recs if recs.dtype == ev.EVENT_DTYPE else to_events(recs)
        self._names()
        return self._finish(events)

    def _finish(self, events: np.ndarray) -> ev.EventBatch:
        """Decoded records -> a time-sorted batch with names. The program reconstructs the
        switch-ins the kernel did not trace at the previous switch on the CPU (arg = -1, it
        alone sees every switch); here they move to the latest proof that the task was not
        running yet (reconstruct.py, the perf backend's rule)."""
        events, names = take_names(events)
        t = events["t_ns"]
        if len(t) > 1 and not bool(np.all(t[1:] >= t[:-1])):
            # Ring order is reservation order across CPUs (nearly time order), and a
            # reconstructed switch-in carries the older time of its bound.
            events = take_rows(events, np.argsort(t, kind="stable"))
        self._not_running.forget(self._exited_before)
        events = place_kernel_switch_ins(events, self._not_running)
        tasks = self._tasks
        known = (events["kind"] != ev.WAKEUP) & (events["kind"] != ev.WAKEUP_NEW) & \
                (events["kind"] != ev.MIGRATE)
        tasks.learn_pairs(events["tid"][known], events["pid"][known])
        tasks.fill(events)
        tasks.learn_names(sorted(names, key=lambda i: i.t_ns))
        now = int(events["t_ns"][-1]) if len(events) else time.monotonic_ns()
        tasks.lookup_live(tasks.seen_tids(events).tolist(), t_ns=now)
        exits = events["tid"][events["kind"] == ev.EXIT]
        # Forgotten by the evidence one batch later (a task's last switch follows its exit).
        self._exited_before = exits.tolist()
        self._exited = exits.tolist()
        return ev.EventBatch(events=events, tasks=tasks.take_infos(), lost=self._lost())
