"""Hostile and odd input outside the store: formulas and metrics files past their limits, a
synthetic description of 10^15 objects, `record --force` with a command that cannot start,
and values that are unknown (never shown as zero)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from fakefs import FakeRoot

from snumap_tui import store
from snumap_tui.analysis.report import build_report
from snumap_tui.commands.top import gathered_statuses
from snumap_tui.errors import SnumapError
from snumap_tui.model.expr import MAX_DEPTH, MAX_OPERATORS, ExprError, parse
from snumap_tui.model.usermetrics import load_metrics_file, parse_metrics
from snumap_tui.sources.numa import NumaSource
from snumap_tui.topology.build import MAX_SYNTHETIC_OBJECTS, synthetic_object_count
from snumap_tui.trace.events import EVENT_DTYPE, SWITCH, EventBatch
from snumap_tui.ui.demo import demo_frame, synthetic_topology

PY = sys.executable


def snumap(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-m", "snumap_tui.cli", *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


def one_line(p: subprocess.CompletedProcess[str], *words: str, notes: int = 0) -> str:
    """The one error line (after ``notes`` lines of what the command did first)."""
    assert p.returncode == 2, (p.returncode, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 + notes and "Traceback" not in p.stderr, p.stderr
    lines = lines[notes:]
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize(("text", "why"), [
    ("(" * 300 + "cycles" + ")" * 300, f"nested more than {MAX_DEPTH} deep"),
    (" + ".join(["cycles"] * 1000), "formula too long: 8997 characters"),
    ("+".join(["x"] * 1000), f"more than {MAX_OPERATORS} operators"),
    ("-" * 10_000 + "cycles", "formula too long"),
    ("-" * 1000 + "cycles", f"nested more than {MAX_DEPTH} deep"),
    ("x" + "/x" * 300, f"more than {MAX_OPERATORS} operators"),
], ids=["300 parentheses", "1000-term sum", "1000 short terms", "10000 minuses",
        "1000 minuses", "300 divisions"])
def test_formula_limits_are_one_line_errors(text: str, why: str) -> None:
    with pytest.raises(ExprError) as e:
        parse(text, known={"cycles", "x"})
    msg = str(e.value)
    assert why in msg and "\n" not in msg and len(msg) < 300, msg


def test_formulas_just_inside_the_limits_still_work() -> None:
    deep = "(" * (MAX_DEPTH - 1) + "cycles" + ")" * (MAX_DEPTH - 1)
    wide = " + ".join(["cycles"] * (MAX_OPERATORS + 1))
    env = {"cycles": np.array([2.0])}
    assert parse(deep, known={"cycles"}).evaluate(env).tolist() == [2.0]
    assert parse(wide, known={"cycles"}).evaluate(env).tolist() == [2.0 * (MAX_OPERATORS + 1)]


def test_a_huge_metrics_file_is_refused_fast(tmp_path: Path) -> None:
    big = tmp_path / "big.toml"
    block = '[metric.m{}]\nformula = "1000 * cache_misses / instructions"\n'
    big.write_text("".join(block.format(i) for i in range(800_000)))     # ~50 MB
    t0 = time.monotonic()
    with pytest.raises(SnumapError, match=r"at most 1048576 \(1 MiB\)"):
        load_metrics_file(big)
    assert time.monotonic() - t0 < 5           # refused from its size, never parsed
    many = "".join(block.format(i) for i in range(1001))
    with pytest.raises(SnumapError, match=r"1001 metrics \(at most 1000\)"):
        parse_metrics(many)
    assert len(parse_metrics("".join(block.format(i) for i in range(50)))[0]) == 50


def test_synthetic_object_count() -> None:
    assert synthetic_object_count("pack:2 core:4 pu:2") == 1 + 2 + 8 + 16
    assert synthetic_object_count("2 2 2") == 15
    assert synthetic_object_count("pack:2(memory=1GB) [numa(memory=2GB)] core:2 pu:2") == 17
    assert synthetic_object_count("not a description") is None
    assert synthetic_object_count("pack:16 core:256 pu:4") == 20497 < MAX_SYNTHETIC_OBJECTS


def test_a_synthetic_description_beyond_the_limit_is_refused_before_hwloc() -> None:
    p = snumap("topo", "--synthetic", "pack:99999 core:99999 pu:99999", timeout=30)
    one_line(p, "999,980,000,200,000 objects", "at most 32,768")
    assert snumap("topo", "--synthetic", "pack:2 core:2 pu:2").returncode == 0


def test_record_force_with_a_command_that_cannot_start_keeps_the_old_file(
        tmp_path: Path) -> None:
    out = tmp_path / "keep.rec"
    p = snumap("record", "-o", str(out), "--backend", "proc", "--duration", "0.3s")
    assert p.returncode == 0, p.stderr
    with store.open(out) as rec:         # what record writes passes every schema
        list(rec.samples())
        rec.events()
        assert rec.damaged == [] and rec.header["sources"], rec.damaged
    before = out.read_bytes()
    p = snumap("record", "--force", "-o", str(out), "--backend", "proc", "--",
               str(tmp_path / "no-such-command"))
    one_line(p, "cannot run", "no-such-command", notes=1)     # notes: "tracing with proc"
    assert out.read_bytes() == before
    assert sorted(x.name for x in tmp_path.iterdir()) == ["keep.rec"]    # no leftover
    # A command that starts: the recording is replaced, under its own name.
    p = snumap("record", "--force", "-o", str(out), "--backend", "proc", "--", "true")
    assert p.returncode == 0, p.stderr
    with store.open(out) as rec:
        assert rec.header["command"] == ["true"]
    assert sorted(x.name for x in tmp_path.iterdir()) == ["keep.rec"]


def test_numa_memory_without_node_directories_comes_from_proc_meminfo(
        tmp_path: Path) -> None:
    FakeRoot(tmp_path, cpus=2, nodes=1)
    import shutil

    shutil.rmtree(tmp_path / "sys/devices/system/node")
    src = NumaSource(tmp_path)
    st = src.status()
    assert st.available and "one node" in (st.reason or "")
    r = src.read()
    assert r["nodes"].tolist() == [0]
    total = r["mem_total"][0]
    assert total > 0 and r["mem_used"][0] == total - r["mem_free"][0]
    assert np.isnan(r["numa_hit"][0]) and np.isnan(r["file_pages"][0])  # unknown, not 0
    empty = tmp_path / "empty"
    (empty / "proc").mkdir(parents=True)
    assert not NumaSource(empty).status().available


def test_rates_of_a_static_gathered_tree_are_unavailable(tmp_path: Path) -> None:
    frame = demo_frame(synthetic_topology(1, 1, 1, 2, 1), 0)
    frame.values["util_pct"][:] = np.nan              # the tree's counters did not move
    frame.values["ctxsw_per_s"] = np.zeros(len(frame.topology))
    frame.values["mem_total_bytes"] = np.full(len(frame.topology), 8e9)
    gathered_statuses(frame, tmp_path)
    assert np.isnan(frame.values["ctxsw_per_s"]).all()
    assert (frame.values["mem_total_bytes"] == 8e9).all()     # a level, not a rate: kept


def test_unknown_numa_memory_in_an_xml_is_not_zero(tmp_path: Path) -> None:
    xml = tmp_path / "m.xml"
    p = subprocess.run(["lstopo-no-graphics", "--input", "pack:1 core:2 pu:1", "--of", "xml",
                        str(xml)], capture_output=True, check=False)
    if p.returncode != 0:
        pytest.skip("lstopo-no-graphics is not installed")
    import re

    xml.write_text(re.sub(r'\s(local_memory|total_memory)="\d+"', "", xml.read_text()))
    from snumap_tui.topology.build import load_topology

    topo = load_topology(xml=xml)
    assert [n.local_memory for n in topo.numa_nodes] == [None]
    assert topo.root.total_memory is None
    text = snumap("topo", "--topology", str(xml)).stdout
    assert "size unknown" in text and " 0B" not in text and "0 B" not in text


def _recording(path: Path, backend: str) -> None:
    ev = np.zeros(4, dtype=EVENT_DTYPE)
    ev["t_ns"] = 10**9 + np.arange(4) * 10**6
    ev["kind"], ev["cpu"] = SWITCH, 0
    ev["tid"], ev["tid2"] = [0, 7, 0, 7], [7, 0, 7, 0]
    ev["pid"], ev["pid2"] = [0, 7, 0, 7], [7, 0, 7, 0]
    topo = synthetic_topology(1, 1, 1, 1, 1)
    with store.Writer(path, {"topology": topo.to_json(), "backend": backend,
                             "start_monotonic_ns": 10**9}) as w:
        w.add_events(EventBatch(ev))


@pytest.mark.parametrize(("backend", "want"), [("perf", 0), ("bcc", 0), ("proc", None)])
def test_kernel_migrations_are_zero_when_traced_and_unknown_when_not(
        tmp_path: Path, backend: str, want: int | None) -> None:
    path = tmp_path / "r.rec"
    _recording(path, backend)
    with store.open(path) as rec:
        r = build_report(rec)
    assert [t["kernel_migrations"] for t in r["tasks"]] == [want]


def test_tick_columns_that_change_between_samples_are_unknown() -> None:
    from snumap_tui.model.derive import derive
    from snumap_tui.model.sample import Sample

    t = synthetic_topology(1, 1, 1, 2, 1)
    cpus = np.array(sorted(t.pu_os_indexes))
    a = Sample(1, 1, {"procstat": {"cpus": cpus, "hz": 100,
                                   "ticks": np.ones((len(cpus), 10), np.uint64)}})
    b = Sample(10**9, 2, {"procstat": {"cpus": cpus, "hz": 100,
                                       "ticks": np.full((len(cpus), 8), 5, np.uint64)}})
    assert derive(a, b, t).get("util_pct", t.root.id) is None      # not a crash, not 0
