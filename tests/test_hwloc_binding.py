"""The ctypes binding against hwloc's own tool on the same input.

``lstopo-no-graphics --of xml`` is hwloc reading the same synthetic string, XML file or
gathered tree through its C API; our walk must find the same objects: the count of every type,
the PU set of every Package, NUMANode and Core, cache and NUMA memory sizes. The corpus
machines (../shared/corpus) are used when present and skipped cleanly when not.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest

from snumap_tui.errors import SnumapError
from snumap_tui.topology.build import first_c_error, load_topology, xml_major_version

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
LSTOPO = shutil.which("lstopo-no-graphics")

SYNTHETIC = [
    "pack:2 numa:2 core:4 pu:2",
    "pack:2 numa:4 l3:6 core:8 pu:2",
    "pack:2 die:2 [numa(memory=1GB)] l3:2 [numa(memory=2GB)] core:3 pu:2",
    "pack:4 l3:2 l2:4 l1d:1 l1i:1 core:1 pu:4",
    "group:2 pack:2 numa:1 l3:1 core:16 pu:1",
    # SMT siblings 32 apart, as on most x86 servers.
    "pack:2 numa:2 l3:1 l2:8 l1d:1 core:1 pu:2(indexes=2*32:1*2)",
]
# Misc and I/O objects are not part of the model (the binding drops them, like lstopo --no-io).
IGNORED_TYPES = {"Misc", "Bridge", "PCIDev", "OSDev"}


def _hwloc_or_skip() -> None:
    if LSTOPO is None:
        pytest.skip("lstopo-no-graphics (Debian package hwloc-nox) is not installed")


def parse_bitmap(text: str) -> frozenset[int]:
    """hwloc's bitmap string: comma-separated 32-bit hex words, most significant first
    ("0x000000ff,0xffffffff"); an empty word between commas is a zero word."""
    bits: set[int] = set()
    for pos, word in enumerate(reversed(text.split(","))):
        value = int(word, 16) if word else 0
        for b in range(32):
            if value >> b & 1:
                bits.add(pos * 32 + b)
    return frozenset(bits)


def lstopo_objects(source: str) -> list[dict[str, str]]:
    """Every object lstopo loads from ``source`` (a synthetic string, an XML file, a directory),
    as the attribute dicts of its XML export."""
    out = subprocess.run([LSTOPO, "--no-io", "-i", source, "--of", "xml", "-"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    root = ET.fromstring(out)
    return [dict(e.attrib) for e in root.iter("object")
            if e.attrib.get("type") not in IGNORED_TYPES]


def compare_with_lstopo(source: str, **load_kw: str) -> None:
    ref = lstopo_objects(source)
    topo = load_topology(**load_kw)  # type: ignore[arg-type]

    assert Counter(o["type"] for o in ref) == Counter(o.type for o in topo)
    assert len(topo) == len(ref)

    for t in ("Package", "NUMANode"):
        want = {int(o["os_index"]): parse_bitmap(o["cpuset"]) for o in ref if o["type"] == t}
        got = {o.os_index: o.cpuset for o in topo.by_type(t)}
        assert got == want, t
    # Core OS indexes repeat across packages: compare the multiset of their PU sets.
    want_cores = Counter(parse_bitmap(o["cpuset"]) for o in ref if o["type"] == "Core")
    assert Counter(o.cpuset for o in topo.by_type("Core")) == want_cores
    assert sorted(int(o["os_index"]) for o in ref if o["type"] == "PU") == \
        sorted(topo.pu_os_indexes)
    # Sizes: caches and NUMA memory.
    want_caches = Counter((o["type"], int(o["cache_size"]), int(o.get("cache_linesize", 0)))
                          for o in ref if "cache_size" in o)
    got_caches = Counter((o.type, o.cache_size, o.cache_linesize or 0) for o in topo
                         if o.cache_size is not None)
    assert got_caches == want_caches
    # lstopo's XML leaves local_memory out when hwloc has no value: unknown (None), not 0.
    want_mem = {int(o["os_index"]): int(o["local_memory"]) if "local_memory" in o else None
                for o in ref if o["type"] == "NUMANode"}
    assert {o.os_index: o.local_memory for o in topo.numa_nodes} == want_mem
    # The model's invariants hold on what the binding built.
    assert [o.id for o in topo.walk()] == list(range(len(topo)))
    for o in topo:
        for c in topo.children_of(o):
            assert c.cpuset <= o.cpuset


@pytest.mark.parametrize("desc", SYNTHETIC)
def test_synthetic_matches_lstopo(desc: str) -> None:
    _hwloc_or_skip()
    compare_with_lstopo(desc, synthetic=desc)


def test_this_machine_matches_lstopo() -> None:
    _hwloc_or_skip()
    out = subprocess.run([LSTOPO, "--no-io", "--of", "xml", "-"], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    ref = [o for o in ET.fromstring(out).iter("object") if o.get("type") not in IGNORED_TYPES]
    topo = load_topology()
    assert Counter(o.get("type") for o in ref) == Counter(o.type for o in topo)
    assert topo.meta["source_kind"] == "machine"
    assert topo.meta.get("OSName") == "Linux"


def _corpus_files(sub: str, pattern: str) -> list[str]:
    d = CORPUS / sub
    return sorted(p.name for p in d.glob(pattern)) if d.is_dir() else []


@pytest.mark.parametrize("name", _corpus_files("xml", "*.xml"))
def test_corpus_xml_matches_lstopo(corpus: Path, name: str) -> None:
    _hwloc_or_skip()
    path = str(corpus / "xml" / name)
    compare_with_lstopo(path, xml=path)


@pytest.fixture(scope="module")
def unpacked(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every gathered tree of the corpus, unpacked once for this module."""
    dest = tmp_path_factory.mktemp("fsroot")
    for tb in sorted((corpus / "fsroot").glob("*.tar.bz2")):
        with tarfile.open(tb, "r:bz2") as tf:
            try:
                tf.extractall(dest, filter="data")
            except TypeError:  # Python without extraction filters
                tf.extractall(dest)
    return dest


