"""The C library, loaded once for every ctypes caller in snumap (syscall(2) for
perf_event_open and bpf(2), mallopt(3), vsnprintf(3) for libbpf's messages, adjtimex(2)).

``syscall`` returns a long; each caller sets the argtypes of the other functions it uses."""

from __future__ import annotations

import ctypes
import functools


@functools.cache
def libc() -> ctypes.CDLL:
    """The process's C library (the symbols already loaded: glibc or musl), errno kept."""
    lib = ctypes.CDLL(None, use_errno=True)
    lib.syscall.restype = ctypes.c_long
    return lib
