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
import re
import signal
import socket
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from snumap_tui.errors import SnumapError

if TYPE_CHECKING:
    from snumap_tui.trace.events import EventBatch

DEFAULT_OUTPUT = "snumap.rec"
POLL_S = 0.1
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0,
          "h": 3600.0}


def parse_duration(text: str, *, positive: bool = True) -> float:
    """Seconds from "100ms", "2s", "1.5" (seconds), "1m", "250us". Without ``positive``, 0 is
    let through for a range check that says more (``check_interval``)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zµ]*)\s*", text or "")
    if not m or (m.group(2) and m.group(2) not in _UNITS):
        raise SnumapError(f"bad duration {text!r} (examples: 100ms, 2s, 1.5, 1m)")
    value = float(m.group(1)) * _UNITS.get(m.group(2) or "s", 1.0)
    if positive and value <= 0:
        raise SnumapError("duration must be positive")
    return value


def option_value(option: str, text: str, parse: Any) -> Any:
    """``parse(text)``, its error naming the option the user gave (``--interval 0: interval
    0s is out of range ...``, as ``snumap top`` says it): a bare "must be positive" does not
    say which of several durations on the command line was wrong."""
    try:
        return parse(text)
    except SnumapError as exc:
        raise SnumapError(f"{option} {text}: {exc}") from None


_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20,
               "g": 1 << 30, "gib": 1 << 30}


def parse_size(text: str) -> int:
    """Bytes from "8M", "512k", "1GiB", "65536"."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([a-zA-Z]*)\s*", text or "")
    if not m or m.group(2).lower() not in _SIZE_UNITS:
        raise SnumapError(f"bad size {text!r} (examples: 8M, 512k, 1G)")
    value = int(float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])
    if value < 4096:
        raise SnumapError(f"size {text!r} is below one page")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", default=DEFAULT_OUTPUT, metavar="FILE",
                        help=f"recording to write (default {DEFAULT_OUTPUT})")
    parser.add_argument("--interval", default="100ms",
                        help="metric sampling interval (default 100ms)")
    parser.add_argument("--duration", default=None,
                        help="stop after this long (default: when the command exits, or Ctrl-C)")
    parser.add_argument("--backend", default="auto", choices=["auto", "bcc", "perf", "proc"],
                        help="scheduling tracer (default: the best that works here)")
    parser.add_argument("--system-wide", action="store_true",
                        help="trace every task on every PU. Without it, a recording of "
                             "CMD traces CMD and every process and thread it forks: their "
                             "switches, wakeups, migrations, forks, execs and exits; other "
                             "tasks appear only as 'other (not traced)' time on the PUs the "
                             "command used, without names. Without CMD the whole system is "
                             "always traced")
    parser.add_argument("--buffer-size", default=None, metavar="SIZE",
                        help="kernel event buffer per CPU (perf: one ring per CPU; bcc: one "
                             "ring of SIZE x CPUs). Default 8M, less on many CPUs (256M in "
                             "all); raise it if events are lost")
    parser.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    parser.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS...",
                        help="command to run and record (executed directly, not by a shell)")


# ---- the command's process --------------------------------------------------------------------

class HeldChild:
    """A forked child that waits on a pipe before it execs CMD.

    A second, close-on-exec pipe reports a failed exec (its errno) back: EOF there means the
    exec succeeded, which is how subprocess does it too.
    """

    def __init__(self, cmd: list[str]) -> None:
        self.cmd = cmd
        go_r, go_w = os.pipe()
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child execs or exits
            try:
                os.close(go_w)
                os.close(err_r)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                if os.read(go_r, 1) != b"g":
                    os._exit(127)
                os.close(go_r)
                os.execvp(cmd[0], cmd)
            except OSError as exc:
                os.write(err_w, str(exc.errno).encode())
            finally:
                os._exit(127)
        os.close(go_r)
        os.close(err_w)
        self.pid = pid
        self._go = go_w
        self._err = err_r

    def release(self) -> None:
        """Let it exec; raise SnumapError if the exec failed."""
        os.write(self._go, b"g")
        os.close(self._go)
        data = os.read(self._err, 64)
        os.close(self._err)
        if data:
            os.waitpid(self.pid, 0)
            err = int(data or 0)
            raise SnumapError(f"cannot run {self.cmd[0]}: {os.strerror(err)}")

    def abandon(self) -> None:
        """The tracer could not start: the child never runs the command."""
        os.close(self._go)
        os.close(self._err)
        os.waitpid(self.pid, 0)

    def exited(self) -> bool:
        """True once it exited, without reaping it (so /proc still has it for a last read)."""
        info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        return info is not None

    def reap(self) -> int:
        """Its exit status as a shell reports it (128 + signal when killed)."""
        _, status = os.waitpid(self.pid, 0)
        if os.WIFSIGNALED(status):
            return 128 + os.WTERMSIG(status)
        return os.WEXITSTATUS(status)


