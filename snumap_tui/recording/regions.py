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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--regions", default="auto", choices=["auto", "omp", "mpi", "none"],
                        help="probe the OpenMP and MPI runtimes the command maps (uprobes), "
                             "so time is coloured and reported by parallel region and MPI "
                             "call (default auto: whatever is found)")
    parser.add_argument("--probe", action="append", default=[], metavar="FILE:SYMBOL",
                        help="also make this function of a binary or library a region, from "
                             "entry to return (repeatable)")


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
