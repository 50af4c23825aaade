"""Network interfaces: bytes and packets per interface from /sys/class/net/*/statistics.

Documentation/ABI/testing/sysfs-class-net-statistics: ``rx_bytes``, ``tx_bytes``,
``rx_packets``, ``tx_packets`` are cumulative unsigned counters since the interface came up,
readable by everyone. An interface without a ``device`` link is virtual (lo, bridges, veth,
tunnels): its traffic is no NIC's, so it is not read, except ``lo`` (one interface, marked
virtual and left out of the per-NUMA-node sums). A container host has dozens of veths: four
reads each per sweep would cost more than every NIC together.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from snumap_tui.sources._io import READ_FLAGS, Reader, read_text, reason_of
from snumap_tui.sources.base import SourceStatus
from snumap_tui.sources.confine import allows_fast, open_checked, top_of
from snumap_tui.sources.iodev import DeviceSource

NET = "sys/class/net"
FIELDS = ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets")


class NetSource(DeviceSource):
    """Cumulative bytes and packets per network interface."""

    name = "net"
    CLASS_DIR = NET

    def __init__(self, root: Path = Path("/"), reader: Reader = read_text) -> None:
        super().__init__(root, reader)
        self._paths: dict[str, list[Path]] = {}

    def interfaces(self) -> list[str]:
        try:
            return sorted(os.listdir(self.root / NET))
        except OSError:
            return []

    def status(self) -> SourceStatus:
        names = self.interfaces()
        if not names:
            return SourceStatus(self.name, False, f"no network interfaces in /{NET}", None,
                                {"path": str(self.root / NET)})
        phys = [n for n in names if self._place(n).physical]
        # A gathered tree (hwloc-gather-topology) copies the statistics of some interfaces
        # only: the source works when any interface's counters read, physical ones first.
        error: OSError | None = None
        for n in phys + [n for n in names if n not in phys]:
            try:
                self._reader(self.root / NET / n / "statistics" / "rx_bytes")
                break
            except OSError as exc:
                error = error or exc
        else:
            assert error is not None
            return SourceStatus(self.name, False, reason_of(error), None)
        return SourceStatus(self.name, True, None if phys else "only virtual interfaces",
                            None, {"interfaces": names, "physical": phys})

    def _files(self, name: str) -> list[Path]:
        got = self._paths.get(name)
        if got is None:
            stats = self.root / NET / name / "statistics"
            got = self._paths[name] = [stats / f for f in FIELDS]
        return got

    def read(self) -> dict[str, Any]:
        names = [n for n in self.interfaces() if n == "lo" or self._place(n).physical]
        vals = np.full((len(FIELDS), len(names)), np.nan)
        fast = allows_fast(self._reader)       # no test hook: plain reads of small files
        top = top_of(self._reader)
        for i, n in enumerate(names):
            for j, path in enumerate(self._files(n)):
                try:
                    if fast:
                        fd = open_checked(path, top, READ_FLAGS)
                        try:                  # a counter is < 32 digits; never read on
                            vals[j, i] = float(os.read(fd, 64))
                        finally:
                            os.close(fd)
                    else:
                        vals[j, i] = float(self._reader(path))
                except (OSError, ValueError):
                    pass   # NaN: an interface that vanished mid-read, never 0
        out = self.place_fields(names)
        out.update(zip(FIELDS, vals))
        return out

    def close(self) -> None:
        super().close()
        self._paths.clear()
