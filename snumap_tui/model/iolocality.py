"""Is a process next to the GPUs and adapters it uses? A finding when it is not.

A device is local to one package (and NUMA node): DMA to and from it crosses the inter-socket
link (UPI, Infinity Fabric) when the threads driving it, and usually their buffers, sit on the
other package. ``io_locality`` compares the package of each device a process has open
(``sources.devfiles``) with the packages of the PUs its threads ran on, and says which device
is remote to which threads, with the binding that would fix it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from snumap_tui.model.iorates import place

if TYPE_CHECKING:
    from snumap_tui.sources.devfiles import OpenDevice
    from snumap_tui.topology.model import Topology, TopoObject


@dataclass(frozen=True)
class DeviceUse:
    device: OpenDevice
    package: int | None          # OS index of the device's package (None: unknown)
    numa: int | None             # OS index of its NUMA node (None: unknown)
    local: bool | None           # every thread on its package (None: cannot tell)
    remote_pus: tuple[int, ...]  # PUs the threads ran on that are on another package


@dataclass(frozen=True)
class LocalityFinding:
    level: str                   # "warn"
    text: str                    # one line for the details pane and the report


def _package_of(topo: Topology, obj: TopoObject) -> TopoObject | None:
    if obj.type == "Package":
        return obj
    up = topo.ancestor_of_type(obj, "Package")
    if up is not None:
        return up
    # A NUMA node or Machine-level device of a single-package machine.
    pkgs = [p for p in topo.by_type("Package") if obj.cpuset and obj.cpuset <= p.cpuset]
    return pkgs[0] if len(pkgs) == 1 else None


def device_uses(topo: Topology, devices: Sequence[OpenDevice], thread_pus: Iterable[int]
                ) -> list[DeviceUse]:
    """Where each device sits against the PUs the process's threads ran on."""
    pus = sorted({p for p in thread_pus if topo.find("PU", p) is not None})
    out: list[DeviceUse] = []
    for d in devices:
        attach, numa, _ = place(topo, d.kind, d.name, d.busid, d.numa)
        pkg = _package_of(topo, topo[attach])
        if pkg is None or not pus:
            out.append(DeviceUse(d, None, numa, None, ()))
            continue
        remote = tuple(p for p in pus if p not in pkg.cpuset)
        out.append(DeviceUse(d, pkg.os_index, numa, not remote, remote))
    return out


def io_locality(topo: Topology, devices: Sequence[OpenDevice], thread_pus: Iterable[int]
                ) -> tuple[list[DeviceUse], list[LocalityFinding]]:
    """The uses, and a finding for every device some threads use from the far package."""
    from snumap_tui.topology.render import compact_cpulist

    uses = device_uses(topo, devices, thread_pus)
    findings: list[LocalityFinding] = []
    for u in uses:
        if u.local is not False:
            continue
        far = sorted({pk.os_index for p in u.remote_pus
                      if (pk := topo.package_of(p)) is not None and pk.os_index is not None})
        where = f"package {u.package}" + (f" (NUMA {u.numa})" if u.numa is not None else "")
        fix = f"numactl --cpunodebind={u.numa}" if u.numa is not None else \
            f"hwloc-bind package:{u.package}"
        findings.append(LocalityFinding("warn", (
            f"{u.device.name} is on {where}, threads run on package "
            f"{','.join(map(str, far))} (PUs {compact_cpulist(u.remote_pus)}): cross-socket "
            f"DMA; bind near it: {fix}")))
    return uses, findings
