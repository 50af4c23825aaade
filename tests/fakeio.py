"""Fake I/O devices in a fake /sys + /proc tree (beside tests/fakefs.py), counters advancing.

Laid out the way Linux does it, links relative as in a gathered tree:

- a NIC ``devices/pci0000:XX/0000:XX:00.0/<busid>/net/<name>/statistics/{rx,tx}_{bytes,packets}``
  (Documentation/ABI/testing/sysfs-class-net-statistics), ``class/net/<name>`` linking there,
  its ``device`` link to the PCI function, whose ``numa_node`` says where it sits;
- ``lo``: ``devices/virtual/net/lo``, no ``device`` link;
- an InfiniBand HCA ``.../<busid>/infiniband/<hca>/ports/<n>/counters/port_{xmit,rcv}_
  {data,packets}`` (data in 4-octet units, Documentation/ABI/stable/sysfs-class-infiniband)
  and its verbs device ``class/infiniband_verbs/uverbsN/ibdev``;
- a disk ``.../<busid>/block/<name>`` with ``/sys/block/<name>`` and a ``/proc/diskstats`` line
  (Documentation/admin-guide/iostats.rst);
- an NVIDIA GPU: ``/proc/driver/nvidia/gpus/<busid>/information`` ("Device Minor: N");
- open files of a process: ``/proc/PID/fd/N`` symlinks to device paths (not followed).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.fakefs import cpulist, cpumask


@dataclass
class _Dev:
    kind: str
    name: str
    busid: str | None
    numa: int
    counters: dict[str, int] = field(default_factory=dict)


class FakeIo:
    """``node_cpus``: each NUMA node's PUs, for the PCI functions' ``local_cpus`` (what hwloc
    reads to place a device; FakeRoot.cpus_of_node gives them)."""

    def __init__(self, root: Path, node_cpus: dict[int, list[int]] | None = None,
                 ncpus: int = 0) -> None:
        self.root = Path(root)
        self.node_cpus = node_cpus or {}
        self.ncpus = ncpus or 1 + max((c for cs in self.node_cpus.values() for c in cs),
                                      default=0)
        self.devs: dict[str, _Dev] = {}
        self._uverbs = 0

    # ---- building ----------------------------------------------------------------------
    def _pci_dir(self, busid: str, numa: int, pci_class: int = 0x020000,
                 vendor: int = 0x15b3) -> Path:
        host = busid.split(":")[1]
        d = self.root / "sys/devices" / f"pci0000:{host}" / f"0000:{host}:00.0" / busid
        d.mkdir(parents=True, exist_ok=True)
        (d / "numa_node").write_text(f"{numa}\n")
        (d / "class").write_text(f"0x{pci_class:06x}\n")
        (d / "vendor").write_text(f"0x{vendor:04x}\n")
        (d / "device").write_text("0x1017\n")
        # Documentation/ABI/testing/sysfs-bus-pci: local_cpus (a cpumask), local_cpulist.
        cpus = self.node_cpus.get(numa, range(self.ncpus))
        (d / "local_cpus").write_text(cpumask(cpus, self.ncpus) + "\n")
        (d / "local_cpulist").write_text(cpulist(cpus) + "\n")
        self._link(self.root / "sys/bus/pci/devices" / busid, d)
        return d

    @staticmethod
    def _link(link: Path, target: Path) -> None:
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink():
            link.unlink()
        link.symlink_to(os.path.relpath(target, link.parent))

    def add_nic(self, name: str, busid: str | None, numa: int = -1) -> None:
        if busid is None:
            d = self.root / "sys/devices/virtual/net" / name
        else:
            pci = self._pci_dir(busid, numa)
            d = pci / "net" / name
            self._link(d / "device", pci)
        (d / "statistics").mkdir(parents=True, exist_ok=True)
        self._link(self.root / "sys/class/net" / name, d)
        self.devs[f"net:{name}"] = _Dev("net", name, busid, numa, dict.fromkeys(
            ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets"), 1000))
        self._write()

    def add_hca(self, hca: str, busid: str, numa: int, ports: int = 1) -> str:
        pci = self._pci_dir(busid, numa, 0x020700)
        d = pci / "infiniband" / hca
        self._link(d / "device", pci)
        self._link(self.root / "sys/class/infiniband" / hca, d)
        uv = f"uverbs{self._uverbs}"
        self._uverbs += 1
        v = pci / "infiniband_verbs" / uv
        v.mkdir(parents=True, exist_ok=True)
        (v / "ibdev").write_text(hca + "\n")
        self._link(v / "device", pci)
        self._link(self.root / "sys/class/infiniband_verbs" / uv, v)
        for p in range(1, ports + 1):
            (d / "ports" / str(p) / "counters").mkdir(parents=True, exist_ok=True)
            self.devs[f"ib:{hca}:{p}"] = _Dev("ib", f"{hca}:{p}", busid, numa, dict.fromkeys(
                ("port_rcv_data", "port_xmit_data", "port_rcv_packets", "port_xmit_packets"),
                100))
        self._write()
        return f"/dev/infiniband/{uv}"

    def add_disk(self, name: str, busid: str | None, numa: int = -1) -> None:
        if busid is None:
            d = self.root / "sys/devices/virtual/block" / name
        else:
            pci = self._pci_dir(busid, numa, 0x010802, 0x144d)
            d = pci / "block" / name
            self._link(d / "device", pci)
        d.mkdir(parents=True, exist_ok=True)
        self._link(self.root / "sys/block" / name, d)
        self._link(self.root / "sys/class/block" / name, d)
        self.devs[f"disk:{name}"] = _Dev("disk", name, busid, numa, dict.fromkeys(
            ("reads", "sectors_read", "writes", "sectors_written", "io_ms"), 0))
        self._write()

    def add_nvidia_gpu(self, minor: int, busid: str, numa: int) -> str:
        self._pci_dir(busid, numa, 0x030200, 0x10de)
        info = self.root / "proc/driver/nvidia/gpus" / busid / "information"
        info.parent.mkdir(parents=True, exist_ok=True)
        info.write_text(f"Model: \t\t Fake GPU\nIRQ:   \t\t 100\nBus Location: \t {busid}\n"
                        f"Device Minor: \t {minor}\n")
        return f"/dev/nvidia{minor}"

    def open_files(self, pid: int, targets: list[str]) -> None:
        """Make /proc/PID/fd/3.. symlinks to these paths (devices, sockets, files)."""
        d = self.root / "proc" / str(pid) / "fd"
        d.mkdir(parents=True, exist_ok=True)
        for i, t in enumerate(["/dev/null", "/dev/pts/0", "socket:[12345]", *targets]):
            link = d / str(i)
            if link.is_symlink():
                link.unlink()
            link.symlink_to(t)

    def add_route(self, iface: str, network: str) -> None:
        """A /proc/net/route line (Destination and Mask in host byte order, proc(5))."""
        import ipaddress
        import sys

        net = ipaddress.IPv4Network(network)

        def word(a: ipaddress.IPv4Address) -> str:
            return f"{int.from_bytes(a.packed, sys.byteorder):08X}"

        p = self.root / "proc/net/route"
        p.parent.mkdir(parents=True, exist_ok=True)
        head = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
        old = p.read_text() if p.exists() else head
        p.write_text(old + f"{iface}\t{word(net.network_address)}\t00000000\t0001\t0\t0\t0\t"
                     f"{word(net.netmask)}\t0\t0\t0\n")

    def tcp_socket(self, pid: int, fd: int, inode: int, local: str, port: int) -> None:
        """An established TCP socket of ``pid`` on ``local``:``port`` (/proc/PID/net/tcp)."""
        import ipaddress
        import sys

        link = self.root / "proc" / str(pid) / "fd" / str(fd)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(f"socket:[{inode}]")
        a = int.from_bytes(ipaddress.IPv4Address(local).packed, sys.byteorder)
        p = self.root / "proc" / str(pid) / "net" / "tcp"
        p.parent.mkdir(parents=True, exist_ok=True)
        head = ("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt"
                "   uid  timeout inode\n")
        old = p.read_text() if p.exists() else head
        n = old.count("\n") - 1
        p.write_text(old + f"{n:4d}: {a:08X}:{port:04X} 0200000A:D431 01 00000000:00000000 "
                     f"00:00000000 00000000  1000        0 {inode} 1 0000000000000000 20 4 "
                     "30 10 -1\n")

    # ---- time passing --------------------------------------------------------------------
    def advance(self, seconds: float = 1.0, *, net: dict[str, tuple[float, float]] | None = None,
                ib: dict[str, tuple[float, float]] | None = None,
                disk: dict[str, tuple[float, float, float]] | None = None) -> None:
        """Move the counters: ``net``/``ib`` name -> (rx, tx) bytes per second (a packet per
        1000 bytes), ``disk`` name -> (read, write) bytes per second and busy fraction."""
        for name, (rx, tx) in (net or {}).items():
            c = self.devs[f"net:{name}"].counters
            c["rx_bytes"] += int(rx * seconds)
            c["tx_bytes"] += int(tx * seconds)
            c["rx_packets"] += int(rx * seconds / 1000)
            c["tx_packets"] += int(tx * seconds / 1000)
        for name, (rx, tx) in (ib or {}).items():
            c = self.devs[f"ib:{name}"].counters
            c["port_rcv_data"] += int(rx * seconds / 4)
            c["port_xmit_data"] += int(tx * seconds / 4)
            c["port_rcv_packets"] += int(rx * seconds / 4096)
            c["port_xmit_packets"] += int(tx * seconds / 4096)
        for name, (rd, wr, busy) in (disk or {}).items():
            c = self.devs[f"disk:{name}"].counters
            c["reads"] += int(rd * seconds / 4096)
            c["sectors_read"] += int(rd * seconds / 512)
            c["writes"] += int(wr * seconds / 4096)
            c["sectors_written"] += int(wr * seconds / 512)
            c["io_ms"] += int(busy * seconds * 1000)
        self._write()

    def set_counter(self, key: str, counter: str, value: int) -> None:
        self.devs[key].counters[counter] = value
        self._write()

    def _write(self) -> None:
        lines = []
        for d in self.devs.values():
            c = d.counters
            if d.kind == "net":
                stats = (self.root / "sys/class/net" / d.name).resolve() / "statistics"
                for k, v in c.items():
                    (stats / k).write_text(f"{v}\n")
            elif d.kind == "ib":
                hca, port = d.name.split(":")
                cdir = (self.root / "sys/class/infiniband" / hca).resolve() / "ports" / port \
                    / "counters"
                for k, v in c.items():
                    (cdir / k).write_text(f"{v}\n")
            elif d.kind == "disk":
                # major minor name, then the 17 fields of Linux >= 5.5
                lines.append(f" 259 0 {d.name} {c['reads']} 0 {c['sectors_read']} 10 "
                             f"{c['writes']} 0 {c['sectors_written']} 20 0 {c['io_ms']} 30 "
                             "0 0 0 0 0 0")
                lines.append(f" 259 1 {d.name}p1 1 0 8 0 1 0 8 0 0 0 0 0 0 0 0 0 0")
        if lines:
            p = self.root / "proc/diskstats"
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text("\n".join(lines) + "\n")


PID_ON_PACKAGE_0 = 4200    # FakeRoot's lmp_mpi: its threads run on the first package


def sampled_io_node(base: Path, steps: int = 3) -> tuple[Any, list[Any], Path, Any]:
    """A 16-PU, two-package fake node with eth0 and nvme0n1 on package 0, an HCA, nvme1n1
    and a GPU on package 1, the HCA and GPU open in a process on package 0; sampled ``steps``
    times by the real sampler with a clock that moves 1 s per sweep, the counters advancing
    by the second. Returns (topology, frames, root, last tasks reading): deterministic."""
    from snumap_tui.model.sampler import Sampler
    from snumap_tui.topology.build import load_topology
    from tests.fakefs import FakeRoot

    fake = FakeRoot(base, cpus=16, nodes=2, packages=2, smt=1)
    io = FakeIo(fake.root, {n: fake.cpus_of_node(n) for n in range(2)})
    io.add_nic("eth0", "0000:02:00.0", numa=0)
    io.add_nic("lo", None)
    verbs = io.add_hca("mlx5_0", "0000:82:00.0", numa=1)
    io.add_disk("nvme0n1", "0000:03:00.0", numa=0)
    io.add_disk("nvme1n1", "0000:84:00.0", numa=1)
    gpu = io.add_nvidia_gpu(0, "0000:87:00.0", numa=1)
    io.open_files(PID_ON_PACKAGE_0, [verbs, gpu])
    topo = load_topology(fsroot=fake.root)
    now = [1_000_000_000_000]
    s = Sampler(topo, fake.root, 1.0, clock=lambda: now[0], wall_clock=lambda: now[0])
    for src in s.sources:           # sources with a cadence (cpufreq files, /proc status)
        if hasattr(src, "_clock"):  # follow the same clock, not the real one
            src._clock = lambda: now[0] / 1e9
    out = []
    try:
        s.sweep()
        for step in range(steps):
            fake.advance(1.0, busy={c: 0.9 for c in range(8)})
            io.advance(1.0, net={"eth0": (12e6 + step * 1e6, 3e6), "lo": (1e5, 1e5)},
                       ib={"mlx5_0:1": (6.2e9, 5.8e9)},
                       disk={"nvme0n1": (2.5e8, 4e7, 0.35), "nvme1n1": (0, 1.2e9, 0.92)})
            now[0] += 1_000_000_000
            f = s.frame()
            if f is not None:
                out.append(f)
        last = s.last
        tasks = last.readings.get("tasks") if last is not None else None
    finally:
        s.close()
    return topo, out, fake.root, tasks


class StillFeed:
    """A feed for `snumap top` whose frames a test or script pushes itself; the details pane
    asks it for a process's devices as it asks the live feed (``LiveFeed.process_io``)."""

    interval_s = 1.0

    def __init__(self, topo: Any, root: Path, tasks: Any) -> None:
        self.topo, self.root, self.tasks = topo, root, tasks

    def start(self, callback: Any) -> None:
        pass

    def stop(self) -> None:
        pass

    def set_interval(self, seconds: float) -> None:
        pass

    def watch_pid(self, pid: int | None) -> None:
        pass

    def process_io(self, pid: int) -> tuple[list[Any], list[Any]]:
        from snumap_tui.model.process_io import process_io

        return process_io(self.topo, self.root, pid, self.tasks)
