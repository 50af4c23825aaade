"""I/O in a Frame: per-device rates (``IoRow``) and per-object counters for the metrics.

Readings of the I/O sources (``net``, ``ib``, ``disk``, ``gpu``; fields in
``snumap_tui.model.sample``) are cumulative per device. Two things come out of a pair:

- one ``IoRow`` per device, with its rates and where it sits: the topology's I/O object when
  hwloc saw it (matched by OS device name, or by PCI bus id for GPUs), else the NUMA node sysfs
  names, else the machine. Rows are shown under their NUMA node (``IoRow.attach``);
- object counters (``net_rx_bytes``, ``disk_io_ms``, ``gpu_util``...) attached to that same
  object, which ``derive`` sums up the tree like the NUMA memory counters: so a NUMA node, its
  package and the machine each get the traffic of the devices local to them. Virtual devices
  (lo, bridges, loop, dm) get rows but are left out of the sums.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from snumap_tui.model.sample import Sample
    from snumap_tui.topology.model import Topology

IO_KINDS = ("net", "ib", "disk", "gpu")

# The topology OS device type each source's devices are found as.
_OSDEV_OF = {"net": "Network", "ib": "OpenFabrics", "disk": "Block"}


@dataclass(frozen=True)
class IoRow:
    kind: str                    # "net", "ib", "disk", "gpu"
    name: str                    # "eth0", "mlx5_0:1", "nvme0n1", "nvml0"
    attach: int                  # TopoObject.id shown under: its NUMA node, else its locality
    numa: int | None             # OS index of the local NUMA node, when known
    io: int | None = None        # index into Topology.io of its object, when hwloc has it
    physical: bool = True
    rx_bps: float | None = None  # bytes/s received (net, ib) or read (disk)
    tx_bps: float | None = None  # bytes/s sent (net, ib) or written (disk)
    rx_pps: float | None = None  # packets/s (net, ib); reads/s (disk)
    tx_pps: float | None = None  # packets/s (net, ib); writes/s (disk)
    util_pct: float | None = None    # disk: % of the interval busy; GPU: kernel activity
    mem_used: float | None = None    # GPU memory in use (bytes)
    mem_total: float | None = None
    power_w: float | None = None     # GPU board power
    busid: str | None = None


def _f(v: float) -> float | None:
    return None if math.isnan(v) or math.isinf(v) else v


def place(topo: Topology, kind: str, name: str, busid: str | None, numa: int
          ) -> tuple[int, int | None, int | None]:
    """(object id shown under, local NUMA OS index, Topology.io index) of one device."""
    osdev = _OSDEV_OF.get(kind)
    dev_name = name.split(":")[0] if kind == "ib" else name
    io = topo.io_osdev(osdev, dev_name) if osdev is not None else None
    if io is None and busid:
        io = topo.io_pci(busid)
    if io is not None:
        # hwloc's placement is the reference; when it is coarser than a NUMA node (a device
        # on the Machine), the node sysfs names is more precise.
        local = io.numa if io.numa is not None else (numa if numa >= 0 else None)
        node = topo.find("NUMANode", local) if local is not None else None
        return (node.id if node is not None else io.attach), local, io.index
    node = topo.find("NUMANode", numa) if numa >= 0 else None
    if node is not None:
        return node.id, numa, None
    single = topo.numa_nodes[0] if len(topo.numa_nodes) == 1 else None
    if single is not None:            # one node: every device is local to it
        return single.id, single.os_index, None
    return topo.root.id, None, None


def _rate(q: dict[str, Any], p: dict[str, Any] | None, field: str, i: int, j: int | None,
          dt: float) -> float | None:
    if p is None or j is None or field not in q or field not in p or not dt > 0:
        return None
    d = float(q[field][i]) - float(p[field][j])
    return _f(d / dt) if d >= 0 else None     # a counter reset: unknown, not negative


def device_rows(prev: Sample, cur: Sample, topo: Topology) -> list[IoRow]:
    """One row per device of every I/O reading in ``cur`` (rates need ``prev`` too)."""
    dt = (cur.t_ns - prev.t_ns) / 1e9
    rows: list[IoRow] = []
    for kind in IO_KINDS:
        q = cur.readings.get(kind)
        if not q or "names" not in q:
            continue
        p = prev.readings.get(kind)
        before = {n: j for j, n in enumerate(p["names"])} if p and "names" in p else {}
        numas = q.get("numa")
        phys = q.get("physical")
        busids = q.get("busid") or [None] * len(q["names"])
        for i, name in enumerate(q["names"]):
            attach, numa, io = place(topo, kind, name, busids[i],
                                     int(numas[i]) if numas is not None else -1)
            j = before.get(name)

            def r(field: str, q: dict[str, Any] = q, p: dict[str, Any] | None = p,
                  i: int = i, j: int | None = j) -> float | None:
                return _rate(q, p, field, i, j, dt)

            common: dict[str, Any] = {"kind": kind, "name": name, "attach": attach,
                                      "numa": numa, "io": io, "busid": busids[i],
                                      "physical": bool(phys[i]) if phys is not None else True}
            if kind in ("net", "ib"):
                rows.append(IoRow(**common, rx_bps=r("rx_bytes"), tx_bps=r("tx_bytes"),
                                  rx_pps=r("rx_packets"), tx_pps=r("tx_packets")))
            elif kind == "disk":
                busy = r("io_ms")
                rows.append(IoRow(**common, rx_bps=r("read_bytes"), tx_bps=r("write_bytes"),
                                  rx_pps=r("reads"), tx_pps=r("writes"),
                                  util_pct=None if busy is None else min(100.0, busy / 10.0)))
            else:
                energy = r("energy_mj")
                power = energy / 1000.0 if energy is not None else _f(float(q["power_w"][i]))
                rows.append(IoRow(**common, util_pct=_f(float(q["util_pct"][i])),
                                  mem_used=_f(float(q["mem_used"][i])),
                                  mem_total=_f(float(q["mem_total"][i])), power_w=power))
    return rows


# Per-object counters from the rows: counter name -> what of a row it sums (per second values
# times dt give the interval's count, so the metric formulas read like the others: x / dt).
_COUNTERS: dict[str, tuple[str, Callable[[IoRow], float | None]]] = {
    "net_rx_bytes": ("net", lambda r: r.rx_bps), "net_tx_bytes": ("net", lambda r: r.tx_bps),
    "net_packets": ("net", lambda r: None if r.rx_pps is None or r.tx_pps is None
                    else r.rx_pps + r.tx_pps),
    "ib_rx_bytes": ("ib", lambda r: r.rx_bps), "ib_tx_bytes": ("ib", lambda r: r.tx_bps),
    "disk_read_bytes": ("disk", lambda r: r.rx_bps),
    "disk_write_bytes": ("disk", lambda r: r.tx_bps),
    "disk_io_ms": ("disk", lambda r: None if r.util_pct is None else r.util_pct * 10.0),
    "disks": ("disk", lambda r: 1.0),
    "gpu_util": ("gpu", lambda r: r.util_pct), "gpus": ("gpu", lambda r: 1.0),
    "gpu_mem_used": ("gpu", lambda r: r.mem_used),
    "gpu_energy_mj": ("gpu", lambda r: None if r.power_w is None else r.power_w * 1000.0),
}
_BY_KIND: dict[str, list[tuple[str, Callable[[IoRow], float | None]]]] = {}
for _name, (_kind, _get) in _COUNTERS.items():
    _BY_KIND.setdefault(_kind, []).append((_name, _get))

# Counters that are already "per interval" counts of seconds-independent things (device counts)
# or instantaneous values (GPU utilisation, memory): not multiplied by dt.
_NOT_RATES = frozenset({"disks", "gpus", "gpu_util", "gpu_mem_used"})


def attach_counters(rows: Sequence[IoRow], dt: float,
                    attach: Callable[[str, int, float], None]) -> None:
    """Add every physical device's counters to the object it sits under."""
    for r in rows:
        if not r.physical:
            continue
        for name, get in _BY_KIND.get(r.kind, ()):
            v = get(r)
            if v is None:
                continue
            if name not in _NOT_RATES:
                if not dt > 0:
                    continue
                v = v * dt
            attach(name, r.attach, v)


def io_counters(prev: Sample, cur: Sample, topo: Topology, dt: float,
                attach: Callable[[str, int, float], None]) -> list[IoRow]:
    """The rows of the interval, their counters attached (``derive``'s hook)."""
    if not any(k in cur.readings for k in IO_KINDS):
        return []
    rows = device_rows(prev, cur, topo)
    attach_counters(rows, dt, attach)
    return rows


__all__ = ["IO_KINDS", "IoRow", "attach_counters", "device_rows", "io_counters", "place"]
