"""A merged job's report names threads as ``node:tid`` everywhere (the waits, the findings),
never blames a PU of another node, and a merge of recordings made without ``--job`` aligns
them by each recording's start wall time (issue 32 item 11). Written through the store API
with every time known."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from snumap_tui import store
from snumap_tui.analysis.report import build_report, format_report
from snumap_tui.analysis.synth import synthetic_topology
from snumap_tui.store.merge import merge
from snumap_tui.trace.events import EVENT_DTYPE, SWITCH, WAKEUP, EventBatch, TaskInfo
from snumap_tui.trace.region_catalog import BEGIN, END, REGION_DTYPE, RegionName

MS = 1_000_000
WALL = 1_700_000_000_000_000_000
BARRIER = RegionName("MPI_Barrier", "mpi", "call", True)


def _ev(rows: list[tuple[int, int, int, int, int, int]], mono0: int) -> np.ndarray:
    """(t ms, cpu, kind, tid, tid2, arg) -> events, pids = tids."""
    ev = np.zeros(len(rows), dtype=EVENT_DTYPE)
    for i, (t, cpu, kind, a, b, arg) in enumerate(rows):
        ev[i] = (mono0 + t * MS, cpu, kind, a, b, a, b, arg)
    return np.sort(ev, order="t_ns")


def node(path: Path, name: str, mono0: int, offset: int, rows: list[tuple[int, ...]],
         tids: list[int], regions: np.ndarray | None = None, job: bool = True) -> Path:
    topo = synthetic_topology(1, 1, 2, 1, host=name)
    header = {"host": name, "node": name, "start_monotonic_ns": mono0,
              "start_wall_ns": mono0 + offset, "topology": topo.to_dict(), "pid_max": 32768}
    if job:
        header.update(job={"system": "slurm", "id": "7"}, boot_id=f"boot-{name}",
                      clock_start={"t_monotonic_ns": mono0, "wall_minus_monotonic_ns": offset,
                                   "uncertainty_ns": 50,
                                   "ntp": {"synced": True, "maxerror_ns": 1_000_000,
                                           "esterror_ns": 1000}})
    with store.Writer(path, header, force=True) as w:
        w.add_events(EventBatch(events=_ev(rows, mono0),  # type: ignore[arg-type]
                                tasks=[TaskInfo(tid=t, pid=t, comm=f"prog{t}", t_ns=mono0)
                                       for t in tids]))
        if regions is not None:
            w.add_regions(regions, [BARRIER])
        w.add_marker(mono0 + 100 * MS, "end")
    return path


def job(tmp_path: Path, with_job: bool = True) -> Path:
    """Node a: tid 500 runs all along on PU 0, waiting in MPI_Barrier 10-90 ms; PU 1 idle.
    Node b: 600 and 601 keep both PUs busy; 602, woken at 20 ms, waits until 60 ms."""
    a_rows = [(0, 0, SWITCH, 0, 500, 0), (100, 0, SWITCH, 500, 0, 1)]
    reg = np.zeros(2, REGION_DTYPE)
    reg[0] = (100 * 10**9 + 10 * MS, 500, 500, BEGIN, 0)
    reg[1] = (100 * 10**9 + 90 * MS, 500, 500, END, 0)
    b_rows = [(0, 0, SWITCH, 0, 600, 0), (0, 1, SWITCH, 0, 601, 0),
              (20, 0, WAKEUP, 602, 0, 0), (60, 0, SWITCH, 600, 602, 0),
              (100, 0, SWITCH, 602, 0, 1), (100, 1, SWITCH, 601, 0, 1)]
    a = node(tmp_path / "a.rec", "a", 100 * 10**9, WALL, a_rows, [500], reg, with_job)
    b = node(tmp_path / "b.rec", "b", 95 * 10**9, WALL + 5 * 10**9, b_rows,
             [600, 601, 602], None, with_job)
    out = tmp_path / "job.rec"
    merge([a, b], out)
    return out


def test_waits_and_findings_name_threads_by_node(tmp_path: Path) -> None:
    with store.open(job(tmp_path)) as rec:
        r = build_report(rec)
    (w,) = r["waits"]
    assert w["label"] == "a:500"
    text = format_report(r)
    waiting = text.split("Waiting per thread")[1].splitlines()[1]
    assert waiting.split()[0] == "a:500", waiting
    found = {f["kind"]: f["text"] for f in r["findings"]}
    assert "(tid a:500) waited" in found["waiting"], found


def test_a_pu_of_another_node_is_not_blamed_for_a_wait(tmp_path: Path) -> None:
    """602 waited 40 ms on node b, both of whose PUs were busy; node a's PU 1 was idle, but
    602 could never have run there."""
    with store.open(job(tmp_path)) as rec:
        r = build_report(rec)
    kinds = [f["kind"] for f in r["findings"]]
    assert "idle_while_waiting" not in kinds, r["findings"]
    # node a's PU 1 idle while its PU 0 was busy: named by its node, as every PU in a finding
    idle = next(f["text"] for f in r["findings"] if f["kind"] == "idle_pus")
    assert idle.startswith("PUs a:1 stayed idle"), idle


def test_merge_without_job_aligns_by_start_wall_time(tmp_path: Path) -> None:
    out = job(tmp_path, with_job=False)
    with store.open(out) as rec:
        nodes = rec.header["nodes"]
    assert nodes[1]["shift_ns"] == 5 * 10**9          # b's clock: 5 s later, by wall time
    assert nodes[1]["align_how"].startswith("by each recording's start wall time")
    p = subprocess.run([sys.executable, "-m", "snumap_tui.cli", "merge",
                        str(tmp_path / "a.rec"), str(tmp_path / "b.rec"), "-o",
                        str(tmp_path / "again.rec")], capture_output=True, text=True,
                       timeout=120, check=False)
    assert p.returncode == 0, p.stderr
    assert "alignment unknown" not in p.stderr
    assert "shift +5.000000 s, aligned by wall clock, error unknown" in p.stderr, p.stderr
