"""GHz from APERF/MPERF is scaled by the base (TSC) frequency, never by cpuinfo_max_freq (the
maximum turbo frequency with intel_pstate/amd-pstate): from cpufreq ``base_frequency``, else
the msr PMU's ``tsc`` opened next to aperf/mperf, else max_khz flagged. And opening aperf and
mperf leaks nothing when the second open fails."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakefs import FakeRoot
from topo_factory import make_topology

from snumap_tui.model.derive import derive
from snumap_tui.model.sample import Sample
from snumap_tui.sources.freq import FreqSource

S = 1_000_000_000
# arch/x86/events/msr.c: event codes of the msr PMU (sysfs "event=0x.." files)
MSR_EVENTS = {"tsc": "0x00", "aperf": "0x01", "mperf": "0x02"}
RATES = {0x00: 2.0e9, 0x01: 3.0e9, 0x02: 2.0e9}  # per second: TSC 2 GHz, APERF 1.5x MPERF


class FakeCounter:
    """A free-running msr counter: counts RATES[config] per second of the fake clock."""

    def __init__(self, clock: list[float], config: int, opened: list[FakeCounter]) -> None:
        self.clock, self.config, self.closed = clock, config, False
        opened.append(self)

    def __call__(self) -> int:
        return int(self.clock[0] * RATES[self.config])

    def close(self) -> None:
        self.closed = True


def msr_tree(tmp_path: Path, events: tuple[str, ...] = ("tsc", "aperf", "mperf"),
             base_khz: int | None = None) -> FakeRoot:
    fake = FakeRoot(tmp_path, cpus=2, nodes=1, packages=1, caches=False, processes=False)
    d = fake.root / "sys/bus/event_source/devices/msr"
    (d / "events").mkdir(parents=True)
    (d / "format").mkdir()
    (d / "type").write_text("14\n")
    (d / "format/event").write_text("config:0-63\n")
    for ev in events:
        (d / "events" / ev).write_text(f"event={MSR_EVENTS[ev]}\n")
    if base_khz is not None:
        for c in range(2):
            (fake.root / f"sys/devices/system/cpu/cpu{c}/cpufreq/base_frequency").write_text(
                f"{base_khz}\n")
    return fake


def ghz_of(fake: FakeRoot, opened: list[FakeCounter]) -> tuple[float | None, set[str]]:
    clock = [10.0]
    src = FreqSource(fake.root, reader=fake.reader,
                     counter_opener=lambda typ, cfg, cpu: FakeCounter(clock, cfg, opened))
    assert src.status().available
    topo = make_topology(packages=1, cores_per_numa=2, pus_per_core=1)
    a = src.read()
    clock[0] += 1.0
    b = src.read()
    src.close()
    f = derive(Sample(5 * S, 0, {"freq": a}), Sample(6 * S, 0, {"freq": b}), topo)
    return f.get("ghz", topo.pu(0).id), f.flags.get("ghz", set())


def test_base_from_the_tsc_not_the_turbo_max(tmp_path: Path) -> None:
    fake = msr_tree(tmp_path)          # cpuinfo_max_freq 3.5 GHz (turbo), TSC 2 GHz
    opened: list[FakeCounter] = []
    ghz, flags = ghz_of(fake, opened)
    # 2 GHz x 3/2 = 3.0; scaled by max_khz it would read 5.25 GHz
    assert ghz == pytest.approx(3.0)
    assert "base_from_max_khz" not in flags
    assert len(opened) == 6 and all(c.closed for c in opened)


def test_base_frequency_file_wins(tmp_path: Path) -> None:
    fake = msr_tree(tmp_path, events=("aperf", "mperf"), base_khz=2_200_000)
    ghz, flags = ghz_of(fake, [])
    assert ghz == pytest.approx(3.3)   # 2.2 GHz (intel_pstate base_frequency) x 1.5
    assert "base_from_max_khz" not in flags


def test_max_khz_is_a_flagged_last_resort(tmp_path: Path) -> None:
    fake = msr_tree(tmp_path, events=("aperf", "mperf"))
    ghz, flags = ghz_of(fake, [])
    assert ghz == pytest.approx(5.25)  # 3.5 GHz x 1.5: the best it can say, and says so
    assert "base_from_max_khz" in flags


def test_failed_mperf_closes_the_aperf_already_open(tmp_path: Path) -> None:
    fake = msr_tree(tmp_path)
    opened: list[FakeCounter] = []
    clock = [0.0]

    def opener(typ: int, cfg: int, cpu: int) -> FakeCounter:
        if cfg == 0x02 and cpu == 1:
            raise PermissionError(13, "Permission denied")
        return FakeCounter(clock, cfg, opened)

    src = FreqSource(fake.root, reader=fake.reader, counter_opener=opener)
    st = src.status()
    assert st.available and st.detail["aperf_mperf"] is False   # cpufreq still works
    # PU 0's aperf, mperf, tsc and PU 1's aperf were opened: every one closed again
    assert len(opened) == 4 and all(c.closed for c in opened)
