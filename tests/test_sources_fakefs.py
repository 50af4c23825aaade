"""Sources on fake /sys + /proc trees (tests/fakefs.py) and on the corpus's gathered trees:
hotplug, RAPL wraparound, a root-only energy_uj, NUMA memory, jobs, --fsroot without perf."""

from __future__ import annotations

import tarfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from fakefs import FakeRoot

from snumap_tui.sources import all_sources
from snumap_tui.sources.freq import FreqSource
from snumap_tui.sources.numa import NumaSource
from snumap_tui.sources.perf import PerfSource
from snumap_tui.sources.procstat import ProcStatSource, busy_fraction
from snumap_tui.sources.rapl import ROOT_ONLY, RaplSource
from snumap_tui.sources.tasks import TasksSource


@pytest.fixture
def fake(tmp_path: Path) -> FakeRoot:
    return FakeRoot(tmp_path, cpus=16, nodes=4, packages=2, caches=False)


def energy_delta(a: dict, b: dict) -> np.ndarray:
    """What derive() does for RAPL: a difference that wraps at max_energy_range_uj."""
    d = b["energy_uj"] - a["energy_uj"]
    return np.where(d < 0, d + a["max_uj"] + 1, d)


def test_procstat_busy_pu_and_hotplug(fake: FakeRoot) -> None:
    src = ProcStatSource(fake.root)
    a = src.read()
    assert a["cpus"].tolist() == list(range(16))
    fake.advance(1.0, busy={3: 1.0, 5: 0.5})
    b = src.read()
    f = busy_fraction(a, b)
    assert f[3] == pytest.approx(1.0) and f[5] == pytest.approx(0.5)
    assert f[0] == pytest.approx(fake.idle_busy)
    fake.set_online(7, False)
    c = src.read()
    assert 7 not in c["cpus"].tolist() and len(c["cpus"]) == 15
    assert (fake.root / "sys/devices/system/cpu/cpu7/online").read_text() == "0\n"
    fake.set_online(7, True)
    fake.advance(1.0, busy={7: 1.0})
    d = src.read()
    assert 7 in d["cpus"].tolist()
    assert 7 not in busy_fraction(c, d)           # no previous reading to compare with
    assert busy_fraction(b, d)[7] == pytest.approx(1.0)   # its counters resumed


def test_numa_memory_and_counters(fake: FakeRoot) -> None:
    src = NumaSource(fake.root)
    assert src.status().available
    a = src.read()
    assert a["nodes"].tolist() == [0, 1, 2, 3]
    assert np.all(a["mem_total"] == fake.mem_per_node_kb * 1024)
    assert np.all(a["mem_used"] == a["mem_total"] - a["mem_free"])
    assert np.all(a["hugepages_total"] == 16 * 2 * 1024 * 1024)
    assert a["distance"][0] == [10, 16, 32, 32]
    fake.advance(2.0)
    b = src.read()
    assert np.all(b["numa_hit"] - a["numa_hit"] == 20_000)
    assert (b["numa_miss"] - a["numa_miss"]).tolist() == [0, 200, 400, 600]


def test_rapl_zones_map_to_packages_and_machine(tmp_path: Path) -> None:
    fake = FakeRoot(tmp_path, cpus=8, nodes=2, packages=2, rapl_psys=True, processes=False)
    r = RaplSource(fake.root).read()
    assert r["via"] == "powercap"
    assert r["domains"] == ["package-0", "core-0", "dram-0", "package-1", "core-1", "dram-1",
                            "psys"]
    assert r["objects"][2] == ["Package", 0] and r["objects"][-1] == ["Machine", 0]


def test_rapl_wraparound(fake: FakeRoot) -> None:
    src = RaplSource(fake.root)
    fake.set_energy("intel-rapl:0", fake.rapl_max_uj - 10_000_000)  # 10 J before the wrap
    a = src.read()
    before = {z: fake.true_energy_uj(z) for z in fake.rapl_zones}
    fake.advance(1.0, busy={0: 1.0})      # package 0 at 120 W: 120 J, so it wraps
    b = src.read()
    assert b["energy_uj"][0] < a["energy_uj"][0]          # the raw counter wrapped
    d = energy_delta(a, b)
    for i, zone in enumerate(fake.rapl_zones):
        assert d[i] == pytest.approx(fake.true_energy_uj(zone) - before[zone])
    assert d[0] == pytest.approx(120e6)


