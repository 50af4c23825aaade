"""The topology model as built by hwloc: JSON round trip and PU -> core/cache/NUMA/package
lookups where SMT siblings have non-contiguous OS indexes (as on most x86 servers, where the
second hardware thread of core N is PU N + cores)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from snumap_tui.topology.build import load_topology
from snumap_tui.topology.model import Topology

# 2 packages x 2 NUMA nodes x 8 cores; the sibling of PU n is PU n + 32.
SMT_SPLIT = "pack:2 numa:2 l3:1 l2:8 l1d:1 core:1 pu:2(indexes=2*32:1*2)"


def _needs_hwloc() -> None:
    try:
        from snumap_tui.native import hwloc

        hwloc.lib()
    except Exception as exc:  # noqa: BLE001 (any reason the library is unusable)
        pytest.skip(f"hwloc is not usable here: {exc}")


def parse_cpulist(text: str) -> set[int]:
    """Documentation/admin-guide/cputopology.rst cpulist: "0-3,8,10-11"."""
    out: set[int] = set()
    for part in text.strip().split(","):
        if part:
            a, _, b = part.partition("-")
            out.update(range(int(a), int(b or a) + 1))
    return out


def count_json_objects(d: dict[str, Any]) -> list[dict[str, Any]]:
    out = [d]
    for c in d["children"]:
        out.extend(count_json_objects(c))
    return out


def check_round_trip(topo: Topology) -> None:
    text = topo.to_json()
    back = Topology.from_json(text)
    assert back == topo
    assert back.to_json() == text
    objs = count_json_objects(json.loads(text)["root"])
    assert len(objs) == len(topo)  # every object exactly once, NUMA nodes included
    assert sum(o["type"] == "NUMANode" for o in objs) == len(topo.numa_nodes) >= 1
    for o in objs:
        assert {"type", "os_index", "logical_index", "children"} <= set(o)


def check_pu_ranges(topo: Topology) -> None:
    """Each object covers a contiguous run of logical PUs, exactly its cpuset."""
    for o in topo:
        a, b = o.pu_range
        assert {p.os_index for p in topo.pus[a:b]} == o.cpuset, o.label()


def test_round_trip_synthetic_and_this_machine() -> None:
    _needs_hwloc()
    for topo in (load_topology(synthetic=SMT_SPLIT), load_topology()):
        check_round_trip(topo)
        check_pu_ranges(topo)


def test_lookups_with_split_smt_siblings() -> None:
    _needs_hwloc()
    topo = load_topology(synthetic=SMT_SPLIT)
    assert len(topo.pus) == 64
    # Logical order is tree order, so siblings are adjacent there but 32 apart in OS numbers.
    assert topo.pu_os_indexes[:4] == (0, 32, 1, 33)
    for p in range(64):
        base = p % 32
        core = topo.core_of(p)
        assert core is not None and core.cpuset == {base, base + 32}
        pkg = topo.package_of(p)
        assert pkg is not None and pkg.os_index == base // 16
        node = topo.numa_of(p)
        assert node is not None and node.os_index == base // 8
        assert node.cpuset == {c + k for c in range(base // 8 * 8, base // 8 * 8 + 8)
                               for k in (0, 32)}
        caches = topo.caches_of(p)
        assert [c.type for c in caches] == ["L1Cache", "L2Cache", "L3Cache"]
        assert caches[0].cpuset == core.cpuset
        assert caches[2].cpuset == node.cpuset
        assert topo.smallest_covering(core.cpuset) == core  # deepest object with that set
    round_tripped = Topology.from_json(topo.to_json())
    assert round_tripped.core_of(40) == topo.core_of(40)


def test_knl_four_threads_per_core(corpus: Path) -> None:
    """Xeon Phi 7210: 64 cores x 4 threads, thread t of core c is PU c + 64 t."""
    _needs_hwloc()
    topo = load_topology(xml=corpus / "xml" / "Intel-KnightsLanding-XeonPhi-7210.xml")
    check_round_trip(topo)
    check_pu_ranges(topo)
    core5 = topo.core_of(5)
    assert core5 is not None
    assert {p for p in range(256) if topo.core_of(p) == core5} == core5.cpuset
    assert core5.cpuset == {5, 69, 133, 197}
    l2 = [c for c in topo.caches_of(197) if c.type == "L2Cache"]
    assert len(l2) == 1 and len(l2[0].cpuset) == 8  # a tile: 2 cores share 1MB of L2
    assert l2[0].cache_size == 1024 * 1024


def test_gathered_tree_matches_its_kernel_files(corpus: Path, tmp_path: Path) -> None:
    """64amd64: NUMA node, package and L3 of every PU equal the gathered sysfs files
    (node*/cpulist, topology/core_siblings_list, cache/index3/shared_cpu_list). Its cores and
    L2 are hwloc's AMD compute-unit fix-ups, checked only for consistency."""
    _needs_hwloc()
    import tarfile

    with tarfile.open(corpus / "fsroot" / "64amd64-4s2n4ca2co.tar.bz2", "r:bz2") as tf:
        tf.extractall(tmp_path, filter="data")
    root = tmp_path / "64amd64-4s2n4ca2co"
    topo = load_topology(fsroot=root)
    check_round_trip(topo)
    check_pu_ranges(topo)
    sysd = root / "sys/devices/system"
    node_cpus = {int(d.name[4:]): parse_cpulist((d / "cpulist").read_text())
                 for d in (sysd / "node").glob("node[0-9]*")}
    assert len(node_cpus) == 8
    for p in topo.pu_os_indexes:
        cpu = sysd / "cpu" / f"cpu{p}"
        node = topo.numa_of(p)
        assert node is not None and p in node_cpus[node.os_index]
        assert node.cpuset == node_cpus[node.os_index]
        pkg = topo.package_of(p)
        assert pkg is not None
        assert pkg.cpuset == parse_cpulist((cpu / "topology/core_siblings_list").read_text())
        l3 = [c for c in topo.caches_of(p) if c.type == "L3Cache"]
        assert l3[0].cpuset == parse_cpulist((cpu / "cache/index3/shared_cpu_list").read_text())
        core = topo.core_of(p)
        assert core is not None and p in core.cpuset
    dist = topo.distance_matrix()
    assert dist is not None and len(dist.nodes) == 8
    assert Topology.from_json(topo.to_json()).distance_matrix() == dist