# ---- the header ---------------------------------------------------------------------------------

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
    return s, [st.to_dict() for st in s.statuses().values()]


class TreeWatch:
    """The processes of the traced tree, as the tracer's batches name them, handed to the
    sampler's ``watch_pids`` when the set changes (processes that exited are dropped)."""

    def __init__(self, sampler: Any, roots: list[int]) -> None:
        self.sampler = sampler
        self.pids: set[int] = set(roots)
        if self.pids:
            sampler.watch_pids(self.pids)

    def update(self, batch: Any) -> None:
        from snumap_tui.trace import events as ev

        if not self.pids:
            return              # a system-wide recording without a command: nothing to watch
        pids = self.pids | {t.pid for t in batch.tasks if t.pid > 0}
        e = batch.events
        if len(e):
            ended = e[(e["kind"] == ev.EXIT) & (e["tid"] == e["pid"])]["pid"]
            pids -= set(ended.tolist())
        if pids != self.pids:
            self.pids = pids
            self.sampler.watch_pids(pids)


def check_output(out: Path, force: bool) -> bool:
    """Make sure OUT can be written before any tracer starts (and says so on stderr): not an
    existing file without FORCE, not a directory, in a writable directory -- and then opened,
    since only the kernel knows (root may create nothing in /proc, on a read-only mount...).

    A new file is created here, empty; True says so, so that a run that fails before the
    recording starts removes it (and only it: a file that was there is never removed). An
    existing file (with FORCE) is opened without truncating it; the Writer truncates it."""
    if out.is_dir():
        raise SnumapError(f"{out} is a directory")
    if out.exists() and not force:
        raise SnumapError(f"{out} already exists (use --force to overwrite it)")
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise SnumapError(f"cannot write {out}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise SnumapError(f"cannot write {out}: {parent} is not writable")
    flags = os.O_WRONLY | os.O_CLOEXEC | os.O_CREAT | (0 if force else os.O_EXCL)
    existed = out.exists()
    try:
        os.close(os.open(out, flags, 0o644))
    except FileExistsError:
        raise SnumapError(f"{out} already exists (use --force to overwrite it)") from None
    except OSError as e:
        raise SnumapError(f"cannot create {out}: {e.strerror or e}") from None
    return not existed


def remove_unstarted(out: Path, created: bool, say: Any) -> None:
    """The recording never started (the command could not be run, no tracer worked): the
    file this run created holds no events, and left behind it would make the corrected rerun
    fail with "already exists". A file that was there before is left alone."""
    if not created:
        return
    try:
        out.unlink()
    except FileNotFoundError:
        pass
    except OSError as e:
        say(f"cannot remove {out}: {e.strerror or e}")


class Cleanup:
    """Closing steps run in reverse order, each on its own: one that raises neither skips
    the others nor hides the error that ended the run (it is reported on stderr instead);
    without such an error, the first closing error is raised once all steps ran."""

    def __init__(self, say: Any) -> None:
        self.say = say
        self._steps: list[tuple[str, Any]] = []

    def push(self, what: str, fn: Any) -> None:
        self._steps.append((what, fn))

    def run(self, failing: bool) -> None:
        first: BaseException | None = None
        while self._steps:
            what, fn = self._steps.pop()
            try:
                fn()
            except Exception as exc:  # noqa: BLE001 - every step runs; see the docstring
                if failing or first is not None:
                    self.say(f"{what} failed too: {exc}")
                else:
                    first = SnumapError(f"{what} failed: {exc}") if isinstance(
                        exc, OSError) else exc
        if first is not None:
            raise first


# ---- the run ------------------------------------------------------------------------------------

def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


class Drainer:
    """A thread that empties the tracer's kernel buffers every ``DRAIN_S`` (at once again
    when a drain was large), so that they do not overflow while the main thread decodes,
    compresses and writes (which releases the GIL in zstd and numpy); ``take()`` hands the
    raw drains over in order. Tracers without kernel buffers (``drain()`` is None) are read
    by the main thread as before."""

    DRAIN_S = 0.01
    BIG = 1 << 20             # bytes (or records) after which the next drain comes at once

    def __init__(self, tracer: Any) -> None:
        import collections
        import threading

        self.tracer = tracer
        self._q: collections.deque[Any] = collections.deque()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        if type(tracer).drain is not _base_drain():
            self._thread = threading.Thread(target=self._run, name="snumap-drain", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                raw = self.tracer.drain()
                size = _raw_size(raw)
                if size:
                    self._q.append(raw)
                if size < self.BIG:
                    self._stop.wait(self.DRAIN_S)
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            self._error = exc

    def take(self) -> list[Any]:
        """The drains so far (None, once, when the tracer has no drain thread)."""
        if self._error is not None:
            raise self._error
        if self._thread is None:
            return [None]
        out = []
        while self._q:
            out.append(self._q.popleft())
        return merge_drains(out)

    def stop(self) -> list[Any]:
        """Stop the thread; the drains it made and not taken yet."""
        if self._thread is None:
            return []
        self._stop.set()
        self._thread.join()
        self._thread = None
        out = []
        while self._q:
            out.append(self._q.popleft())
        return merge_drains(out)


def _base_drain() -> Any:
    from snumap_tui.trace.base import Tracer

    return Tracer.drain


def merge_drains(raws: list[Any]) -> list[Any]:
    """Consecutive drains as one, so the main thread decodes once per poll (10 times a second)
    instead of once per 10 ms drain: each decode has fixed costs (numpy calls, the tracer's
    map reads) that at 100 small decodes a second took CPU from the traced workload.

    A perf drain is each CPU's ring bytes, whole records only, so one CPU's drains joined are
    that ring's record stream; a bcc drain is an array of records, joined by concatenation.
    Anything else is left as it is."""
    if len(raws) < 2:
        return raws
    if all(isinstance(r, dict) for r in raws):
        per_cpu: dict[Any, list[bytes]] = {}
        for r in raws:
            for cpu, buf in r.items():
                per_cpu.setdefault(cpu, []).append(buf)
        return [{cpu: b"".join(bufs) for cpu, bufs in per_cpu.items()}]
    import numpy as np

    if all(isinstance(r, np.ndarray) for r in raws) and len({r.dtype for r in raws}) == 1:
        return [np.concatenate(raws)]
    return raws


def _raw_size(raw: Any) -> int:
    if raw is None:
        return 0
    if isinstance(raw, dict):
        return sum(len(b) for b in raw.values())
    return len(raw) * 48


def run(args: argparse.Namespace) -> int:
    from snumap_tui.commands.common import topology_from_args
    from snumap_tui.model.sampler import check_interval

    cmd = list(args.cmd or [])
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    # Everything that can be wrong with the arguments is found before anything starts.
    interval = option_value("--interval", args.interval,
                            lambda t: check_interval(parse_duration(t, positive=False)))
    duration = option_value("--duration", args.duration, parse_duration) \
        if args.duration else None
    buffer_bytes = option_value("--buffer-size", args.buffer_size, parse_size) \
        if getattr(args, "buffer_size", None) else None
    out = Path(args.output)
    say = (lambda s: print(f"snumap: {s}", file=sys.stderr))
    created = check_output(out, args.force)
    cleanup = Cleanup(say)
    started = {"recording": False}
    try:
        topology = topology_from_args(args)
        root = Path(args.fsroot) if getattr(args, "fsroot", None) else Path("/")
        # The Writer may truncate the empty file this run just created.
        result = _record(args, cmd, interval, duration, buffer_bytes, out, topology, root, say,
                         cleanup, force=args.force or created, started=started)
    except BaseException:
        try:
            cleanup.run(failing=True)
        finally:
            if not started["recording"]:
                remove_unstarted(out, created, say)
        raise
    cleanup.run(failing=False)
    status, tracer, writer, elapsed = result
    lost = writer.lost_total
    print(f"snumap: recorded {elapsed:.1f} s, {writer.events_written} events, {lost} lost"
          f"{' (!)' if lost else ''}, {_size(writer.bytes_written)} to {out}, "
          f"backend {tracer.name}{' (approximate)' if tracer.approximate else ''}",
          file=sys.stderr)
    return status


def _until(batch: EventBatch, t_ns: int) -> EventBatch:
    """The batch without the events after ``t_ns`` (names and lost counts kept)."""
    from snumap_tui.trace.events import EventBatch

    ev = batch.events
    if len(ev) and int(ev["t_ns"].max()) > t_ns:
        batch = EventBatch(events=ev[ev["t_ns"] <= t_ns], tasks=batch.tasks, lost=batch.lost)
    return batch


def _record(args: argparse.Namespace, cmd: list[str], interval: float, duration: float | None,
            buffer_bytes: int | None, out: Path, topology: Any, root: Path, say: Any,
            cleanup: Cleanup, *, force: bool, started: dict[str, bool]
            ) -> tuple[int, Any, Any, float]:
    """The recording itself; what it opens is pushed on CLEANUP (closed by run() whatever
    happens, in reverse order). ``started["recording"]`` turns True once the command runs
    (or, without one, once the loop starts): from then on the file is kept, whatever
    happens."""
    from snumap_tui.store import Writer
    from snumap_tui.trace.select import start_tracer
    from snumap_tui.trace.tracefs import mount_tracefs, tracefs_root

    sampler, sources = make_sampler(topology, root, interval)
    cleanup.push("closing the metric sources", sampler.close)
    if tracefs_root() is None and os.geteuid() == 0 and mount_tracefs() is not None:
        say("mounted tracefs at /sys/kernel/tracing (as perf does)")

    child = HeldChild(cmd) if cmd else None
    held = {"child": child is not None}

    def abandon() -> None:
        if held["child"] and child is not None:
            held["child"] = False
            child.abandon()

    cleanup.push("abandoning the command", abandon)
    pids = None if (child is None or args.system_wide) else [child.pid]
    tracer, choice = start_tracer(args.backend, pids, say=say, buffer_bytes=buffer_bytes)
    stopped = {"tracer": False}

    def stop_tracer() -> None:
        if not stopped["tracer"]:
            stopped["tracer"] = True
            tracer.stop()

    cleanup.push("stopping the tracer", stop_tracer)
    sources = sources + backend_statuses()
    watch = TreeWatch(sampler, [child.pid] if child is not None else [])
    header = build_header(topology, [sys.argv[0], *sys.argv[1:]] if sys.argv else [], tracer,
                          choice, sources, interval, child is None or args.system_wide, root)
    if cmd:
        header["command"] = cmd
    writer = Writer(out, header, force=force)
    cleanup.push(f"closing {out}", writer.close)

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
    drainer = Drainer(tracer)
    cleanup.push("stopping the drain thread", drainer.stop)

    def events(batch: Any) -> None:
        writer.add_events(batch)
        watch.update(batch)

    if child is not None:
        writer.add_marker(time.monotonic_ns(), "command start: " + " ".join(cmd))
        held["child"] = False
        child.release()
    started["recording"] = True
    next_sample = t_start
    while True:
        now = time.monotonic()
        if now >= next_sample:
            writer.add_sample(sampler.sweep())
            next_sample += interval
            if next_sample < now:
                next_sample = now + interval
        for raw in drainer.take():
            events(tracer.decode(raw))
        if child is not None and child.exited():
            break
        if child is None and stop["sig"]:
            break
        if duration is not None and now - t_start >= duration:
            break
        time.sleep(max(0.0, min(POLL_S, next_sample - time.monotonic())))
    # The recording ends here: the last sample now, and of what the tracer still hands over
    # while it is drained and detached (about half a second for bcc), only the events up to
    # now -- the rest is the recorder's own teardown, outside what was asked for.
    t_stop = time.monotonic()
    writer.add_sample(sampler.sweep())
    t_stop_ns = time.monotonic_ns()
    for raw in drainer.stop():
        events(_until(tracer.decode(raw), t_stop_ns))
    stopped["tracer"] = True
    writer.add_events(_until(tracer.stop(), t_stop_ns))
    if child is not None:
        if not child.exited():      # --duration ended the recording: the command goes on
            say(f"--duration reached; {cmd[0]} (pid {child.pid}) keeps running")
        else:
            status = child.reap()
            writer.add_marker(time.monotonic_ns(), f"command exit: status {status}")
    return status, tracer, writer, t_stop - t_start
