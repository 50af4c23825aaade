"""The sampler: opens the sources once, sweeps them, and hands Frames to a consumer.

A sweep reads every available source and stamps the Sample with one ``time.monotonic_ns()``
(the clock of the scheduler events, so metrics and traces line up). ``frame()`` is a sweep plus
``derive`` against the previous sweep. ``start(callback)`` runs the same on a daemon thread at
the interval (1 s by default, down to 10 ms; 1 ms for a recording) so a UI never blocks on /proc or perf reads; the
schedule is absolute (no drift), and a slow consumer makes the sampler skip ticks, never queue
a burst of catch-up sweeps.

Sources are injectable (``sources=[...]``): tests hand in sources built on a fake tree, the
benchmark times exactly what it constructs, and ``snumap replay`` needs none of this at all.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from snumap_tui.errors import SnumapError
from snumap_tui.model.derive import derive
from snumap_tui.model.frame import Frame
from snumap_tui.model.metrics import Catalogue, default_catalogue
from snumap_tui.model.sample import Sample
from snumap_tui.model.taskrows import TaskTimeline
from snumap_tui.sources.base import Source, SourceStatus
from snumap_tui.topology.model import Topology

MIN_INTERVAL_S = 0.01
# `snumap record` samples down to 1 ms (the research tools sampled at 1-5 ms); what that costs
# is measured in docs/benchmarks.md ("Sampling at 1 ms"). A live view redraws at most every
# 10 ms, so top and the exporter keep MIN_INTERVAL_S.
RECORD_MIN_INTERVAL_S = 0.001
MAX_INTERVAL_S = 3600.0

def default_sources(root: Path = Path("/"), tasks: bool = True, topology: Topology | None = None
                    ) -> tuple[list[Source], list[SourceStatus]]:
    """Every source of the sources package's registry (``all_sources``) on ``root``, and the
    statuses of sources that could not even be constructed (none today: construction opens
    nothing, each source says in its status() what it lacks)."""
    from snumap_tui.sources import SOURCE_NAMES, all_sources

    names = tuple(n for n in SOURCE_NAMES if tasks or n != "tasks")
    return all_sources(root, topology=topology, names=names), []


def _request_events(sources: Iterable[Source], events: Iterable[str]) -> None:
    """Add the perf events a user's metrics file asks for (``events = [...]``, any event perf(1)
    can name: native/perf_spec.py) to the perf source before it opens its groups (it opens
    them on its first status()): software events join the software group, all others the
    hardware group. One the machine cannot count is reported by the source's status ("perf:
    LLC-load-misses: no hardware PMU (virtual machine)"), never silently n/a."""
    wanted = list(dict.fromkeys(events))
    if not wanted:
        return
    from snumap_tui.sources.perf import PerfSource, needs_pmu
    from snumap_tui.sources.tasks import TasksSource

    for s in sources:
        if isinstance(s, TasksSource):      # the per-thread counters of watched processes
            s.counter_events = tuple(wanted)
        if not isinstance(s, PerfSource):
            continue
        hw = [e for e in wanted if needs_pmu(e, s.root) and e not in s.hw_events]
        sw = [e for e in wanted if not needs_pmu(e, s.root) and e not in s.sw_events]
        s.hw_events = (*s.hw_events, *hw)
        s.sw_events = (*s.sw_events, *sw)


def _without_tasks(sample: Sample) -> Sample:
    """The sample as derive() should see it when the sampler builds the process rows."""
    if "tasks" not in sample.readings:
        return sample
    return Sample(t_ns=sample.t_ns, wall_ns=sample.wall_ns,
                  readings={k: v for k, v in sample.readings.items() if k != "tasks"})


def check_interval(seconds: float, minimum: float = MIN_INTERVAL_S) -> float:
    try:
        s = float(seconds)
    except (TypeError, ValueError):
        raise SnumapError(f"interval must be a number of seconds, not {seconds!r}") from None
    if not minimum <= s <= MAX_INTERVAL_S:
        raise SnumapError(f"interval {s:g}s is out of range ({minimum * 1000:g} ms to "
                          f"{MAX_INTERVAL_S:g} s)")
    return s


