"""snumap exporter on fake trees: what the exposition says against what the tree did.

The fake tree's counters advance by known amounts (tests/fakefs.py), so CPU seconds, RAPL
joules (across a wrap), node memory and the per-job numbers are checked exactly; a fake perf
source proves the ratio of sums: IPC per package from the exported counters equals the IPC
``derive`` gives the package for the same interval.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fakefs import FakeRoot
from prometheus_client.parser import text_string_to_metric_families

from snumap_tui.exporter.runtime import Exporter
from snumap_tui.model.derive import derive
from snumap_tui.sources.base import SourceStatus
from snumap_tui.topology.build import load_topology
from snumap_tui.topology.model import Topology


class FakePerf:
    """A perf source whose per-PU counts grow by known steps: cycles 1e9 per sweep on
    every PU, instructions 1e9 x (1 + PU index) / 4 (so IPC differs per PU)."""

    name = "perf"

    def __init__(self, cpus: list[int], events: tuple[str, ...] = ("cycles", "instructions")
                 ) -> None:
        self.root = Path("/")
        self.cpus = np.array(cpus, dtype=np.int64)
        self.events = list(events)
        self.n = 0

    def status(self) -> SourceStatus:
        return SourceStatus(self.name, True)

    def read(self) -> dict[str, Any]:
        self.n += 1
        k = len(self.events)
        step = np.ones((len(self.cpus), k)) * 1e9
        if "instructions" in self.events:
            step[:, self.events.index("instructions")] = 1e9 * (1 + self.cpus) / 4
        value = step * self.n
        t = np.full((len(self.cpus), k), 1e6 * self.n)
        return {"cpus": self.cpus, "events": self.events, "value": value, "enabled": t,
                "running": t}

    def close(self) -> None:
        pass


def sources(fake: FakeRoot, perf: bool = True) -> list[Any]:
    from snumap_tui.sources.freq import FreqSource
    from snumap_tui.sources.numa import NumaSource
    from snumap_tui.sources.procstat import ProcStatSource
    from snumap_tui.sources.rapl import RaplSource
    from snumap_tui.sources.tasks import TasksSource

    r = fake.reader
    out: list[Any] = [ProcStatSource(fake.root, reader=r),
                      FreqSource(fake.root, reader=r, max_age_s=0),
                      RaplSource(fake.root, reader=r), NumaSource(fake.root, reader=r),
                      TasksSource(fake.root, reader=r)]
    if perf:
        out.append(FakePerf(list(range(fake.ncpus))))
    return out


def parse(body: bytes) -> dict[str, list[tuple[dict[str, str], float]]]:
    """name (as scraped) -> [(labels, value)]."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def total(series: dict[str, list[tuple[dict[str, str], float]]], name: str,
          **match: str) -> float:
    return sum(v for labels, v in series.get(name, ())
               if all(labels.get(k) == w for k, w in match.items()))


@pytest.fixture()
def fake(tmp_path: Path) -> FakeRoot:
    return FakeRoot(tmp_path / "fs", cpus=8, nodes=2, packages=2)


@pytest.fixture()
def topo(fake: FakeRoot) -> Topology:
    return load_topology(fsroot=fake.root)


def run(exp: Exporter, fake: FakeRoot, steps: Iterator[dict[int, float]]) -> None:
    exp.on_sample(exp.sampler.sweep())
    for busy in steps:
        fake.advance(1.0, busy=busy)
        exp.on_sample(exp.sampler.sweep())


def test_cpu_seconds_memory_and_energy_across_a_wrap(fake: FakeRoot, topo: Topology) -> None:
    exp = Exporter(topo, fake.root, sources=sources(fake))
    try:
        fake.set_energy("intel-rapl:0", fake.rapl_max_uj - 10)   # the first advance wraps
        before = fake.true_energy_uj("intel-rapl:0")
        run(exp, fake, iter([{1: 1.0}, {1: 1.0}]))
        s = parse(exp.render())
    finally:
        exp.close()
    # PU 1 ran 2 s: 90 % user, 10 % system; its SMT sibling idled at 2 %.
    core1 = topo.core_of(1)
    pkg1 = topo.package_of(1)
    assert core1 is not None and pkg1 is not None
    mine = {"core": str(core1.os_index), "package": str(pkg1.os_index)}
    busy = total(s, "snumap_cpu_seconds_total", mode="user", **mine) + \
        total(s, "snumap_cpu_seconds_total", mode="system", **mine)
    assert busy == pytest.approx(2.0 + 2 * 0.02, abs=0.03)
    # Every PU's seconds add up to the time that passed (2 s x 8 PUs).
    assert total(s, "snumap_cpu_seconds_total") == pytest.approx(16.0, abs=0.05)
    # Node memory: the tree's MemTotal of each node, in bytes.
    for n in range(2):
        assert total(s, "snumap_memory_size_bytes", numa_node=str(n)) == \
            fake.mem_per_node_kb * 1024
    # RAPL: joules of package 0 equal the true energy, the wrap included, not a reset.
    e0 = total(s, "snumap_energy_joules_total", domain="package", package="0")
    assert e0 == pytest.approx((fake.true_energy_uj("intel-rapl:0") - before) / 1e6)
    assert e0 > 1.0
    # A perf event the source did not open is absent, not 0.
    assert "snumap_branch_misses_total" not in s


