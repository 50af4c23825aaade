"""The I/O sources (NICs, InfiniBand ports, disks, GPUs) on fake trees whose counters advance,
and on this machine; derive's per-device rows and per-NUMA-node/package sums."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from snumap_tui.model.derive import derive
from snumap_tui.model.sample import Sample
from snumap_tui.sources.diskstats import DiskstatsSource, parse_diskstats
from snumap_tui.sources.infiniband import InfinibandSource
from snumap_tui.sources.netdev import NetSource
from snumap_tui.sources.nvml import GpuSource
from snumap_tui.topology.model import Topology
from tests.fakefs import FakeRoot
from tests.fakeio import FakeIo


def two_package_topology(fake: FakeRoot) -> Topology:
    from snumap_tui.topology.build import load_topology

    return load_topology(fsroot=fake.root)


@pytest.fixture
def machine(tmp_path: Path) -> tuple[FakeRoot, FakeIo]:
    """Two packages, one NUMA node each; eth0 and a disk on node 0, mlx5_0 on node 1."""
    fake = FakeRoot(tmp_path, cpus=8, nodes=2, packages=2, smt=1)
    io = FakeIo(fake.root, {n: fake.cpus_of_node(n) for n in range(2)})
    io.add_nic("eth0", "0000:02:00.0", numa=0)
    io.add_nic("lo", None)
    io.add_nic("veth0", None)
    io.add_hca("mlx5_0", "0000:82:00.0", numa=1)
    io.add_disk("nvme0n1", "0000:03:00.0", numa=0)
    io.add_disk("loop0", None)
    return fake, io


def _sweep(sources: list[Any], t_s: float) -> Sample:
    return Sample(t_ns=int(t_s * 1e9), wall_ns=0,
                  readings={s.name: s.read() for s in sources if s.status().available})


def test_counters_advance_into_rates_per_device_and_per_node(
        machine: tuple[FakeRoot, FakeIo]) -> None:
    fake, io = machine
    topo = two_package_topology(fake)
    sources = [NetSource(fake.root), InfinibandSource(fake.root), DiskstatsSource(fake.root)]
    for s in sources:
        assert s.status().available, s.status()
    a = _sweep(sources, 10.0)
    io.advance(2.0, net={"eth0": (1e6, 2e5), "lo": (5e7, 5e7)},
               ib={"mlx5_0:1": (4e9, 1e9)}, disk={"nvme0n1": (3e6, 1e6, 0.25),
                                                  "loop0": (1e6, 0, 0.5)})
    fake.advance(2.0)
    b = _sweep(sources, 12.0)
    f = derive(a, b, topo)
    rows = {r.name: r for r in f.io}
    assert rows["eth0"].rx_bps == pytest.approx(1e6) and rows["eth0"].tx_bps == pytest.approx(2e5)
    assert rows["eth0"].rx_pps == pytest.approx(1000)
    assert rows["mlx5_0:1"].rx_bps == pytest.approx(4e9, rel=1e-6)
    assert rows["mlx5_0:1"].tx_bps == pytest.approx(1e9, rel=1e-6)
    assert rows["nvme0n1"].rx_bps == pytest.approx(3e6, rel=1e-3)
    assert rows["nvme0n1"].util_pct == pytest.approx(25.0)
    assert not rows["lo"].physical and not rows["loop0"].physical
    assert "veth0" not in rows          # virtual interfaces other than lo are not read
    # Where they sit: the sysfs numa_node of their PCI function (this topology has no I/O).
    n0, n1 = topo.get("NUMANode", 0), topo.get("NUMANode", 1)
    assert rows["eth0"].attach == n0.id and rows["eth0"].numa == 0
    assert rows["mlx5_0:1"].attach == n1.id and rows["mlx5_0:1"].numa == 1
    # Summed where they attach, up to the package and the machine; lo and loop0 left out.
    p0, p1 = topo.get("Package", 0), topo.get("Package", 1)
    assert f.get("net_rx_bytes_per_s", n0.id) == pytest.approx(1e6)
    assert f.get("net_rx_bytes_per_s", p0.id) == pytest.approx(1e6)
    assert f.get("net_rx_bytes_per_s", topo.root.id) == pytest.approx(1e6)
    assert f.get("net_rx_bytes_per_s", p1.id) is None     # no NIC there: unknown, not 0
    assert f.get("ib_rx_bytes_per_s", p1.id) == pytest.approx(4e9, rel=1e-6)
    assert f.get("ib_rx_bytes_per_s", p0.id) is None
    assert f.get("disk_read_bytes_per_s", p0.id) == pytest.approx(3e6, rel=1e-3)
    assert f.get("disk_util_pct", p0.id) == pytest.approx(25.0)
    assert f.get("disk_util_pct", topo.root.id) == pytest.approx(25.0)


def test_devices_placed_by_the_topology_io_objects_when_hwloc_has_them(
        machine: tuple[FakeRoot, FakeIo]) -> None:
    """With an I/O object in the topology (here: eth0 put on package 1 by hand, against what
    sysfs says), the topology wins: hwloc's placement is the reference."""
    fake, io = machine
    topo = two_package_topology(fake)
    d = topo.to_dict()
    pkg1 = topo.get("Package", 1)
    d["io"] = [{"type": "PCIDev", "attach": pkg1.id, "busid": "0000:02:00.0",
                "class_id": 0x0200, "numa": 1},
               {"type": "OSDev", "attach": pkg1.id, "io_parent": 0, "name": "eth0",
                "osdev_type": "Network", "numa": 1}]
    topo = Topology.from_dict(d)
    src = NetSource(fake.root)
    a = _sweep([src], 1.0)
    io.advance(1.0, net={"eth0": (5e5, 0)})
    b = _sweep([src], 2.0)
    f = derive(a, b, topo)
    eth0 = next(r for r in f.io if r.name == "eth0")
    assert eth0.io == 1 and eth0.numa == 1
    assert f.get("net_rx_bytes_per_s", pkg1.id) == pytest.approx(5e5)


