"""glibc malloc tuning for long-running recorders (mallopt(3) through ctypes).

glibc serves a block of ``M_MMAP_THRESHOLD`` (128 KiB) or more with its own mmap and unmaps it
on free -- until the first such block is freed: the threshold then rises to that block's size
(the "dynamic mmap threshold", up to 32 MiB), and from then on the recorder's numpy arrays of a
few MiB (a drained batch, a chunk's columns) come from the heap and the per-thread arenas,
which keep the pages of the largest backlog ever met and fragment. Under a context-switch
storm that was about 12 MiB of the recorder's peak RSS. Setting the threshold explicitly turns
the dynamic threshold off: big blocks go back to the kernel when freed.
"""

from __future__ import annotations

import ctypes

M_MMAP_THRESHOLD = -3
DEFAULT_THRESHOLD = 128 * 1024


def fix_mmap_threshold(threshold: int = DEFAULT_THRESHOLD) -> bool:
    """Pin glibc's mmap threshold to THRESHOLD bytes; False where there is no glibc mallopt
    (musl, other platforms) or it refused."""
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, int(threshold)))