class Sampler:
    """Sweeps the sources of one machine and derives Frames on its topology."""

    def __init__(self, topology: Topology, root: Path = Path("/"), interval_s: float = 1.0,
                 sources: Iterable[Source] | None = None, tasks: bool = True,
                 catalogue: Catalogue | None = None,
                 clock: Callable[[], int] = time.monotonic_ns,
                 wall_clock: Callable[[], int] = time.time_ns) -> None:
        self.topology = topology
        self.root = Path(root)
        # The commands check their own floor first (record's is 1 ms, top's 10 ms).
        self.interval_s = check_interval(interval_s, RECORD_MIN_INTERVAL_S)
        self.catalogue = catalogue if catalogue is not None else default_catalogue()
        self._clock, self._wall = clock, wall_clock
        if sources is None:
            made, missing = default_sources(self.root, tasks, topology)
        else:
            made = [s for s in sources if tasks or s.name != "tasks"]
            missing = []
        _request_events(made, getattr(self.catalogue, "extra_counters", frozenset()))
        self.sources: list[Source] = made
        self._status: dict[str, SourceStatus] = {s.name: s for s in missing}
        for s in made:
            try:
                self._status[s.name] = s.status()
            except OSError as exc:
                self._status[s.name] = SourceStatus(s.name, False, f"cannot open: {exc}")
        self._active = [s for s in made if self._status[s.name].available]
        self.prev: Sample | None = None
        self.last: Sample | None = None
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self._watched: set[int] = set()
        self._counted: set[int] = set()
        # close() while the runner is stuck in a sweep hands the closing over to the runner.
        self._handoff = threading.Lock()
        self._close_on_exit = False
        self._runner_done = True
        self._timeline = TaskTimeline()
        self.tasks_every_s = 0.0
        self._slow: dict[str, float] = {}        # source name -> seconds between its reads
        self._slow_at: dict[str, int] = {}       # ... and when it was last read (ns)

    def set_slow_sources(self, every_s: float, names: Iterable[str]) -> None:
        """Read the sources NAMES at most every ``every_s`` (the others at every sweep):
        record at a 1 ms interval keeps the per-PU counters, CPU times and energy at every
        sample, and memory per node, the process list and the I/O devices every 10 ms (they
        were more than half of a sweep). A sweep between two of their reads has none of
        their readings, as if they were missing, which every consumer already handles.
        Calls add up (each NAMES at its own EVERY_S; 0 reads them at every sweep again)."""
        for n in names:
            if every_s > 0:
                self._slow[n] = float(every_s)
            else:
                self._slow.pop(n, None)
        self._slow_at = {}

    # ---- one sweep -------------------------------------------------------------------------
    def statuses(self) -> dict[str, SourceStatus]:
        """Every source's status (what ``snumap probe`` and the sources screen show)."""
        return dict(self._status)

    def sweep(self) -> Sample:
        """Read every available source once; the Sample carries one monotonic timestamp."""
        with self._lock:
            return self._sweep()

    def _sweep(self) -> Sample:
        t_ns, wall_ns = self._clock(), self._wall()
        readings: dict[str, dict[str, Any]] = {}
        for s in self._active:
            every = self._slow.get(s.name)
            if every is not None:
                if t_ns - self._slow_at.get(s.name, -(1 << 62)) < every * 1e9:
                    continue
                self._slow_at[s.name] = t_ns
            try:
                r = s.read()
            except (OSError, ValueError) as exc:
                # A file that vanished or a counter that broke: this sweep goes without it, and
                # the status says so; the next sweep tries again. A parse error's text quotes
                # the file (int('...')): only its kind is said, never what the file holds.
                why = str(exc) if isinstance(exc, OSError) else \
                    f"unexpected content ({type(exc).__name__})"
                self._status[s.name] = SourceStatus(s.name, False, f"read failed: {why}")
                continue
            if r:
                readings[s.name] = r
                if not self._status[s.name].available:
                    self._status[s.name] = s.status()
        sample = Sample(t_ns=t_ns, wall_ns=wall_ns, readings=readings)
        self.prev, self.last = self.last, sample
        return sample

    def frame(self) -> Frame | None:
        """Sweep, and derive against the previous sweep (None on the very first)."""
        with self._lock:
            self._sweep()
            return self._derive()

    def _derive(self) -> Frame | None:
        prev, cur = self.prev, self.last
        if prev is None or cur is None:
            return None
        # The process rows come from the timeline (a full tasks reading is paired with the
        # last full one, a partial one laid over it), not from the previous sweep alone.
        tp, tc = prev.readings.get("tasks"), cur.readings.get("tasks")
        f = derive(_without_tasks(prev), _without_tasks(cur), self.topology, self.catalogue)
        f.tasks = self._timeline.rows(prev.t_ns, tp, cur.t_ns, tc)
        f.sources = dict(self._status)
        return f

    def set_tasks_cadence(self, every_s: float) -> None:
        """How often the process list is read in full: every sweep (0, the default, what
        batch mode and the recorder get), or every ``every_s`` seconds with only the watched
        processes (``watch_pids``) read in between -- what a UI asks for while no process list
        is on screen (the list is a third of a sweep's cost). Back to 0, a running sampler
        sweeps at once, so a process list just shown is filled without waiting a tick."""
        every_s = max(0.0, float(every_s))
        was = self.tasks_every_s
        self.tasks_every_s = every_s
        with self._lock:
            for s in self.sources:
                cadence = getattr(s, "set_cadence", None)
                if cadence is not None:
                    cadence(every_s, self._watched)
        if every_s == 0.0 and was > 0.0 and self.running:
            self._wake.set()

    def set_kthreads(self, show: bool) -> None:
        """Kernel threads in the process list or not (tasks source's ``kthreads``). The rows
        start again from the next two readings: a thread the last reading left out has no
        interval to measure its CPU % over (it would get all its time since boot)."""
        with self._lock:
            for s in self.sources:
                if hasattr(s, "kthreads") and s.kthreads != show:
                    s.kthreads = show
                    self._timeline.reset()
        if self.running:
            self._wake.set()

    def watch_pids(self, pids: Iterable[int], counters: bool = False) -> None:
        """Ask the tasks source for these processes' pages per NUMA node (numa_maps), and to
        keep reading them every sweep when the rest of the list is read less often. With
        ``counters`` also their per-thread perf counters (``watch_counters``). Called from a
        UI thread: the lock keeps the sampler thread from sweeping the tasks source while its
        sets of watched processes change under it."""
        want = set(pids)
        with self._lock:
            for s in self.sources:
                cadence = getattr(s, "set_cadence", None)
                if cadence is not None:
                    cadence(self.tasks_every_s, want)
                per_pid = getattr(s, "want_numa", None)   # the tasks source: one pid at a time
                if per_pid is not None:
                    for pid in self._watched - want:
                        per_pid(pid, False)
                    for pid in want - self._watched:
                        per_pid(pid, True)
            self._watched = want
        if counters:
            self.watch_counters(want)

    def watch_counters(self, pids: Iterable[int]) -> None:
        """Per-thread perf counters (hardware where the PMU has them, software always: context
        switches, migrations, page faults) on these processes, following their threads across
        PUs; the process rows of the next frames carry their rates (TaskRow.ctx_switches_s,
        TaskRow.ipc ...), each thread's counts (TaskRow.threads) and the memory per NUMA node
        of every sweep (TaskRow.memory_nodes). An empty set closes them all."""
        from snumap_tui.sources.tasks import TasksSource

        want = set(pids)
        with self._lock:
            for s in self.sources:
                per_pid = getattr(s, "want_counters", None)
                if per_pid is None:
                    continue
                if want and isinstance(s, TasksSource) and s.process_memory is None:
                    from snumap_tui.sources.procmem import ProcessMemory

                    s.process_memory = ProcessMemory(s.root)   # memory per node, each sweep
                for pid in self._counted - want:
                    per_pid(pid, False)
                for pid in want - self._counted:
                    per_pid(pid, True)
            self._counted = want

    # ---- the background runner ---------------------------------------------------------
    def set_interval(self, seconds: float) -> None:
        """Change the interval; a running sampler starts its new schedule right away."""
        self.interval_s = check_interval(seconds)
        self._wake.set()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, callback: Callable[[Frame], None] | None, *,
              on_sample: Callable[[Sample], None] | None = None,
              on_error: Callable[[BaseException], None] | None = None) -> None:
        """Deliver a Frame to ``callback`` every interval, from a daemon thread. ``on_sample``
        gets every raw Sample (the recorder stores those; the exporter adds them up); with
        no ``callback`` no Frame is derived at all. An exception stops the runner and goes
        to ``on_error`` (kept in ``self.error`` either way)."""
        if self.running:
            raise RuntimeError("sampler already running")
        self._stopping = False
        self._wake.clear()
        self.error = None
        self._runner_done = False
        self._thread = threading.Thread(target=self._run, args=(callback, on_sample, on_error),
                                        name="snumap-sampler", daemon=True)
        self._thread.start()

    def _run(self, callback: Callable[[Frame], None] | None,
             on_sample: Callable[[Sample], None] | None,
             on_error: Callable[[BaseException], None] | None) -> None:
        try:
            # The first Frame needs two sweeps: make the first gap short so a UI fills in fast,
            # and keep it short (a few times at most) while the frames have no utilisation yet:
            # /proc/stat had not moved between the two sweeps (a fake tree written every
            # 0.25 s, or a pre-sweep just before this thread started).
            first_gap = min(self.interval_s, 0.25)
            short_left = 8
            due = time.monotonic()
            gap = first_gap
            while not self._stopping:
                with self._lock:
                    sample = self._sweep()
                    frame = self._derive() if callback is not None else None
                if on_sample is not None:
                    on_sample(sample)
                if frame is not None and callback is not None:
                    callback(frame)
                due += gap
                if short_left > 0 and not self._has_util(frame):
                    short_left -= 1
                    gap = first_gap
                else:
                    short_left = 0
                    gap = self.interval_s
                now = time.monotonic()
                if due <= now:              # fell behind: skip the missed ticks
                    due += math.ceil((now - due) / gap + 1e-9) * gap
                if self._wake.wait(max(0.0, due - now)):
                    self._wake.clear()
                    due = time.monotonic()  # new interval (or stop): restart the schedule
        except Exception as exc:   # handed to the consumer (or re-raised), never swallowed
            self.error = exc
            if on_error is None:
                raise
            on_error(exc)
        finally:
            with self._handoff:
                self._runner_done = True
                close = self._close_on_exit
            if close:                    # close() gave up waiting: the runner closes last
                with self._lock:
                    self._close_sources()

    def _has_util(self, frame: Frame | None) -> bool:
        """Whether a frame shows the machine's utilisation (or never will: no /proc/stat)."""
        if frame is None:
            return False
        if not any(s.name == "procstat" for s in self._active):
            return True
        return frame.get("util_pct", self.topology.root.id) is not None

    def stop(self, timeout: float = 5.0) -> bool:
        """Stop the runner and wait for its sweep in progress to finish. False when it is
        still sweeping after ``timeout`` (a hung read): the thread is kept, so ``running``
        stays true and ``close()`` leaves the sources to it."""
        self._stopping = True
        self._wake.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout)
            if t.is_alive():
                return False
        self._thread = None
        return True

    def close(self, timeout: float = 5.0) -> None:
        """Stop, and close every source (perf file descriptors, BPF programs). If the runner
        is still inside a sweep after stop()'s timeout, the sources are closed by the runner
        when that sweep ends, never under it (a pread on an fd number closed and reused)."""
        if not self.stop(timeout):
            with self._handoff:
                if not self._runner_done:
                    self._close_on_exit = True
                    return
        self._close_sources()

    def _close_sources(self) -> None:
        self._close_on_exit = False
        for s in self.sources:
            with contextlib.suppress(OSError):
                s.close()
