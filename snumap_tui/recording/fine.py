"""`snumap record` below 10 ms: the per-PU counters sampled by the kernel at the interval
(sources/perf_sampling.py), the recorder's loop awake every ``SWEEP_S`` only.

At each of the loop's sweeps (every source read, the perf groups among them), the samples the
kernel took since the last sweep go into the file first, on the interval's grid, then the
sweep's own: one sample stream in time order, each of the grid's samples holding the per-PU
counters only, as the samples between two reads of the slower sources always did.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from snumap_tui.model.sample import Sample

if TYPE_CHECKING:
    from snumap_tui.sources.perf import PerfSource
    from snumap_tui.sources.perf_sampling import KernelSampled

SWEEP_S = 0.1
BELOW_S = 0.01      # the intervals below this are the kernel's (10 ms and up: the loop's)


class FineCounters:
    """The kernel-sampled counters of one recording, written before each sweep's sample."""

    def __init__(self, sampled: KernelSampled, source: PerfSource) -> None:
        self.sampled = sampled
        self.source = source
        self.generation = source.generation
        self.restarts = 0

    def _follow(self) -> None:
        """The source opened its groups again (the online PUs changed): the rings of the
        new groups' clocks from here on (the old ones unmapped, which ends their events)."""
        old = self.sampled
        old.close()
        new = _rings(self.source, old.period)
        new.anchor, new.last_t = old.anchor, old.last_t
        new.lost, new.samples = old.lost, old.samples
        self.sampled = new
        self.generation = self.source.generation
        self.restarts += 1

    def write_before(self, writer: Any, sweep: Sample) -> Sample:
        """The grid's samples since the last sweep written, given this sweep (not written
        here); the sweep with its counters as they were at its time (interpolated between
        the kernel's last sample before it and the direct read after)."""
        if self.source.generation != self.generation:
            self._follow()
        read_ns = self.source.read_ns
        grid, at_sweep = self.sampled.between(
            sweep.t_ns, sweep.readings.get("perf") or {},
            read_ns if len(read_ns) == len(self.sampled.cpus) else None)
        for t, reading in grid:
            wall = sweep.wall_ns - (sweep.t_ns - t)
            writer.add_sample(Sample(t_ns=t, wall_ns=wall, readings={"perf": reading}))
        if at_sweep is None:
            return sweep
        return Sample(t_ns=sweep.t_ns, wall_ns=sweep.wall_ns,
                      readings={**sweep.readings, "perf": at_sweep})

    def header(self) -> dict[str, Any]:
        """The recording header's ``counter_sampling`` (docs/format.md)."""
        return {"by": "kernel", "period_ns": self.sampled.period,
                "pus": len({r.cpu for r in self.sampled.rings}), "sweep_ns": int(SWEEP_S * 1e9)}

    def close(self) -> None:
        self.sampled.close()


def _rings(src: PerfSource, period: int) -> KernelSampled:
    """The rings of SRC's groups' sampling clocks (the groups opened with them if they were
    not: ``arm`` does it before the sampler first opens them)."""
    from snumap_tui.sources.perf_sampling import KernelSampled

    groups = src.sample_every(period)
    cpus, events = src.layout()
    return KernelSampled(groups, cpus, events, period)


def arm(sources: list[Any], interval_s: float) -> None:
    """Below BELOW_S, have the perf source open its groups with their sampling clocks from
    the start (before the sampler's first status() opens them: not opened twice)."""
    from snumap_tui.sources.perf import PerfSource

    if interval_s < BELOW_S:
        for src in sources:
            if isinstance(src, PerfSource):
                src.sample_ns = round(interval_s * 1e9)


def start(sampler: Any, interval_s: float) -> FineCounters | None:
    """Have the kernel sample the sampler's perf source every INTERVAL_S (below BELOW_S);
    None when it cannot (no perf source, or no group took a sampling clock, or no ring
    could be mapped): its groups are then opened again without clocks, and the loop reads
    the counters itself at every sample, as before."""
    from snumap_tui.sources.perf import PerfSource

    if interval_s >= BELOW_S:
        return None
    statuses = sampler.statuses()
    src = next((s for s in sampler.sources if isinstance(s, PerfSource)
                and s.name in statuses and statuses[s.name].available), None)
    if src is None:
        return None
    sampled = _rings(src, round(interval_s * 1e9))
    if not sampled:
        sampled.close()
        src.sample_every(0)
        return None
    return FineCounters(sampled, src)
