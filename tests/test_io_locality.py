"""The selected process's devices and the locality finding, on a fake two-package machine:
an InfiniBand HCA on package 1 (hwloc itself places it, from the fake sysfs), a GPU on
package 0, and a process whose threads run on package 0."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from snumap_tui.model.iolocality import io_locality
from snumap_tui.model.process_io import process_io, thread_pus
from snumap_tui.sources.devfiles import open_devices
from snumap_tui.topology.build import load_topology
from snumap_tui.topology.model import Topology
from tests.fakefs import FakeRoot
from tests.fakeio import FakeIo

PID = 4200          # FakeRoot's lmp_mpi: affinity and threads on the first half of the PUs


@pytest.fixture
def machine(tmp_path: Path) -> tuple[FakeRoot, Topology, FakeIo]:
    fake = FakeRoot(tmp_path, cpus=8, nodes=2, packages=2, smt=1)
    io = FakeIo(fake.root, {n: fake.cpus_of_node(n) for n in range(2)})
    io.add_nic("eth0", "0000:02:00.0", numa=0)
    verbs = io.add_hca("mlx5_0", "0000:82:00.0", numa=1)
    gpu = io.add_nvidia_gpu(0, "0000:07:00.0", numa=0)
    io.open_files(PID, [verbs, gpu, "/dev/nvidiactl", "/tmp/out.dat", verbs])
    return fake, load_topology(fsroot=fake.root), io


def test_hwloc_places_the_fake_hca_on_package_1(machine: tuple[FakeRoot, Topology, FakeIo]
                                                ) -> None:
    _, topo, _ = machine
    hca = next(o for o in topo.io if o.name == "mlx5_0")
    assert topo[hca.attach].type == "Package" and topo[hca.attach].os_index == 1
    assert hca.numa == 1


def test_open_devices_from_proc_fd(machine: tuple[FakeRoot, Topology, FakeIo]) -> None:
    fake, _, _ = machine
    devs = open_devices(fake.root, PID)
    assert [(d.kind, d.name, d.busid, d.numa) for d in devs] == [
        ("ib", "mlx5_0", "0000:82:00.0", 1), ("gpu", "nvidia0", "0000:07:00.0", 0)]
    assert open_devices(fake.root, 1) == []          # no fd directory: nothing, no error


def test_far_package_finding(machine: tuple[FakeRoot, Topology, FakeIo]) -> None:
    fake, topo, _ = machine
    proc = next(p for p in fake.processes if p.pid == PID)
    pus = {t.last_cpu for t in proc.threads}
    assert pus and all(topo.package_of(p).os_index == 0 for p in pus)  # type: ignore[union-attr]
    uses, findings = io_locality(topo, open_devices(fake.root, PID), pus)
    by = {u.device.name: u for u in uses}
    assert by["mlx5_0"].package == 1 and by["mlx5_0"].local is False
    assert by["nvidia0"].package == 0 and by["nvidia0"].local is True
    assert len(findings) == 1
    text = findings[0].text
    assert text.startswith("mlx5_0 is on package 1 (NUMA 1), threads run on package 0 "
                           "(PUs 0-3): cross-socket DMA")
    assert "numactl --cpunodebind=1" in text


def test_threads_near_their_devices_give_no_finding(
        machine: tuple[FakeRoot, Topology, FakeIo]) -> None:
    fake, topo, _ = machine
    uses, findings = io_locality(topo, open_devices(fake.root, PID), {4, 5})
    assert findings and "nvidia0" in findings[0].text     # now the GPU is the far one
    uses, findings = io_locality(topo, [u.device for u in uses if u.device.kind == "ib"],
                                 {4, 5})
    assert findings == [] and uses[0].local is True


def test_process_io_reads_thread_pus_from_the_tasks_reading(
        machine: tuple[FakeRoot, Topology, FakeIo]) -> None:
    from snumap_tui.sources.tasks import TasksSource

    fake, topo, _ = machine
    tasks = TasksSource(fake.root, reader=fake.reader).read()
    assert thread_pus(tasks, PID) == {t.last_cpu for p in fake.processes if p.pid == PID
                                      for t in p.threads}
    uses, findings = process_io(topo, fake.root, PID, tasks)
    assert {u.device.name for u in uses} == {"mlx5_0", "nvidia0"} and len(findings) == 1


def test_details_pane_shows_devices_and_the_finding(
        machine: tuple[FakeRoot, Topology, FakeIo]) -> None:
    from snumap_tui.commands.top import LiveFeed
    from snumap_tui.ui.io_detail import ProcessIoLines

    fake, topo, _ = machine
    feed = LiveFeed(topo, fake.root, 1.0, origin=("fsroot", "fake"))
    try:
        feed.sampler.sweep()
        text = ProcessIoLines().text(feed, PID, 100)
    finally:
        feed.stop()
    assert text is not None
    lines = text.plain.splitlines()
    assert lines[0].startswith(" devices: mlx5_0 pkg 1 NUMA 1 remote · nvidia0 pkg 0")
    assert lines[1].startswith(" ⚠ mlx5_0 is on package 1")
    assert ProcessIoLines().text(feed, 880, 100) is None     # sshd: no device open


def test_batch_json_and_text_carry_the_io(machine: tuple[FakeRoot, Topology, FakeIo],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """`snumap top --batch --fsroot`: the JSON frame lists every device with its place, the
    text tree has an I/O row under each NUMA node with devices, within 80 columns."""
    import json

    from snumap_tui.cli import main

    fake, topo, _ = machine
    assert main(["top", "--fsroot", str(fake.root), "--batch", "--json", "--count", "1",
                 "--interval", "0.05"]) == 0
    frame = json.loads(capsys.readouterr().out.splitlines()[-1])
    io = {r["name"]: r for r in frame["io"]}
    assert io["mlx5_0:1"]["attach"] == topo.get("NUMANode", 1).id
    assert io["eth0"]["numa"] == 0 and io["eth0"]["kind"] == "net"
    assert frame["sources"]["ib"]["available"] is True
    assert main(["top", "--fsroot", str(fake.root), "--batch", "--count", "1",
                 "--interval", "0.05"]) == 0
    text = capsys.readouterr().out
    io_rows = [ln for ln in text.splitlines() if ln.strip().startswith("I/O")]
    assert len(io_rows) == 2 and "ib ↓0B ↑0B/s" in io_rows[1]
    assert all(len(ln) <= 80 for ln in text.splitlines())


def test_a_socket_names_the_nic_of_its_local_address(
        machine: tuple[FakeRoot, Topology, FakeIo]) -> None:
    """A TCP connection from 10.0.0.5 (eth0's subnet, package 0) and one from 10.1.0.7
    (eth1's, package 1): both NICs are found, eth1 is remote to threads on package 0."""
    fake, _, io = machine
    io.add_nic("eth1", "0000:83:00.0", numa=1)
    topo = load_topology(fsroot=fake.root)
    io.add_route("eth0", "10.0.0.0/24")
    io.add_route("eth1", "10.1.0.0/16")
    io.add_route("eth0", "0.0.0.0/0")                 # the default route
    io.tcp_socket(PID, 40, 9001, "10.0.0.5", 50000)
    io.tcp_socket(PID, 41, 9002, "10.1.0.7", 50001)
    io.tcp_socket(PID, 42, 9003, "127.0.0.1", 50002)  # loopback: no NIC
    devs = open_devices(fake.root, PID)
    nets = [(d.name, d.numa, d.busid) for d in devs if d.kind == "net"]
    assert nets == [("eth0", 0, "0000:02:00.0"), ("eth1", 1, "0000:83:00.0")]
    uses, findings = io_locality(topo, devs, {0, 1})
    assert {u.device.name: u.local for u in uses} == {
        "mlx5_0": False, "nvidia0": True, "eth0": True, "eth1": False}
    assert sorted(f.text.split()[0] for f in findings) == ["eth1", "mlx5_0"]


def test_socket_tables_parse_verbatim() -> None:
    import ipaddress

    from snumap_tui.sources.sockets import parse_if_inet6, parse_routes, parse_socket_table

    # Linux 6.1 /proc/net/tcp and tcp6 lines (x86_64), /proc/net/route and if_inet6.
    tcp = ("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid"
           "  timeout inode\n"
           "   0: 0100007F:0CEA 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0"
           "        0 23456 1 0000000000000000 100 0 0 10 0\n")
    assert parse_socket_table(tcp) == {23456: ipaddress.IPv4Address("127.0.0.1")}
    tcp6 = ("  sl  local_address                         remote_address                       "
            " st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
            "   0: 000080FE000000002AD4FF025E1300FE:0016 00000000000000000000000000000000:0000"
            " 0A 00000000:00000000 00:00000000 00000000     0        0 777 1 0 100 0 0 10 0\n"
            "   1: 0000000000000000FFFF00000500000A:1F90 00000000000000000000000000000000:0000"
            " 0A 00000000:00000000 00:00000000 00000000     0        0 778 1 0 100 0 0 10 0\n")
    got = parse_socket_table(tcp6)
    assert got[777] == ipaddress.IPv6Address("fe80::2ff:d42a:fe00:135e")
    assert got[778] == ipaddress.IPv4Address("10.0.0.5")        # IPv4-mapped
    routes = parse_routes("Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\n"
                          "eth0\t00000000\t0100000A\t0003\t0\t0\t0\t00000000\n"
                          "eth0\t0000000A\t00000000\t0001\t0\t0\t0\t00FFFFFF\n")
    assert routes[0] == ("eth0", ipaddress.IPv4Network("10.0.0.0/24"))
    v6 = parse_if_inet6("fe8000000000000002ffd42afe00135e 02 40 20 80     eth0\n")
    assert v6 == {ipaddress.IPv6Address("fe80::2ff:d42a:fe00:135e"): "eth0"}


def test_this_machines_socket_on_its_nic() -> None:
    """Live: a UDP socket bound to the address of the interface this machine's default route
    names is found on that interface (nothing is sent, no other host involved)."""
    import fcntl
    import socket
    import struct

    from snumap_tui.sources.sockets import parse_routes, socket_interfaces

    routes = parse_routes(Path("/proc/net/route").read_text())
    iface = next((i for i, net in routes if net.prefixlen == 0), None)
    if iface is None:
        pytest.skip("no default IPv4 route here")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:   # SIOCGIFADDR (netdevice(7)): the interface's IPv4 address
            raw = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", iface.encode()[:15]))
        except OSError:
            pytest.skip(f"{iface} has no IPv4 address")
        s.bind((socket.inet_ntoa(raw[20:24]), 0))
        got = socket_interfaces(Path("/"), os.getpid())
    assert got == [iface]