def test_hybrid_kinds_round_trip(corpus: Path) -> None:
    _needs_hwloc()
    topo = load_topology(xml=corpus / "xml" / "Intel-RaptorLake-Corei7-1370P.xml")
    back = Topology.from_json(topo.to_json())
    assert back.cpukinds == topo.cpukinds and len(back.cpukinds) == 2
    assert back.meta["source_kind"] == "xml"


def test_json_topology_is_read_back_without_hwloc(tmp_path: Path) -> None:
    """A saved `snumap topo --json` loads through --topology with the library unusable."""
    _needs_hwloc()
    topo = load_topology(synthetic="pack:2 core:2 pu:2")
    f = tmp_path / "m.json"
    f.write_text(topo.to_json())
    import subprocess
    import sys

    code = ("from snumap_tui.topology.build import load_topology as L;"
            f"t = L(xml={str(f)!r}); import snumap_tui.native.hwloc as h;"
            "assert h._lib is None; print(len(t))")
    env = {"SNUMAP_HWLOC_LIB": "libhwloc-absent.so.0", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=60, check=False)
    assert out.stdout.strip() == str(len(topo)), out.stderr


def test_lstopo_agrees_on_split_siblings() -> None:
    """The synthetic index order is what hwloc's own tool reports too (guards the fixture)."""
    lstopo = shutil.which("lstopo-no-graphics")
    if lstopo is None:
        pytest.skip("lstopo-no-graphics is not installed")
    import subprocess

    out = subprocess.run([lstopo, "-i", SMT_SPLIT, "-p", "--only", "PU"], capture_output=True,
                         text=True, timeout=60, check=True).stdout.split()
    assert [int(w.removeprefix("P#")) for w in out if w.startswith("P#")][:4] == [0, 32, 1, 33]
