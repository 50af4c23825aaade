"""`snumap topo`: the collapsed tree, --full, --json, and the 80-column limit."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from snumap_tui.cli import main
from snumap_tui.topology.build import load_topology
from snumap_tui.topology.render import (
    compact_cpulist,
    format_cpulist,
    format_size,
    render_tree,
    wrap_words,
)

BIG = "pack:8 numa:8 l3:4 core:12 pu:2"  # 1536 PUs, 64 NUMA nodes


@pytest.fixture(autouse=True)
def _needs_hwloc() -> None:
    try:
        from snumap_tui.native import hwloc

        hwloc.lib()
    except Exception as exc:  # noqa: BLE001 (any reason the library is unusable)
        pytest.skip(f"hwloc is not usable here: {exc}")


def run_topo(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["topo", *args]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    return out


def test_collapsed_tree_of_a_synthetic_machine(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_topo(capsys, "--synthetic", "pack:2 numa:2 core:4 pu:2")
    assert out == (
        "Machine: 2 packages, 16 cores, 32 PUs\n"
        "Memory: 4096MB in 4 NUMA nodes: 4 x 1024MB\n"
        "Source: pack:2 numa:2 core:4 pu:2\n"
        "\n"
        "Machine (4096MB total)\n"
        "  2 x Package (cpus 0-15 | 16-31; NUMA P#0-1 | 2-3)\n"
        "    2 x Group (first Package: NUMA P#0-1)\n"
        "      NUMANode (1024MB)\n"
        "      4 x Core + 2 PU\n"
    )


def test_interleaved_numbering_is_shown_not_merged(capsys: pytest.CaptureFixture[str]) -> None:
    """PUs numbered package-major (SMT siblings 16 apart): every collapsed line says which
    cpus each member has, and inside a collapsed subtree, those of the first instance."""
    desc = "pack:2 numa:2 core:4 pu:2(indexes=core:pack)"
    tree = run_topo(capsys, "--synthetic", desc).split("\n\n", 1)[1]
    assert tree == (
        "Machine (4096MB total)\n"
        "  2 x Package (cpus 0-7,16-23 | 8-15,24-31; NUMA P#0-1 | 2-3)\n"
        "    2 x Group (first Package: cpus 0-3,16-19 | 4-7,20-23; NUMA P#0-1)\n"
        "      NUMANode (1024MB)\n"
        "      4 x Core + 2 PU (first Group: cpus 0,16 | 1,17 | 2,18 | 3,19)\n"
    )


def test_single_objects_keep_their_indexes(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_topo(capsys, "--synthetic", "pack:1 [numa(memory=2GiB)] l2:2 core:1 pu:2(indexes=2*2:1*2)")
    assert "Package P#0" in out
    assert "NUMANode P#0 (2048MB)" in out
    # Siblings 2 apart: the collapsed group says which PUs each member covers.
    assert "  2 x L2 4096KB + Core + 2 PU (cpus 0,2 | 1,3)\n" in out


def test_full_has_one_line_per_object(capsys: pytest.CaptureFixture[str]) -> None:
    desc = "pack:2 numa:2 l3:1 core:3 pu:2"
    out = run_topo(capsys, "--synthetic", desc, "--full")
    tree = out.split("\n\n", 1)[1].splitlines()
    assert len(tree) == len(load_topology(synthetic=desc))
    assert sum(ln.strip().startswith("PU P#") for ln in tree) == 24
    assert sum(ln.strip().startswith("NUMANode P#") for ln in tree) == 4


def _json_objects(d: dict[str, Any]) -> list[dict[str, Any]]:
    out = [d]
    for c in d["children"]:
        out.extend(_json_objects(c))
    return out


def test_json_has_every_object_once(capsys: pytest.CaptureFixture[str]) -> None:
    desc = "pack:2 [numa(memory=1GB)] l3:2 [numa(memory=2GB)] core:2 pu:2"
    data = json.loads(run_topo(capsys, "--synthetic", desc, "--json"))
    objs = _json_objects(data["root"])
    topo = load_topology(synthetic=desc)
    assert len(objs) == len(topo)
    assert sorted(o["os_index"] for o in objs if o["type"] == "NUMANode") == list(range(6))
    assert sorted(o["os_index"] for o in objs if o["type"] == "PU") == list(range(16))
    for o in objs:
        assert {"type", "os_index", "logical_index", "children"} <= set(o)
    assert data["meta"]["source"] == desc


def test_a_big_machine_fits_80_columns(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_topo(capsys, "--synthetic", BIG)
    lines = out.splitlines()
    assert max(len(ln) for ln in lines) <= 80
    assert len(lines) < 25  # 1536 PUs, 64 NUMA nodes on one screen
    assert "12 x Core + 2 PU" in out
    full = run_topo(capsys, "--synthetic", BIG, "--full").splitlines()
    assert max(len(ln) for ln in full) <= 80


def test_width_wraps_notes_and_cuts_only_labels(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_topo(capsys, "--synthetic", BIG, "--width", "30")
    assert max(len(ln) for ln in out.splitlines()) <= 30
    # The numbering moves below its line and wraps; nothing of it is cut.
    assert "  8 x Package\n    (cpus 0-767, each next\n     Package +768; NUMA P#0-7,\n" in out
    narrow = run_topo(capsys, "--synthetic", BIG, "--width", "20").splitlines()
    assert max(len(ln) for ln in narrow) <= 20
    assert "        12 x Core +…" in narrow      # a label wider than the screen is cut


CORPUS_EXPECT = {
    "Intel-KnightsLanding-XeonPhi-7210.xml": [
        ("  32 x L2 1024KB (cpus 0-1,64-65,128-129,192-193, each next L2 +2)\n"
        "    2 x L1d 32KB + L1i 32KB + Core + 4 PU\n"
        "      (first L2: cpus 0,64,128,192 | 1,65,129,193)\n"), "256 PUs"],
    "AMD-19h-Zen3-2xEpyc-7763.xml": ["  2 x Package (cpus 0-63 | 64-127)\n    8 x L3 32MB\n",
                                     "AMD EPYC 7763"],
    "Intel-RaptorLake-Corei7-1370P.xml": ["CPU kind: IntelCore, efficiency 1, 12 PUs",
                                          "[IntelAtom]", "L2 1280KB"],
    # SMT siblings 36 apart, packages even/odd: never "(cpus 0-71)".
    "Intel-Skylake-2xXeon6140.xml": [
        ("  2 x Package + L3 25MB (cpus 0,2,…,70 | 1,3,…,71)\n"
        "    18 x L2 1024KB + L1d 32KB + L1i 32KB + Core + 2 PU\n"
        "      (first Package: cpus 0,36 | 2,38 | … | 34,70)\n")],
}


@pytest.mark.parametrize("name", sorted(CORPUS_EXPECT))
def test_corpus_machines(capsys: pytest.CaptureFixture[str], corpus: Path, name: str) -> None:
    out = run_topo(capsys, "--topology", str(corpus / "xml" / name))
    assert max(len(ln) for ln in out.splitlines()) <= 80
    for needle in CORPUS_EXPECT[name]:
        assert needle in out, out


def test_gathered_tree_shows_numa_memory_and_distances(capsys: pytest.CaptureFixture[str],
                                                       corpus: Path, tmp_path: Path) -> None:
    with tarfile.open(corpus / "fsroot" / "64amd64-4s2n4ca2co.tar.bz2", "r:bz2") as tf:
        tf.extractall(tmp_path, filter="data")
    out = run_topo(capsys, "--fsroot", str(tmp_path / "64amd64-4s2n4ca2co"))
    assert "Memory: 120GB in 8 NUMA nodes: 7 x 16GB, 1 x 8192MB" in out
    assert "NUMA distances (NUMALatency):" in out
    assert "     0 10 16 16 22 16 22 16 22" in out  # row of node 0, from node0/distance
    assert "NUMANode P#5 (8192MB)" in out  # the odd node is not collapsed away
    assert "  2 x Package (cpus 0-15 | 16-31; NUMA P#0-1 | 2-3)\n" in out


def test_this_machine(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_topo(capsys)
    topo = load_topology()
    assert f"{len(topo.pus)} PU" in out
    assert "Source: this machine" in out
    assert max(len(ln) for ln in out.splitlines()) <= 80


def test_formatting_helpers() -> None:
    # lstopo's units: powers of 1024, integers, the number kept below 10240.
    assert format_size(32 * 1024) == "32KB"
    assert format_size(1310720) == "1280KB"
    assert format_size(10 << 20) == "10MB"
    assert format_size(7342338 * 1024) == "7170MB"
    assert format_size(25952256) == "25MB"        # 24.75 MiB rounds like lstopo's
    assert format_size(16 * 2**30) == "16GB"
    assert format_size(12 * 2**40) == "12TB"
    assert format_size(None) == "?"
    assert format_cpulist([0, 1, 2, 3, 8, 10, 11]) == "0-3,8,10-11"
    assert format_cpulist([]) == ""
    assert compact_cpulist(range(0, 96, 4)) == "0,4,…,92"
    assert compact_cpulist([0, 4, 8, 12]) == "0,4,8,12"         # short ones written out
    assert compact_cpulist([0, 1, 64, 65]) == "0-1,64-65"
    assert compact_cpulist([0, 2, 4, 6, 8, 9, 10]) == "0,2,4,6,8-10"
    assert compact_cpulist([*range(0, 20, 2), 30, 31]) == "0,2,…,18,30-31"


def test_wrap_words_breaks_at_spaces_and_slashes_only() -> None:
    assert wrap_words("NVM 1152MB (3 x 384MB)", 12) == ["NVM 1152MB", "(3 x 384MB)"]
    assert wrap_words("denied: /sys/kernel/tracing/events/sched", 20) == [
        "denied: /sys/kernel/", "tracing/events/sched"]
    assert wrap_words("a bbbbbbbbbb", 6, 4) == ["a", "bbbb", "bbbb", "bb"]  # no slash: cut


def test_collapsed_groups_keep_numa_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_topo(capsys, "--synthetic", "pack:4 [numa] core:2 pu:1")
    assert "  4 x Package (cpus 0-1 | 2-3 | 4-5 | 6-7; NUMA P#0-3)\n" in out


def _lstopo(*args: str, env: dict[str, str] | None = None) -> str:
    exe = shutil.which("lstopo-no-graphics")
    if exe is None:
        pytest.skip("lstopo-no-graphics is not installed")
    return subprocess.run([exe, "--no-io", *args], capture_output=True, text=True, check=True,
                          env={**os.environ, **(env or {})}, timeout=60).stdout


def _model_sizes(topo: Any) -> list[str]:
    sizes = [format_size(o.cache_size) for o in topo if o.is_cache and o.cache_size]
    sizes += [format_size(o.local_memory) for o in topo.numa_nodes if o.local_memory]
    if topo.root.total_memory:
        sizes.append(format_size(topo.root.total_memory))
    return sorted(sizes)


# lstopo's console output: "(32KB)", "(P#0 7002MB)", "(504GB total)".
_LSTOPO_SIZE = re.compile(r"\((?:P#\d+ )?(\d+[KMGT]B)(?: total)?\)")


def test_sizes_match_lstopo_on_synthetic() -> None:
    desc = "pack:2 [numa(memory=7342338KB)] l3(size=25952256) l2(size=1310720) core:2 pu:1"
    topo = load_topology(synthetic=desc)
    assert _model_sizes(topo) == sorted(_LSTOPO_SIZE.findall(_lstopo("-i", desc)))


@pytest.mark.parametrize("name", ["AMD-19h-Zen3-2xEpyc-7763.xml",
                                  "Intel-SapphireRapids-2xXeonMax9460.xml",
                                  "Intel-Skylake-2xXeon6140.xml"])
def test_sizes_match_lstopo_on_corpus_xml(corpus: Path, name: str) -> None:
    path = corpus / "xml" / name
    assert _model_sizes(load_topology(xml=path)) == \
        sorted(_LSTOPO_SIZE.findall(_lstopo("-i", str(path))))


_UNPACKED: dict[str, Path] = {}


def _unpack(corpus: Path, tmp_path: Path, name: str) -> Path:
    """A gathered tree unpacked once per test session (bunzip2 is most of these tests)."""
    if name not in _UNPACKED or not _UNPACKED[name].is_dir():
        with tarfile.open(corpus / "fsroot" / f"{name}.tar.bz2", "r:bz2") as tf:
            tf.extractall(tmp_path, filter="data")
        _UNPACKED[name] = tmp_path / name
    return _UNPACKED[name]


def test_sizes_match_lstopo_on_gathered_trees(corpus: Path, tmp_path: Path) -> None:
    for name in ("96em64t-4n4d3ca2co", "fakeheteromemtiers", "16amd64-8n2c"):
        root = _unpack(corpus, tmp_path, name)
        env = {"HWLOC_FSROOT": str(root), "HWLOC_THISSYSTEM": "0", "HWLOC_COMPONENTS": "-x86"}
        assert _model_sizes(load_topology(fsroot=root)) == \
            sorted(_LSTOPO_SIZE.findall(_lstopo(env=env))), name


def test_96em64t_groups_show_their_cpus_and_nodes(capsys: pytest.CaptureFixture[str],
                                                 corpus: Path, tmp_path: Path) -> None:
    root = _unpack(corpus, tmp_path, "96em64t-4n4d3ca2co")
    tree = run_topo(capsys, "--fsroot", str(root)).split("\n\n")[-1]
    assert tree == (
        "Machine (504GB total)\n"
        "  4 x Group (cpus 0-23 | 24-47 | 48-71 | 72-95; NUMA P#0-3)\n"
        "    NUMANode (126GB)\n"
        "    4 x Package + L3 16MB (first Group: cpus 0,4,…,20 | 1,5,…,21 | … | 3,7,…,23)\n"
        "      3 x L2 3072KB\n"
        "        2 x L1d 32KB + L1i 32KB + Core + PU\n"
    )


def test_memory_tiers_summarised_by_kind(capsys: pytest.CaptureFixture[str], corpus: Path,
                                         tmp_path: Path) -> None:
    root = _unpack(corpus, tmp_path, "fakeheteromemtiers")
    out = run_topo(capsys, "--fsroot", str(root))
    assert out.startswith(
        "Machine: 1 package, 6 cores, 6 PUs; QEMU Virtual CPU version 2.5+\n"
        "Memory: 6090MB in 7 NUMA nodes: DRAM 3914MB (2935MB + 979MB), HBM 1024MB (2 x\n"
        "  512MB), NVM 1152MB (3 x 384MB)\n")
    assert "…" not in out and max(len(ln) for ln in out.splitlines()) <= 80
    assert "    NUMANode P#4 (512MB, HBM)\n" in out


def test_render_is_pure() -> None:
    """The same model renders the same lines, from JSON too (replay on another machine)."""
    from snumap_tui.topology.model import Topology

    topo = load_topology(synthetic="pack:2 core:4 pu:2")
    again = Topology.from_json(topo.to_json())
    assert render_tree(topo) == render_tree(again)
