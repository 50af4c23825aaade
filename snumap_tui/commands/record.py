"""`snumap record`: metrics and every scheduling event of a command (or the system) into one file.

With a command after ``--``, the command is forked first and held on a pipe until the tracer
follows its pid, then exec'd directly (never through a shell), so not one of its events is
missed; the recording ends when it exits, and ``snumap record`` exits with its status. Without
one, the whole system is recorded until ``--duration`` or Ctrl-C / SIGTERM.

A drain thread (``Drainer``) copies the kernel's event buffers out every 10 ms; the main loop
decodes those drains every ``POLL_S`` and sweeps the metric sources every ``--interval``; the
store's Writer (thread-safe) puts both in the same crash-safe file (docs/format.md), on
CLOCK_MONOTONIC.
"""

from __future__ import annotations

import argparse
import signal
from pathlib import Path
from typing import Any

from snumap_tui.commands.options import (
    add_mode_argument,
    interval_option,
    option_value,
    parse_duration,
    parse_size,
)
from snumap_tui.recording import attach as record_attach
from snumap_tui.recording import counters as record_counters
from snumap_tui.recording import priority as record_priority
from snumap_tui.recording import regions as record_regions
from snumap_tui.recording.job import JobWatch, add_job_argument
from snumap_tui.recording.output import OutputFile
from snumap_tui.recording.runtime import Cleanup
from snumap_tui.recording.selfcost import COST, STEADY, SelfCost
from snumap_tui.recording.session import record_session
from snumap_tui.recording.status import LiveStatus, summary

DEFAULT_OUTPUT = "snumap.rec"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", default=DEFAULT_OUTPUT, metavar="FILE",
                        help=f"recording to write (default {DEFAULT_OUTPUT})")
    parser.add_argument("--interval", default="100ms",
                        help="metric sampling interval (default 100ms, down to 1ms)")
    parser.add_argument("--duration", default=None,
                        help="stop after this long (default: when the command exits, or Ctrl-C)")
    parser.add_argument("--backend", default="auto", choices=["auto", "libbpf", "bcc", "perf", "proc"],
                        help="scheduling tracer (default: the best that works here)")
    parser.add_argument("--system-wide", action="store_true",
                        help="trace every task on every PU. Without it, a recording of "
                             "CMD traces CMD and every process and thread it forks: their "
                             "switches, wakeups, migrations, forks, execs and exits; other "
                             "tasks appear only as 'other (not traced)' time on the PUs the "
                             "command used, without names. Without CMD the whole system is "
                             "always traced")
    parser.add_argument("--buffer-size", default=None, metavar="SIZE",
                        help="kernel event buffer per CPU (perf: one ring per CPU, default 8M, "
                             "less on many CPUs; libbpf: a ring per CPU, bcc: one ring of "
                             "SIZE x CPUs, default 4M; 256M in all); raise it if events are lost")
    parser.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    parser.add_argument("--cpus", default=None, metavar="LIST",
                        help="run CMD on these CPUs (its affinity, e.g. 0-3,8; the recorder "
                             "itself stays free)")
    add_mode_argument(parser)
    parser.add_argument("--keep-cmdlines", action="store_true",
                        help="keep every process's command line; by default only the "
                        "recording user's and the traced tree's are kept, other processes "
                        "keep their name (a command line may hold a password)")
    add_job_argument(parser)
    record_attach.add_arguments(parser)
    record_regions.add_arguments(parser)
    record_counters.add_arguments(parser)
    record_priority.add_arguments(parser)
    parser.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS...",
                        help="command to run and record (executed directly, not by a shell)")



def run(args: argparse.Namespace) -> int:
    from snumap_tui.native.malloc import one_arena

    one_arena()        # before any thread starts: one malloc arena keeps the peak RSS lower

    cmd = list(args.cmd or [])
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    # Everything that can be wrong with the arguments is found before anything starts.
    from snumap_tui.model.sampler import RECORD_MIN_INTERVAL_S

    interval = interval_option(args.interval, RECORD_MIN_INTERVAL_S)
    duration = option_value("--duration", args.duration, parse_duration) \
        if args.duration else None
    # Per CPU; the tracers cap all CPUs' rings together at 256 MiB anyway.
    buffer_bytes = option_value("--buffer-size", args.buffer_size,
                                lambda t: parse_size(t, most=1 << 30)) \
        if getattr(args, "buffer_size", None) else None
    args.counter_specs = record_counters.specs_from_args(args)
    record_priority.wanted(args)            # a bad --nice is one line before anything starts
    args.attached = record_attach.Attached.from_args(args, cmd)     # --pid
    status_line = LiveStatus(command=bool(cmd))      # the live line on a terminal
    say = status_line.say
    args.backend_asked = args.backend   # --job may pick another, which the user did not
    job = JobWatch.from_args(args, say)      # --job: expands %j/%N in args.output
    args.job_watch = job
    out = Path(args.output)
    # SIGTERM during the set-up ends it as Ctrl-C does: through the clean-up below, so no
    # temporary file or held child is left behind (the loop installs its own handlers).
    old_term = signal.signal(signal.SIGTERM, _interrupted)
    try:
        return _run(args, cmd, interval, duration, buffer_bytes, out, say, status_line)
    finally:
        signal.signal(signal.SIGTERM, old_term)


class Terminated(KeyboardInterrupt):
    """SIGTERM before the recording loop runs."""


def _interrupted(signum: int, _frame: Any) -> None:
    raise Terminated(signum)


def _run(args: argparse.Namespace, cmd: list[str], interval: float, duration: float | None,
         buffer_bytes: int | None, out: Path, say: Any, status_line: LiveStatus) -> int:
    from snumap_tui.analysis.recorder_cost import recorder_cost
    from snumap_tui.commands.common import topology_from_args

    started = None
    cleanup = Cleanup(say)
    cost = SelfCost()           # the recorder's own cost, kept in the file and said last
    try:
        # replaced only once the recording starts
        started = OutputFile(out, args.force, getattr(args, "mode", None), _inputs(args, cmd))
        topology = topology_from_args(args)
        root = Path(args.fsroot) if getattr(args, "fsroot", None) else Path("/")
        result = record_session(args, cmd, interval, duration, buffer_bytes, out, topology, root, say,
                         cleanup, started=started, status_line=status_line, cost=cost)
    except BaseException:
        try:
            cleanup.run(failing=True)
        finally:
            if started is not None:
                started.discard(say)
        raise
    cleanup.run(failing=False)
    status, tracer, writer, elapsed = result
    say(summary(writer, tracer, out, elapsed, recorder_cost(
        [{"what": STEADY, "t_ns": cost.t_steady or 0},
         {"what": COST, **cost.info(writer.lost_total)}] if cost.t_steady else [])))
    return status


def _inputs(args: argparse.Namespace, cmd: list[str]) -> list[str]:
    """What the recording must not replace: the topology file, the program it runs."""
    given = [getattr(args, "topology", None), cmd[0] if cmd and "/" in cmd[0] else None]
    return [p for p in given if p]


