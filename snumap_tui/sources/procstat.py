"""/proc/stat: CPU time per PU, in USER_HZ ticks since boot.

Format (Documentation/filesystems/proc.rst, "Miscellaneous kernel statistics in /proc/stat"):
``cpuN user nice system idle iowait irq softirq steal guest guest_nice``; older kernels give
fewer columns (steal since 2.6.11, guest since 2.6.24, guest_nice since 2.6.33). Only online
PUs have a line, so a PU that goes offline simply disappears and comes back with its counters.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from snumap_tui.sources._io import Reader, count_of, read_text, reason_of, user_hz
from snumap_tui.sources.base import SourceStatus

COLUMNS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest",
           "guest_nice")


def parse_proc_stat(text: str) -> dict[str, Any]:
    """Parse /proc/stat text into the "procstat" readings (without ``hz``).

    ``ticks`` always has 10 columns; ``columns`` says how many the kernel gave (the rest are
    0 and must not be read as measured: guest/guest_nice are already inside user/nice).
    """
    out: dict[str, Any] = {}
    # The per-CPU lines are one contiguous block after the aggregate "cpu  " line: parse the
    # block in one numpy call (this is the floor of every sweep, 1024 lines at 1024 PUs).
    start = text.find("\ncpu0")
    if start < 0:
        start = text.find("\ncpu")
    end = start
    ncols = len(COLUMNS)
    nlines = 0
    if start >= 0:
        start += 1
        end = start
        while text.startswith("cpu", end):
            nl = text.find("\n", end)
            end = len(text) if nl < 0 else nl + 1
            nlines += 1
        ncols = min(len(text[start:text.find("\n", start)].split()) - 1, len(COLUMNS))
    for line in text[end:].splitlines():
        key, _, val = line.partition(" ")
        if key in ("ctxt", "procs_running", "procs_blocked", "btime", "processes"):
            n = count_of(val)
            if n is not None:          # not a count (a damaged or crafted file): unknown
                out[key] = n
    ncols = max(ncols, 0)
    cpus, ticks = _cpu_block(text[start:end] if nlines else "", nlines, ncols)
    out["cpus"] = cpus
    out["ticks"] = ticks
    out["columns"] = ncols
    return out


def _cpu_block(block: str, nlines: int, ncols: int) -> tuple[np.ndarray, np.ndarray]:
    """(PU numbers, ticks (n, 10)) of the per-CPU lines."""
    ticks = np.zeros((nlines, len(COLUMNS)), dtype=np.uint64)
    if not nlines:
        return np.zeros(0, dtype=np.int64), ticks
    # np.fromstring in text mode (sep=" ") is 4x faster than split() + np.array here. A token
    # it cannot read stops it: numpy 2 raises, numpy 1 warns and returns what it had read,
    # fewer numbers than the block's tokens (the kernel's lines are single-spaced: one space
    # before each, once "cpu" is a space). Not warnings.catch_warnings: at every sample it
    # would swap the process's warning filters under the other threads.
    digits = block.replace("cpu", " ")
    try:
        flat = np.fromstring(digits, dtype=np.uint64, sep=" ")
        if len(flat) == digits.count(" "):
            flat = flat.reshape(nlines, len(flat) // nlines)
            if flat.shape[1] >= ncols + 1 and int(flat[:, 0].max()) < 1 << 31:
                ticks[:, :ncols] = flat[:, 1:ncols + 1]
                return flat[:, 0].astype(np.int64), ticks
    except ValueError:
        pass
    # Something in the block is not a count (a damaged or crafted file): line by line, a
    # line that does not read is a PU not reported (as if offline).
    cpus, rows = [], []
    for line in block.splitlines():
        parts = line.split()
        if not parts or not parts[0].startswith("cpu"):
            continue
        cpu = count_of(parts[0][3:])
        vals = [count_of(v) for v in parts[1:ncols + 1]]
        if cpu is None or cpu >= 1 << 31 or len(vals) < ncols or None in vals:
            continue
        cpus.append(cpu)
        rows.append(vals)
    ticks = np.zeros((len(rows), len(COLUMNS)), dtype=np.uint64)
    if rows:
        ticks[:, :ncols] = np.array(rows, dtype=np.uint64)
    return np.array(cpus, dtype=np.int64), ticks


def busy_fraction(prev: dict[str, Any], cur: dict[str, Any]) -> dict[int, float]:
    """Fraction of time each PU was not idle between two readings (idle + iowait = idle).

    A convenience for tests and probe; the views use derive(). PUs present in only one of the
    readings (hotplug) or without elapsed ticks are left out.
    """
    prev_rows = {int(c): i for i, c in enumerate(prev["cpus"])}
    out: dict[int, float] = {}
    for j, c in enumerate(cur["cpus"]):
        i = prev_rows.get(int(c))
        if i is None:
            continue
        d = cur["ticks"][j, :8].astype(np.int64) - prev["ticks"][i, :8].astype(np.int64)
        total = int(d.sum())
        if total > 0:
            out[int(c)] = 1.0 - float(d[3] + d[4]) / total
    return out


class ProcStatSource:
    """Per-PU CPU time from ``<root>/proc/stat``."""

    name = "procstat"

    def __init__(self, root: Path = Path("/"), reader: Reader = read_text) -> None:
        self.root = Path(root)
        self.path = self.root / "proc" / "stat"
        self._reader = reader
        self.hz = user_hz()

    def status(self) -> SourceStatus:
        try:
            r = parse_proc_stat(self._reader(self.path))
        except OSError as exc:
            return SourceStatus(self.name, False, reason_of(exc),
                                "mount procfs: mount -t proc proc /proc",
                                {"path": str(self.path)})
        if len(r["cpus"]) == 0:
            return SourceStatus(self.name, False, f"no per-CPU lines in {self.path}", None,
                                {"path": str(self.path)})
        caveat = None
        if r["columns"] < len(COLUMNS):
            caveat = f"old kernel: {r['columns']} of {len(COLUMNS)} columns"
        return SourceStatus(self.name, True, caveat, None,
                            {"path": str(self.path), "cpus": len(r["cpus"]),
                             "columns": r["columns"]})

    def read(self) -> dict[str, Any]:
        r = parse_proc_stat(self._reader(self.path))
        r["hz"] = self.hz
        return r

    def close(self) -> None:
        pass
