"""The I/O counters and metrics of the catalogue (``snumap_tui.model.metrics`` merges them).

The counters are attached by ``model.iorates`` to the NUMA node (or locality) of each physical
device and summed up the tree, so every metric here is "the devices local to this object":
a NUMA node's NICs, a package's disks, the machine's everything.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from snumap_tui.model.metrics import Metric

OBJ = "obj"

IO_COUNTERS: dict[str, tuple[str, str]] = {
    # /sys/class/net/*/statistics (physical interfaces), over the interval.
    "net_rx_bytes": (OBJ, "bytes received by the NICs"),
    "net_tx_bytes": (OBJ, "bytes sent by the NICs"),
    "net_packets": (OBJ, "packets received and sent by the NICs"),
    # /sys/class/infiniband/*/ports/*/counters (4-octet units converted to bytes).
    "ib_rx_bytes": (OBJ, "bytes received by the InfiniBand ports"),
    "ib_tx_bytes": (OBJ, "bytes sent by the InfiniBand ports"),
    # /proc/diskstats (whole physical disks).
    "disk_read_bytes": (OBJ, "bytes read from the disks"),
    "disk_write_bytes": (OBJ, "bytes written to the disks"),
    "disk_io_ms": (OBJ, "milliseconds the disks were busy (summed over disks)"),
    "disks": (OBJ, "number of disks"),
    # NVML, instantaneous except the energy.
    "gpu_util": (OBJ, "GPU utilisation, % summed over GPUs"),
    "gpus": (OBJ, "number of GPUs"),
    "gpu_mem_used": (OBJ, "GPU memory in use (bytes)"),
    "gpu_energy_mj": (OBJ, "GPU energy over the interval (mJ)"),
}

_BPS: dict[str, Any] = {"unit": "B/s", "scale": "log", "vmin": 1e3, "vmax": 1.25e10,
                        "group": "io"}


def io_metrics(m: Callable[..., Metric]) -> list[Metric]:
    """The built-in I/O metrics, made with the catalogue's ``make_metric``."""
    from snumap_tui.model.metrics import Threshold  # defined before the catalogue is built

    return [
        m("net_rx_bytes_per_s", "net_rx_bytes / dt", description="NIC receive rate", **_BPS),
        m("net_tx_bytes_per_s", "net_tx_bytes / dt", description="NIC send rate", **_BPS),
        m("net_packets_per_s", "net_packets / dt", unit="/s", scale="log", vmin=1.0,
          vmax=1e7, group="io", description="NIC packets per second (both directions)"),
        m("ib_rx_bytes_per_s", "ib_rx_bytes / dt", description="InfiniBand receive rate",
          **(_BPS | {"vmax": 5e10})),
        m("ib_tx_bytes_per_s", "ib_tx_bytes / dt", description="InfiniBand send rate",
          **(_BPS | {"vmax": 5e10})),
        m("disk_read_bytes_per_s", "disk_read_bytes / dt", description="disk read rate",
          **_BPS),
        m("disk_write_bytes_per_s", "disk_write_bytes / dt", description="disk write rate",
          **_BPS),
        m("disk_util_pct", "disk_io_ms / disks / dt / 10", unit="%", group="io",
          description="disk utilisation (time busy, mean over the disks)",
          thresholds=(Threshold(">", 90, "warn", "a disk is saturated"),)),
        m("gpu_util_pct", "gpu_util / gpus", unit="%", group="io",
          description="GPU utilisation (mean over the GPUs)"),
        m("gpu_mem_used_bytes", "gpu_mem_used", unit="B", vmax=2.0**37, group="io",
          description="GPU memory in use"),
        m("gpu_power_w", "gpu_energy_mj / dt / 1000", unit="W", vmax=700.0, group="io",
          description="GPU board power (NVML)"),
    ]
