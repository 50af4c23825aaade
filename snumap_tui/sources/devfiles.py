"""Which GPUs and network adapters a process has open: its /proc/PID/fd links to device files.

A process that uses a GPU or an RDMA NIC holds their character devices open (proc(5):
/proc/PID/fd/N is a symbolic link to the file; readlink only, nothing is opened):

- ``/dev/nvidiaN`` (NVIDIA driver, major 195): GPU minor N; the driver lists each GPU as
  ``/proc/driver/nvidia/gpus/<PCI bus id>/information`` with a "Device Minor: N" line;
- ``/dev/dri/renderD*``, ``/dev/dri/card*`` (DRM: AMD, Intel, NVIDIA's DRM side):
  ``/sys/class/drm/<name>/device`` is the PCI function;
- ``/dev/infiniband/uverbsN`` (RDMA verbs: MPI over InfiniBand, RoCE, EFA):
  ``/sys/class/infiniband_verbs/uverbsN/ibdev`` names the HCA (Documentation/ABI/stable/
  sysfs-class-infiniband), ``umadN`` the same under ``infiniband_mad``.

and a NIC used through TCP/UDP sockets: the interface of each socket's local address
(``sources.sockets``); a virtual interface (a bond, a bridge) names no adapter and is left out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from snumap_tui.sources._io import Reader, read_optional, read_text
from snumap_tui.sources.iodev import fd_links, locality, normal_busid
from snumap_tui.sources.sockets import socket_interfaces

_NVIDIA = re.compile(r"^/dev/nvidia(\d+)$")
_DRI = re.compile(r"^/dev/dri/((?:renderD|card)\d+)$")
_VERBS = re.compile(r"^/dev/infiniband/((?:uverbs|umad)\d+)$")
_MINOR = re.compile(r"^Device Minor:\s*(\d+)", re.MULTILINE)


@dataclass(frozen=True)
class OpenDevice:
    kind: str              # "gpu", "ib" or "net"
    path: str              # the device file: "/dev/nvidia0"
    name: str              # what the topology calls it: "mlx5_0", or the file's name
    busid: str | None      # the PCI function ("0000:82:00.0")
    numa: int              # sysfs numa_node, -1 unknown


def _nvidia_busid(root: Path, minor: int, reader: Reader) -> str | None:
    base = root / "proc/driver/nvidia/gpus"
    try:
        entries = sorted(base.iterdir())
    except OSError:
        return None
    for d in entries:
        text = read_optional(reader, d / "information") or ""
        m = _MINOR.search(text)
        if m and int(m.group(1)) == minor:
            return normal_busid(d.name)
    return None


def _pci_numa(root: Path, busid: str | None, reader: Reader) -> int:
    if busid is None:
        return -1
    text = read_optional(reader, root / "sys/bus/pci/devices" / busid / "numa_node")
    try:
        return int(text.strip()) if text else -1
    except ValueError:
        return -1


def device_of(root: Path, target: str, reader: Reader = read_text) -> OpenDevice | None:
    """The GPU or adapter behind one fd link target (None for anything else)."""
    m = _NVIDIA.match(target)
    if m:
        busid = _nvidia_busid(root, int(m.group(1)), reader)
        return OpenDevice("gpu", target, f"nvidia{m.group(1)}", busid,
                          _pci_numa(root, busid, reader))
    m = _DRI.match(target)
    if m:
        loc = locality(root, root / "sys/class/drm" / m.group(1), reader)
        return OpenDevice("gpu", target, m.group(1), loc.busid, loc.numa)
    m = _VERBS.match(target)
    if m:
        cls = "infiniband_verbs" if m.group(1).startswith("uverbs") else "infiniband_mad"
        ibdev = (read_optional(reader, root / "sys/class" / cls / m.group(1) / "ibdev")
                 or "").strip()
        if not ibdev:
            return OpenDevice("ib", target, m.group(1), None, -1)
        loc = locality(root, root / "sys/class/infiniband" / ibdev, reader)
        return OpenDevice("ib", target, ibdev, loc.busid, loc.numa)
    return None


def open_devices(root: Path, pid: int, reader: Reader = read_text,
                 limit: int = 65536) -> list[OpenDevice]:
    """The GPUs and RDMA adapters process ``pid`` holds open, each once, in fd order, then
    the NICs its sockets use.
    ``limit`` bounds the fds looked at (an MPI rank can hold tens of thousands)."""
    out: list[OpenDevice] = []
    links = fd_links(root, pid, limit)
    seen: set[str] = set()
    for _, target in links:                 # in fd order
        if not target.startswith("/dev/") or target in seen:
            continue
        seen.add(target)
        dev = device_of(root, target, reader)
        if dev is not None and all(d.name != dev.name for d in out):
            out.append(dev)
    for iface in socket_interfaces(root, pid, reader, limit, links):
        loc = locality(root, root / "sys/class/net" / iface, reader)
        if loc.physical and all(d.name != iface for d in out):
            out.append(OpenDevice("net", f"/sys/class/net/{iface}", iface, loc.busid, loc.numa))
    return out
