"""The eBPF backend: bpf/sched.c compiled by bcc, filtered in the kernel, read in bulk.

bcc compiles C at run time against the running kernel's headers
(/lib/modules/$(uname -r)/build), needs root or CAP_BPF + CAP_PERFMON, and its Python module
is the distribution's (Debian: python3-bpfcc in /usr/lib/python3/dist-packages), which a
virtualenv does not see; ``import_bcc`` reaches it there without adding that directory for
anything else.
"""

from __future__ import annotations

import importlib
import os
import platform
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from snumap_tui.sources.base import SourceStatus
from snumap_tui.sources.privileges import has_caps
from snumap_tui.trace import events as ev
from snumap_tui.trace.base import Tracer
from snumap_tui.trace.bpf_layout import bpf_dir, load_layout, to_events
from snumap_tui.trace.bpf_ring import BpfRingReader
from snumap_tui.trace.reconstruct import NotRunning, place_kernel_switch_ins
from snumap_tui.trace.rows import take_rows
from snumap_tui.trace.tasks import TaskTable, threads_of, tree_of
from snumap_tui.trace.tracefs import tracefs_missing, tracefs_root

DIST_PACKAGES = ("/usr/lib/python3/dist-packages",)


def import_bcc() -> ModuleType:
    """bcc's Python module: the normal way, else from the distribution's dist-packages only."""
    try:
        return importlib.import_module("bcc")
    except ImportError:
        pass
    for d in DIST_PACKAGES:
        if not (Path(d) / "bcc" / "__init__.py").exists():
            continue
        sys.path.append(d)
        try:
            return importlib.import_module("bcc")
        finally:
            sys.path.remove(d)
    raise ImportError("the bcc Python module is not installed "
                      "(Debian/Ubuntu: apt install python3-bpfcc; Fedora: python3-bcc)")


def headers_dir() -> Path:
    return Path("/lib/modules") / platform.release() / "build"


