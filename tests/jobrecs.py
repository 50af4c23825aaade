"""Recordings of a job's nodes written through the store API, as `snumap record --job` writes
them (header with node, job, clock readings; info chunks with ranks): the merge tests' and the
merged views' input, with run times known exactly."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from snumap_tui import store
from snumap_tui.analysis.synth import synthetic_topology
from snumap_tui.model.sample import Sample
from snumap_tui.trace.events import EVENT_DTYPE, SWITCH, EventBatch, TaskInfo

WALL = 1_700_000_000_000_000_000
MB = 1 << 20


def busy_events(t0: int, cpu: int, tid: int, runs: list[tuple[int, int]]) -> np.ndarray:
    """tid runs on cpu during each (start, end) ns after t0 (switch in, switch out to idle)."""
    ev = np.zeros(2 * len(runs), dtype=EVENT_DTYPE)
    for i, (a, b) in enumerate(runs):
        ev[2 * i] = (t0 + a, cpu, SWITCH, 0, tid, 0, tid, 0)
        ev[2 * i + 1] = (t0 + b, cpu, SWITCH, tid, 0, tid, 0, 1)
    return ev


def node_rec(path: Path, node: str, mono0: int, offset: int, *, job: str = "42",
             rank_pids: dict[int, int] | None = None, boot: str | None = None,
             runs: dict[int, list[tuple[int, int]]] | None = None) -> Path:
    """A node's recording as `record --job` writes it: its monotonic clock starts at mono0
    and wall = monotonic + offset; tid 100+r runs rank r's intervals on PU r % 2."""
    topo = synthetic_topology(1, 1, 2, 1, host=node)
    rank_pids = rank_pids or {}
    runs = runs or {}
    evs = [busy_events(mono0, r % 2, pid, runs.get(r, [(0, 10_000_000)]))
           for r, pid in rank_pids.items()]
    ev = np.sort(np.concatenate(evs), order="t_ns") if evs else np.zeros(0, EVENT_DTYPE)
    clock = {"t_monotonic_ns": mono0, "wall_minus_monotonic_ns": offset, "uncertainty_ns": 50,
             "ntp": {"synced": True, "maxerror_ns": 2_000_000, "esterror_ns": 1000}}
    header = {"host": node, "node": node, "job": {"system": "slurm", "id": job},
              "clock_start": clock, "pid_max": 32768, "start_monotonic_ns": mono0,
              "start_wall_ns": mono0 + offset, "boot_id": boot or f"boot-{node}"}
    tasks = [TaskInfo(tid=p, pid=p, comm=f"rank{r}", t_ns=mono0) for r, p in rank_pids.items()]
    with store.Writer(path, {**header, "topology": topo.to_dict()}, force=True) as w:
        w.add_events(EventBatch(events=ev, tasks=tasks))
        w.add_info(mono0, "job processes", {
            "columns": ["pid", "comm", "step", "node", "rank", "rank_var"],
            "rows": [[p, f"rank{r}", "0", node, r, "PMI_RANK"] for r, p in rank_pids.items()]})
        w.add_info(mono0 + 10**9, "clock end", {"clock": {**clock,
                                                          "t_monotonic_ns": mono0 + 10**9}})
    return path


def readings(k: int, busy: float, rx: float, energy: float) -> dict:
    """Node readings after ``k`` seconds: PU 0 busy ``busy`` of the time, eth0 received
    ``rx`` bytes a second, the package used ``energy`` joules a second."""
    ticks = np.array([[int(100 * busy * k), 0, 0, int(100 * (1 - busy) * k), 0, 0, 0, 0, 0, 0],
                      [0, 0, 0, 100 * k, 0, 0, 0, 0, 0, 0]], dtype=np.uint64)
    return {
        "procstat": {"cpus": np.array([0, 1]), "ticks": ticks, "hz": 100},
        "numa": {"nodes": np.array([0]), "mem_total": np.array([8.0 * 2**30]),
                 "mem_used": np.array([2.0 * 2**30]), "mem_free": np.array([6.0 * 2**30]),
                 "file_pages": np.array([1.0 * 2**30])},
        "net": {"names": ["eth0"], "physical": np.array([True]), "numa": np.array([0]),
                "busid": ["0000:03:00.0"], "rx_bytes": np.array([rx * k]),
                "tx_bytes": np.array([0.0]), "rx_packets": np.array([10.0 * k]),
                "tx_packets": np.array([0.0])},
        "rapl": {"domains": ["package-0"], "objects": [["Package", 0]],
                 "energy_uj": np.array([energy * 1e6 * k]), "max_uj": np.array([2.0**40]),
                 "via": "powercap"},
    }


def with_samples(path: Path, node: str, mono0: int, offset: int, busy: float, rx: float,
                 energy: float) -> Path:
    """``node_rec`` with four samples a second apart (``readings``)."""
    node_rec(path, node, mono0, offset, rank_pids={0 if node == "a" else 1: 500})
    with store.open(path) as rec:
        header = dict(rec.header)
    header["interval_ns"] = 10**9
    with store.Writer(path, header, force=True) as w:
        for k in range(4):
            w.add_sample(Sample(mono0 + k * 10**9 + 1000, mono0 + offset + k * 10**9,
                                readings(k, busy, rx, energy)))
    return path