def test_counter_reset_and_saturation_are_unknown_not_zero(
        machine: tuple[FakeRoot, FakeIo]) -> None:
    fake, io = machine
    topo = two_package_topology(fake)
    sources = [NetSource(fake.root), InfinibandSource(fake.root)]
    io.advance(1.0, net={"eth0": (1e6, 1e6)})
    a = _sweep(sources, 1.0)
    io.set_counter("net:eth0", "rx_bytes", 0)          # the interface was reset
    io.set_counter("ib:mlx5_0:1", "port_rcv_data", 0xFFFFFFFF)   # 32-bit counter saturated
    b = _sweep(sources, 2.0)
    assert b.readings["ib"]["saturated"] == ["mlx5_0:1"]
    rows = {r.name: r for r in derive(a, b, topo).io}
    assert rows["eth0"].rx_bps is None and rows["eth0"].tx_bps == pytest.approx(0.0)
    assert rows["mlx5_0:1"].rx_bps is None


def test_unavailable_with_a_reason(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    (empty / "proc").mkdir(parents=True)
    for src in (NetSource(empty), InfinibandSource(empty), DiskstatsSource(empty)):
        st = src.status()
        assert not st.available and st.reason
    assert "InfiniBand" in (InfinibandSource(empty).status().reason or "")
    gpu = GpuSource(empty)
    st = gpu.status()
    assert not st.available and "not this machine" in (st.reason or "")


def test_gpu_unavailable_here_says_why() -> None:
    """This machine has no NVIDIA driver: its absence (or NVML's own error, or the binding's
    absence when the extra is not installed) is the reason."""
    st = GpuSource(Path("/")).status()
    assert not st.available
    assert "NVML" in (st.reason or "") or "nvidia-ml-py" in (st.reason or "")
    assert st.fix and "snumap[gpu]" in st.fix


class _FakeNvml:
    """pynvml's API over two recorded GPUs (what nvidia-smi -q showed on an A100 node)."""

    class NVMLError(Exception):
        pass

    def __init__(self) -> None:
        self.energy = [1_000_000, 2_000_000]

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetPciInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(busId=[b"00000000:07:00.0", b"00000000:87:00.0"][h])

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=[90, 5][h], memory=[40, 1][h])

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(used=[30 << 30, 1 << 30][h], total=40 << 30)

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return [250_000, 60_000][h]

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        if h == 1:
            raise self.NVMLError("Not Supported")
        return self.energy[h]


def test_gpu_through_an_nvml_module(machine: tuple[FakeRoot, FakeIo]) -> None:
    fake, _ = machine
    topo = two_package_topology(fake)
    nv = _FakeNvml()
    src = GpuSource(fake.root, nvml=nv)
    st = src.status()
    assert st.available and st.detail["busids"] == ["0000:07:00.0", "0000:87:00.0"]
    a = _sweep([src], 1.0)
    nv.energy[0] += 500_000          # 500 J in 2 s: 250 W
    b = _sweep([src], 3.0)
    rows = {r.name: r for r in derive(a, b, topo).io}
    assert rows["nvml0"].power_w == pytest.approx(250.0)
    assert rows["nvml1"].power_w == pytest.approx(60.0)     # no energy counter: instantaneous
    assert rows["nvml0"].util_pct == 90 and rows["nvml0"].mem_used == 30 << 30
    f = derive(a, b, topo)
    assert f.get("gpu_util_pct", topo.root.id) == pytest.approx(47.5)
    assert f.get("gpu_power_w", topo.root.id) == pytest.approx(310.0)


def test_parse_diskstats_verbatim() -> None:
    # Linux 6.x /proc/diskstats lines (20 fields), and a 4.x one (14 fields).
    text = ("   8       0 sda 20616 4911 1527438 9853 29361 27373 1779800 39427 0 37004 "
            "52128 0 0 0 0 2512 2846\n"
            " 259       0 nvme0n1 100 0 800 5 200 0 1600 9 0 12 14\n")
    d = parse_diskstats(text)
    assert d["sda"] == (20616.0, 1527438 * 512.0, 29361.0, 1779800 * 512.0, 37004.0)
    assert d["nvme0n1"][4] == 12.0