def ring_pages(buffer_bytes: int | None = None, ncpu: int | None = None) -> int:
    """Pages of the one BPF ring all CPUs share: BUFFER_BYTES per CPU (default
    ``perf.default_buffer_bytes``) times the CPUs, rounded up to a power of two (the kernel
    wants one), between 1024 pages and 256 MiB. 48 bytes per event: 16 MiB (2 CPUs) holds
    ~350k events between two drains."""
    from snumap_tui.trace.perf import default_buffer_bytes

    n = ncpu or os.cpu_count() or 1
    page = os.sysconf("SC_PAGE_SIZE")
    pages = max(1024, (buffer_bytes or default_buffer_bytes(n)) * n // page)
    return min((256 << 20) // page, 1 << (pages - 1).bit_length())


class BccTracer(Tracer):
    """Scheduling events through eBPF (see bpf/sched.c for what is filtered where)."""

    name = "bcc"
    approximate = False

    def __init__(self) -> None:
        self._bpf: Any = None
        self._ring: BpfRingReader | None = None
        self._tasks = TaskTable()
        self._lost_seen: dict[int, int] = {}
        self._exited: list[int] = []
        self._exited_before: list[int] = []
        self._not_running = NotRunning()
        self._system_wide = True
        self.compile_s = 0.0

    @classmethod
    def status(cls) -> SourceStatus:
        missing = has_caps(("CAP_BPF", "CAP_PERFMON"), alternative="CAP_SYS_ADMIN")
        if missing:
            return SourceStatus("trace:bcc", False, f"no {missing} (not root)",
                                "run as root, or give CAP_BPF and CAP_PERFMON")
        try:
            import_bcc()
        except ImportError as exc:
            return SourceStatus("trace:bcc", False, str(exc),
                                "apt install python3-bpfcc (or your distribution's bcc)")
        except OSError as exc:  # libbcc.so missing or broken makes the import itself fail
            return SourceStatus("trace:bcc", False, f"bcc does not load: {exc}",
                                "reinstall bcc (python3-bpfcc, libbpfcc)")
        hdr = headers_dir()
        if not hdr.exists():
            return SourceStatus("trace:bcc", False, f"no kernel headers at {hdr}",
                                "install linux-headers-$(uname -r) (or kernel-devel)",
                                {"path": str(hdr)})
        if tracefs_root() is None:
            return tracefs_missing("trace:bcc")
        return SourceStatus("trace:bcc", True, None, None, {"headers": str(hdr)})

    def start(self, pids: Iterable[int] | None = None) -> None:
        """Compile and load bpf/sched.c (bcc attaches its tracepoint programs as it loads
        them), seed the tracked tree, map the ring. Anything after the load that fails frees
        the BPF object again before the error goes on: no program stays attached."""
        bcc = import_bcc()
        rec_dtype, _names_dtype, _ = load_layout()
        pages = ring_pages(self.buffer_bytes)
        src = (bpf_dir() / "sched.c").read_text()
        roots = list(pids) if pids is not None else None
        self._system_wide = roots is None
        t0 = time.monotonic()
        try:
            self._bpf = bcc.BPF(text=src.encode(), cflags=[f"-I{bpf_dir()}",
                                                  f"-DSNUMAP_RING_PAGES={pages}",
                                                  f"-DSNUMAP_SYSTEM_WIDE={int(roots is None)}",
                                                  "-Wno-macro-redefined"])
        except Exception as exc:
            raise RuntimeError(f"bcc could not compile or load bpf/sched.c: {exc}") from exc
        self.compile_s = time.monotonic() - t0
        try:
            self._attach(roots, rec_dtype, pages)
        except BaseException:
            self._release()
            raise

    def _attach(self, roots: list[int] | None, rec_dtype: np.dtype, pages: int) -> None:
        """Seed the tracked map with the roots' trees and map the ring (bcc attached the
        tracepoint programs when it loaded them)."""
        b = self._bpf
        if roots is not None:
            tracked = b[b"tracked"]
            for pid in tree_of(roots):
                tids = threads_of(pid) or [pid]
                for tid in tids:
                    tracked[tracked.Key(tid)] = tracked.Leaf(pid)
                    self._tasks.learn(tid, tgid=pid)
            self._tasks.lookup_live([t for p in roots for t in (threads_of(p) or [p])])
        self._ring = BpfRingReader(b[b"events"].map_fd, pages * os.sysconf("SC_PAGE_SIZE"),
                                   rec_dtype)

    def follow(self, pids: Iterable[int]) -> bool:
        b = self._bpf
        if self._system_wide or b is None:
            return b is not None
        tracked = b[b"tracked"]
        for pid in tree_of(list(pids)):
            for tid in threads_of(pid) or [pid]:
                tracked[tracked.Key(tid)] = tracked.Leaf(pid)
                self._tasks.learn(tid, tgid=pid)
        return True

    def _release(self) -> None:
        """Unmap the ring, detach the programs and free the BPF object (its maps, program
        fds); each step on its own so that one failing does not leave the rest attached. Safe
        to call twice."""
        ring, self._ring = self._ring, None
        bpf, self._bpf = self._bpf, None
        if ring is not None:
            try:
                ring.close()
            except (OSError, ValueError, BufferError):
                pass
        if bpf is not None:
            try:
                bpf.cleanup()
            except Exception:  # noqa: BLE001, S110 - bcc raises plain Exception on detach errors
                pass

    def _lost(self) -> dict[int, int]:
        table = self._bpf[b"lost"]
        per_cpu = table[table.Key(0)]
        out = {}
        for cpu, n in enumerate(per_cpu):
            n = int(n)
            d = n - self._lost_seen.get(cpu, 0)
            if d:
                out[cpu] = d
                self._lost_seen[cpu] = n
        return out

    def _names(self) -> None:
        table = self._bpf[b"names"]
        done = []
        for k, v in table.items():
            tid = int(k.value)
            self._tasks.learn(tid, tgid=int(v.tgid) or None, ppid=int(v.ppid) or None,
                              comm=bytes(v.comm).split(b"\0", 1)[0].decode(errors="replace"))
            done.append(k)
        for k in done:
            try:
                del table[k]
            except KeyError:
                pass

    def decode(self, recs: np.ndarray | None) -> ev.EventBatch:
        if recs is None:
            recs = self.drain()
            if recs is None:
                return ev.EventBatch()
        if self._exited and not self._system_wide:
            tracked = self._bpf[b"tracked"]
            for tid in self._exited:
                try:
                    del tracked[tracked.Key(tid)]
                except KeyError:
                    pass
        self._exited = []
        events = to_events(recs)
        self._names()
        return self._finish(events)

    def drain(self) -> np.ndarray | None:
        """The ring's records since the last drain (a copy; the space is given back)."""
        return self._ring.read() if self._ring is not None else None

    def read(self) -> ev.EventBatch:
        return self.decode(self.drain())

    def _finish(self, events: np.ndarray) -> ev.EventBatch:
        """Decoded records -> a time-sorted batch with names. The program reconstructs the
        switch-ins the kernel did not trace at the previous switch on the CPU (arg = -1, it
        alone sees every switch); here they move to the latest proof that the task was not
        running yet (reconstruct.py, the perf backend's rule)."""
        t = events["t_ns"]
        if len(t) > 1 and not bool(np.all(t[1:] >= t[:-1])):
            # Ring order is reservation order across CPUs (nearly time order), and a
            # reconstructed switch-in carries the older time of its bound.
            events = take_rows(events, np.argsort(t, kind="stable"))
        self._not_running.forget(self._exited_before)
        events = place_kernel_switch_ins(events, self._not_running)
        tasks = self._tasks
        known = (events["kind"] != ev.WAKEUP) & (events["kind"] != ev.WAKEUP_NEW) & \
                (events["kind"] != ev.MIGRATE)
        tasks.learn_pairs(events["tid"][known], events["pid"][known])
        tasks.fill(events)
        now = int(events["t_ns"][-1]) if len(events) else time.monotonic_ns()
        tasks.lookup_live(tasks.seen_tids(events).tolist(), t_ns=now)
        exits = events["tid"][events["kind"] == ev.EXIT]
        # Forgotten by the evidence one batch later (a task's last switch follows its exit).
        self._exited_before = exits.tolist()
        self._exited = exits.tolist()
        return ev.EventBatch(events=events, tasks=tasks.take_infos(), lost=self._lost())

    def stop(self) -> ev.EventBatch:
        """Detach the programs, read what the ring still holds, free everything -- the
        freeing even when the detach or the last read raised."""
        if self._bpf is None:
            return ev.EventBatch()
        try:
            # Detach first so nothing is half-written, then drain what is left.
            for tp in list(self._bpf.tracepoint_fds):
                self._bpf.detach_tracepoint(tp)
            return self.read()
        finally:
            self._release()
