"""InfiniBand (and RoCE) ports: data and packets per port from the port counters.

``/sys/class/infiniband/<hca>/ports/<n>/counters/`` (Documentation/ABI/stable/sysfs-class-
infiniband): ``port_xmit_data`` and ``port_rcv_data`` count octets *divided by 4* (the IBA
PortCounters attribute, "in units of 4 octets"), ``port_xmit_packets`` and
``port_rcv_packets`` count packets. Drivers without extended counters (PortCountersExtended)
saturate the 32-bit ones instead of wrapping; a counter stuck at 0xFFFFFFFF is reported
("saturated") rather than turned into a rate of 0.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from snumap_tui.sources._io import reason_of
from snumap_tui.sources.base import SourceStatus
from snumap_tui.sources.iodev import DeviceSource

IB = "sys/class/infiniband"
# counter file -> (reading field, multiplier to bytes/packets)
COUNTERS = {"port_rcv_data": ("rx_bytes", 4.0), "port_xmit_data": ("tx_bytes", 4.0),
            "port_rcv_packets": ("rx_packets", 1.0), "port_xmit_packets": ("tx_packets", 1.0)}
SATURATED_32 = 0xFFFFFFFF


class InfinibandSource(DeviceSource):
    """Cumulative bytes and packets per InfiniBand port ("mlx5_0:1")."""

    name = "ib"
    CLASS_DIR = IB

    def ports(self) -> list[tuple[str, str]]:
        """(HCA, port number) pairs, sorted."""
        out: list[tuple[str, str]] = []
        try:
            hcas = sorted(os.listdir(self.root / IB))
        except OSError:
            return out
        for h in hcas:
            try:
                nums = sorted(os.listdir(self.root / IB / h / "ports"),
                              key=lambda s: int(s) if s.isdigit() else 0)
            except OSError:
                continue
            out.extend((h, n) for n in nums)
        return out

    def status(self) -> SourceStatus:
        ports = self.ports()
        if not ports:
            return SourceStatus(self.name, False, f"no InfiniBand HCA in /{IB}",
                                "on a node with an HCA: modprobe ib_core and the HCA's "
                                "driver (mlx5_ib)", {"path": str(self.root / IB)})
        h, n = ports[0]
        try:
            self._reader(self.root / IB / h / "ports" / n / "counters" / "port_rcv_data")
        except OSError as exc:
            return SourceStatus(self.name, False, reason_of(exc), None)
        return SourceStatus(self.name, True, None, None,
                            {"ports": [f"{a}:{b}" for a, b in ports]})

    def read(self) -> dict[str, Any]:
        ports = self.ports()
        vals = {f: np.full(len(ports), np.nan) for f, _ in COUNTERS.values()}
        saturated: list[str] = []
        for i, (h, n) in enumerate(ports):
            base = self.root / IB / h / "ports" / n / "counters"
            for fname, (field, mult) in COUNTERS.items():
                try:
                    raw = int(self._reader(base / fname).strip())
                except (OSError, ValueError):
                    continue
                if raw == SATURATED_32:
                    saturated.append(f"{h}:{n}")
                    continue     # NaN: the count stopped; a rate from it would be 0
                vals[field][i] = raw * mult
        hcas = [h for h, _ in ports]
        out = self.place_fields([f"{h}:{n}" for h, n in ports], hcas)
        out["devices"] = hcas
        out.update(vals)
        if saturated:
            out["saturated"] = sorted(set(saturated))
        return out
