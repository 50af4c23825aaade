"""The moving parts of `snumap record`: the held child, the drain thread and the ordered
clean-up (the output file is `recording/output.py`). `commands/record.py` wires them
together."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

from snumap_tui.errors import SnumapError

# ---- the command's process --------------------------------------------------------------------

class HeldChild:
    """A forked child that waits on a pipe before it execs CMD.

    A second, close-on-exec pipe reports a failed exec (its errno) back: EOF there means the
    exec succeeded, which is how subprocess does it too. The command gets the user's
    environment (``threadpools.user_environ``): not the one-thread pools snumap pinned for
    itself, but what the user asked for (``OMP_NUM_THREADS=64 snumap record -- ./app``).
    """

    def __init__(self, cmd: list[str], cpus: set[int] | None = None) -> None:
        from snumap_tui.threadpools import user_environ

        self.cmd = cmd
        env = user_environ()
        go_r, go_w = os.pipe()
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child execs or exits
            try:
                os.close(go_w)
                os.close(err_r)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                # Python ignores SIGPIPE; the traced command gets the default, as from a shell
                signal.signal(signal.SIGPIPE, signal.SIG_DFL)
                if os.read(go_r, 1) != b"g":
                    os._exit(127)
                os.close(go_r)
                if cpus:
                    os.sched_setaffinity(0, cpus)
                os.execvpe(cmd[0], cmd, env)
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

class TreeWatch:
    """The processes of the traced tree, as the tracer's batches name them, handed to the
    sampler's ``watch_pids`` when the set changes (processes that exited are dropped)."""

    def __init__(self, sampler: Any, roots: list[int], memory: Any = None,
                 whole_system: bool = False) -> None:
        self.sampler = sampler
        self.memory = memory           # a MemoryRecorder, told the same set
        # --system-wide with a command: the batches name every task of the machine, so the
        # tree grows by forks of its own processes only.
        self.whole_system = whole_system
        self.pids: set[int] = set(roots)
        if self.pids:
            self._tell()

    def _tell(self) -> None:
        self.sampler.watch_pids(self.pids)
        if self.memory is not None:
            self.memory.watch(self.pids)

    def update(self, batch: Any) -> None:
        from snumap_tui.trace import events as ev

        if not self.pids:
            return              # a system-wide recording without a command: nothing to watch
        e = batch.events
        if self.whole_system:
            pids = set(self.pids)
            forks = e[e["kind"] == ev.FORK] if len(e) else e
            for parent, child in zip(forks["pid"].tolist(), forks["pid2"].tolist()):
                if parent in pids and child > 0:
                    pids.add(child)
        else:
            pids = self.pids | {t.pid for t in batch.tasks if t.pid > 0}
        if len(e):
            ended = e[(e["kind"] == ev.EXIT) & (e["tid"] == e["pid"])]["pid"]
            pids -= set(ended.tolist())
        if pids != self.pids:
            self.pids = pids
            self._tell()


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

