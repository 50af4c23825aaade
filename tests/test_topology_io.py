"""I/O objects (bridges, PCI devices, OS devices) against hwloc's own lstopo.

The reference is ``lstopo-no-graphics --of xml`` on the same input, parsed here with
ElementTree: for every I/O object in document order, its type, name, PCI bus id, OS device
type and the cpuset of its parent (for an I/O parent: of the first non-I/O ancestor, hwloc's
locality) must equal what snumap's model holds.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from snumap_tui.topology.build import load_topology
from snumap_tui.topology.io import IoObject
from snumap_tui.topology.model import Topology

LSTOPO = shutil.which("lstopo-no-graphics")
IO = ("Bridge", "PCIDev", "OSDev")

pytestmark = pytest.mark.skipif(LSTOPO is None, reason="lstopo-no-graphics (hwloc-nox) missing")


def _cpuset(mask: str) -> frozenset[int]:
    """hwloc's XML cpuset: comma-separated 32-bit hex words, high first ("0x000000ff")."""
    value = int(mask.replace("0x", "").replace(",", "") or "0", 16)
    return frozenset(i for i in range(value.bit_length()) if value >> i & 1)


def lstopo_io(env: dict[str, str] | None = None, xml: Path | None = None
              ) -> list[tuple[str, str | None, str | None, int | None, frozenset[int]]]:
    """(type, name, busid, osdev_type, locality cpuset) of every I/O object lstopo keeps."""
    assert LSTOPO is not None
    cmd = [LSTOPO, "--of", "xml"] + (["-i", str(xml)] if xml else [])
    out = subprocess.run(cmd, env={**os.environ, **(env or {})}, capture_output=True,
                         check=True, timeout=60).stdout
    rows = []

    def visit(el: ET.Element, locality: frozenset[int]) -> None:
        for c in el.findall("object"):
            t = c.get("type", "")
            if t in IO:
                ost = c.get("osdev_type")
                rows.append((t, c.get("name"), c.get("pci_busid"),
                             int(ost) if ost is not None else None, locality))
                visit(c, locality)
            else:
                visit(c, _cpuset(c.get("cpuset", "0x0")))

    root = ET.fromstring(out)
    visit(root, frozenset())
    return rows


_OSDEV = {"Block": 0, "GPU": 1, "Network": 2, "OpenFabrics": 3, "DMA": 4, "CoProc": 5}


def ours(topo: Topology) -> list[tuple[str, str | None, str | None, int | None,
                                        frozenset[int]]]:
    return [(o.type, o.name, o.busid,
             _OSDEV[o.osdev_type] if o.osdev_type is not None else None,
             topo[o.attach].cpuset) for o in topo.io]


_UNPACKED: dict[str, Path] = {}


def _unpack(corpus: Path, tmp: Path, name: str) -> Path:
    """The gathered tree, unpacked once per test session (bzip2 takes seconds)."""
    got = _UNPACKED.get(name)
    if got is None or not got.is_dir():
        with tarfile.open(corpus / "fsroot" / f"{name}.tar.bz2", "r:bz2") as tf:
            tf.extractall(tmp, filter="data")
        got = _UNPACKED[name] = tmp / name
    return got


def _fsroot_env(root: Path) -> dict[str, str]:
    return {"HWLOC_FSROOT": str(root), "HWLOC_THISSYSTEM": "0", "HWLOC_COMPONENTS": "-x86"}


def check_parents(topo: Topology) -> None:
    """Tree shape: an I/O parent lists the object as its child, and both share a locality."""
    for o in topo.io:
        if o.io_parent is not None:
            p = topo.io[o.io_parent]
            assert o.index in p.children and p.attach == o.attach
        for c in o.children:
            assert topo.io[c].io_parent == o.index


@pytest.mark.parametrize("name", ["32em64t-2n8c+1mic", "fakeheteromemtiers"])
def test_fsroot_io_equals_lstopo(corpus: Path, tmp_path: Path, name: str) -> None:
    root = _unpack(corpus, tmp_path, name)
    topo = load_topology(fsroot=root)
    want = lstopo_io(_fsroot_env(root))
    assert want, "the corpus tree has I/O objects"
    assert ours(topo) == want
    check_parents(topo)
    back = Topology.from_json(topo.to_json())
    assert back.io == topo.io and back == topo


