"""The recording session: one room that `record`, `scale` (through its child recorders) and a
node's sampler drive.

It opens the metric sources, the scheduling tracer, the region probes and the Writer, holds
and releases the command, and runs the loop that drains the kernel's buffers, samples the
metrics and writes both into one crash-safe file (docs/format.md), on CLOCK_MONOTONIC. The
command-line shell (`commands/record.py`) only parses arguments and prints.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import signal
import socket
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from snumap_tui.errors import SnumapError
from snumap_tui.heap import LongLived
from snumap_tui.recording import counters as record_counters
from snumap_tui.recording import fine as record_fine
from snumap_tui.recording import priority as record_priority
from snumap_tui.recording import regions as record_regions
from snumap_tui.recording.memory import MemoryRecorder
from snumap_tui.recording.output import OutputFile
from snumap_tui.recording.runtime import Cleanup, Drainer, HeldChild, TreeWatch
from snumap_tui.recording.selfcost import COST, STEADY, SelfCost
from snumap_tui.recording.status import LiveStatus, better_backends_note

if TYPE_CHECKING:
    from snumap_tui.trace.events import EventBatch

POLL_S = 0.1


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


def _children_cpu_ns() -> int:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return int((r.ru_utime + r.ru_stime) * 1e9)


def _version() -> str:
    from snumap_tui import __version__

    return __version__


def backend_statuses() -> list[dict[str, Any]]:
    from snumap_tui.trace.select import ORDER, tracer_class

    return [tracer_class(n).status().to_dict() for n in ORDER]


# ---- metric samples -----------------------------------------------------------------------------

TASKS_EVERY_S = 1.0        # --system-wide (and a recording without a command)
# Below 10 ms the kernel samples the counters and the loop reads every source at its 100 ms
# sweeps (recording/fine.py). Where the kernel cannot, these are read every 10 ms only
# (docs/benchmarks.md, "Record overhead: default interval and 1 ms"): memory per node, the
# I/O devices and the process list (the traced threads' CPU time is exact in the scheduling
# events anyway). A sample's readings cost about as much to encode as to read.
SLOW_EVERY_S = 0.01
# /proc/stat is among them: the kernel gives its CPU times in USER_HZ ticks (10 ms), so a read
# every millisecond found the same figures nine times out of ten, at 40 us a read and as much
# to store (the exact per-PU busy time is in the switch events anyway).
SLOW_SOURCES = ("numa", "tasks", "net", "ib", "disk", "gpu", "procstat")
# A recording of a command (or --pid, --job) reads the I/O devices' counters once a second
# whatever the interval: they are the node's, not the traced tree's, and beside a program on
# every PU their sysfs and /proc reads were a third of a sample (0.5 of 1.6 ms: each file
# costs several times more with the program's caches around it). --system-wide keeps them
# at the interval.
IO_SOURCES = ("net", "ib", "disk")
IO_EVERY_S = 1.0


def make_sampler(topology: Any, root: Path, interval_s: float, whole_system: bool = True
                 ) -> tuple[Any, list[dict[str, Any]]]:
    """The metrics engine's Sampler for the recording, and its sources' statuses.

    Every process's full tasks reading at every sample (10 a second at the default interval)
    would be most of the recorder's own CPU time on a busy node, and most of the file. The
    traced tree's processes (``watch_pids``, kept up to date from the tracer's batches) are
    read at every sample. The full list of the machine's tasks: every ``TASKS_EVERY_S`` when
    the whole system is recorded; otherwise once, at the first sample, before the command
    starts (what else was running on the node), and never while it runs. A recording of a
    command needs no other task by name, nor its own threads from /proc (one row per
    process: the threads' run time is in the switch events): the others' load on each PU is
    in the per-PU CPU times (/proc/stat, one file) and, exactly, in the switch program's
    "other (not traced)" intervals; reading thousands of /proc directories a second on a
    full node would take a PU's time from the program for nothing it shows. The I/O devices
    likewise: every ``IO_EVERY_S`` unless the whole system is recorded. Below 10 ms the
    perf groups open with their sampling clocks (recording/fine.py ``arm``)."""
    from snumap_tui.model.sampler import Sampler, default_sources

    made, _ = default_sources(root, True, topology)
    record_fine.arm(made, interval_s)
    s = Sampler(topology, root, interval_s, sources=made, tasks=True)
    s.set_tasks_cadence(TASKS_EVERY_S if whole_system else math.inf)
    if not whole_system:        # the threads' run time is in the scheduling events
        for src in s.sources:
            if hasattr(src, "per_thread"):
                src.per_thread = False
    set_cadences(s, interval_s, whole_system)
    return s, [st.to_dict() for st in s.statuses().values()]


def set_cadences(sampler: Any, step_s: float, whole_system: bool) -> None:
    """The slower sources' cadences for a loop that sweeps every STEP_S: the interval, or
    the 100 ms sweeps when the kernel samples the counters (recording/fine.py)."""
    sampler.set_slow_sources(SLOW_EVERY_S if step_s < SLOW_EVERY_S else 0, SLOW_SOURCES)
    if not whole_system and step_s < IO_EVERY_S:     # after: the I/O devices' cadence wins
        sampler.set_slow_sources(IO_EVERY_S, IO_SOURCES)

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


def _warm_up() -> None:
    """Load what the loop imports on first use (the watched tree's memory rows, the events'
    helpers, numpy.ma: numpy 2's np.unique imports it on its first call, 25 ms), so that
    the loop's first passes after the command's release do not."""
    import numpy.ma  # noqa: F401

    import snumap_tui.store.procmem
    import snumap_tui.textsafe
    import snumap_tui.trace.events  # noqa: F401


def _bpf_objects(tracer: Any, regions: Any) -> list[Any]:
    """The BPF objects whose programs' statistics the recorder's cost reports: the
    scheduling tracer's and the region probes' (libbpf paths only)."""
    probes = getattr(getattr(regions, "tracer", None), "uprobes", None)
    return [getattr(tracer, "_obj", None), getattr(probes, "obj", None)]


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


def record_session(args: argparse.Namespace, cmd: list[str], interval: float, duration: float | None,
            buffer_bytes: int | None, out: Path, topology: Any, root: Path, say: Any,
            cleanup: Cleanup, *, started: OutputFile,
            status_line: LiveStatus | None = None,
            cost: SelfCost | None = None) -> tuple[int, Any, Any, float]:
    """The recording itself; what it opens is pushed on CLEANUP (closed by run() whatever
    happens, in reverse order). ``started.start()`` runs once the command runs (or, without
    one, once the loop starts): from then on the file is kept under its name, whatever
    happens.

    Nothing heavy overlaps the command: every set-up step (sources opened, probes planned and
    attached, the tracer loaded, the Writer, the drain thread, the first sample with its full
    /proc sweep, one pass of the loop's work to load what it imports and warm numpy and zstd)
    ends before the command is released; the "recorder steady" info chunk says when, and
    COST (recording/selfcost.py) measures the recorder from there on."""
    from snumap_tui.model.cmdlines import drop_other_cmdlines
    from snumap_tui.store import Writer
    from snumap_tui.trace.select import start_tracer
    from snumap_tui.trace.tracefs import mount_tracefs, tracefs_root

    cost = cost if cost is not None else SelfCost()
    whole_system = bool(args.system_wide) or (
        not cmd and getattr(args, "attached", None) is None
        and getattr(args, "job_watch", None) is None)
    sampler, sources = make_sampler(topology, root, interval, whole_system)
    cleanup.push("closing the metric sources", sampler.close)
    # Below 10 ms the kernel samples the per-PU counters and the loop sweeps every 100 ms,
    # every source at each sweep (the I/O devices of a command's recording once a second;
    # recording/fine.py); where it cannot, the loop reads the counters itself at every sample.
    fine = record_fine.start(sampler, interval)
    step = interval
    if fine is not None:
        cleanup.push("unmapping the counters' rings", fine.close)
        step = record_fine.SWEEP_S
        set_cadences(sampler, step, whole_system)
    cost.step("sources")
    if tracefs_root() is None and os.geteuid() == 0 and mount_tracefs() is not None:
        say("mounted tracefs at /sys/kernel/tracing (as perf does)")

    cpu0 = _children_cpu_ns()
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
    if job is not None:
        tracer.follow_lag_ns = job.follow_lag_ns
    note = better_backends_note(tracer.name, getattr(args, "backend_asked", args.backend))
    if note:
        say(note)
    stopped = {"tracer": False}

    def stop_tracer() -> None:
        if not stopped["tracer"]:
            stopped["tracer"] = True
            tracer.stop()

    cleanup.push("stopping the tracer", stop_tracer)
    cost.step("tracer")
    # The drain thread, before the probes: it drains their ring too (Drainer's guests).
    drainer = Drainer(tracer, priority)
    cleanup.push("stopping the drain thread", drainer.stop)
    regions.host = drainer
    regions.start(pids, [child.pid] if child is not None else None,
                  attached.binaries() if attached is not None else [])
    cost.step("region probes")
    cost.bpf_objects = lambda: _bpf_objects(tracer, regions)
    sources = sources + backend_statuses()
    # process memory below 10 ms as the slow sources: every SLOW_EVERY_S
    memory = MemoryRecorder(root, say, SLOW_EVERY_S if step < SLOW_EVERY_S else 0.0)
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
    if child is not None:
        header["command_pid"] = child.pid     # whose exit ends the program's run (scale)
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
    if fine is not None:
        header["counter_sampling"] = fine.header()
    writer = Writer(started.path, header, fd=started.writer_fd())   # OutputFile's file
    writer.counter_events = [e["name"] for e in (counters or {}).get("events", [])]
    cleanup.push(f"closing {out}", writer.close)
    cost.writer = writer
    if job is not None:
        job.start(writer)
    cost.step("writer")

    stop = {"sig": 0}

    def on_signal(signum: int, _frame: Any) -> None:
        stop["sig"] = signum
        if child is not None and signum == signal.SIGTERM:
            os.kill(child.pid, signal.SIGTERM)   # the command ends, and then so do we

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    cleanup.push("restoring signal handlers",
                 lambda: [signal.signal(s, h) for s, h in old.items()])
    status = 0

    def events(batch: Any) -> None:
        writer.add_events(batch)
        watch.update(batch)
        regions.follow(batch)

    def sample_now(last: bool = False) -> int:
        """One sample written (its process memory rows too, at their own cadence); its
        time."""
        sample = sampler.sweep()
        if fine is not None:        # the kernel's samples since the last sweep, first
            sample = fine.write_before(writer, sample)
        writer.add_sample(_kept(sample, keep))
        memory.sample(writer, sample.t_ns, last)
        return int(sample.t_ns)

    # The first sample (the full /proc sweep of a recording of a command), then one pass of
    # the loop's work on what the buffers hold so far: its imports and first numpy and zstd
    # calls happen here, and the first chunks are written, before the command runs.
    t_start = time.monotonic()
    sample_now()
    cost.step("first sample")
    _warm_up()
    for raw in drainer.take():
        events(tracer.decode(raw))
    regions.poll(writer)
    writer.flush()
    cost.step("warm-up")
    # What start-up made lives until the end: full collections stop walking it (a pause of
    # tens of milliseconds each, while the program runs otherwise; heap.py).
    heap = LongLived()
    heap.settle()
    cost.step("heap frozen")
    t_steady = cost.steady()
    writer.add_info(t_steady, STEADY, cost.steady_info())
    if child is not None:
        writer.add_marker(time.monotonic_ns(), "command start: " + " ".join(cmd))
        held["child"] = False
        child.release()
    if attached is not None:
        for p in attached.procs:
            writer.add_marker(time.monotonic_ns(), f"attached: pid {p['pid']} ({p['comm']})")
    started.start(writer)
    next_sample = t_start + step
    clock = time.thread_time_ns
    threads_at = time.monotonic()
    if status_line is not None:
        status_line.backend = tracer.name
    # The buffers, the probes and the status line every POLL_S (or at once for a backlog),
    # whatever the interval: at 1 ms, doing it at every sample was a fifth of the recorder.
    next_poll = 0.0
    woke = False
    while True:
        now = time.monotonic()
        sampled = now >= next_sample
        if sampled:
            c0 = clock()
            sample_now()
            cost.part("sampling", clock() - c0)
            next_sample += step
            if next_sample < now:
                next_sample = now + step
            if now - threads_at >= 1.0:     # the thread count, once a second
                threads_at = now
                cost.tick()
        job_over = False
        # due, or soon and the thread is awake for a sample anyway (one wake, not two)
        if now >= next_poll or woke or (sampled and next_poll - now < POLL_S / 2):
            next_poll = now + POLL_S
            raws = drainer.take()
            # --job: the processes the job started by now are followed before these are
            # decoded
            job_over = job is not None and job.poll(writer, tracer, say)
            c0 = clock()
            for raw in raws:
                events(tracer.decode(raw))
            c1 = clock()
            regions.poll(writer)
            cost.part("decoding and writing events", c1 - c0)
            cost.part("regions", clock() - c1)
            if status_line is not None:
                status_line.update(now - t_start, writer)
        if child is not None and child.exited():
            break
        if (child is None and stop["sig"]) or job_over:
            break
        if attached is not None and not attached.alive():
            break
        if duration is not None and now - t_start >= duration:
            break
        woke = drainer.wait(max(0.0, min(POLL_S, next_sample - time.monotonic(),
                                         next_poll - time.monotonic())))
    # The recording ends here: the last sample now, and of what the tracer still hands over
    # while it is drained and detached (about half a second for bcc), only the events up to
    # now -- the rest is the recorder's own teardown, outside what was asked for.
    t_stop = time.monotonic()
    cost.stop()
    heap.release()
    if status_line is not None:
        status_line.clear()
    memory.finish(writer, sample_now(last=True))
    t_stop_ns = time.monotonic_ns()
    wakeups = drainer.wakeups if drainer.threaded else None    # the drain thread's, if any
    for raw in drainer.stop():
        events(_until(tracer.decode(raw), t_stop_ns))
    stopped["tracer"] = True
    # the tracer's last read (with what --job's tracer held back) takes the whole path too:
    # the tree watch and the region probes' follow, not the writer alone
    events(_until(tracer.stop(), t_stop_ns))
    record_counters.finish(writer, tracer, t_stop_ns, say)
    if fine is not None and fine.sampled.lost:
        say(f"the kernel could not write {fine.sampled.lost} of the counters' samples "
            "(their rings were full)")
    if fine is not None and fine.restarts:
        say(f"the online PUs changed {fine.restarts} time(s): the counters' sampling "
            "followed them")
    regions.finish(writer, t_stop_ns)
    if job is not None:
        job.finish(writer)          # after the last events: it records their largest tid
    writer.add_info(t_stop_ns, COST, cost.info(writer.lost_total, wakeups))
    ran = child is not None and child.exited()
    if child is not None:
        if not child.exited():      # --duration ended the recording: the command goes on
            say(f"--duration reached; {cmd[0]} (pid {child.pid}) keeps running")
        else:
            status = child.reap()
            writer.add_marker(time.monotonic_ns(), f"command exit: status {status}")
    # The program's CPU time (the command's processes waited for, since the recording began)
    # is what the region probes' estimated cost is a share of.
    cpu_ns = _children_cpu_ns() - cpu0 if ran else None
    note = regions.said_cost(writer, cpu_ns)
    if note is not None:
        writer.summary_notes.append(note)
    return status, tracer, writer, t_stop - t_start
