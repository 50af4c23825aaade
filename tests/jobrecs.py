"""Recordings of a job's nodes written through the store API, as `snumap record --job` writes
them (header with node, job, clock readings; info chunks with ranks): the merge tests' and the
merged views' input, with run times known exactly."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from snumap_tui import store
from snumap_tui.analysis.synth import synthetic_topology
from snumap_tui.trace.events import EVENT_DTYPE, SWITCH, EventBatch, TaskInfo

WALL = 1_700_000_000_000_000_000


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
