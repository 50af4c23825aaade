"""What the recorder costs, measured by the recorder and kept in the recording.

Two info chunks (docs/format.md, "Info chunk"):

- ``"recorder steady"``, written once every set-up step is done and just before the command
  is released (or, without a command, before the loop starts): its ``t_ns`` and ``steps``
  (each set-up step's name and the CLOCK_MONOTONIC time it ended). The command's first event
  (its exec) comes after it, so a reader can check from the file alone that nothing heavy of
  the recorder's overlapped the program's start.
- ``"recorder cost"``, written at the end: the recorder's own CPU time (every thread of the
  process, user + system: CLOCK_PROCESS_CPUTIME_ID) over its steady state, that steady
  state's length, the CPU per part (the main loop's sampling, decoding and region work by
  CLOCK_THREAD_CPUTIME_ID; each other thread by its own clock; the store's encoding,
  compression and writes among them, in whichever thread), the most threads it had,
  its peak RSS (VmHWM), the events lost, and -- when kernel.bpf_stats_enabled is on -- each
  BPF program's calls and run time (the kernel's statistics: that time is spent in the
  traced programs' context, not the recorder's).

``snumap report`` and record's last line print them (analysis/recorder_cost.py).
"""

from __future__ import annotations

import os
import resource
import threading
import time
from pathlib import Path
from typing import Any

from snumap_tui.analysis.recorder_cost import COST, STEADY

__all__ = ["COST", "STEADY", "SelfCost", "bpf_program_stats", "rss_peak_bytes", "thread_count"]
BPF_STATS = Path("/proc/sys/kernel/bpf_stats_enabled")


