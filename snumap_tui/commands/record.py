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
import os
import platform
import signal
import socket
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from snumap_tui.commands import (
    record_attach,
    record_counters,
    record_priority,
    record_regions,
)
from snumap_tui.commands.options import (
    add_mode_argument,
    interval_option,
    option_value,
    parse_duration,
    parse_size,
)
from snumap_tui.commands.record_job import JobWatch, add_job_argument
from snumap_tui.commands.record_memory import MemoryRecorder
from snumap_tui.commands.record_output import OutputFile
from snumap_tui.commands.record_runtime import (
    Cleanup,
    Drainer,
    HeldChild,
    TreeWatch,
)
from snumap_tui.commands.record_status import LiveStatus, better_backends_note, summary
from snumap_tui.errors import SnumapError

if TYPE_CHECKING:
    from snumap_tui.trace.events import EventBatch

DEFAULT_OUTPUT = "snumap.rec"
POLL_S = 0.1
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



def build_header(topology: Any, argv: list[str], tracer: Any, choice: list[str],
                 sources: list[dict[str, Any]], interval_s: float, system_wide: bool,
                 root: Path = Path("/")) -> dict[str, Any]:
    from snumap_tui.sources.cpuinfo import cpu_model

    return {
        "topology": topology.to_dict(),
        "host": socket.gethostname(),
        "kernel": platform.release(),
        "machine": platform.machine(),
        "cpu_model": cpu_model(root),
        "command_line": argv,
        "backend": tracer.name,
        "approximate": bool(tracer.approximate),
        "backend_choice": choice,
        "system_wide": system_wide,
        "interval_ns": int(interval_s * 1e9),
        "sources": sources,
        "snumap_version": _version(),
    }


def _version() -> str:
    from snumap_tui import __version__

    return __version__


def backend_statuses() -> list[dict[str, Any]]:
    from snumap_tui.trace.select import ORDER, tracer_class

    return [tracer_class(n).status().to_dict() for n in ORDER]


# ---- metric samples -----------------------------------------------------------------------------

TASKS_EVERY_S = 1.0
# Below 10 ms these are read every 10 ms only (docs/benchmarks.md, "Record overhead: default
# interval and 1 ms"): memory per node, the I/O devices and the process list (the traced
# threads' CPU time is exact in the scheduling events anyway). A sample's readings cost about
# as much to encode as to read.
SLOW_EVERY_S = 0.01
SLOW_SOURCES = ("numa", "tasks", "net", "ib", "disk", "gpu")


def make_sampler(topology: Any, root: Path, interval_s: float
                 ) -> tuple[Any, list[dict[str, Any]]]:
    """The metrics engine's Sampler for the recording, and its sources' statuses.

    Every process's full tasks reading at every sample (10 a second at the default interval)
    would be most of the recorder's own CPU time on a busy node, and most of the file; the
    full list is read every ``TASKS_EVERY_S``, the traced tree's processes (``watch_pids``,
    kept up to date from the tracer's batches) at every sample."""
    from snumap_tui.model.sampler import Sampler

    s = Sampler(topology, root, interval_s, tasks=True)
    s.set_tasks_cadence(TASKS_EVERY_S)
    if interval_s < SLOW_EVERY_S:
        s.set_slow_sources(SLOW_EVERY_S, SLOW_SOURCES)
    return s, [st.to_dict() for st in s.statuses().values()]

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
    from snumap_tui.commands.common import topology_from_args

    started = None
    cleanup = Cleanup(say)
    try:
        # replaced only once the recording starts
        started = OutputFile(out, args.force, getattr(args, "mode", None), _inputs(args, cmd))
        topology = topology_from_args(args)
        root = Path(args.fsroot) if getattr(args, "fsroot", None) else Path("/")
        result = _record(args, cmd, interval, duration, buffer_bytes, out, topology, root, say,
                         cleanup, started=started, status_line=status_line)
    except BaseException:
        try:
            cleanup.run(failing=True)
        finally:
            if started is not None:
                started.discard(say)
        raise
    cleanup.run(failing=False)
    status, tracer, writer, elapsed = result
    say(summary(writer, tracer, out, elapsed))
    return status