def test_rapl_root_only_energy_falls_back_to_power_pmu(fake: FakeRoot) -> None:
    for zone in fake.rapl_zones:
        rel = "sys/class/powercap/" + zone + "/energy_uj"
        fake.deny(rel)
    # Without a way to open perf counters (another machine's tree): unavailable, and why.
    st = RaplSource(fake.root, reader=fake.reader).status()
    assert not st.available and ROOT_ONLY in (st.reason or "") and st.fix
    # With the perf power PMU (an injected opener standing in for perf_event_open):
    opened: list[tuple[int, int, int]] = []
    counts = {"n": 1000}

    def opener(type_: int, config: int, cpu: int) -> Callable[[], int]:
        opened.append((type_, config, cpu))
        return lambda: counts["n"] * (config + 1)

    src = RaplSource(fake.root, reader=fake.reader, counter_opener=opener)
    st = src.status()
    assert st.available and "power PMU" in (st.reason or "")
    r = src.read()
    assert r["via"] == "perf"
    assert (24, 0x02, 0) in opened and (24, 0x02, 4) in opened   # one PU per package
    assert r["domains"][:2] == ["package-0", "package-1"]
    assert r["energy_uj"][0] == pytest.approx(1000 * 3 * 2 ** -32 * 1e6)


def test_rapl_absent(tmp_path: Path) -> None:
    fake = FakeRoot(tmp_path, cpus=2, rapl=False, hypervisor=True, processes=False)
    st = RaplSource(fake.root).status()
    assert not st.available and "virtual machine" in (st.reason or "")
    assert RaplSource(fake.root).read() == {}


def test_cpufreq(fake: FakeRoot) -> None:
    src = FreqSource(fake.root)
    assert src.status().available
    fake.advance(1.0, busy={2: 1.0})
    r = src.read()
    assert r["cur_khz"][2] == 3_000_000 and r["cur_khz"][0] == 1_200_000
    assert np.all(r["max_khz"] == 3_500_000)
    assert "aperf" not in r      # fsroot: no msr counters, absent rather than zero


def test_no_cpufreq(tmp_path: Path) -> None:
    fake = FakeRoot(tmp_path, cpus=2, cpufreq=False, processes=False)
    st = FreqSource(fake.root).status()
    assert not st.available and "cpufreq" in (st.reason or "")


def test_tasks_threads_affinity_jobs_numa(fake: FakeRoot) -> None:
    src = TasksSource(fake.root)
    src.want_numa(4300)
    fake.advance(1.0, busy={15: 1.0})
    r = src.read()
    th = r["threads"]
    i = th["tid"].tolist().index(4300)
    assert th["comm"][i] == "(weird) name" and th["last_cpu"][i] == 15
    assert th["state"][i] == "R" and th["utime"][i] == 90 and th["stime"][i] == 10
    procs = r["processes"]
    assert procs[4200]["job"] == "slurm:1234" and procs[4200]["nthreads"] == 4
    assert procs[4300]["job"] == "pbs:5678.server" and procs[4300]["affinity"] == [15]
    assert procs[880]["job"] == "systemd:ssh.service"
    assert procs[4300]["numa_pages"] == {3: 300, 0: 40}
    assert "numa_pages" not in procs[4200]     # only for processes asked for
    assert procs[4300]["cmdline"] == "./a.out x y"


def test_perf_is_not_this_machine_on_a_fake_root(fake: FakeRoot) -> None:
    src = PerfSource(fake.root)
    st = src.status()
    assert not st.available and "not this machine" in (st.reason or "")
    assert src.read() == {}
    assert all(not s.available for s in src.statuses())


def test_all_sources_on_a_fake_root(fake: FakeRoot) -> None:
    sources = all_sources(fake.root)
    names = [s.name for s in sources]
    assert names == ["procstat", "perf", "freq", "rapl", "numa", "tasks",
                     "net", "ib", "disk", "gpu"]
    readings = {s.name: s.read() for s in sources if s.status().available}
    # The fake root has no I/O devices (tests/fakeio.py adds them): those say so.
    assert set(readings) == {"procstat", "freq", "rapl", "numa", "tasks"}
    for s in sources:
        s.close()


def test_large_fake_machine(tmp_path: Path) -> None:
    fake = FakeRoot(tmp_path, cpus=1024, nodes=16, packages=4, cpu_dirs=False,
                    processes=False)
    r = ProcStatSource(fake.root).read()
    assert len(r["cpus"]) == 1024
    assert len(NumaSource(fake.root).read()["nodes"]) == 16
    assert len(RaplSource(fake.root).read()["domains"]) == 12


