"""The cpufreq source reads each scaling_cur_freq at most every max_age_s and at most
``budget`` files per sweep (stalest first), reusing the rest; unreadable values stay NaN."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from fakefs import FakeRoot

from snumap_tui.sources.freq import FreqSource


class Clock:
    def __init__(self) -> None:
        self.t = 50.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def fake(tmp_path: Path) -> FakeRoot:
    return FakeRoot(tmp_path, cpus=8, nodes=1, packages=1, caches=False, processes=False)


def counting(fake: FakeRoot) -> tuple[list[str], object]:
    seen: list[str] = []

    def reader(path: Path) -> str:
        if path.name == "scaling_cur_freq":
            seen.append(path.parent.parent.name)
        return fake.reader(path)

    return seen, reader


def test_values_are_reused_within_max_age(fake: FakeRoot) -> None:
    seen, reader = counting(fake)
    clock = Clock()
    src = FreqSource(fake.root, reader=reader, max_age_s=1.0, clock=clock)
    first = src.read()["cur_khz"]
    assert len(seen) == 8 and np.all(first == 2_400_000)
    fake.advance(1.0, busy={2: 1.0})
    seen.clear()
    clock.t += 0.5
    again = src.read()["cur_khz"]
    assert not seen and again[2] == 2_400_000            # too young: reused
    clock.t += 0.5
    later = src.read()["cur_khz"]
    assert len(seen) == 8 and later[2] == 3_000_000 and later[0] == 1_200_000
    assert first[2] == 2_400_000                          # readings are copies, not views


def test_budget_reads_the_stalest_first(fake: FakeRoot) -> None:
    seen, reader = counting(fake)
    clock = Clock()
    src = FreqSource(fake.root, reader=reader, max_age_s=0.0, budget=3, clock=clock)
    src.read()
    assert len(seen) == 8                               # never read: all of them at once
    rounds = []
    for _ in range(3):
        seen.clear()
        clock.t += 1
        src.read()
        rounds.append(list(seen))
    assert [len(r) for r in rounds] == [3, 3, 3]
    covered = rounds[0] + rounds[1] + rounds[2][:2]
    assert sorted(covered) == sorted(f"cpu{c}" for c in range(8))     # round robin
    assert rounds[2][2] == rounds[0][0]                 # then the stalest again


def test_an_unreadable_value_is_nan_not_zero(fake: FakeRoot) -> None:
    clock = Clock()
    src = FreqSource(fake.root, reader=fake.reader, max_age_s=0.0, clock=clock)
    assert src.read()["cur_khz"][3] == 2_400_000
    (fake.root / "sys/devices/system/cpu/cpu3/cpufreq/scaling_cur_freq").write_text("garbage\n")
    clock.t += 1
    assert np.isnan(src.read()["cur_khz"][3])


def test_live_reads_use_the_same_cadence(fake: FakeRoot) -> None:
    """The os.read fast path (default reader) on the fake files."""
    clock = Clock()
    src = FreqSource(fake.root, max_age_s=1.0, clock=clock)
    assert np.all(src.read()["cur_khz"] == 2_400_000)
    fake.advance(1.0, busy={1: 1.0})
    assert src.read()["cur_khz"][1] == 2_400_000
    clock.t += 1.0
    assert src.read()["cur_khz"][1] == 3_000_000


def test_kept_open_files_recover_and_close(fake: FakeRoot) -> None:
    """The fast path keeps each file open (pread at 0): a bad value is NaN, a later good one is
    read again through a fresh descriptor, and close() releases every descriptor."""
    clock = Clock()
    src = FreqSource(fake.root, max_age_s=0.0, clock=clock)
    f = fake.root / "sys/devices/system/cpu/cpu2/cpufreq/scaling_cur_freq"
    assert src.read()["cur_khz"][2] == 2_400_000
    f.write_text("garbage\n")
    clock.t += 1
    assert np.isnan(src.read()["cur_khz"][2])
    f.write_text("1800000\n")
    clock.t += 1
    assert src.read()["cur_khz"][2] == 1_800_000
    fds = list(src._cur_fds.values())
    assert len(fds) == 8
    src.close()
    for fd in fds:
        with pytest.raises(OSError):
            os.fstat(fd)
