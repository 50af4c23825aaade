"""The process memory chunk (kind 17, docs/format.md "Process memory chunk"): memory per
traced process and NUMA node at each sample, as ``sources/procmem.py`` reads it.

One row per (sample time, process, node): ``t_ns`` u64, ``pid`` i32, ``node`` i32 (-1: the
process's whole RSS), ``bytes`` u64, ``exact`` bool (False: the RSS spread over the nodes in the
proportions of the last numa_maps walk). The Writer buffers rows (``MemoryBuffer``); the
reader's ``process_memory()`` concatenates every chunk's rows (schema checked in
store/kinds.py).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from snumap_tui.store.kinds import K_PROCESS_MEMORY

__all__ = ["K_PROCESS_MEMORY", "MEMORY_DTYPE", "MemoryBuffer", "decode_memory", "empty"]

MEMORY_DTYPE = np.dtype([("t_ns", "<u8"), ("pid", "<i4"), ("node", "<i4"), ("bytes", "<u8"),
                         ("exact", "?")])


def empty() -> np.ndarray:
    return np.zeros(0, dtype=MEMORY_DTYPE)


def rows_at(t_ns: int, rows: Iterable[tuple[int, int, int, bool]]) -> np.ndarray:
    """ProcessMemory.read()'s rows stamped with the sample time."""
    got = list(rows)
    out = np.zeros(len(got), dtype=MEMORY_DTYPE)
    if got:
        pid, node, nbytes, exact = zip(*got)
        out["t_ns"] = int(t_ns)
        out["pid"] = pid
        out["node"] = node
        out["bytes"] = nbytes
        out["exact"] = exact
    return out


class MemoryBuffer:
    """Rows waiting for the next flush."""

    def __init__(self) -> None:
        self._parts: list[np.ndarray] = []
        self.n = 0

    def add(self, rows: np.ndarray) -> None:
        if len(rows):
            self._parts.append(rows.astype(MEMORY_DTYPE, copy=False))
            self.n += len(rows)

    def take(self) -> tuple[dict[str, np.ndarray], int, int, int] | None:
        """(chunk value, count, t_min, t_max), or None when nothing is buffered."""
        if not self.n:
            return None
        rows = np.concatenate(self._parts)
        rows = rows[np.argsort(rows["t_ns"], kind="stable")]
        self._parts, self.n = [], 0
        value = {k: np.ascontiguousarray(rows[k]) for k in MEMORY_DTYPE.names or ()}
        return value, len(rows), int(rows["t_ns"][0]), int(rows["t_ns"][-1])


def decode_memory(value: dict[str, np.ndarray]) -> np.ndarray:
    """One chunk's checked value (store/kinds.py schema) as MEMORY_DTYPE rows."""
    n = len(value["t_ns"])
    out = np.zeros(n, dtype=MEMORY_DTYPE)
    for k in MEMORY_DTYPE.names or ():
        out[k] = value[k]
    return out
