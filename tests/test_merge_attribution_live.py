"""`snumap merge` of two real recordings of an OpenMP program counted with
``--events task-clock,page-faults`` (libbpf backend), the second under another host name (a
UTS namespace of its own): the merged report keeps each node's per-thread counters (equal to
its own report's), memory high-water marks per NUMA node and regions; the Parquet export's
thread_counters, process_memory and regions tables hold both nodes' rows; the replay's
region timeline and process view read both."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from snumap_tui.store import open as open_recording
from snumap_tui.trace.libbpf import LibbpfTracer
from tests.test_attribution_live import PAGES, SRC, _compile

SNUMAP = [sys.executable, "-m", "snumap_tui.cli"]

pytestmark = [
    pytest.mark.skipif(not LibbpfTracer.status().available,
                       reason="the libbpf backend cannot run here (root, BTF)"),
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                       reason="a second host name needs root and unshare"),
]



def _record(tmp: Path, prog: Path, name: str, host: str | None) -> tuple[Path, dict[str, int]]:
    rec = tmp / f"{name}.rec"
    cmd = [*SNUMAP, "record", "-o", str(rec), "--backend", "libbpf", "--interval", "50ms",
           "--events", "task-clock,page-faults", "--", str(prog)]
    if host is not None:
        cmd = ["unshare", "--uts", "sh", "-c", f'hostname {host} && exec "$@"', "sh", *cmd]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False,
                       cwd=tmp, env=dict(os.environ, OMP_WAIT_POLICY="passive"))
    assert r.returncode == 0, r.stderr
    return rec, {k: int(v) for k, v in (line.split() for line in r.stdout.split("\n") if line)}


def _report(rec: Path) -> dict[str, Any]:
    return json.loads(subprocess.run([*SNUMAP, "report", "--json", str(rec)],
                                     capture_output=True, text=True, check=True).stdout)


def _numa_count(rec: Path) -> int:
    with open_recording(rec) as r:
        return max(o.os_index for o in r.topology if o.type == "NUMANode") + 1


def _moved(nodes: dict[str, int], base: int) -> dict[str, int]:
    return {str(int(k) + base): v for k, v in nodes.items()}


def test_merged_job_keeps_counters_memory_and_regions_of_both_nodes(tmp_path: Path) -> None:
    # one thread spins 150 ms of CPU time, the other faults in 64 MiB and keeps them to the end
    prog = _compile(SRC % {"spin": 150, "pages": PAGES, "pause": 200_000},
                    tmp_path / "omp_job", "-fopenmp")
    a, tids_a = _record(tmp_path, prog, "a", None)
    b, tids_b = _record(tmp_path, prog, "b", "snumap-node-b")
    job = tmp_path / "job.rec"
    m = subprocess.run([*SNUMAP, "merge", str(a), str(b), "-o", str(job)],
                       capture_output=True, text=True, check=False)
    assert m.returncode == 0 and "merged 2 node(s)" in m.stderr, m.stderr
    with open_recording(job) as rec:
        assert rec.nodes is not None
        nodes = rec.nodes.nodes
        tb = int(nodes[1]["tid_base"])
        assert nodes[1]["node"] == "snumap-node-b"
        assert [e["name"] for e in rec.header["counters"]["events"]] == ["task-clock",
                                                                         "page-faults"]
    numa_b = _numa_count(a)
    ra, rb, rj = _report(a), _report(b), _report(job)

    # Counters: every thread of each node, with its own report's sums.
    cj = rj["counters"]
    assert cj["available"] and cj["events"] == ["task-clock", "page-faults"]
    merged = {t["tid"]: t["events"] for t in cj["threads"]}
    for rep, base in ((ra, 0), (rb, tb)):
        own = {t["tid"] + base: t["events"] for t in rep["counters"]["threads"]}
        assert own and {t: merged[t] for t in own} == own
    assert len(merged) == len(ra["counters"]["threads"]) + len(rb["counters"]["threads"])
    assert merged[tids_a["busy"]]["task-clock"] >= 140e6
    assert merged[tb + tids_b["busy"]]["task-clock"] >= 140e6
    assert merged[tids_a["faulter"]]["page-faults"] >= PAGES
    assert merged[tb + tids_b["faulter"]]["page-faults"] >= PAGES
    for ev in ("task-clock", "page-faults"):
        total = sum(t["events"][ev] for r in (ra, rb) for t in r["counters"]["threads"])
        assert sum(e[ev] for e in merged.values()) == pytest.approx(total, rel=1e-12)
    # ... and the OpenMP region's counts are both nodes' together.
    (reg_a,), (reg_b,) = ([g for g in r["counters"]["regions"]
                           if g["name"].startswith("main._omp_fn.")] for r in (ra, rb))
    (reg_j,) = [g for g in cj["regions"] if g["name"] == reg_a["name"]]
    for ev in ("task-clock", "page-faults"):
        assert reg_j["events"][ev] == pytest.approx(reg_a["events"][ev] + reg_b["events"][ev],
                                                    rel=1e-9)

    # ... and so are the marker phase's (SNUMAP_MARKERS "begin/end compute" on both nodes).
    (ph_a,), (ph_b,), (ph_j,) = ([p for p in r["counters"]["phases"] if p["name"] == "compute"]
                                 for r in (ra, rb, rj))
    assert ph_j["events"]["page-faults"] == pytest.approx(
        ph_a["events"]["page-faults"] + ph_b["events"]["page-faults"], rel=1e-9)

    # Memory: each node's process with its own high-water marks, its NUMA nodes moved.
    pa_, pb_ = ra["processes"][0], rb["processes"][0]
    procs = {p["pid"]: p for p in rj["processes"]}
    ma, mb = procs[pa_["pid"]]["memory"], procs[tb + pb_["pid"]]["memory"]
    assert pa_["memory"]["rss_bytes"] >= PAGES * 4096
    assert ma["rss_bytes"] == pa_["memory"]["rss_bytes"]
    assert ma["nodes"] == pa_["memory"]["nodes"]
    assert mb["rss_bytes"] == pb_["memory"]["rss_bytes"] >= PAGES * 4096
    assert mb["nodes"] == _moved(pb_["memory"]["nodes"], numa_b)
    # Regions: both nodes' threads ran the body, and its memory is both nodes'.
    (ga,), (gb,) = ([g for g in r["regions"] if g["name"] == reg_a["name"]] for r in (ra, rb))
    (gj,) = [g for g in rj["regions"] if g["name"] == reg_a["name"]]
    assert sorted(t["tid"] for t in gj["threads"]) == sorted(
        [t["tid"] for t in ga["threads"]] + [tb + t["tid"] for t in gb["threads"]])
    assert gj["memory"]["nodes"] == {**ga["memory"]["nodes"],
                                     **_moved(gb["memory"]["nodes"], numa_b)}

    # Parquet: the three tables hold both nodes' rows.
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "pq"
    subprocess.run([*SNUMAP, "export", str(job), "--format", "parquet", "-o", str(out)],
                   capture_output=True, text=True, check=True)
    tc = pq.read_table(out / "thread_counters.parquet").to_pydict()
    tid = np.array(tc["tid"])
    clock = np.array(tc["task-clock"], dtype=np.float64)
    for rep, sel in ((ra, (tid > 0) & (tid < tb)), (rb, tid > tb)):
        own = sum(t["events"]["task-clock"] for t in rep["counters"]["threads"])
        assert sel.any() and clock[sel].sum() == pytest.approx(own, rel=1e-12)
    mem = pq.read_table(out / "process_memory.parquet").to_pydict()
    assert {p for p in mem["pid"]} == {pa_["pid"], tb + pb_["pid"]}
    assert {n for p, n in zip(mem["pid"], mem["node"]) if p > tb and n >= 0} == \
        {int(k) for k in mb["nodes"]}
    regs = pq.read_table(out / "regions.parquet").to_pydict()
    body = [t for t, n in zip(regs["tid"], regs["name"]) if n.startswith("main._omp_fn.")]
    assert any(t < tb for t in body) and any(t > tb for t in body)

    # Replay: the region timeline and the process view of node b's process.
    from snumap_tui.analysis.memory import timelines
    from snumap_tui.analysis.process_view import strips, thread_intervals
    from snumap_tui.ui.replay_data import load_replay

    with open_recording(job) as rec:
        data = load_replay(rec)
        assert data.regions is not None
        owners = np.concatenate([np.asarray(t) for t in data.regions.tids])
        assert (owners > tb).any() and ((owners > 0) & (owners < tb)).any()
        pid = tb + pb_["pid"]
        ps = strips(data.intervals, pid, data.t0, data.t1, 40,
                    timelines(rec.process_memory()).get(pid),
                    thread_intervals(data.intervals, pid))
        assert {tb + tids_b["busy"], tb + tids_b["faulter"]} <= set(ps.threads)
        assert max(ps.peak.values()) >= PAGES * 4096