class Drainer:
    """A thread that empties the tracer's kernel buffers every ``DRAIN_S`` (at once again
    when a drain was large or stopped at its budget: ``drain_capped()``, which the tracer --
    a Tracer or the RegionTracer -- provides), so that they do not overflow while the main
    thread decodes, compresses and writes (which releases the GIL in zstd and numpy);
    ``take()`` hands the raw drains over in order. Tracers without kernel buffers
    (``drain()`` is None) are read by the main thread as before.

    The drains waiting for the main thread are bounded (``MAX_BACKLOG``): when it falls
    behind (more events than it can decode and write, as under a context-switch storm on a
    busy machine), the thread stops draining until it catches up, the kernel buffers fill
    and the tracer counts what it drops as lost -- a bounded recorder and an honest loss
    count instead of memory growing with the backlog.

    A guest (``host=`` another Drainer) has no thread of its own: the host's thread drains it
    at each of its wakes (the region probes' ring, whose exec holds wait for it). One thread
    for both rings: the recorder's threads stay a handful. A guest whose tracer has
    ``wait_fds`` (the eBPF probes' rings, which wake their reader every eighth written and at
    once for a held exec or a probe past its budget) joins the host's epoll, and the thread
    sleeps as it does without guests; any other guest keeps the thread coming every
    ``DRAIN_S`` for it (its own tracer still at its own, backed off, period). Beside a
    program using every PU, those 100 wakes a second were half the recorder's CPU."""

    DRAIN_S = 0.01
    # After empty drains the period doubles up to this: a traced program that switches little
    # woke the thread 100 times a second for nothing (a third of the recorder's CPU at the
    # default interval); the 4 MiB per CPU rings hold ~270 ms of a switch storm, and the first
    # drain that finds something brings the period back to DRAIN_S.
    IDLE_DRAIN_S = 0.08
    BIG = 1 << 19             # bytes after which the next drain comes at once
    MAX_BACKLOG = 4 << 20     # bytes of drains not taken yet
    WAKE = 1 << 20            # backlog that wakes the main thread before its next poll
    PRESSURE = 1 << 18        # a drain this large (25 MB/s) raises the recorder's priority

    # With a tracer whose kernel buffers wake it (``wait_fds``: the libbpf rings, every eighth
    # written), the thread sleeps in epoll up to this long between drains that are not large:
    # 4 wake-ups a second on a quiet machine instead of 12-100, and under a storm one per
    # eighth of a ring instead of one per 10 ms. With guests it still comes every DRAIN_S for
    # them (their rings do not wake it).
    WAKE_IDLE_S = 0.25

    def __init__(self, tracer: Any, priority: Any = None, idle_s: float | None = None,
                 host: Drainer | None = None) -> None:
        import collections
        import threading

        self.tracer = tracer
        self._wake: KernelWake | None = None    # the rings' epoll (an own thread only)
        self.wakeups = 0              # the thread's sleeps ended (a figure for tests, benches)
        self.idle_s = self.IDLE_DRAIN_S if idle_s is None else idle_s
        # recording/priority.Priority: told at each drain whether the buffers fill
        self.priority = priority
        self._q: collections.deque[Any] = collections.deque()
        self._queued = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._guests: list[Drainer] = []
        self._guests_lock = threading.Lock()    # held while the guests are drained
        self._host = host
        self._wake_fds: list[int] | None = None     # a guest's descriptors in its host's epoll
        fds = tracer.wait_fds() if hasattr(tracer, "wait_fds") else []
        if host is not None:
            if fds and host._wake is not None:
                try:
                    host._wake.add(fds)
                    self._wake_fds = fds
                except OSError:             # drained every DRAIN_S instead, as before
                    host._wake.remove(fds)
            with host._guests_lock:
                host._guests = [*host._guests, self]
            if host._wake is not None:
                host._wake.interrupt()      # its sleep is sized for the guests it has now
        elif type(tracer).drain is not _base_drain():
            if fds:
                self._wake = KernelWake(fds)
            self._thread = threading.Thread(target=self._run, name="snumap-drain", daemon=True)
            self._thread.start()

    @property
    def threaded(self) -> bool:
        """Whether it drains from a thread of its own (and can host guests)."""
        return self._thread is not None

    def _pump(self) -> int:
        """One drain of the tracer into the queue; its size in bytes."""
        raw = self.tracer.drain()
        size = _raw_size(raw)
        if size:
            with self._lock:
                self._q.append((raw, size))
                self._queued += size
            if self._queued >= self.WAKE:
                self._ready.set()
        return size

    def _pump_guests(self) -> None:
        # Under the lock a guest's stop() takes to leave: no drain of it after its stop.
        with self._guests_lock:
            for g in self._guests:
                if g._error is not None or g._queued > self.MAX_BACKLOG:
                    continue
                try:
                    g._pump()
                except BaseException as exc:  # noqa: BLE001 - handed to the guest's taker
                    g._error = exc

    def _run(self) -> None:
        import time

        period = self.DRAIN_S
        due = 0.0                  # when this thread's own tracer is drained next
        try:
            while not self._stop.is_set():
                guests = self._guests
                # guests without a descriptor of their own to wake the thread: drained
                # every DRAIN_S, the thread's own tracer at its own period in between
                polled = any(g._wake_fds is None for g in guests)
                if guests:
                    self._pump_guests()
                if polled:
                    now = time.monotonic()
                    if now < due:
                        self._stop.wait(min(due - now, self.DRAIN_S))
                        continue
                if self._queued > self.MAX_BACKLOG:
                    if self.priority is not None:
                        self.priority.pressure()        # the main thread is behind
                    self._stop.wait(self.DRAIN_S)
                    continue
                size = self._pump()
                if self.priority is not None:
                    if size >= self.PRESSURE or self._queued >= self.WAKE:
                        self.priority.pressure()
                    else:
                        self.priority.idle()
                # At once again after a large drain, or one that stopped at its budget with
                # more there: a BPF ring set reads each ring up to an even share, so a drain
                # of one busy CPU's ring stayed under BIG and paused while that ring filled.
                # Never at once after an empty drain (a record still being written stops it).
                period = (min(period * 2, max(self.idle_s, self.DRAIN_S)) if size == 0
                          else self.DRAIN_S)
                if size < self.BIG and (size == 0 or not self.tracer.drain_capped()):
                    sleep = self.WAKE_IDLE_S if self._wake is not None else period
                    due = time.monotonic() + (period if polled else sleep)
                    timeout = min(sleep, self.DRAIN_S) if polled else sleep
                    if self._wake is not None:
                        if self._wake.wait(timeout):
                            due = 0.0           # a ring woke it: drained at once
                    else:
                        self._stop.wait(timeout)
                    self.wakeups += 1
                else:
                    due = 0.0
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            self._error = exc

    def wait(self, timeout: float) -> bool:
        """Sleep until the next poll (TIMEOUT), or sooner once a backlog worth decoding has
        built up: at hundreds of thousands of events a second, a main thread that slept its
        whole poll left the drain thread stopped at MAX_BACKLOG and the kernel dropping.
        True when the backlog ended the sleep (it is to be taken now)."""
        got = self._ready.wait(timeout)
        self._ready.clear()
        return got

    def take(self) -> Iterator[Any]:
        """The drains so far (None, once, when the tracer has no drain thread), joined up to
        ``MERGE_MAX`` bytes each (``merge_drains``). Lazy: each join leaves the queue only
        when the caller asks for it, so the main thread holds one join and its decoding at a
        time, and the drain thread's backlog bound counts what is really still waiting."""
        if self._error is not None:
            raise self._error
        if self._thread is None and self._host is None:
            return iter([None])
        with self._lock:
            n = len(self._q)
        return self._joined(n)

    def _joined(self, n: int) -> Iterator[Any]:
        """The first N queued drains, popped and joined a group (MERGE_MAX bytes) at a time."""
        while n > 0:
            group: list[Any] = []
            size = 0
            with self._lock:
                while n > 0 and self._q and (not group or size + self._q[0][1] <= MERGE_MAX):
                    raw, k = self._q.popleft()
                    self._queued -= k
                    size += k
                    n -= 1
                    group.append(raw)
            if not group:
                return
            joined = merge_drains(group)
            del group           # the parts go before the join is decoded
            yield from joined

    FINAL_DRAINS = 64         # at most this many drains of what the buffers still hold at stop

    def stop(self) -> Iterator[Any]:
        """Stop the thread; the drains it made and not taken yet, then what the kernel
        buffers still hold, drained here once the thread is gone: a traced program's last
        milliseconds of region hits wait there when it has just exited, and a thread that
        had not run since (a loaded machine) took them nowhere."""
        if self._host is not None:
            host, self._host = self._host, None
            with host._guests_lock:     # the host's thread drains it no more
                host._guests = [g for g in host._guests if g is not self]
            if self._wake_fds is not None and host._wake is not None:
                host._wake.remove(self._wake_fds)
            self._wake_fds = None
        elif self._thread is None:
            return iter([])
        else:
            self._stop.set()
            if self._wake is not None:
                self._wake.interrupt()
            self._thread.join()
            self._thread = None
        if self._wake is not None:
            self._wake.close()
            self._wake = None
        if self._error is None:
            try:
                for _ in range(self.FINAL_DRAINS):
                    raw = self.tracer.drain()
                    size = _raw_size(raw)
                    if not size:
                        break
                    self._q.append((raw, size))
                    self._queued += size
            except (OSError, ValueError) as exc:     # handed on by take(), as the thread's
                self._error = exc
        return self._joined(len(self._q))


