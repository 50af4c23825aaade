"""Choosing the scheduling tracer: the best backend that works here, and why not the better ones.

Order of preference: libbpf (a CO-RE program built ahead of time: filters in the kernel, no
compiler or headers, the cheapest per event), bcc (the same program compiled at run time
against kernel headers: kernels without BTF), perf tracepoints (no eBPF, filters in user
space), /proc polling (no privilege, approximate).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any

from snumap_tui.errors import SnumapError
from snumap_tui.sources.base import SourceStatus
from snumap_tui.textsafe import safe_lines
from snumap_tui.trace.base import Tracer

ORDER = ("libbpf", "bcc", "perf", "proc")


def tracer_class(name: str) -> type[Tracer]:
    """The class of backend NAME (imported lazily: bcc pulls in libbcc)."""
    if name == "libbpf":
        from snumap_tui.trace.libbpf import LibbpfTracer

        return LibbpfTracer
    if name == "bcc":
        from snumap_tui.trace.bcc import BccTracer

        return BccTracer
    if name == "perf":
        from snumap_tui.trace.perf import PerfTracer

        return PerfTracer
    if name == "proc":
        from snumap_tui.trace.proc import ProcTracer

        return ProcTracer
    raise SnumapError(f"unknown tracing backend {name!r} (choose from auto, {', '.join(ORDER)})")


def describe(st: SourceStatus) -> str:
    return st.reason + (f" (fix: {st.fix})" if st.fix else "") if st.reason else "unavailable"


def pick(backend: str, status_of: Callable[[str], SourceStatus]) -> tuple[str, list[str]]:
    """The backend `record --backend BACKEND` uses, given each backend's status (STATUS_OF is
    asked in order, only until one works), and the lines explaining the choice, the last one
    ``tracing with NAME (...)``. ``auto`` takes the first of libbpf, bcc, perf, proc that
    works; a named backend that cannot run here is an error that says why."""
    lines: list[str] = []
    names = ORDER if backend == "auto" else (backend,)
    for name in names:
        st = status_of(name)
        if st.available:
            why = "; ".join(lines)
            line = f"tracing with {name}" + (f" ({why})" if why else "")
            if tracer_class(name).approximate:
                line += " — approximate: per-thread CPU time at each interval, not every switch"
            return name, [*lines, line]
        if backend != "auto":
            raise SnumapError(f"the {name} backend cannot run here: {describe(st)}")
        lines.append(f"{name} not used: {describe(st)}")
    raise SnumapError("no tracing backend works here: " + "; ".join(lines))


def choose_tracer(backend: str = "auto", *, say: Callable[[str], None] | None = None,
                  statuses: dict[str, SourceStatus] | None = None) -> tuple[Tracer, list[str]]:
    """A ready (not started) tracer for BACKEND (``pick``), and the lines explaining the
    choice; STATUSES overrides a backend's own status. The last line is also passed to SAY
    (default: stderr)."""
    say = say or (lambda s: print(safe_lines(s), file=sys.stderr))

    def status_of(name: str) -> SourceStatus:
        return statuses[name] if statuses and name in statuses else tracer_class(name).status()

    name, lines = pick(backend, status_of)
    say(lines[-1])
    return tracer_class(name)(), lines


def start_tracer(backend: str, pids: Iterable[int] | None, *,
                 say: Callable[[str], None] | None = None,
                 buffer_bytes: int | None = None,
                 counters: list[Any] | None = None) -> tuple[Tracer, list[str]]:
    """Choose and start a tracer (counting COUNTERS, perf_spec.EventSpec, per run interval
    where the backend can: trace/counters.py); with ``auto``, a backend that is available but fails to
    start (bcc cannot compile, perf_event_open refused) is stopped and gives way to the next
    one."""
    say = say or (lambda s: print(safe_lines(s), file=sys.stderr))
    roots = list(pids) if pids is not None else None
    failed: dict[str, SourceStatus] = {}
    while True:
        quiet: list[str] = []
        tracer, lines = choose_tracer(backend, say=quiet.append, statuses=failed)
        tracer.buffer_bytes = buffer_bytes
        tracer.counter_specs = list(counters or [])
        tracer.counter_dropped = []
        try:
            tracer.start(roots)
        except BaseException as exc:
            # start() cleans up after itself; stop() again (guarded) in case it left anything,
            # before the next backend opens its own.
            try:
                tracer.stop()
            except Exception:  # noqa: BLE001, S110 - the start failure is the error that matters
                pass
            if not isinstance(exc, (OSError, RuntimeError)):
                raise
            if backend != "auto":
                raise SnumapError(f"the {tracer.name} backend failed to start: {exc}") from None
            failed[tracer.name] = SourceStatus(tracer.name, False, f"failed to start: {exc}")
            continue
        say(lines[-1])
        from snumap_tui.trace.admin_fix import admin_fix

        fix = admin_fix(tracer.name)
        if fix:
            say(fix)
            lines.append(fix)
        return tracer, lines
