"""Memory per process and NUMA node in recordings (sources/procmem.py, the process memory
chunk, analysis/memory.py, the report's memory section)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from snumap_tui import store
from snumap_tui.analysis.memory import process_memory, region_memory, timelines
from snumap_tui.analysis.synth import synthetic_topology
from snumap_tui.sources.procmem import RSS_NODE, ProcessMemory, parse_statm_resident
from snumap_tui.store.procmem import rows_at

PY = sys.executable
MIB = 1 << 20

# Allocates and touches 256 MiB (bound to node 0), prints CLOCK_MONOTONIC ns when every page
# is resident, holds it a few intervals, frees it and holds on a little.
ALLOC = """
import mmap, os, sys, time
try:
    os.sched_setaffinity(0, {0})
except OSError:
    pass
m = mmap.mmap(-1, 256 << 20)
for i in range(0, 256 << 20, 4096):
    m[i] = 1
print(time.monotonic_ns(), flush=True)
time.sleep(0.5)
m.close()
time.sleep(0.3)
"""


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="needs procfs")
def test_256_mib_on_node_0_is_in_the_timeline_within_one_interval_and_in_the_report(
        tmp_path: Path) -> None:
    out = tmp_path / "mem.rec"
    run = subprocess.run([PY, "-m", "snumap_tui.cli", "record", "-o", str(out), "--backend",
                          "proc", "--interval", "50ms", "--", PY, "-c", ALLOC],
                         capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    ready = int(run.stdout.split()[0])
    with store.open(out) as rec:
        rows = rec.process_memory()
        pid = int(rec.markers and rows["pid"][0])
        tl = timelines(rows)[pid]
        after = np.flatnonzero(tl.t_ns >= ready)
        assert len(after), "no sample after the allocation"
        first = int(after[0])
        # The first sample after the pages are resident is within one interval (+ scheduling
        # slack on a loaded machine) and shows them on node 0.
        assert tl.t_ns[first] - ready <= 50e6 + 50e6
        assert tl.nodes[0][first] >= 256 * MIB
        assert tl.nodes[RSS_NODE][first] >= 256 * MIB
        assert tl.nodes[0][-1] < 100 * MIB                  # freed before the end
    rep = subprocess.run([PY, "-m", "snumap_tui.cli", "report", "--json", str(out)],
                         capture_output=True, text=True, timeout=120, check=True)
    procs = {p["pid"]: p for p in json.loads(rep.stdout)["processes"]}
    mem = procs[pid]["memory"]
    assert 256 * MIB <= mem["nodes"]["0"] < 300 * MIB      # the high-water mark
    assert mem["last"]["0"] < 100 * MIB
    assert mem["kinds"]["0"] == "DRAM"
    text = subprocess.run([PY, "-m", "snumap_tui.cli", "report", str(out)],
                          capture_output=True, text=True, timeout=120, check=True).stdout
    line = next(x for x in text.splitlines() if x.strip().startswith(str(pid)) and "N0" in x)
    assert float(line.split()[2]) >= 256.0


def _fake_proc(root: Path, pid: int, statm: str, numa_maps: str, nodes: str = "0-1") -> None:
    d = root / "proc" / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    (d / "statm").write_text(statm)
    (d / "numa_maps").write_text(numa_maps)
    n = root / "sys/devices/system/node"
    n.mkdir(parents=True, exist_ok=True)
    (n / "has_memory").write_text(nodes + "\n")


def test_two_nodes_split_by_numa_maps_then_scaled_until_the_rss_moves(tmp_path: Path) -> None:
    now = [0.0]
    _fake_proc(tmp_path, 7, "1000 300 0 0 0 0 0\n",
               "7f00 default anon=100 N0=100 kernelpagesize_kB=4\n"
               "7f01 default anon=200 N1=200 kernelpagesize_kB=4\n")
    src = ProcessMemory(tmp_path, clock=lambda: now[0], page_bytes=4096)
    assert src.nodes == [0, 1] and not src.one_node
    src.watch([7])
    rows = {(n, e): b for _, n, b, e in src.read()}
    assert rows == {(RSS_NODE, True): 300 * 4096, (0, True): 100 * 4096, (1, True): 200 * 4096}
    # The RSS barely moved: no new walk, the last split scaled to it (an estimate).
    now[0] += 1.0
    _fake_proc(tmp_path, 7, "1000 303 0 0 0 0 0\n", "7f00 default anon=303 N0=303\n")
    rows = src.read()
    assert src.walks == 1 and all(not e for _, n, _, e in rows if n != RSS_NODE)
    assert sum(b for _, n, b, _ in rows if n != RSS_NODE) == pytest.approx(303 * 4096, abs=2)
    # It moved by more than 1/32: walked again, exact.
    now[0] += 1.0
    _fake_proc(tmp_path, 7, "1000 900 0 0 0 0 0\n", "7f00 default anon=900 N0=900\n")
    rows = {(n, e): b for _, n, b, e in src.read()}
    assert src.walks == 2 and rows == {(RSS_NODE, True): 900 * 4096, (0, True): 900 * 4096}
    # A walk that took 0.5 s is not repeated before 5 s, however much the RSS moves.
    src._walks[7].cost = 0.5
    now[0] += 1.0
    _fake_proc(tmp_path, 7, "1000 5000 0 0 0 0 0\n", "7f00 default anon=5000 N0=5000\n")
    src.read()
    assert src.walks == 2


def test_a_zombie_or_a_bad_statm_is_not_a_zero_row(tmp_path: Path) -> None:
    with pytest.raises(ProcessLookupError):
        parse_statm_resident("0 0 0 0 0 0 0\n")
    with pytest.raises(ValueError):
        parse_statm_resident("garbage")
    _fake_proc(tmp_path, 8, "0 0 0 0 0 0 0\n", "", nodes="0")
    src = ProcessMemory(tmp_path, page_bytes=4096)
    src.watch([8, 9])                       # 9 does not exist
    assert src.read() == [] and not src.errors


def test_the_recorders_rss_and_peak_come_from_one_status_read(tmp_path: Path) -> None:
    """With peaks (the recorder), /proc/PID/status alone gives the RSS (VmRSS) and the
    kernel's peak (VmHWM): no statm read beside it; a zombie (no VmRSS) is gone, no row."""
    d = tmp_path / "proc" / "7"
    d.mkdir(parents=True)
    (d / "status").write_text("Name:\tx\nVmHWM:\t  8000 kB\nVmRSS:\t  1200 kB\n")
    (tmp_path / "proc" / "8").mkdir()
    (tmp_path / "proc" / "8" / "status").write_text("Name:\tz\nState:\tZ (zombie)\n")
    n = tmp_path / "sys/devices/system/node"
    n.mkdir(parents=True)
    (n / "has_memory").write_text("0\n")
    src = ProcessMemory(tmp_path, page_bytes=4096, peaks=True)
    src.watch([7, 8])
    assert src.read() == [(7, RSS_NODE, 1200 << 10, True), (7, 0, 1200 << 10, True)]
    assert src.peaks == {7: 8000 << 10} and not src.errors
    (d / "status").write_text("Name:\tx\nVmHWM:\t  6000 kB\nVmRSS:\t  900 kB\n")
    src.read()
    assert src.peaks == {7: 8000 << 10}           # the largest read (clear_refs resets it)
    assert "status (VmRSS, VmHWM)" in src.describe()