def _cpus(args: argparse.Namespace, cmd: list[str]) -> set[int] | None:
    """--cpus: the command's affinity (checked against this machine's CPUs)."""
    text = getattr(args, "cpus", None)
    if not text:
        return None
    from snumap_tui.native.perf_pmu import parse_cpulist

    if not cmd:
        raise SnumapError("--cpus: needs a command to run (after --)")
    try:
        cpus = set(parse_cpulist(text))
    except ValueError:
        raise SnumapError(f"--cpus {text}: give a CPU list such as 0-3,8") from None
    missing = cpus - os.sched_getaffinity(0)
    if not cpus or missing:
        raise SnumapError(f"--cpus {text}: CPUs {sorted(missing)[:8]} are not available here")
    return cpus


def _inputs(args: argparse.Namespace, cmd: list[str]) -> list[str]:
    """What the recording must not replace: the topology file, the program it runs."""
    given = [getattr(args, "topology", None), cmd[0] if cmd and "/" in cmd[0] else None]
    return [p for p in given if p]


def _kept(sample: Any, keep: Any) -> Any:
    return sample if keep is None else keep(sample)


def _until(batch: EventBatch, t_ns: int) -> EventBatch:
    """The batch without the events after ``t_ns`` and the run intervals begun after it
    (names and lost counts kept). The counters were once dropped with the events: a command
    that ended before the drain thread's first drain lost all of them."""
    from snumap_tui.trace.events import EventBatch

    ev = batch.events
    c = batch.counters
    if c is not None and len(c) and int(c["t_start"].max()) > t_ns:
        c = c[c["t_start"] <= t_ns]
    if len(ev) and int(ev["t_ns"].max()) > t_ns:
        ev = ev[ev["t_ns"] <= t_ns]
    if ev is not batch.events or c is not batch.counters:
        batch = EventBatch(events=ev, tasks=batch.tasks, lost=batch.lost, counters=c)
    return batch


