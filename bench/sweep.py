"""The cost of one full sweep: read every source, derive, aggregate up the tree.

On this machine (its real /proc and /sys, its hwloc topology, the perf software events it has)
and on generated fake trees (tests/fakefs.py) of 128, 384 and 1024 PUs whose topology hwloc
loads from the fake sysfs. A fake tree cannot be counted by perf_event_open, so there the
"perf" readings are generated (cycles, instructions, cache and branch events, multiplexed, as
the real source returns them): derive does all its work, only the syscalls are missing.

Next to it, the floor: reading /proc/stat once (bytes only, and read + parse). Every number is
the median of many runs, in milliseconds. Run: ``python bench/sweep.py [--runs N]``; writes its
section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import median_ms, table, write_section

from snumap_tui.model.derive import derive
from snumap_tui.model.sample import Sample
from snumap_tui.model.sampler import Sampler
from snumap_tui.sources import IO_SOURCE_NAMES
from snumap_tui.sources.base import SourceStatus
from snumap_tui.topology.build import load_topology

PERF_EVENTS = ["cycles", "instructions", "cache-references", "cache-misses",
               "branch-instructions", "branch-misses", "context-switches", "cpu-migrations",
               "page-faults"]


class GeneratedPerf:
    """Per-PU perf readings that advance like a real group read (raw, unscaled, 60 % on the
    PMU), for trees perf_event_open cannot count."""

    name = "perf"
    root = Path("/")

    def __init__(self, cpus: list[int]) -> None:
        self.cpus = np.array(cpus, dtype=np.int64)
        self.k = len(PERF_EVENTS)
        self.t = 0.0
        rng = np.random.default_rng(1)
        self.rate = rng.uniform(1e6, 3e9, size=(len(cpus), self.k))

    def status(self) -> SourceStatus:
        return SourceStatus(self.name, True, "generated readings (benchmark)")

    def read(self) -> dict[str, Any]:
        self.t += 0.1
        n = len(self.cpus)
        return {"cpus": self.cpus, "events": list(PERF_EVENTS), "value": self.rate * self.t,
                "enabled": np.full((n, self.k), self.t * 1e9),
                "running": np.full((n, self.k), self.t * 0.6e9)}

    def close(self) -> None:
        pass


class SteppingClock:
    """A clock that moves ``step`` seconds per call: each sweep of the benchmark then looks
    like one sweep per second to the sources with a cadence (cpufreq files at most every
    0.9 s per PU and 128 per sweep; the tasks source's 5 s refresh of status and threads),
    so they pay what they pay at ``snumap top``'s default 1 s interval, not the nothing they
    pay when sweeps come back to back."""

    def __init__(self, step: float = 1.0) -> None:
        self.t, self.step = 0.0, step

    def __call__(self) -> float:
        self.t += self.step
        return self.t


def at_one_second(sampler: Sampler) -> None:
    for s in sampler.sources:
        if s.name in ("freq", "tasks") and hasattr(s, "_clock"):
            s._clock = SteppingClock()  # type: ignore[attr-defined]


def measure(label: str, sampler: Sampler, stat_path: Path, runs: int) -> list[object]:
    """One row: the floor, each source's read, derive alone, and the full sweep (read every
    source + derive + aggregate) without and with the process list."""
    at_one_second(sampler)
    topo = sampler.topology
    raw_read = median_ms(stat_path.read_bytes, runs)
    procstat = next(s for s in sampler.sources if s.name == "procstat")
    parse = median_ms(procstat.read, runs)
    per_source = {s.name: median_ms(s.read, runs) for s in sampler._active}
    sampler.sweep()
    sampler.sweep()
    prev, cur = sampler.prev, sampler.last
    assert prev is not None and cur is not None
    p2 = Sample(prev.t_ns, 0, {k: v for k, v in prev.readings.items() if k != "tasks"})
    c2 = Sample(cur.t_ns, 0, {k: v for k, v in cur.readings.items() if k != "tasks"})
    derive_ms = median_ms(lambda: derive(p2, c2, topo), runs)
    with_tasks = median_ms(sampler.frame, runs)
    no_tasks = _without(sampler, {"tasks"}, runs)
    no_freq = _without(sampler, {"tasks", "freq"}, runs)
    no_io = _without(sampler, {"tasks", *IO_SOURCE_NAMES}, runs)
    reads = ", ".join(f"{k} {v:.3f}" for k, v in per_source.items())
    return [label, len(topo.pus), len(topo), f"{raw_read:.3f}", f"{parse:.3f}", reads,
            f"{derive_ms:.3f}", f"**{no_tasks:.3f}**", f"{no_freq:.3f}", f"{no_io:.3f}",
            f"{with_tasks:.3f}"]


def _without(sampler: Sampler, names: set[str], runs: int) -> float:
    """Median full sweep with some sources left out (then put back)."""
    out = [s for s in sampler._active if s.name in names]
    sampler._active = [s for s in sampler._active if s.name not in names]
    try:
        return median_ms(sampler.frame, runs)
    finally:
        sampler._active.extend(out)


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--sizes", default="128,384,1024")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    rows = []
    topo = load_topology()
    live = Sampler(topo, Path("/"))
    rows.append(measure("this machine", live, Path("/proc/stat"), args.runs))
    live.close()
    print(rows[-1], flush=True)
    from fakefs import FakeRoot
    from fakeio import FakeIo
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(x) for x in args.sizes.split(",")):
            nodes = 8 if n >= 128 else 2
            fake = FakeRoot(Path(tmp) / f"fs{n}", cpus=n, nodes=nodes, packages=2)
            # I/O as on an HPC node: a NIC and an NVMe disk per package, an HCA on the
            # second, and lo (hwloc places them from the fake sysfs, the sources read them).
            io = FakeIo(fake.root, {k: fake.cpus_of_node(k) for k in range(nodes)})
            io.add_nic("lo", None)
            for pkg, node in ((0, 0), (1, nodes // 2)):
                io.add_nic(f"eth{pkg}", f"0000:{2 + 0x80 * pkg:02x}:00.0", numa=node)
                io.add_disk(f"nvme{pkg}n1", f"0000:{3 + 0x80 * pkg:02x}:00.0", numa=node)
            io.add_hca("mlx5_0", "0000:84:00.0", numa=nodes // 2)
            ftopo = load_topology(fsroot=fake.root)
            from snumap_tui.model.sampler import default_sources
            srcs, _ = default_sources(fake.root)
            srcs = [s for s in srcs if s.name != "perf"] + [GeneratedPerf(list(range(n)))]
            s = Sampler(ftopo, fake.root, sources=srcs)
            runs = max(30, args.runs * 128 // n)
            rows.append(measure(f"fake tree, 2 packages, {nodes} nodes", s,
                                fake.root / "proc" / "stat", runs))
            s.close()
            print(rows[-1], flush=True)
    header = ["machine", "PUs", "objects", "/proc/stat read (floor)", "procstat read+parse",
              "each source's read", "derive (no tasks)", "full sweep, no tasks",
              "full sweep, no tasks, no freq", "full sweep, no tasks, no I/O",
              "full sweep with tasks"]
    body = table(header, rows) + (
        "\nAll in ms, medians. *full sweep, no tasks* = read every source but the process "
        "list + derive + aggregation to every object: the number the 2 ms budget at 384 PUs "
        "is about. *no freq* leaves out the cpufreq source, which reads one "
        "scaling_cur_freq file per PU, now at most every 0.9 s per PU and 128 files per sweep "
        "(sources with a cadence are timed as at a 1 s interval: their clock moves 1 s per "
        "sweep). *with tasks* adds the process list (/proc/PID/stat per "
        "process, task/*/stat of those that ran, status every 5 s) and the process rows (this machine: all its processes; fake trees: 4 processes). Fake "
        "trees: the perf source is generated readings (no syscalls), the other sources read "
        "the fake files. *no I/O* leaves out the I/O sources (net, ib, disk, gpu: this "
        "machine has eth0, lo, two ifb and vda, loops; the fake trees two NICs, lo, an HCA "
        "and two NVMe disks), so the I/O's cost is the difference with *no tasks*. The machine "
        f"is shared with other jobs (load average {load_average()} when the run ended), so "
        "medians carry noise.\n")
    print(body)
    if not args.no_write:
        write_section("sweep", "One full sweep: read + derive + aggregate", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