def test_region_high_water_mark_is_over_the_samples_inside_its_instances() -> None:
    rows = np.concatenate([rows_at(t, [(5, RSS_NODE, b, True), (5, 0, b, True)])
                           for t, b in ((100, 10 * MIB), (200, 50 * MIB), (300, 20 * MIB),
                                        (400, 90 * MIB))])
    tls = timelines(rows)
    assert region_memory([(5, 150, 320)], tls) == {"samples": 2, "rss_bytes": 50 * MIB,
                                                   "nodes": {"0": 50 * MIB}}
    assert region_memory([(5, 110, 120)], tls)["samples"] == 0
    per = process_memory(rows, synthetic_topology(1, 1, 1, 1))
    assert per[5]["nodes"] == {"0": 90 * MIB} and per[5]["last"] == {"0": 90 * MIB}


def test_the_chunk_round_trips_and_a_bad_one_is_a_damage_note(tmp_path: Path) -> None:
    from snumap_tui.store import Writer
    from snumap_tui.store.kinds import validate

    path = tmp_path / "m.rec"
    rows = rows_at(1000, [(os.getpid(), RSS_NODE, 5 * MIB, True), (os.getpid(), 0, 5 * MIB,
                                                                    False)])
    with Writer(path, {"topology": synthetic_topology(1, 1, 1, 1).to_dict()}) as w:
        w.add_process_memory(rows)
    with store.open(path) as rec:
        got = rec.process_memory()
        assert got.tolist() == rows.tolist() and not rec.damaged
    bad = {k: rows[k].copy() for k in rows.dtype.names}
    bad["node"][0] = -5
    with pytest.raises(ValueError, match="node"):
        validate(17, bad, 2)
    # Written with a good CRC: the reader skips it with a note, keeps the good chunk.
    from snumap_tui.store import codec
    from snumap_tui.store.kinds import K_PROCESS_MEMORY

    path2 = tmp_path / "bad.rec"
    with Writer(path2, {"topology": synthetic_topology(1, 1, 1, 1).to_dict()}) as w:
        w.add_process_memory(rows)
        w.flush()
        w._write_chunk(K_PROCESS_MEMORY, codec.encode(bad), count=2, t_min=1000, t_max=1000)
    with store.open(path2) as rec:
        assert rec.process_memory().tolist() == rows.tolist()
        assert any("process memory chunk" in d and "node" in d for d in rec.damaged)


