"""One interface for the scheduling tracers: bcc (eBPF), perf tracepoints, /proc polling.

Usage::

    tracer = choose_tracer("auto")       # snumap_tui.trace.select; prints why better ones failed
    tracer.start(pids=[child_pid])       # None = the whole system; pids = roots to follow,
                                         # with every process/thread they fork
    while running:
        batch = tracer.read()            # EventBatch, non-blocking
    batch = tracer.stop()                # the rest

``read()`` is ``decode(drain())``: ``drain()`` only copies what the kernel wrote out of its
buffers (quick, so a dedicated thread can empty them often), ``decode()`` does the rest
(decoding, filtering, names) and may run on another thread, one call at a time, in order.
``buffer_bytes`` (set before ``start``) sizes the kernel buffers per CPU (None: the default).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import Any

from snumap_tui.sources.base import SourceStatus
from snumap_tui.trace.events import EventBatch


class Tracer(ABC):
    name: str = "?"
    approximate: bool = False      # True for /proc polling
    buffer_bytes: int | None = None
    # Events to count per run interval (perf_spec.EventSpec, set before ``start``), and
    # whether this backend can (trace/counters.py); after start, the ones it counts.
    counts_intervals: bool = False
    counter_specs: Sequence[Any] = ()
    counter_dropped: Sequence[str] = ()
    counter_source = ""            # how (the recording header's counters.source)

    @classmethod
    @abstractmethod
    def status(cls) -> SourceStatus:
        """Whether this backend can run here, why not, how to fix it."""

    @abstractmethod
    def start(self, pids: Iterable[int] | None = None) -> None: ...

    @abstractmethod
    def read(self) -> EventBatch: ...

    def drain(self) -> Any:
        """What the kernel buffered since the last drain, copied out (None: nothing). Backends
        without kernel buffers (polling) do their whole read in ``decode``."""
        return None

    def drain_capped(self) -> bool:
        """Whether the last drain stopped at its budget with more in the kernel buffers: the
        drain thread then comes back at once instead of pausing."""
        return False

    def wait_fds(self) -> list[int]:
        """Descriptors that poll readable (edge-triggered) when the kernel buffers hold a
        drain worth taking; empty: the drain thread sleeps on its timer alone."""
        return []

    def decode(self, raw: Any) -> EventBatch:
        """The batch for one ``drain()`` result (None: whatever ``read()`` finds now)."""
        return self.read()

    @abstractmethod
    def stop(self) -> EventBatch: ...

    #: Set by ``record --job`` where the backend filters the tree in user space (perf): how
    #: long events wait before that filter, for the job's rescan to find a new process first.
    follow_lag_ns = 0

    def follow(self, pids: Iterable[int]) -> bool:
        """Add PIDS and their trees to a tracer started on roots (``record --job``: a new job
        step's tasks are forked by slurmd, not by a traced process). False where the backend
        cannot; a system-wide tracer sees them anyway and returns True."""
        return False
