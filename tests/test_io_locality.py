"""The selected process's devices and the locality finding, on a fake two-package machine:
an InfiniBand HCA on package 1 (hwloc itself places it, from the fake sysfs), a GPU on
package 0, and a process whose threads run on package 0."""

from __future__ import annotations

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