def test_parquet_process_memory_table(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    from snumap_tui.export.parquet import write_parquet
    from snumap_tui.store import Writer
    from snumap_tui.trace.events import EventBatch, TaskInfo

    path = tmp_path / "m.rec"
    rows = np.concatenate([rows_at(t, [(42, RSS_NODE, b, True), (42, 0, b, True)])
                           for t, b in ((1000, 5 * MIB), (2000, 300 * MIB))])
    with Writer(path, {"topology": synthetic_topology(1, 1, 1, 1).to_dict()}) as w:
        w.add_events(EventBatch(tasks=[TaskInfo(42, 42, "alloc")]))
        w.add_process_memory(rows)
    with store.open(path) as rec:
        (tmp_path / "out").mkdir()      # export gives it a temporary directory (safeout)
        counts = write_parquet(tmp_path / "out", rec)
    assert counts["process_memory"] == 4
    t = pq.read_table(tmp_path / "out" / "process_memory.parquet").to_pylist()
    assert {(r["t_ns"], r["node"], r["bytes"], r["kind"], r["comm"]) for r in t} == {
        (1000, -1, 5 * MIB, "", "alloc"), (1000, 0, 5 * MIB, "DRAM", "alloc"),
        (2000, -1, 300 * MIB, "", "alloc"), (2000, 0, 300 * MIB, "DRAM", "alloc")}


def test_memory_kinds_are_hwlocs_on_a_machine_with_hbm_and_nvm(corpus: Path,
                                                                tmp_path: Path) -> None:
    import tarfile

    from snumap_tui.analysis.memory import node_kinds
    from snumap_tui.sources.procmem import memory_nodes
    from snumap_tui.topology.build import load_topology

    with tarfile.open(corpus / "fsroot" / "fakeheteromemtiers.tar.bz2", "r:bz2") as tf:
        tf.extractall(tmp_path, filter="data")
    root = tmp_path / "fakeheteromemtiers"
    try:
        topo = load_topology(fsroot=root)
    except Exception as exc:  # noqa: BLE001 - hwloc absent or too old here
        pytest.skip(f"hwloc cannot load the tree: {exc}")
    assert node_kinds(topo) == {0: "DRAM", 1: "DRAM", 2: "HBM", 4: "HBM", 6: "NVM",
                                8: "NVM", 9: "NVM"}
    assert len(memory_nodes(root)) > 1


def test_system_wide_with_a_command_watches_the_commands_tree_only() -> None:
    """--system-wide: the batches name every task of the machine; the memory (and the
    sampler's watch) follow the command's forks, not every task named."""
    from snumap_tui.recording.runtime import TreeWatch
    from snumap_tui.trace.events import EVENT_DTYPE, EXIT, FORK, EventBatch, TaskInfo

    class Sink:
        def __init__(self) -> None:
            self.pids: set[int] = set()

        def watch_pids(self, pids: set[int]) -> None:
            self.pids = set(pids)

        watch = watch_pids

    sampler, memory = Sink(), Sink()
    w = TreeWatch(sampler, [10], memory, whole_system=True)
    ev = np.zeros(4, EVENT_DTYPE)
    # 10 forks 11, 11 forks 12 (same batch), 99 (not ours) forks 98, then 11 exits.
    for i, (t, kind, pid, pid2) in enumerate(((1, FORK, 10, 11), (2, FORK, 11, 12),
                                              (3, FORK, 99, 98), (4, EXIT, 11, -1))):
        ev[i]["t_ns"], ev[i]["kind"], ev[i]["pid"], ev[i]["pid2"] = t, kind, pid, pid2
        ev[i]["tid"] = pid
    w.update(EventBatch(events=ev, tasks=[TaskInfo(99, 99, "other"), TaskInfo(98, 98, "x")]))
    assert memory.pids == sampler.pids == {10, 12}
    # Without --system-wide the tracer's batches hold the tree only: its tasks join.
    w2 = TreeWatch(Sink(), [10], Sink())
    w2.update(EventBatch(tasks=[TaskInfo(13, 13, "kid")]))
    assert w2.pids == {10, 13}


def test_below_10_ms_the_memory_is_read_every_10_ms_and_at_the_last_sample(
        tmp_path: Path) -> None:
    """record at 1 ms reads the traced processes' memory as its slow sources, every 10 ms
    (recording/memory.MemoryRecorder's EVERY_S), and once more at the last sample, whose
    read the kernel's peaks come from."""
    from snumap_tui.recording.memory import MemoryRecorder

    class Source:
        def __init__(self) -> None:
            self.pids = {1}
            self.errors: dict[int, str] = {}

        def read(self) -> list[tuple[int, int, int, bool]]:
            return [(1, -1, 4096, True)]

    class Writer:
        def __init__(self) -> None:
            self.times: list[int] = []

        def add_process_memory(self, rows: Any) -> None:
            self.times.append(int(rows["t_ns"][0]))

    rec = MemoryRecorder(tmp_path, print, every_s=0.01)
    rec.source = Source()           # type: ignore[assignment]
    w = Writer()
    ms = 1_000_000
    for t in range(25):
        rec.sample(w, t * ms)
    rec.sample(w, 25 * ms, last=True)
    assert w.times == [0, 10 * ms, 20 * ms, 25 * ms]
    every = MemoryRecorder(tmp_path, print)       # at the default interval: every sample
    every.source = Source()         # type: ignore[assignment]
    for t in range(3):
        every.sample(w, (100 + t) * ms)
    assert w.times[-3:] == [100 * ms, 101 * ms, 102 * ms]
