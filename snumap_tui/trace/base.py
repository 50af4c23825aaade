"""One interface for the scheduling tracers: bcc (eBPF), perf tracepoints, /proc polling.

Usage::

    tracer = choose_tracer("auto")       # snumap_tui.trace.select; prints why better ones failed
    tracer.start(pids=[child_pid])       # None = the whole system; pids = roots to follow,
                                         # with every process/thread they fork
    while running:
        batch = tracer.read()            # EventBatch, non-blocking
    batch = tracer.stop()                # the rest
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable

from snumap_tui.sources.base import SourceStatus
from snumap_tui.trace.events import EventBatch


class Tracer(ABC):
    name: str = "?"
    approximate: bool = False      # True for /proc polling

    @classmethod
    @abstractmethod
    def status(cls) -> SourceStatus:
        """Whether this backend can run here, why not, how to fix it."""

    @abstractmethod
    def start(self, pids: Iterable[int] | None = None) -> None: ...

    @abstractmethod
    def read(self) -> EventBatch: ...

    @abstractmethod
    def stop(self) -> EventBatch: ...