def thread_count() -> int:
    """Threads of this process now (native ones too: a BLAS pool is not in threading)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def _thread_clocks() -> dict[str, tuple[int, int]]:
    """{name: (ident, CPU ns so far)} of this process's Python threads but the calling one
    (names made unique with #2, #3 ...)."""
    out: dict[str, tuple[int, int]] = {}
    me = threading.get_ident()
    for t in threading.enumerate():
        if t.ident is None or t.ident == me or not t.is_alive():
            continue
        try:
            ns = time.clock_gettime_ns(time.pthread_getcpuclockid(t.ident))
        except (OSError, ValueError):
            continue          # it ended meanwhile
        name, k = t.name, 2
        while name in out:
            name, k = f"{t.name}#{k}", k + 1
        out[name] = (t.ident, ns)
    return out


def rss_peak_bytes() -> int:
    """VmHWM of this process (getrusage's ru_maxrss, in KiB on Linux)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def bpf_program_stats(objects: list[Any]) -> dict[str, tuple[int, int]]:
    """{program name: (run_cnt, run_time_ns)} of the BPF programs OBJECTS hold (anything
    with ``programs()`` giving ``name`` and ``fd``), from their fdinfo; empty when the kernel
    keeps no statistics (kernel.bpf_stats_enabled off: the recorder never turns it on, it
    costs every BPF program of the machine two clock reads a call)."""
    try:
        if BPF_STATS.read_text().strip() != "1":
            return {}
    except OSError:
        return {}
    out: dict[str, tuple[int, int]] = {}
    for obj in objects:
        if obj is None:
            continue
        try:
            progs = list(obj.programs())
        except (OSError, ValueError, AttributeError):
            continue
        for p in progs:
            fd = getattr(p, "fd", -1)
            if fd is None or fd < 0:
                continue
            info = _fdinfo(fd)
            if "run_cnt" in info:
                cnt, ns = out.get(p.name, (0, 0))
                out[str(p.name)] = (cnt + info["run_cnt"], ns + info.get("run_time_ns", 0))
    return out


def _fdinfo(fd: int) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        text = Path(f"/proc/self/fdinfo/{fd}").read_text()
    except OSError:
        return out
    for line in text.splitlines():
        k, _, v = line.partition(":")
        if v.strip().isdigit():
            out[k.strip()] = int(v.strip())
    return out


class SelfCost:
    """The recorder's own cost: ``step(name)`` after each set-up step, ``steady()`` once all
    are done, ``part(name, ns)`` for the main loop's parts, ``tick()`` at each sample (the
    thread count), ``stop()`` when the loop ends, ``info(lost)`` for the chunk."""

    def __init__(self, bpf_objects: Any = None) -> None:
        self.steps: list[tuple[str, int]] = []
        self.t_steady: int | None = None
        self.t_stop: int | None = None
        self._cpu0 = 0
        self._cpu1 = 0
        self.setup_cpu_ns = 0
        self._threads0: dict[str, tuple[int, int]] = {}
        self._threads1: dict[str, tuple[int, int]] = {}
        self._main0 = 0
        self._main1 = 0
        self.parts: dict[str, int] = {}
        self.threads_peak = thread_count()
        self.bpf_objects = bpf_objects        # a callable giving the BPF objects
        self._bpf0: dict[str, tuple[int, int]] = {}
        self._bpf1: dict[str, tuple[int, int]] = {}
        self.writer: Any = None      # the store's Writer: its encoding and writing CPU time
        self._write0 = 0
        self._write1 = 0
        self._info: dict[str, Any] | None = None

    def step(self, name: str) -> None:
        self.steps.append((name, time.monotonic_ns()))

    def steady(self) -> int:
        """The recorder is in its steady state from now: the time, and what it has so far."""
        self._bpf0 = bpf_program_stats(self._objects())
        self.tick()
        self._threads0 = _thread_clocks()
        self._write0 = int(getattr(self.writer, "write_cpu_ns", 0))
        self._main0 = time.thread_time_ns()
        self._cpu0 = time.process_time_ns()
        self.setup_cpu_ns = self._cpu0
        self.t_steady = time.monotonic_ns()
        return self.t_steady

    def part(self, name: str, ns: int) -> None:
        self.parts[name] = self.parts.get(name, 0) + ns

    def tick(self) -> None:
        n = thread_count()
        self.threads_peak = max(self.threads_peak, n)

    def stop(self) -> None:
        """The steady state ends (the recording loop is over): read the clocks, before the
        tear-down (final drains, threads joined) adds its own."""
        if self.t_steady is None or self.t_stop is not None:
            return
        self.tick()
        self._cpu1 = time.process_time_ns()
        self._main1 = time.thread_time_ns()
        self._threads1 = _thread_clocks()
        self._write1 = int(getattr(self.writer, "write_cpu_ns", 0))
        self.t_stop = time.monotonic_ns()
        self._bpf1 = bpf_program_stats(self._objects())

    def _objects(self) -> list[Any]:
        try:
            return list(self.bpf_objects()) if self.bpf_objects is not None else []
        except (OSError, AttributeError):
            return []

    def steady_info(self) -> dict[str, Any]:
        return {"steps": [[name, t] for name, t in self.steps]}

    def info(self, lost: int, wakeups: int | None = None) -> dict[str, Any]:
        """The cost chunk's fields (docs/format.md, "recorder cost"); the first call's, again
        (record's last line says what the file keeps). WAKEUPS: the drain thread's (None:
        no drain thread)."""
        if self.t_steady is None:
            return {}
        if self._info is not None:
            return self._info
        self.stop()
        t_stop = self.t_stop if self.t_stop is not None else time.monotonic_ns()
        by: dict[str, int] = {f"main: {k}": v for k, v in self.parts.items()}
        main = max(0, self._main1 - self._main0)
        by["main: other"] = max(0, main - sum(self.parts.values()))
        for name, (ident, ns) in self._threads1.items():
            first = self._threads0.get(name)
            start = first[1] if first is not None and first[0] == ident else 0
            by[f"thread: {name}"] = max(0, ns - start)
        cpu = max(0, self._cpu1 - self._cpu0)
        # Threads that ended meanwhile, and native ones (a BLAS pool): the rest of the total.
        by["other threads"] = max(0, cpu - sum(by.values()))
        out: dict[str, Any] = {
            "recorded_ns": max(0, t_stop - self.t_steady), "cpu_ns": cpu,
            "setup_cpu_ns": self.setup_cpu_ns, "threads": self.threads_peak,
            "rss_peak_bytes": rss_peak_bytes(), "lost": int(lost), "cpu_by": by,
            "writer_ns": max(0, self._write1 - self._write0)}
        if wakeups is not None:
            out["wakeups"] = int(wakeups)
        bpf = {}
        for name, (cnt, ns) in self._bpf1.items():
            c0, n0 = self._bpf0.get(name, (0, 0))
            bpf[name] = [max(0, cnt - c0), max(0, ns - n0)]
        if bpf:
            out["bpf"] = bpf
        self._info = out
        return out
