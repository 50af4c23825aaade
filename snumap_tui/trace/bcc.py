"""The bcc eBPF backend: bpf/sched.c compiled by bcc at run time, filtered in the kernel, read
in bulk (bpf_common.py). The libbpf backend (libbpf.py) runs the same logic without a compiler
or headers; bcc remains for kernels without BTF (no /sys/kernel/btf/vmlinux) and libbpf < 1.0.

bcc compiles C at run time against the running kernel's headers
(/lib/modules/$(uname -r)/build), needs root or CAP_BPF + CAP_PERFMON, and its Python module
is the distribution's (Debian: python3-bpfcc in /usr/lib/python3/dist-packages), which a
virtualenv does not see; ``import_bcc`` reaches it there without adding that directory for
anything else.
"""

from __future__ import annotations

import importlib
import importlib.util
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
from snumap_tui.trace.bpf_common import BpfTracer, ring_pages
from snumap_tui.trace.bpf_layout import bpf_dir, load_layout
from snumap_tui.trace.bpf_ring import BpfRingReader
from snumap_tui.trace.tasks import seed_tree
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


def find_bcc() -> str | None:
    """Where bcc's Python module is, without importing it: importing loads libbcc, which
    maps LLVM and clang (~60 MB of the recorder's memory, ~0.1 s) -- the status checks every
    recording makes must not pay that."""
    try:
        spec = importlib.util.find_spec("bcc")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin:
        return spec.origin
    for d in DIST_PACKAGES:
        init = Path(d) / "bcc" / "__init__.py"
        if init.exists():
            return str(init)
    return None


def headers_dir() -> Path:
    return Path("/lib/modules") / platform.release() / "build"


class BccTracer(BpfTracer):
    """Scheduling events through eBPF (see bpf/sched.c for what is filtered where)."""

    name = "bcc"
    approximate = False

    def __init__(self) -> None:
        super().__init__()
        self._bpf: Any = None
        self.compile_s = 0.0

    @classmethod
    def status(cls) -> SourceStatus:
        missing = has_caps(("CAP_BPF", "CAP_PERFMON"), alternative="CAP_SYS_ADMIN")
        if missing:
            return SourceStatus("trace:bcc", False, f"no {missing} (not root)",
                                "run as root, or give CAP_BPF and CAP_PERFMON")
        if find_bcc() is None:
            # A broken libbcc shows when start() imports it (and auto moves on).
            return SourceStatus("trace:bcc", False, "the bcc Python module is not installed",
                                "apt install python3-bpfcc (or your distribution's bcc)")
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
        try:
            bcc = import_bcc()
        except ImportError as exc:
            raise RuntimeError(str(exc)) from None
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
            for tid, pid in seed_tree(roots, self._tasks):
                self._track(tid, pid)
        self._ring = BpfRingReader(b[b"events"].map_fd, pages * os.sysconf("SC_PAGE_SIZE"),
                                   rec_dtype)

    def _loaded(self) -> bool:
        return self._bpf is not None

    def _track(self, tid: int, tgid: int) -> None:
        tracked = self._bpf[b"tracked"]
        tracked[tracked.Key(tid)] = tracked.Leaf(tgid)

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
        return self._lost_since(table[table.Key(0)])

    def _untrack(self, tids: list[int]) -> None:
        tracked = self._bpf[b"tracked"]
        for tid in tids:
            try:
                del tracked[tracked.Key(tid)]
            except KeyError:
                pass

    def _names(self) -> None:
        table = self._bpf[b"names"]
        done = []
        for k, v in table.items():
            tid = int(k.value)
            # The names themselves come as records with their times (events.COMM).
            self._tasks.learn(tid, tgid=int(v.tgid) or None, ppid=int(v.ppid) or None)
            done.append(k)
        for k in done:
            try:
                del table[k]
            except KeyError:
                pass

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