class KernelWake:
    """The drain thread's sleep on the kernel buffers' descriptors (edge-triggered epoll: a
    descriptor is reported once per wakeup the kernel sent, not while data waits), and on a
    pipe that ``interrupt`` writes to."""

    def __init__(self, fds: list[int]) -> None:
        import select

        self.fds: list[int] = []
        self._ep = select.epoll()
        self._r, self._w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            self._ep.register(self._r, select.EPOLLIN)
            self.add(fds)
        except OSError:
            self.close()
            raise

    def add(self, fds: list[int]) -> None:
        """Wake on FDS too (edge-triggered; a guest's rings are added from another thread
        than the one that waits: epoll_ctl may be)."""
        import select

        for fd in fds:
            self._ep.register(fd, select.EPOLLIN | select.EPOLLET)
            self.fds.append(fd)

    def remove(self, fds: list[int]) -> None:
        """Wake on FDS no more (a guest that left; already closed ones are gone anyway)."""
        for fd in fds:
            try:
                self._ep.unregister(fd)
            except (OSError, ValueError):
                pass
            if fd in self.fds:
                self.fds.remove(fd)

    def wait(self, timeout: float) -> bool:
        """Sleep until a buffer woke us, ``interrupt``, or TIMEOUT; True when woken."""
        try:
            got = self._ep.poll(timeout)
        except InterruptedError:
            return True
        for fd, _ in got:
            if fd == self._r:           # level-triggered: emptied, or every poll returns
                try:
                    os.read(self._r, 4096)
                except OSError:
                    pass
        return bool(got)

    def interrupt(self) -> None:
        try:
            os.write(self._w, b"x")
        except OSError:
            pass

    def close(self) -> None:
        for closer in (self._ep.close, lambda: os.close(self._r), lambda: os.close(self._w)):
            try:
                closer()
            except OSError:
                pass


