"""glibc's malloc settings (mallopt(3)), for the long-running recorder.

glibc gives each thread that meets contention its own arena (up to 8 per core), and an arena
keeps what it has grown to. The recorder's drain, sampler and main threads each churn through
megabytes of short-lived arrays: with one arena per thread every arena holds its own
high-water mark. One arena shared by all threads measured 57 MB peak RSS instead of 63-64 MB
under a context-switch storm, at the same CPU time (bench/sched_overhead.py's load; the
threads barely contend: the drain thread sleeps between reads). Other C libraries, or a
MALLOC_ARENA_MAX the user set, are left alone.
"""

from __future__ import annotations

import ctypes
import os

from snumap_tui.native.libc import libc

M_ARENA_MAX = -8        # glibc's malloc.h


def one_arena() -> bool:
    """Limit glibc to one malloc arena for the threads started after this call; False where
    that is not glibc or the user chose (MALLOC_ARENA_MAX)."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    try:
        c = libc()
        mallopt = c.mallopt
    except (OSError, AttributeError):
        return False
    if not hasattr(c, "gnu_get_libc_version"):          # glibc only (musl's is a stub)
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, 1))
