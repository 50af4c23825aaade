"""Counters per run interval: the events ``--events`` names, opened on every CPU for the
scheduling tracer to read at each switch (docs/attribution.md).

The libbpf tracer reads them in its sched_switch program (bpf_perf_event_read_value on a
BPF_MAP_TYPE_PERF_EVENT_ARRAY of these descriptors) and hands over one record per run
interval of a traced thread: the counter, enabled-time and running-time deltas of each event
between its switch-in and its switch-out on that CPU (``COUNTER_FIELDS`` + one column of N per
value). Each event is opened on its own (no group), so the kernel rotates events that do not
fit the PMU's counters and running < enabled says by how much; the analysis scales and flags.

Software events (task-clock, page-faults, context-switches ...) go through exactly the same
path as hardware ones, which is how the whole path is tested on a machine without a PMU.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from snumap_tui.errors import SnumapError
from snumap_tui.native import perf_event as pe
from snumap_tui.native import perf_spec
from snumap_tui.sources.perf import core_pmus, no_pmu_reason, raise_fd_limit
from snumap_tui.textsafe import safe_text

MAX_COUNTERS = 8          # SNUMAP_MAX_COUNTERS in bpf/sched_event.h (a test checks it)
HEAD_FIELDS = [("t_start", "<u8"), ("t_end", "<u8"), ("tid", "<i4"), ("pid", "<i4"),
               ("cpu", "<u4"), ("n", "<u4")]
# Errors that mean "this machine cannot count it", as opposed to a mistake in the name.
UNSUPPORTED = (errno.ENOENT, errno.EOPNOTSUPP, errno.ENODEV, errno.EINVAL)


def counter_dtype(n: int) -> np.dtype:
    """The row of an interval with N events (in memory, between tracer and store)."""
    return np.dtype([*HEAD_FIELDS, ("value", "<u8", (n,)), ("enabled", "<u8", (n,)),
                     ("running", "<u8", (n,))])


def ring_dtype(n: int, timed: int) -> np.dtype:
    """The ring record of sched.bpf.c: N counts, enabled and running of the first TIMED."""
    return np.dtype([*HEAD_FIELDS, ("value", "<u8", (n,)), ("enabled", "<u8", (timed,)),
                     ("running", "<u8", (timed,))])


def timed_first(specs: Sequence[perf_spec.EventSpec]) -> list[perf_spec.EventSpec]:
    """The events in the order the switch program wants them: those the kernel may multiplex
    (hardware, which it reads with their times) first, software ones after."""
    return [s for s in specs if s.needs_pmu] + [s for s in specs if not s.needs_pmu]


def widen(recs: np.ndarray, n: int, timed: int) -> np.ndarray:
    """Ring records -> rows: a software event's enabled and running time is its interval."""
    out = np.zeros(len(recs), counter_dtype(n))
    for f in ("t_start", "t_end", "tid", "pid", "cpu", "n", "value"):
        out[f] = recs[f]
    dur = (recs["t_end"] - recs["t_start"]).astype(np.uint64)
    out["enabled"][:] = dur[:, None]
    out["running"][:] = dur[:, None]
    if timed:
        out["enabled"][:, :timed] = recs["enabled"]
        out["running"][:, :timed] = recs["running"]
    return out


def empty_counters(n: int) -> np.ndarray:
    return np.zeros(0, dtype=counter_dtype(n))


def split_events(text: str) -> list[str]:
    """``--events`` text -> event names. Commas inside a ``PMU/terms/`` stay with it."""
    out, cur, depth = [], "", 0
    for ch in text:
        if ch == "/":
            depth ^= 1
        if ch == "," and not depth:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    out.append(cur.strip())
    names = [n for n in out if n]
    if not names:
        raise SnumapError("--events: no event named")
    return names


def parse_events(names: Sequence[str], root: Path = Path("/")) -> list[perf_spec.EventSpec]:
    """The EventSpecs of NAMES; a malformed or unknown name is an error (one line, exit 2),
    and so is asking for more than MAX_COUNTERS or the same event twice."""
    specs = []
    for name in names:
        try:
            specs.append(perf_spec.parse_event(name, root))
        except perf_spec.EventSpecError as e:
            raise SnumapError(f"--events: {e}") from None
    if len(specs) > MAX_COUNTERS:
        raise SnumapError(f"--events: {len(specs)} events named, at most {MAX_COUNTERS} per "
                          f"recording (the kernel multiplexes those beyond the PMU's counters)")
    seen = [s.name for s in specs]
    dup = sorted({n for n in seen if seen.count(n) > 1})
    if dup:
        raise SnumapError(f"--events: {safe_text(dup[0])} is named twice")
    return specs


def _attr(spec: perf_spec.EventSpec) -> pe.PerfEventAttr:
    return pe.make_attr(spec.type, spec.config, config1=spec.config1, config2=spec.config2,
                        exclude_user=spec.exclude_user, exclude_kernel=spec.exclude_kernel,
                        exclude_hv=spec.exclude_hv,
                        read_format=pe.PERF_FORMAT_TOTAL_TIME_ENABLED
                        | pe.PERF_FORMAT_TOTAL_TIME_RUNNING)


def why_unsupported(spec: perf_spec.EventSpec, exc: pe.PerfOpenError,
                    root: Path = Path("/")) -> str:
    """One line: why this machine cannot count SPEC."""
    name = safe_text(spec.name)
    if spec.needs_pmu and spec.pmu is None and not core_pmus(root):
        return f"{name} not supported here: {no_pmu_reason(root)[0]}"
    return f"{name} not supported here: {exc.reason}"


@dataclass
class CpuCounters:
    """SPECS opened on each of CPUS (pid -1: everything that runs there), one descriptor per
    event and CPU. Events this machine cannot count are left out, each with one line in
    ``dropped``; a permission problem is an error for all."""

    specs: list[perf_spec.EventSpec]
    cpus: list[int]
    root: Path = Path("/")
    fds: dict[tuple[int, int], int] = field(default_factory=dict)   # (event i, cpu) -> fd
    dropped: list[str] = field(default_factory=list)

    def open(self) -> None:
        raise_fd_limit(len(self.specs) * len(self.cpus))
        kept: list[perf_spec.EventSpec] = []
        try:
            for spec in self.specs:
                fds: dict[int, int] = {}
                failure: pe.PerfOpenError | None = None
                for cpu in self.cpus:
                    try:
                        fds[cpu] = pe.perf_event_open(_attr(spec), -1, cpu, event=spec.name)
                    except pe.PerfOpenError as e:
                        if e.errno not in UNSUPPORTED:
                            raise
                        failure = e
                        break
                if failure is not None:
                    for fd in fds.values():
                        os.close(fd)
                    self.dropped.append(why_unsupported(spec, failure, self.root))
                    continue
                i = len(kept)
                kept.append(spec)
                for cpu, fd in fds.items():
                    self.fds[(i, cpu)] = fd
        except BaseException:
            self.close()
            raise
        self.specs = kept

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.specs]

    def close(self) -> None:
        fds, self.fds = self.fds, {}
        for fd in fds.values():
            try:
                os.close(fd)
            except OSError:
                pass


def describe_events(specs: Sequence[perf_spec.EventSpec]) -> list[dict[str, object]]:
    """The header's ``counters.events``: what each column is and how to show it."""
    return [{"name": s.name, "kind": s.kind, "scale": s.scale, "unit": s.unit}
            for s in specs]