CORPUS_NODES = {"64amd64-4s2n4ca2co": 8, "96em64t-4n4d3ca2co": 4, "16amd64-8n2c": 8,
                "fakeheteromemtiers": 7}


@pytest.mark.parametrize("name", sorted(CORPUS_NODES))
def test_corpus_fsroot_loads_numa_memory(corpus: Path, tmp_path: Path, name: str) -> None:
    tarball = corpus / "fsroot" / f"{name}.tar.bz2"
    if not tarball.exists():
        pytest.skip(f"{tarball.name} not in the corpus")
    with tarfile.open(tarball) as tf:
        tf.extractall(tmp_path, filter="data")
    root = tmp_path / name
    src = NumaSource(root)
    assert src.status().available
    r = src.read()
    assert len(r["nodes"]) == CORPUS_NODES[name]
    assert np.all(r["mem_total"] > 0) and np.all(np.isfinite(r["mem_total"]))
    assert np.all(r["mem_free"] <= r["mem_total"])
    dist = r["distance"]
    assert len(dist) == CORPUS_NODES[name] and all(dist[i][i] == 10 for i in range(len(dist)))
    if (root / "proc/stat").exists():
        assert len(ProcStatSource(root).read()["cpus"]) > 0
    assert not PerfSource(root).status().available


def test_rapl_verdicts_both_ways_from_one_source(fake: FakeRoot) -> None:
    """What `snumap probe` prints: powercap's verdict (through the source's reader, so a
    denied energy_uj is seen as such), the perf power PMU's, and the source's own, with
    the PMU's counters opened once, not once per verdict."""
    for zone in fake.rapl_zones:
        fake.deny("sys/class/powercap/" + zone + "/energy_uj")
    opened: list[tuple[int, int, int]] = []

    def opener(type_: int, config: int, cpu: int) -> Callable[[], int]:
        opened.append((type_, config, cpu))
        return lambda: 1

    src = RaplSource(fake.root, reader=fake.reader, counter_opener=opener)
    pc, perf, own = src.verdicts()
    assert (pc.name, pc.available, pc.reason) == ("rapl:powercap", False, ROOT_ONLY)
    assert perf.name == "rapl:perf" and perf.available
    assert own.name == "rapl" and own.available and src.via == "perf"
    n = len(opened)
    assert n > 0 and src.verdicts()[1] is perf and len(opened) == n
    src.close()


def test_rapl_verdicts_when_powercap_works(fake: FakeRoot) -> None:
    closed: list[int] = []

    class Counter:
        def __call__(self) -> int:
            return 1

        def close(self) -> None:
            closed.append(1)

    src = RaplSource(fake.root, reader=fake.reader,
                     counter_opener=lambda t, c, cpu: Counter())
    pc, perf, own = src.verdicts()
    assert pc.available and perf.available and own.available and src.via == "powercap"
    # the PMU was opened only to give its verdict: already closed again
    assert closed and src.read()["via"] == "powercap"


def test_probe_says_when_power_counters_open_but_never_advance(fake: FakeRoot) -> None:
    """A 16-core Firecracker VM: the perf power PMU opened ("rapl:perf available") and read
    0 for ever, so every recording's energy was 0.00 J. Probe now reads twice and says so."""
    for zone in fake.rapl_zones:
        fake.deny("sys/class/powercap/" + zone + "/energy_uj")
    reads = {"n": 0}

    def frozen(type_: int, config: int, cpu: int) -> Callable[[], int]:
        return lambda: 0

    def running(type_: int, config: int, cpu: int) -> Callable[[], int]:
        def read() -> int:
            reads["n"] += 1
            return reads["n"] * 1000
        return read

    src = RaplSource(fake.root, reader=fake.reader, counter_opener=frozen)
    v = {s.name: s for s in src.verdicts(still_check=True)}
    src.close()
    for name in ("rapl:perf", "rapl"):
        assert not v[name].available and v[name].detail["still"]
        assert v[name].reason == ("opens, but its energy counters did not advance in 80 ms: "
                                  "no real RAPL here, e.g. a virtual machine")
    assert ROOT_ONLY in (v["rapl:powercap"].reason or "")       # that way's own verdict kept
    src = RaplSource(fake.root, reader=fake.reader, counter_opener=running)
    v = {s.name: s for s in src.verdicts(still_check=True)}
    src.close()
    assert v["rapl:perf"].available and v["rapl"].available and reads["n"] > 0
