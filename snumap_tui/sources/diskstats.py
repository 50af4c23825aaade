"""Block devices: bytes read and written and time busy, from /proc/diskstats.

Documentation/admin-guide/iostats.rst: after ``major minor name`` come, cumulative since boot,
(1) reads completed, (2) reads merged, (3) sectors read, (4) ms reading, (5) writes completed,
(6) writes merged, (7) sectors written, (8) ms writing, (9) I/Os in progress (instantaneous),
(10) ms doing I/Os, (11) weighted ms; discard fields follow since 4.18 and flush fields since
5.5. A sector here is always 512 bytes, whatever the device's sector size. Field 10 over the
interval is the utilisation iostat prints as %util.

Only whole disks are kept (the names under /sys/block: partitions would count their I/O twice);
a disk without a ``device`` link (loop, ram, dm, md, zram) is marked virtual and left out of
the per-NUMA-node sums, its I/O being some physical disk's as well.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from snumap_tui.sources._io import Reader, read_optional, read_text, reason_of
from snumap_tui.sources.base import SourceStatus
from snumap_tui.sources.iodev import DeviceSource

DISKSTATS = "proc/diskstats"
BLOCK = "sys/block"
SECTOR = 512.0
FIELDS = ("reads", "read_bytes", "writes", "write_bytes", "io_ms")


def parse_diskstats(text: str) -> dict[str, tuple[float, float, float, float, float]]:
    """name -> (reads, read bytes, writes, written bytes, ms doing I/O)."""
    out: dict[str, tuple[float, float, float, float, float]] = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) < 14:
            continue
        try:
            out[f[2]] = (float(f[3]), float(f[5]) * SECTOR, float(f[7]),
                         float(f[9]) * SECTOR, float(f[12]))
        except ValueError:
            continue
    return out


class DiskstatsSource(DeviceSource):
    """Cumulative reads, writes and busy time per whole disk."""

    name = "disk"
    CLASS_DIR = BLOCK

    def __init__(self, root: Path = Path("/"), reader: Reader = read_text) -> None:
        super().__init__(root, reader)
        self._disks: list[str] | None = None

    def disks(self) -> list[str]:
        """Whole disks (``/sys/block``), sorted; read once (hot-plugged disks appear after a
        restart of the view, like everywhere else in the topology)."""
        if self._disks is None:
            try:
                self._disks = sorted(e.name for e in (self.root / BLOCK).iterdir())
            except OSError:
                self._disks = []
        return self._disks

    def status(self) -> SourceStatus:
        try:
            text = read_optional(self._reader, self.root / DISKSTATS)
        except OSError as exc:
            return SourceStatus(self.name, False, reason_of(exc), None)
        if text is None:
            return SourceStatus(self.name, False, f"no /{DISKSTATS}"
                                + (" (a gathered tree has none)" if self.root != Path("/")
                                   else ""), None, {"path": str(self.root / DISKSTATS)})
        stats = parse_diskstats(text)
        disks = [d for d in self.disks() if d in stats] or sorted(stats)
        if not disks:
            return SourceStatus(self.name, False, "no block devices in /proc/diskstats", None)
        return SourceStatus(self.name, True, None, None, {"disks": disks})

    def read(self) -> dict[str, Any]:
        stats = parse_diskstats(self._reader(self.root / DISKSTATS))
        whole = self.disks()
        names = [d for d in whole if d in stats] if whole else sorted(stats)
        vals = np.array([stats[n] for n in names], dtype=np.float64).reshape(len(names),
                                                                               len(FIELDS))
        out = self.place_fields(names)
        out.update(zip(FIELDS, vals.T.copy()))
        return out

    def close(self) -> None:
        super().close()
        self._disks = None
