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

from snumap_tui.sources._io import Reader, read_text, reason_of, user_hz
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
            out[key] = int(val)
    ticks = np.zeros((nlines, len(COLUMNS)), dtype=np.uint64)
    if nlines:
        # np.fromstring in text mode (sep=" ") is 4x faster than split() + np.array here.
        flat = np.fromstring(text[start:end].replace("cpu", " "), dtype=np.uint64, sep=" ")
        width = len(flat) // nlines
        flat = flat.reshape(nlines, width)
        cpus = flat[:, 0].astype(np.int64)
        ticks[:, :ncols] = flat[:, 1:ncols + 1]
    else:
        cpus = np.zeros(0, dtype=np.int64)
    out["cpus"] = cpus
    out["ticks"] = ticks
    out["columns"] = ncols
    return out


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