def _record(args: argparse.Namespace, cmd: list[str], interval: float, duration: float | None,
            buffer_bytes: int | None, out: Path, topology: Any, root: Path, say: Any,
            cleanup: Cleanup, *, started: OutputFile,
            status_line: LiveStatus | None = None) -> tuple[int, Any, Any, float]:
    """The recording itself; what it opens is pushed on CLEANUP (closed by run() whatever
    happens, in reverse order). ``started.start()`` runs once the command runs (or, without
    one, once the loop starts): from then on the file is kept under its name, whatever
    happens."""
    from snumap_tui.model.cmdlines import drop_other_cmdlines
    from snumap_tui.store import Writer
    from snumap_tui.trace.select import start_tracer
    from snumap_tui.trace.tracefs import mount_tracefs, tracefs_root

    sampler, sources = make_sampler(topology, root, interval)
    cleanup.push("closing the metric sources", sampler.close)
    if tracefs_root() is None and os.geteuid() == 0 and mount_tracefs() is not None:
        say("mounted tracefs at /sys/kernel/tracing (as perf does)")

    regions = record_regions.RegionSession(args, cmd, args.backend, say)
    cleanup.push("stopping the region probes", regions.close)
    cpus = _cpus(args, cmd)
    child = HeldChild(cmd, cpus) if cmd else None
    held = {"child": child is not None}
    # After the fork: the command keeps its priority whatever the recorder's threads take.
    priority = record_priority.start(args, say)

    def abandon() -> None:
        if held["child"] and child is not None:
            held["child"] = False
            child.abandon()

    cleanup.push("abandoning the command", abandon)
    pids = None if (child is None or args.system_wide) else [child.pid]
    job = getattr(args, "job_watch", None)
    if job is not None and not args.system_wide:
        pids = job.roots()
    attached = getattr(args, "attached", None)
    if attached is not None:
        pids = attached.tree()
    specs = getattr(args, "counter_specs", [])
    tracer, choice = start_tracer(args.backend, pids, say=say, buffer_bytes=buffer_bytes,
                                  counters=specs)
    counters = record_counters.started(tracer, specs, say)
    note = better_backends_note(tracer.name, getattr(args, "backend_asked", args.backend))
    if note:
        say(note)
    stopped = {"tracer": False}

    def stop_tracer() -> None:
        if not stopped["tracer"]:
            stopped["tracer"] = True
            tracer.stop()

    cleanup.push("stopping the tracer", stop_tracer)
    regions.start(pids, [child.pid] if child is not None else None,
                  attached.binaries() if attached is not None else [])
    sources = sources + backend_statuses()
    memory = MemoryRecorder(root, say)
    watch = TreeWatch(sampler, [child.pid] if child is not None else (pids or []), memory,
                      whole_system=bool(args.system_wide))
    keep = None if getattr(args, "keep_cmdlines", False) else \
        (lambda s: drop_other_cmdlines(s, {os.getuid(), os.geteuid()},
                                       [*watch.pids, *(job.procs if job is not None else ())]))
    header = build_header(topology, [sys.argv[0], *sys.argv[1:]] if sys.argv else [], tracer,
                          choice, sources, interval,
                          (child is None and attached is None) or args.system_wide, root)
    if cmd:
        header["command"] = cmd
    if cpus:
        header["cpus"] = sorted(cpus)
    if job is not None:
        header.update(job.header(), system_wide=bool(args.system_wide))
    if attached is not None:
        header.update(attached.header())
    header["regions"] = regions.header()
    header["process_memory"] = memory.header()
    header["recorder_nice"] = priority.nice       # taken while the event buffers fill
    if counters is not None:
        header["counters"] = counters
    writer = Writer(started.path, header, fd=started.writer_fd())   # OutputFile's file
    writer.counter_events = [e["name"] for e in (counters or {}).get("events", [])]
    cleanup.push(f"closing {out}", writer.close)
    if job is not None:
        job.start(writer)

    stop = {"sig": 0}

    def on_signal(signum: int, _frame: Any) -> None:
        stop["sig"] = signum
        if child is not None and signum == signal.SIGTERM:
            os.kill(child.pid, signal.SIGTERM)   # the command ends, and then so do we

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    cleanup.push("restoring signal handlers",
                 lambda: [signal.signal(s, h) for s, h in old.items()])
    t_start = time.monotonic()
    status = 0
    drainer = Drainer(tracer, priority)
    cleanup.push("stopping the drain thread", drainer.stop)

    def events(batch: Any) -> None:
        writer.add_events(batch)
        watch.update(batch)
        regions.follow(batch)

    if child is not None:
        writer.add_marker(time.monotonic_ns(), "command start: " + " ".join(cmd))
        held["child"] = False
        child.release()
    if attached is not None:
        for p in attached.procs:
            writer.add_marker(time.monotonic_ns(), f"attached: pid {p['pid']} ({p['comm']})")
    started.start(writer)
    next_sample = t_start
    while True:
        now = time.monotonic()
        if now >= next_sample:
            sample = sampler.sweep()
            writer.add_sample(_kept(sample, keep))
            memory.sample(writer, sample.t_ns)
            next_sample += interval
            if next_sample < now:
                next_sample = now + interval
        raws = drainer.take()
        # --job: the processes the job started by now are followed before these are decoded
        job_over = job is not None and job.poll(writer, tracer, say)
        for raw in raws:
            events(tracer.decode(raw))
        regions.poll(writer)
        if child is not None and child.exited():
            break
        if (child is None and stop["sig"]) or job_over:
            break
        if attached is not None and not attached.alive():
            break
        if duration is not None and now - t_start >= duration:
            break
        if status_line is not None:
            status_line.backend = tracer.name
            status_line.update(now - t_start, writer)
        drainer.wait(max(0.0, min(POLL_S, next_sample - time.monotonic())))
    # The recording ends here: the last sample now, and of what the tracer still hands over
    # while it is drained and detached (about half a second for bcc), only the events up to
    # now -- the rest is the recorder's own teardown, outside what was asked for.
    t_stop = time.monotonic()
    if status_line is not None:
        status_line.clear()
    sample = sampler.sweep()
    writer.add_sample(_kept(sample, keep))
    memory.sample(writer, sample.t_ns)
    t_stop_ns = time.monotonic_ns()
    for raw in drainer.stop():
        events(_until(tracer.decode(raw), t_stop_ns))
    stopped["tracer"] = True
    writer.add_events(_until(tracer.stop(), t_stop_ns))
    record_counters.finish(writer, tracer, t_stop_ns, say)
    regions.finish(writer, t_stop_ns)
    if job is not None:
        job.finish(writer)          # after the last events: it records their largest tid
    if child is not None:
        if not child.exited():      # --duration ended the recording: the command goes on
            say(f"--duration reached; {cmd[0]} (pid {child.pid}) keeps running")
        else:
            status = child.reap()
            writer.add_marker(time.monotonic_ns(), f"command exit: status {status}")
    return status, tracer, writer, t_stop - t_start
