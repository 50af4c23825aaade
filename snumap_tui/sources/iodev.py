"""What the I/O sources share: where a device sits, found from sysfs alone.

A class device (``/sys/class/net/eth0``, ``/sys/class/infiniband/mlx4_0``, ``/sys/block/sda``)
links with ``device`` into ``/sys/devices/...``; walking that path up gives the PCI function it
hangs from (a path component like ``0000:02:00.0``) and the first ``numa_node`` file on the way
(Documentation/ABI/testing/sysfs-bus-pci: "numa_node ... -1 when unknown"). The topology's own
I/O objects say the same when hwloc saw them; this is the fallback that also works with a
topology that has none (``--topology`` of an XML without I/O) and for a device hwloc filtered
out. Links in a gathered tree are relative, so they resolve inside ``--fsroot``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from snumap_tui.sources._io import Reader, read_optional, read_text

_BUSID = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


@dataclass(frozen=True)
class Locality:
    numa: int            # the NUMA node's OS index, -1 when sysfs does not say
    busid: str | None    # the PCI function it hangs from ("0000:02:00.0"), if any
    physical: bool       # has a ``device`` link (not lo, a bridge, a loop or dm device)


def normal_busid(text: str) -> str:
    """'00000000:3B:00.0' (NVML's 8-digit domain, upper case) -> '0000:3b:00.0'."""
    dom, _, rest = text.strip().lower().partition(":")
    return f"{int(dom, 16):04x}:{rest}"


def locality(root: Path, class_dir: Path, reader: Reader) -> Locality:
    """Where the device of ``class_dir`` sits (see the module docstring)."""
    dev = class_dir / "device"
    if not dev.exists():
        return Locality(-1, None, False)
    try:
        real = dev.resolve()
    except OSError:
        return Locality(-1, None, True)
    top = (root / "sys" / "devices").resolve()
    numa, busid = -1, None
    cur = real
    while cur != cur.parent and (cur == top or top in cur.parents):
        if busid is None and _BUSID.match(cur.name):
            busid = normal_busid(cur.name)
        if numa < 0:
            text = read_optional(reader, cur / "numa_node")
            if text is not None:
                try:
                    numa = int(text.strip())
                except ValueError:
                    numa = -1
        if busid is not None and numa >= 0:
            break
        cur = cur.parent
    return Locality(numa if numa >= 0 else -1, busid, True)


def fd_links(root: Path, pid: int, limit: int = 65536) -> list[tuple[int, str]]:
    """(fd, link target) of a process's open files, in fd order (proc(5): /proc/PID/fd/N is a
    symbolic link; read, never followed). ``limit`` bounds the fds looked at (an MPI rank can
    hold tens of thousands); none when the directory cannot be read."""
    out: list[tuple[int, str]] = []
    try:
        with os.scandir(root / "proc" / str(pid) / "fd") as it:
            for n, e in enumerate(it):
                if n >= limit:
                    break
                if not e.name.isdigit():
                    continue
                try:
                    out.append((int(e.name), os.readlink(e.path)))
                except OSError:
                    continue           # closed meanwhile, or not ours to read
    except OSError:
        return []
    return sorted(out)


class DeviceSource:
    """What the per-device sources share: a root, a reader, and each device's place (read
    once: a device does not move; ``close()`` forgets them). ``CLASS_DIR`` is the sysfs class
    directory its devices are found in, relative to the root."""

    CLASS_DIR = ""

    def __init__(self, root: Path = Path("/"), reader: Reader = read_text) -> None:
        self.root = Path(root)
        self._reader = reader
        self._places: dict[str, Locality] = {}

    def _place(self, name: str) -> Locality:
        loc = self._places.get(name)
        if loc is None:
            try:
                loc = locality(self.root, self.root / self.CLASS_DIR / name, self._reader)
            except OSError:
                loc = Locality(-1, None, False)
            self._places[name] = loc
        return loc

    def place_fields(self, names: list[str], devices: list[str] | None = None
                     ) -> dict[str, Any]:
        """The reading's fields that say which devices and where (``devices``: the sysfs
        device of each name when they differ, as InfiniBand ports of one HCA)."""
        places = [self._place(d) for d in (devices if devices is not None else names)]
        return {"names": names,
                "physical": np.array([p.physical for p in places], dtype=bool),
                "numa": np.array([p.numa for p in places], dtype=np.int64),
                "busid": [p.busid for p in places]}

    def close(self) -> None:
        self._places.clear()