def _base_drain() -> Any:
    from snumap_tui.trace.base import Tracer

    return Tracer.drain


MERGE_MAX = 1 << 20     # bytes of raw records decoded at once


def merge_drains(raws: list[Any], limit: int = MERGE_MAX) -> list[Any]:
    """Consecutive drains joined, so the main thread decodes once per poll (10 times a second)
    instead of once per 10 ms drain: each decode has fixed costs (numpy calls, the tracer's
    map reads) that at 100 small decodes a second took CPU from the traced workload. Joined
    up to LIMIT bytes each: a decode makes several copies of its batch, so a backlog decoded
    in one piece was the recorder's peak memory.

    A perf drain is each CPU's ring bytes, whole records only, so one CPU's drains joined are
    that ring's record stream; an eBPF drain is an array of records, joined by concatenation.
    Anything else is left as it is."""
    if len(raws) < 2:
        return raws
    groups: list[list[Any]] = [[]]
    size = 0
    for r in raws:
        n = _raw_size(r)
        if groups[-1] and size + n > limit:
            groups.append([])
            size = 0
        groups[-1].append(r)
        size += n
    if len(groups) > 1:
        return [m for g in groups for m in _merge(g)]
    return _merge(raws)


def _merge(raws: list[Any]) -> list[Any]:
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
