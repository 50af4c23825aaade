"""Synthetic studies: a study directory whose runs' measurements follow Amdahl's law with
known serial fractions (no recordings), for tests and benchmarks of everything downstream of
the runs -- aggregation, report, export, models, plots."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np

from snumap_tui.study.configs import build_configs
from snumap_tui.study.manifest import Study, create_or_resume, new_manifest


def amdahl(t1: float, serial: float, p: int) -> float:
    return t1 * (serial + (1 - serial) / p)


def make_study(path: Path, *, threads: list[int], serial: dict[str, float],
               t1: dict[str, float] | None = None, repeats: int = 1, places: list[str] | None = None,
               noise: float = 0.0, seed: int = 1, machine: dict[str, Any] | None = None,
               sizes: list[float] | None = None, figures: bool = False,
               slowdown: dict[int, float] | None = None) -> Study:
    """A study at PATH of ``prog {input}`` over THREADS × PLACES (× input SIZES, named
    n<size>), REPEATS each: region R takes ``amdahl(t1[R], serial[R], p)`` seconds, times the
    size where sizes are given (times a uniform noise of ±NOISE), the program their sum plus
    10 ms. With FIGURES, every row also has counters as ``--events cycles,instructions``
    would give them (cycles = 1e9 x time x threads, 2 instructions a cycle; ratios by
    attribution's formulas) and a memory high-water mark of 64 MiB x threads. With SLOWDOWN
    ({threads: share}), each run also ran untraced, the recorded program that share slower
    than the untraced one (the recorder's perturbation)."""
    rnd = random.Random(seed)
    t1 = t1 or {r: 1.0 for r in serial}
    confs = []
    inputs: list[tuple[str, str, float | None]] = [(f"n{v:g}", f"{v:g}", float(v))
                                                   for v in sizes or []]
    for c in build_configs(threads, places or ["compact"], None, inputs, None):
        confs.append({**c.to_dict(), "key": c.key, "cpus": None, "cpuset": None,
                      "omp_env": {}, "command": ["prog"]})
    m = new_manifest(["prog"], [], confs, repeats,
                     machine or {"hostname": "synthetic", "pus": max(threads),
                                 "cores": max(threads), "packages": 1},
                     {"threads": "OMP_NUM_THREADS"}, {"threads": threads})
    study, _ = create_or_resume(path, m)
    study.save(keys=None)
    for run in study.plan():
        regs: list[dict[str, Any]] = []
        for r, s in serial.items():
            t = amdahl(t1[r], s, run.config.threads) * (1 + noise * (2 * rnd.random() - 1)) \
                * (run.config.input_value or 1.0)
            regs.append({"region": r, "parent": "(program)", "kind": "omp", "wait": False,
                         "time_s": t, "count": 1})
        prog: dict[str, Any] = {"time_s": sum(x["time_s"] for x in regs) + 0.01,
                                "energy_j": None, "energy_note": "synthetic"}
        if figures:
            for x in [prog, *regs]:
                x.update(_figures(x["time_s"], run.config.threads))
        state: dict[str, Any] = {
            "id": run.id, "config": run.config.key, "repeat": run.repeat, "status": "ok",
            "exit_status": 0, "recording": f"runs/{run.id}.rec",
            "measurements": {"program": prog, "regions": regs}}
        if slowdown is not None:
            state["untraced"] = {"time_s": prog["time_s"] / (1 + slowdown.get(
                run.config.threads, 0.0)), "exit_status": 0, "order": "before"}
        study.write_run(run.id, state)
    study.save()
    return study


def _figures(time_s: float, threads: int) -> dict[str, Any]:
    from snumap_tui.analysis.attribution import derived

    cyc = 1e9 * time_s * threads
    events = {"cycles": cyc, "instructions": 2 * cyc}
    figs, why = derived(list(events), np.array(list(events.values())),
                        int(time_s * threads * 1e9), None)
    return {"counters": {"on_cpu_s": time_s * threads, "events": events, **figs, "na": why,
                         "multiplexed": [], "dropped": []},
            "memory": {"samples": 3, "rss_bytes": (64 << 20) * threads,
                       "nodes": {"0": 64 << 20}}}