def test_this_machine_sources_read() -> None:
    """Live: the kernel's own counters. 4 MiB sent over loopback show up in lo's counters
    (others' traffic only adds), and lo is virtual (left out of the per-node sums)."""
    import socket
    import threading

    net = NetSource(Path("/"))
    if not net.status().available:
        pytest.skip("no network interfaces")
    r = net.read()
    assert "lo" in r["names"] and not r["physical"][r["names"].index("lo")]
    lo = r["names"].index("lo")
    srv = socket.create_server(("127.0.0.1", 0))
    got = bytearray()

    def drain() -> None:
        conn, _ = srv.accept()
        with conn:
            while chunk := conn.recv(1 << 16):
                got.extend(chunk)

    t = threading.Thread(target=drain)
    t.start()
    with socket.create_connection(srv.getsockname()) as c:
        c.sendall(b"x" * (4 << 20))
    t.join(timeout=30)
    srv.close()
    after = net.read()
    assert len(got) == 4 << 20
    assert after["rx_bytes"][lo] - r["rx_bytes"][lo] >= 4 << 20
    assert after["tx_packets"][lo] > r["tx_packets"][lo]
    disk = DiskstatsSource(Path("/"))
    if disk.status().available:
        d = disk.read()
        assert len(d["names"]) == len(d["read_bytes"])


def test_recording_keeps_io_samples_and_the_io_topology(
        machine: tuple[FakeRoot, FakeIo], tmp_path: Path) -> None:
    """record -> replay: the I/O readings are samples like any other, the topology's I/O
    objects ride in the header, and the metric series derive the same rates."""
    import json

    from snumap_tui import store

    fake, io = machine
    topo = two_package_topology(fake)
    assert any(o.name == "mlx5_0" for o in topo.io)
    sources = [NetSource(fake.root), InfinibandSource(fake.root), DiskstatsSource(fake.root)]
    path = tmp_path / "io.rec"
    with store.Writer(path, {"topology": topo.to_json()}) as w:
        for k in range(3):
            w.add_sample(_sweep(sources, float(k)))
            io.advance(1.0, ib={"mlx5_0:1": (2e9, 1e9)}, disk={"nvme0n1": (0, 8e6, 0.5)})
    with store.open(path) as rec:
        assert rec.topology.io == topo.io
        m = store.metric_series(rec)
        assert list(m.of("ib_rx_bytes_per_s", "Package", 1)) == pytest.approx([2e9, 2e9])
        assert m.of("disk_write_bytes_per_s", "Package", 0)[-1] == pytest.approx(8e6, rel=1e-3)
        # An older recording: the same header without the "io" list reads, without I/O.
        old = json.loads(topo.to_json())
        del old["io"]
        assert Topology.from_dict(old).io == () and Topology.from_dict(old).objects == \
            topo.objects


def test_report_io_totals_and_busy_disk_finding(machine: tuple[FakeRoot, FakeIo]) -> None:
    """`snumap report`'s I/O: totals are rate x interval summed, peaks the busiest interval;
    a disk busy over 90 % of the recording is a finding; virtual devices are left out."""
    from snumap_tui.analysis.io_report import format_io, io_findings, io_totals

    fake, io = machine
    topo = two_package_topology(fake)
    sources = [NetSource(fake.root), InfinibandSource(fake.root), DiskstatsSource(fake.root)]
    samples = [_sweep(sources, 0.0)]
    for k, (rate, busy) in enumerate([(1e6, 0.95), (3e6, 0.99)]):
        io.advance(2.0, net={"eth0": (rate, 0.0), "lo": (1e9, 1e9)},
                   disk={"nvme0n1": (0.0, 5e7, busy)})
        samples.append(_sweep(sources, 2.0 * (k + 1)))
    got = {d["name"]: d for d in io_totals(samples, topo)}
    assert "lo" not in got and "loop0" not in got
    eth0 = got["eth0"]
    assert eth0["in_bytes"] == pytest.approx(8e6) and eth0["in_peak"] == pytest.approx(3e6)
    assert eth0["in_avg"] == pytest.approx(2e6) and eth0["numa"] == 0
    disk = got["nvme0n1"]
    assert disk["out_bytes"] == pytest.approx(2e8, rel=1e-3)
    assert disk["util_avg"] == pytest.approx(97.0) and disk["util_peak"] == pytest.approx(99.0)
    found = io_findings(list(got.values()))
    assert [f["device"] for f in found] == ["nvme0n1"]
    assert "busy 97 %" in found[0]["text"] and "NUMA node 0" in found[0]["text"]
    lines = format_io(list(got.values()))
    assert all(len(ln) <= 80 for ln in lines)
    assert any(ln.startswith("  eth0") and "in 7.6M" in ln for ln in lines)