def test_32em64t_counts_and_locality(corpus: Path, tmp_path: Path) -> None:
    """7 bridges, 7 PCI devices, 14 OS devices (the issue's count); the InfiniBand HCA is on
    package 1 and NUMA node 1, the Ethernet ports on package 0 and node 0."""
    topo = load_topology(fsroot=_unpack(corpus, tmp_path, "32em64t-2n8c+1mic"))
    count = {t: sum(o.type == t for o in topo.io) for t in IO}
    assert count == {"Bridge": 7, "PCIDev": 7, "OSDev": 14}
    by_name = {o.name: o for o in topo.io if o.name}
    ib = by_name["mlx4_0"]
    assert ib.osdev_type == "OpenFabrics" and ib.numa == 1
    assert topo[ib.attach].type == "Package" and topo[ib.attach].os_index == 1
    assert by_name["eth0"].numa == 0 and by_name["ib0"].osdev_type == "Network"
    hca = topo.io[ib.io_parent or 0]
    assert hca.label() == "PCI 82:00.0 (Network)" and hca.vendor_id == 0x15b3
    assert by_name["sda"].label() == 'Block(Disk) "sda"'
    assert by_name["eth0"].label() == 'Net "eth0"'


def test_xml_with_io_equals_lstopo(corpus: Path, tmp_path: Path) -> None:
    """An XML export that carries I/O (lstopo --of xml of a gathered tree) reads the same."""
    root = _unpack(corpus, tmp_path, "32em64t-2n8c+1mic")
    xml = tmp_path / "io.xml"
    assert LSTOPO is not None
    xml.write_bytes(subprocess.run([LSTOPO, "--of", "xml"], env={**os.environ,
                                   **_fsroot_env(root)}, capture_output=True, check=True,
                                   timeout=60).stdout)
    topo = load_topology(xml=xml)
    assert ours(topo) == lstopo_io(xml=xml)
    assert ours(topo) == ours(load_topology(fsroot=root))


def test_this_machine_io_equals_lstopo() -> None:
    topo = load_topology()
    assert ours(topo) == lstopo_io()


def test_without_io_and_synthetic() -> None:
    assert load_topology(io=False).io == ()
    assert load_topology(synthetic="pack:2 core:2 pu:2").io == ()


def test_old_json_without_io_still_reads() -> None:
    """A topology written before I/O existed (no "io" key) reads with an empty list, and one
    without I/O writes no key (so it is byte-identical to what older snumap wrote)."""
    topo = load_topology(synthetic="pack:2 core:2 pu:2")
    data = topo.to_dict()
    assert "io" not in data
    assert Topology.from_dict(json.loads(json.dumps(data))).io == ()


def test_io_object_json_fields() -> None:
    o = IoObject(index=0, type="PCIDev", attach=3, busid="0000:82:00.0", class_id=0x0207,
                 vendor_id=0x15b3, device_id=0x1017, linkspeed=15.75, numa=1)
    assert o.label() == "PCI 82:00.0 (InfiniBand) 15.75 GB/s"
    d = o.to_dict()
    assert d["busid"] == "0000:82:00.0" and "name" not in d


def test_topo_text_folds_io_into_80_columns_and_full_shows_the_tree(
        corpus: Path, tmp_path: Path) -> None:
    from snumap_tui.topology.render import render

    topo = load_topology(fsroot=_unpack(corpus, tmp_path, "32em64t-2n8c+1mic"))
    folded = render(topo).splitlines()
    assert all(len(ln) <= 80 for ln in folded)
    assert "I/O: 7 bridges, 7 PCI devices, 14 OS devices (--full: the PCI tree)" in folded
    i = folded.index("  Package P#1 (NUMA P#1):")
    assert folded[i + 1] == '    PCI 82:00.0 (Network): Net "ib0", OpenFabrics "mlx4_0"'
    assert not any("PCIBridge" in ln for ln in folded)       # bridges folded
    full = render(topo, full=True).splitlines()
    assert sum("PCIBridge" in ln for ln in full) == 5
    assert sum("HostBridge" in ln for ln in full) == 2
    assert "        PCI 82:00.0 (Network) [15b3:1003]" in full       # PCI vendor:device
    # Every I/O object once, below the package it attaches to.
    pkg1 = full.index("  Package P#1")
    assert full.index('          Net "ib0"') > pkg1
    assert full.index('          Net "eth0"') < pkg1
    narrow = render(topo, width=40).splitlines()
    assert all(len(ln) <= 40 for ln in narrow)
