"""The regions part of `snumap record`: ``--regions``, ``--probe`` and ``SNUMAP_MARKERS``.

``RegionSession`` is created before the command is forked (the FIFO's path must be in its
environment, the probes on its libraries before it runs), follows the tracer's batches, and
hands region rows to the Writer at each poll. record.py calls four methods; everything else
is here and in trace/regions.py, trace/markers.py.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from snumap_tui.errors import SnumapError
from snumap_tui.extras import install_extra
from snumap_tui.trace.probe_budget import BUDGET_SHARE  # numpy only, not elftools

# Said (last line, marker) when the region probes cost more than this share of the program's
# CPU time in all (analysis/regions.py WARN_SHARE, the report's).
WARN_SHARE = 0.05
# The "region probes" info chunk (docs/format.md): per probed function.
COST_COLUMNS = ("name", "hits", "probe_ns", "call_ns", "detached_ns")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--regions", default="auto", choices=["auto", "omp", "mpi", "none"],
                        help="probe the OpenMP and MPI runtimes the command maps (uprobes), "
                             "so time is coloured and reported by parallel region and MPI "
                             "call (default auto: whatever is found)")
    parser.add_argument("--probe-budget", type=_share, default=None, metavar="PCT",
                        help="the share of a thread's time one probed function may cost "
                             "(default 1%%): a function called more often than that (e.g. a "
                             "critical section taken millions of times) has its probes "
                             "detached, its calls until then kept exact, and the recording "
                             "says so; 0 never detaches")
    parser.add_argument("--probe-scope", default="process", choices=["process", "file"],
                        help="where the region probes' breakpoints are set: in the traced "
                             "processes only (default, eBPF path: other users' programs "
                             "calling the same library are not trapped; past 64 processes "
                             "the probes go on the files), or on the files (every process "
                             "of the node mapping them takes the trap, the hit is dropped "
                             "in the kernel)")
    parser.add_argument("--probe", action="append", default=[], metavar="FILE:SYMBOL",
                        help="also make this function of a binary or library a region, from "
                             "entry to return (repeatable)")


def _share(text: str) -> float:
    """``--probe-budget``: a percentage (``1``, ``0.5%``) -> a share (0.01, 0.005)."""
    try:
        pct = float(text.strip().removesuffix("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a percentage, e.g. 1 or 0.5%") from None
    if not 0 <= pct <= 100:
        raise argparse.ArgumentTypeError(f"{text!r}: between 0 and 100")
    return pct / 100


def cost_note(costs: dict[str, dict[str, int]], cpu_ns: int | None
              ) -> tuple[str, bool] | None:
    """What the region probes cost the program, said in record's last line: the estimated
    probe time, its share of the program's CPU time CPU_NS (when known), and the functions
    detached past the budget; and whether that share is above WARN_SHARE. None without
    probes."""
    if not costs:
        return None
    ns = sum(c["probe_ns"] for c in costs.values())
    off = sorted(n for n, c in costs.items() if c["detached_ns"])
    share = ns / cpu_ns if cpu_ns else None
    over = share is not None and share > WARN_SHARE
    text = f"region probes ~{ns / 1e6:.1f} ms"
    if share is not None:
        text += f" ({100 * share:.2g}% of the program's CPU time{' (!)' if over else ''})"
    if off:
        shown = ", ".join(off[:3]) + (f" and {len(off) - 3} more" if len(off) > 3 else "")
        text += f", detached past the budget: {shown} (counts from then on partial)"
    return text, over


class RegionSession:
    """Markers FIFO, uprobes and their drain thread, for one recording."""

    def __init__(self, args: argparse.Namespace, cmd: list[str], backend: str,
                 say: Callable[[str], None]) -> None:
        from snumap_tui.trace.region_catalog import RegionNames

        self.say = say
        self.names = RegionNames()
        self.cmd = cmd
        self.mode = getattr(args, "regions", "auto") or "auto"
        self.asked = self.mode
        self.user = list(getattr(args, "probe", []) or [])
        self.markers: Any = None
        self.tracer: Any = None
        self.drainer: Any = None
        self.host: Any = None       # the scheduling tracer's Drainer, whose thread drains ours
        self.info: dict[str, Any] = {"mode": self.mode, "found": [], "problems": []}
        self.rows_total = 0
        self.calls_summed = 0       # aggregated calls, summed in the kernel (no row each)
        budget = getattr(args, "probe_budget", None)
        self.budget = BUDGET_SHARE if budget is None else float(budget)
        self.costs: dict[str, dict[str, int]] = {}  # per probed function (probe_costs)
        self.info["budget"] = self.budget
        self._next_rescan = 0.0
        self._old_env = os.environ.get("SNUMAP_MARKERS")
        if backend == "proc" and (self.user or (cmd and self.mode != "none")):
            how = ("choose --backend libbpf, bcc or perf" if os.geteuid() == 0
                   else "run as root or choose --backend libbpf, bcc or perf")
            why = ("regions need uprobes (perf_event_open), which the /proc backend does not "
                   f"use: {how}; markers still work")
            if self.user:
                raise SnumapError(f"--probe: {why}")
            self.info["problems"].append(why)
            if self.mode != "auto":     # auto: the backend note already names better ones
                say(f"regions: {why}")
            self.mode = "none"
        if self.user or self.mode != "none":
            from snumap_tui.trace import elfsyms

            if self.mode == "auto" and not self.user and not elfsyms.have_elftools():
                why = f"regions (auto): off: they need pyelftools: {install_extra('regions')}"
                self.info["problems"].append(why)
                if cmd:
                    say(why)
                self.mode = "none"
            else:
                elfsyms.need_elftools()
                from snumap_tui.trace.regions import RegionTracer

                self.tracer = RegionTracer(self.mode, self.user, self.names, say)
                self.tracer.budget = self.budget
                self.tracer.scope = getattr(args, "probe_scope", "process") or "process"
        if cmd:
            from snumap_tui.trace.markers import ENV, MarkerFifo

            self.markers = MarkerFifo(self.names)
            os.environ[ENV] = self.markers.path     # inherited by the command's fork

    def start(self, roots: list[int] | None, command: list[int] | None = None,
              programs: list[str] | None = None) -> None:
        """Probes on the command's programs and libraries (before it execs), and on PROGRAMS
        (the running processes' of record --pid). ROOTS: the traced tree (None:
        system-wide); COMMAND: the command's pid, if there is one."""
        if self._old_env is None:
            os.environ.pop("SNUMAP_MARKERS", None)
        else:
            os.environ["SNUMAP_MARKERS"] = self._old_env
        if self.tracer is None:
            if self.asked == "none" and not self.user:
                self.say("regions (none): off")
            return
        from snumap_tui.trace import elfsyms
        from snumap_tui.trace.uprobes import status

        st = status()
        if not st.available:
            why = f"regions unavailable: {st.reason}" + (f" (fix: {st.fix})" if st.fix else "")
            if self.user:
                raise SnumapError(f"--probe: {why}")
            self.info["problems"].append(why)
            self.say(why)
            self.tracer = None
            return
        binaries = elfsyms.command_binaries(self.cmd)
        binaries += [b for b in programs or [] if b not in binaries]
        for line in self.tracer.start(binaries, roots, command):
            self.say(line)
        self._drain_if_probed()
        # Not at once: until the held child execs, its maps are this Python's.
        self._next_rescan = time.monotonic() + self.RESCAN_S

    def _drain_if_probed(self) -> None:
        """The drain thread, once there are probes to drain (none: no thread waking every
        10 ms for nothing, e.g. a system-wide recording)."""
        if self.drainer is None and self.tracer is not None and self.tracer.uprobes is not None:
            from snumap_tui.recording.runtime import Drainer

            # No backing off here: a process held at its exec waits for this thread to
            # probe its program and let it go (80 ms idle periods made each hold longer).
            # The scheduling tracer's drain thread does it when there is one (a thread less).
            host = self.host if self.host is not None and self.host.threaded else None
            self.drainer = Drainer(self.tracer, idle_s=Drainer.DRAIN_S, host=host)

    def header(self) -> dict[str, Any]:
        if self.tracer is not None:
            self.info["found"] = list(self.tracer.found)
            self.info["probes"] = self.tracer.path
            self.info["scope"] = ("process" if getattr(self.tracer.uprobes, "scoped", None)
                                  is not None else "file")
            self.info["problems"] = [*self.info["problems"], *self.tracer.problems]
        self.info["markers"] = self.markers is not None
        return dict(self.info)

    def follow(self, batch: Any) -> None:
        if self.tracer is not None:
            self.tracer.follow(batch)

    RESCAN_S = 1.0
    HELD_SAID_NS = 100_000_000      # holds at exec said when they took this long in all

    def poll(self, writer: Any) -> None:
        if self.tracer is not None and time.monotonic() >= self._next_rescan:
            self._next_rescan = time.monotonic() + self.RESCAN_S
            self.tracer.rescan()
            self._drain_if_probed()
        if self.tracer is not None:
            for line in self.tracer.take_lines():
                self.say(line)
        if self.tracer is not None and self.drainer is not None:
            for raw in self.drainer.take():
                self._write(writer, self.tracer.decode(raw))
            self._write_sums(writer, self.tracer.take_sums())
            for t, text in self.tracer.notes:
                self.say(text)
                writer.add_marker(t, text)
            self.tracer.notes.clear()
        if self.markers is not None:
            self._write(writer, self.markers.take())

    def _write_sums(self, writer: Any, sums: Any) -> None:
        if len(sums):
            from snumap_tui.trace.region_catalog import REGION_DTYPE

            writer.add_regions(np.zeros(0, REGION_DTYPE), self.names.items, sums)
            self.calls_summed += int(sums["count"].sum())

    def _write(self, writer: Any, rows: Any) -> None:
        if len(rows):
            writer.add_regions(rows, self.names.items)
            self.rows_total += len(rows)

    def finish(self, writer: Any, t_stop_ns: int) -> None:
        """The last rows (up to the recording's end), and what went wrong, said once."""
        problems: list[str] = []
        if self.tracer is not None and self.drainer is not None:
            for raw in self.drainer.stop():
                rows = self.tracer.decode(raw)
                self._write(writer, rows[rows["t_ns"] <= t_stop_ns])
            self.drainer = None
            self._write_sums(writer, self.tracer.take_sums(last=True))
            self.costs = self.tracer.probe_costs()
            if self.costs:
                writer.add_info(t_stop_ns, "region probes", {
                    "columns": list(COST_COLUMNS),
                    "rows": [[name, *(int(c[k]) for k in COST_COLUMNS[1:])]
                             for name, c in sorted(self.costs.items())]})
            for line in self.tracer.take_lines():
                self.say(line)
            if self.tracer.held_ns >= self.HELD_SAID_NS:
                self.say(f"regions: {self.tracer.holds} exec(s) of the command held "
                         f"{self.tracer.held_ns / 1e6:.0f} ms in all, until their programs "
                         "were probed")
            if self.tracer.lost:
                by = self.tracer.lost_by_region()
                writer.add_region_loss(by, t_stop_ns)
                which = ", ".join(f"{k} {v}" for k, v in sorted(by.items(), key=lambda kv: -kv[1]))
                problems.append(f"{self.tracer.lost} region records lost (ring full)"
                                + (f": {which} (their figures are short by as many)"
                                   if which else ""))
        if self.markers is not None:
            self._write(writer, self.markers.stop())
            problems += self.markers.stats.problems()
        for p in problems:
            self.say(f"regions: {p}")
        if problems:
            writer.add_marker(t_stop_ns, "regions: " + "; ".join(problems))

    def said_cost(self, writer: Any, cpu_ns: int | None) -> str | None:
        """The probes' cost for record's last line (None without probes); a marker when they
        cost more than WARN_SHARE of the program's CPU time CPU_NS."""
        got = cost_note(self.costs, cpu_ns)
        if got is None:
            return None
        text, over = got
        if over:
            writer.add_marker(time.monotonic_ns(), f"regions: {text}, above "
                              f"{100 * WARN_SHARE:g}%")
        return text

    def close(self) -> None:
        raws = []
        if self.drainer is not None:
            raws = self.drainer.stop()
            self.drainer = None
        if self.tracer is not None:
            self.tracer.release(raws)       # no process of the command stays held
            self.tracer.close()
        if self.markers is not None:
            self.markers.close()