def test_ipc_per_package_is_the_ratio_of_sums_derive_gives(fake: FakeRoot,
                                                            topo: Topology) -> None:
    exp = Exporter(topo, fake.root, sources=sources(fake), jobs=False)
    try:
        first = exp.sampler.sweep()
        exp.on_sample(first)
        fake.advance(1.0)
        second = exp.sampler.sweep()
        exp.on_sample(second)
        s = parse(exp.render())
    finally:
        exp.close()
    frame = derive(first, second, topo)
    for pkg in topo.by_type("Package"):
        p = str(pkg.os_index)
        ipc = total(s, "snumap_instructions_total", package=p) / \
            total(s, "snumap_cycles_total", package=p)
        assert ipc == pytest.approx(frame.get("ipc", pkg.id))
        # ... and not the mean of the cores' IPCs (they differ, so the two differ).
        cores = [c for c in topo.by_type("Core") if topo.ancestor_of_type(c, "Package") == pkg]
        assert len({frame.get("ipc", c.id) for c in cores}) > 1


def test_per_pu_adds_the_cpu_label(fake: FakeRoot, topo: Topology) -> None:
    for per_pu, n in ((False, fake.ncores), (True, fake.ncpus)):
        exp = Exporter(topo, fake.root, sources=sources(fake), per_pu=per_pu, jobs=False)
        try:
            run(exp, fake, iter([{}]))
            s = parse(exp.render())
        finally:
            exp.close()
        user = [lab for lab, _ in s["snumap_cpu_seconds_total"] if lab["mode"] == "user"]
        assert len(user) == n
        assert all(("cpu" in lab) == per_pu for lab in user)
        assert all({"package", "numa_node", "core"} <= set(lab) for lab in user)
        assert all("pid" not in lab for lab in user)


def test_unavailable_sources_are_absent_with_the_reason(tmp_path: Path) -> None:
    fake = FakeRoot(tmp_path / "fs", cpus=4, rapl=False, power_pmu=False, cpufreq=False)
    topo = load_topology(fsroot=fake.root)
    exp = Exporter(topo, fake.root, sources=sources(fake, perf=False), jobs=False)
    try:
        run(exp, fake, iter([{}]))
        s = parse(exp.render())
    finally:
        exp.close()
    assert "snumap_energy_joules_total" not in s
    assert "snumap_cpu_frequency_hertz" not in s
    up = {lab["source"]: v for lab, v in s["snumap_source_up"]}
    assert up["rapl"] == 0.0 and up["procstat"] == 1.0
    info = {lab["source"]: lab for lab, _ in s["snumap_source_info"]}
    assert info["rapl"]["available"] == "0" and info["rapl"]["reason"]


def test_jobs_cpu_seconds_and_memory_per_numa_node(fake: FakeRoot, topo: Topology) -> None:
    exp = Exporter(topo, fake.root, sources=sources(fake, perf=False))
    lmp = next(p for p in fake.processes if p.pid == 4200)
    try:
        run(exp, fake, iter([{c: 1.0 for c in range(4)}] * 2))
        s = parse(exp.render())
    finally:
        exp.close()
    # Job 1234's threads ran 2 s each, on the PUs they sit on: per node, their sum.
    want: dict[str, float] = {}
    for th in lmp.threads:
        node = str(fake.node_of(th.last_cpu))
        want[node] = want.get(node, 0.0) + 2.0
    got = {lab["numa_node"]: v for lab, v in s["snumap_job_cpu_seconds_total"]
           if lab["job"] == "1234"}
    assert got == pytest.approx(want)
    labels = next(lab for lab, _ in s["snumap_job_cpu_seconds_total"] if lab["job"] == "1234")
    assert labels["scheduler"] == "slurm" and labels["user"] == "1000"
    mem = {(lab["job"], lab["numa_node"]): v for lab, v in s["snumap_job_resident_bytes"]}
    # numa_maps: the job's own mapping (5000 pages on node 0) and libc's (40 on node 0).
    assert mem[("1234", "0")] == (5000 + 40) * 4096
    assert mem[("5678.server", str(fake.nnodes - 1))] == 300 * 4096
    # sshd is a systemd service, not a batch job: no series.
    assert all(lab["scheduler"] in ("slurm", "pbs") for lab, _ in s["snumap_job_processes"])


def test_series_at_384_pus_stay_under_5000(tmp_path: Path) -> None:
    from snumap_tui.sources.perf import HW_EVENTS, SW_EVENTS

    fake = FakeRoot(tmp_path / "fs", cpus=384, nodes=8, packages=2, cpu_dirs=True)
    topo = load_topology(fsroot=fake.root)
    src = sources(fake, perf=False) + [FakePerf(list(range(384)), (*HW_EVENTS, *SW_EVENTS))]
    exp = Exporter(topo, fake.root, sources=src)
    try:
        run(exp, fake, iter([{}]))
        body = exp.render()
    finally:
        exp.close()
    n = sum(1 for line in body.decode().splitlines() if line and not line.startswith("#"))
    assert 3000 < n <= 5000


def test_a_source_that_stops_is_absent_not_frozen(fake: FakeRoot, topo: Topology) -> None:
    exp = Exporter(topo, fake.root, sources=sources(fake, perf=False), jobs=False)
    try:
        run(exp, fake, iter([{}, {}]))
        assert "snumap_energy_joules_total" in parse(exp.render())
        for zone in fake.rapl_zones:
            fake.deny(f"sys/class/powercap/{zone}/energy_uj")
        run(exp, fake, iter([{}]))
        s = parse(exp.render())
    finally:
        exp.close()
    assert "snumap_energy_joules_total" not in s
    assert total(s, "snumap_cpu_seconds_total") > 0      # the others go on