@pytest.mark.parametrize("name", [n.removesuffix(".tar.bz2")
                                  for n in _corpus_files("fsroot", "*.tar.bz2")])
def test_corpus_fsroot_matches_lstopo(unpacked: Path, name: str) -> None:
    _hwloc_or_skip()
    root = unpacked / name
    compare_with_lstopo(str(root), fsroot=str(root))


def test_fsroot_distances_are_the_kernels(unpacked: Path) -> None:
    """The NUMA latency matrix equals the gathered node*/distance files (ACPI SLIT values, see
    Documentation/ABI/stable/sysfs-devices-node)."""
    root = unpacked / "64amd64-4s2n4ca2co"
    topo = load_topology(fsroot=root)
    dist = topo.distance_matrix()
    assert dist is not None and dist.name == "NUMALatency"
    for i, node in enumerate(dist.nodes):
        text = (root / f"sys/devices/system/node/node{node}/distance").read_text()
        assert list(dist.values[i]) == [int(x) for x in text.split()]


def test_cpukinds_of_a_hybrid_machine(corpus: Path) -> None:
    _hwloc_or_skip()
    topo = load_topology(xml=corpus / "xml" / "Intel-RaptorLake-Corei7-1370P.xml")
    kinds = {k.info("CoreType"): k for k in topo.cpukinds}
    assert set(kinds) == {"IntelCore", "IntelAtom"}
    assert kinds["IntelCore"].efficiency > kinds["IntelAtom"].efficiency
    assert kinds["IntelCore"].cpuset == frozenset(range(12))
    assert kinds["IntelAtom"].cpuset == frozenset(range(12, 20))
    assert topo.cpukind_of(15) is kinds["IntelAtom"]
    assert topo.by_type("Package")[0].info("CPUVendor") == "GenuineIntel"


def test_the_xml_version_is_read_from_the_header() -> None:
    assert xml_major_version('<?xml version="1.0"?>\n<topology version="2.0">') == 2
    assert xml_major_version('<!DOCTYPE topology SYSTEM "hwloc3.dtd">\n<topology>') == 3
    assert xml_major_version('<topology version="3.0">') == 3
    assert xml_major_version("<topology>") is None


def test_the_parser_error_is_the_line_reported() -> None:
    lines = ["I/O warning : failed", "f.xml:1: parser error : Start tag expected", "garbage"]
    assert first_c_error(lines) == "f.xml:1: parser error : Start tag expected"
    assert first_c_error(["only   this"]) == "only this"
    assert first_c_error([]) is None


def test_another_api_major_is_refused() -> None:
    from snumap_tui.native.hwloc import check_api_version

    check_api_version(0x00020800, "libhwloc.so.15")
    with pytest.raises(SnumapError, match="hwloc API 3.0.*libhwloc15"):
        check_api_version(0x00030000, "libhwloc.so.16")


def test_the_library_is_not_loaded_at_import() -> None:
    code = ("import sys, snumap_tui.cli, snumap_tui.native.hwloc as h, snumap_tui.topology.build;"
            "import snumap_tui.commands.topo;"
            "assert h._lib is None; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.stdout.strip() == "ok", out.stderr
