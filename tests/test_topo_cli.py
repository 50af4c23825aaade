"""`snumap topo`: the collapsed tree, --full, --json, and the 80-column limit."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from snumap_tui.cli import main
from snumap_tui.topology.build import load_topology
from snumap_tui.topology.render import format_cpulist, format_size, render_tree

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
        "Memory: 4GB in 4 NUMA nodes: 4 x 1GB\n"
        "Source: pack:2 numa:2 core:4 pu:2\n"
        "\n"
        "Machine (4GB total)\n"
        "  2 x Package  (cpus 0-31)\n"
        "    2 x Group\n"
        "      NUMANode (1GB)\n"
        "      4 x Core + 2 PU\n"
    )


def test_single_objects_keep_their_indexes(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_topo(capsys, "--synthetic", "pack:1 [numa(memory=2GiB)] l2:2 core:1 pu:2(indexes=2*2:1*2)")
    assert "Package P#0" in out
    assert "NUMANode P#0 (2GB)" in out
    # Siblings 2 apart: the collapsed group says which PUs it covers.
    assert "2 x L2" in out and "(cpus 0-3)" in out


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


def test_width_cuts_lines(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_topo(capsys, "--synthetic", BIG, "--width", "30")
    assert max(len(ln) for ln in out.splitlines()) <= 30
    assert any(ln.endswith("…") for ln in out.splitlines())


CORPUS_EXPECT = {
    "Intel-KnightsLanding-XeonPhi-7210.xml": ["32 x L2 1MB", "+ Core + 4 PU", "256 PUs"],
    "AMD-19h-Zen3-2xEpyc-7763.xml": ["2 x Package", "8 x L3 32MB", "AMD EPYC 7763"],
    "Intel-RaptorLake-Corei7-1370P.xml": ["CPU kind: IntelCore, efficiency 1, 12 PUs",
                                          "[IntelAtom]", "L2 1.25MB"],
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
    assert "Memory: 120GB in 8 NUMA nodes: 7 x 16GB, 1 x 8GB" in out
    assert "NUMA distances (NUMALatency):" in out
    assert "     0 10 16 16 22 16 22 16 22" in out  # row of node 0, from node0/distance
    assert "NUMANode P#5 (8GB)" in out  # the odd node is not collapsed away


def test_this_machine(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_topo(capsys)
    topo = load_topology()
    assert f"{len(topo.pus)} PU" in out
    assert "Source: this machine" in out
    assert max(len(ln) for ln in out.splitlines()) <= 80


def test_formatting_helpers() -> None:
    assert format_size(32 * 1024) == "32KB"
    assert format_size(1310720) == "1.25MB"
    assert format_size(16 * 2**30) == "16GB"
    assert format_size(None) == "?"
    assert format_cpulist([0, 1, 2, 3, 8, 10, 11]) == "0-3,8,10-11"
    assert format_cpulist([]) == ""


def test_render_is_pure() -> None:
    """The same model renders the same lines, from JSON too (replay on another machine)."""
    from snumap_tui.topology.model import Topology

    topo = load_topology(synthetic="pack:2 core:4 pu:2")
    again = Topology.from_json(topo.to_json())
    assert render_tree(topo) == render_tree(again)
