"""I/O objects of the topology: hwloc's bridges, PCI devices and OS devices, where they attach.

hwloc 2.x keeps I/O objects out of the main tree: each normal object has an ``io_first_child``
list, and an I/O object's parent is either a normal object (a Package, a Group, the Machine:
its *locality*) or another I/O object (a bridge above a PCI device, a PCI device above its OS
devices). I/O objects have no cpuset of their own; what is local to them is the cpuset of their
first non-I/O ancestor (hwloc_get_non_io_ancestor_obj).

The model keeps them in the same shape, apart from the normal objects, so that the metric
arrays indexed by ``TopoObject.id`` do not change and recordings made before I/O existed read
unchanged (``Topology.io`` is then empty):

- ``IoObject.index`` is its position in ``Topology.io`` (a depth-first order, as hwloc lists
  them), ``io_parent`` the index of its I/O parent (None when the parent is a normal object);
- ``attach`` is the ``TopoObject.id`` of its non-I/O ancestor; ``numa`` the OS index of the
  NUMA node local to it when the nodes of that ancestor's nodeset all serve the same CPUs (one
  node, or several memory kinds of one locality: then the lowest OS index), else None.

Names follow lstopo: ``PCI 02:00.0 (Ethernet)``, ``Net "eth0"``, ``Block(Disk) "sda"``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

IO_TYPES = ("Bridge", "PCIDev", "OSDev")

# enum hwloc_obj_osdev_type_e (hwloc 2.x), and what lstopo writes for each.
OSDEV_TYPES = {0: "Block", 1: "GPU", 2: "Network", 3: "OpenFabrics", 4: "DMA", 5: "CoProc",
               6: "Memory"}
_OSDEV_SHORT = {"Network": "Net"}

# PCI class codes (PCI Code and ID Assignment Specification, class:subclass), the names lstopo
# prints in "PCI 02:00.0 (Ethernet)"; a subclass not listed falls back to its base class.
PCI_CLASSES = {
    0x0100: "SCSI", 0x0101: "IDE", 0x0104: "RAID", 0x0106: "SATA", 0x0107: "SAS",
    0x0108: "NVMExp", 0x0180: "Storage",
    0x0200: "Ethernet", 0x0207: "InfiniBand", 0x0208: "Fabric", 0x0280: "Network",
    0x0300: "VGA", 0x0302: "3D", 0x0380: "Display",
    0x0403: "Audio", 0x0600: "HostBridge", 0x0604: "PCIBridge", 0x0b40: "Co-Processor",
    0x0c03: "USB", 0x0c06: "InfiniBand", 0x1200: "Accelerator", 0x1280: "Processing",
}
PCI_BASE_CLASSES = {
    0x00: "Unclassified", 0x01: "Storage", 0x02: "Network", 0x03: "Display",
    0x04: "Multimedia", 0x05: "Memory", 0x06: "Bridge", 0x07: "Communication",
    0x08: "System", 0x09: "Input", 0x0a: "Docking", 0x0b: "Processor", 0x0c: "SerialBus",
    0x0d: "Wireless", 0x0e: "Intelligent", 0x0f: "Satellite", 0x10: "Crypto",
    0x11: "SignalProcessing", 0x12: "ProcessingAccelerator", 0x13: "Instrumentation",
}


def pci_class_name(class_id: int | None) -> str | None:
    if class_id is None:
        return None
    return PCI_CLASSES.get(class_id) or PCI_BASE_CLASSES.get(class_id >> 8)


@dataclass(frozen=True)
class IoObject:
    index: int
    type: str                      # "Bridge", "PCIDev" or "OSDev" (hwloc's type names)
    attach: int                    # TopoObject.id of the non-I/O ancestor
    io_parent: int | None = None   # index in Topology.io of an I/O parent
    children: tuple[int, ...] = ()
    logical_index: int = 0
    name: str | None = None        # OS devices: "eth0", "mlx4_0", "sda", "nvml0"
    subtype: str | None = None     # "Disk", "NVM", "CUDA", ...
    osdev_type: str | None = None  # OS devices: one of OSDEV_TYPES' values
    busid: str | None = None       # PCI: "0000:02:00.0"
    class_id: int | None = None    # PCI: class << 8 | subclass
    vendor_id: int | None = None
    device_id: int | None = None
    linkspeed: float | None = None     # PCI: GB/s (hwloc's linkspeed), None when unknown
    bridge: str | None = None      # bridges: "host" or "pci", and the buses below: "[02-02]"
    buses: str | None = None
    numa: int | None = None        # OS index of the local NUMA node, when exactly one
    infos: tuple[tuple[str, str], ...] = ()

    def info(self, key: str) -> str | None:
        return next((v for k, v in self.infos if k == key), None)

    @property
    def is_pci(self) -> bool:
        return self.type == "PCIDev"

    @property
    def short_busid(self) -> str | None:
        """'02:00.0' for domain 0 (what lstopo prints), the full id otherwise."""
        if self.busid is None:
            return None
        return self.busid.removeprefix("0000:")

    def label(self) -> str:
        """lstopo's words: 'HostBridge', 'PCIBridge', 'PCI 02:00.0 (Ethernet)', 'Net "eth0"',
        'Block(Disk) "sda"'."""
        if self.type == "Bridge":
            return "HostBridge" if self.bridge == "host" else "PCIBridge"
        if self.type == "PCIDev":
            cls = pci_class_name(self.class_id)
            text = f"PCI {self.short_busid or '?'}"
            if cls:
                text += f" ({cls})"
            if self.linkspeed:
                text += f" {self.linkspeed:g} GB/s"
            return text
        kind = _OSDEV_SHORT.get(self.osdev_type or "", self.osdev_type or "OSDev")
        if self.subtype:
            kind += f"({self.subtype})"
        return f'{kind} "{self.name}"' if self.name else kind

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"type": self.type, "attach": self.attach,
                             "logical_index": self.logical_index}
        for k in ("io_parent", "name", "subtype", "osdev_type", "busid", "class_id",
                  "vendor_id", "device_id", "linkspeed", "bridge", "buses", "numa"):
            v = getattr(self, k)
            if v is not None:
                d[k] = v
        if self.infos:
            d["infos"] = [list(kv) for kv in self.infos]
        return d


def io_from_dicts(items: Sequence[Mapping[str, Any]]) -> tuple[IoObject, ...]:
    """The I/O list from its JSON form (``Topology.to_dict()["io"]``), children rebuilt."""
    kids: dict[int, list[int]] = {}
    for i, d in enumerate(items):
        p = d.get("io_parent")
        if p is not None:
            kids.setdefault(int(p), []).append(i)
    out = []
    for i, d in enumerate(items):
        def opt_int(key: str, d: Mapping[str, Any] = d) -> int | None:
            v = d.get(key)
            return None if v is None else int(v)

        ls = d.get("linkspeed")
        out.append(IoObject(
            index=i, type=str(d["type"]), attach=int(d["attach"]),
            io_parent=opt_int("io_parent"), children=tuple(kids.get(i, ())),
            logical_index=int(d.get("logical_index", 0)), name=d.get("name"),
            subtype=d.get("subtype"), osdev_type=d.get("osdev_type"), busid=d.get("busid"),
            class_id=opt_int("class_id"), vendor_id=opt_int("vendor_id"),
            device_id=opt_int("device_id"), linkspeed=None if ls is None else float(ls),
            bridge=d.get("bridge"), buses=d.get("buses"), numa=opt_int("numa"),
            infos=tuple((str(k), str(v)) for k, v in d.get("infos", ()))))
    return tuple(out)


def io_to_dicts(io: Iterable[IoObject]) -> list[dict[str, Any]]:
    return [o.to_dict() for o in io]


def local_numa(nodes: Iterable[tuple[int, frozenset[int]]]) -> int | None:
    """The NUMA node local to an I/O locality, given the nodes of its non-I/O ancestor's
    nodeset as (OS index, cpuset): the lowest OS index when they all serve the same CPUs (one
    node, or several memory kinds of one locality: DRAM + HBM + NVM); None when they serve
    different CPUs (a device on the Machine of a two-node machine is local to neither)."""
    listed = list(nodes)
    if not listed or len({cpus for _, cpus in listed}) != 1:
        return None
    return min(os for os, _ in listed)
