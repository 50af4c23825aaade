"""Energy apportioned to processes, threads and regions by busy time (analysis/energy.py), on
a fake RAPL tree (tests/fakefs.py) read by the real RAPL source."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from snumap_tui.analysis.energy import curves, window_energy
from snumap_tui.analysis.load import load
from snumap_tui.analysis.report import build_report, format_report
from snumap_tui.analysis.synth import synthetic_topology, write_recording
from snumap_tui.model.sample import Sample
from snumap_tui.sources.rapl import RaplSource
from snumap_tui.store import open as open_recording
from snumap_tui.trace.events import SWITCH, TaskInfo
from tests.fakefs import FakeRoot
from tests.test_analysis import make_events

T = 10**9
STEP = 100_000_000            # 100 ms between samples
STEPS = 10
# Per step: 101 (process 100) runs 60 ms on PU 0, 201 (process 200) 30 ms on PU 1, and an
# untraced task 15 ms on PU 1: busy shares of the package's 2 x 100 ms of PU time 30 %, 15 %
# and 7.5 %.
RUNS = [(0, 101, 100, 0, 60), (1, 201, 200, 20, 50), (1, 55, -2, 60, 75)]


def _events() -> np.ndarray:
    rows = []
    for k in range(STEPS):
        base = T + k * STEP
        for cpu, tid, pid, a, b in RUNS:
            rows.append((base + a * 10**6, SWITCH, cpu, 0, tid, 0, pid, 0))
            rows.append((base + b * 10**6, SWITCH, cpu, tid, 0, pid, 0, 1))
    return make_events(rows)


def _samples(tmp_path: Path) -> tuple[list[Sample], list[float], list[float]]:
    """Readings of the fake tree, the package drawing 20 W and 60 W in turn, DRAM 5 W."""
    fake = FakeRoot(tmp_path / "fake", cpus=2, packages=1, smt=1)
    src = RaplSource(fake.root, reader=fake.reader)
    pkg_zone = next(z for z, v in fake.rapl_zones.items() if v["name"] == "package-0")
    dram_zone = next(z for z, v in fake.rapl_zones.items() if v["name"] == "dram")
    pkg = dram = 1_000_000
    out, pkg_j, dram_j = [], [], []
    for k in range(STEPS + 1):
        fake.set_energy(pkg_zone, pkg)
        fake.set_energy(dram_zone, dram)
        out.append(Sample(T + k * STEP, T + k * STEP, {"rapl": src.read()}))
        w = 20.0 if k % 2 else 60.0
        pkg += int(w * 0.1 * 1e6)
        dram += int(5.0 * 0.1 * 1e6)
        pkg_j.append(w * 0.1)
        dram_j.append(0.5)
    return out, pkg_j[:STEPS], dram_j[:STEPS]


@pytest.fixture()
def recording(tmp_path: Path) -> tuple[Path, float, float]:
    samples, pkg_j, dram_j = _samples(tmp_path)
    topo = synthetic_topology(1, 1, 2, 1)
    path = write_recording(tmp_path / "e.rec", topo, _events(), samples=samples,
                           tasks=[TaskInfo(101, 100, "solver"), TaskInfo(201, 200, "io")],
                           header={"backend": "test"}, regions=_phase())
    return path, sum(pkg_j), sum(dram_j)


def _phase() -> tuple[np.ndarray, list]:
    """A marker phase "setup" on thread 101 over the first two sample intervals."""
    from snumap_tui.trace.region_catalog import BEGIN, END, REGION_DTYPE, RegionNames

    names = RegionNames()
    rid = names.intern("setup", "marker", "marker")
    rows = np.zeros(2, REGION_DTYPE)
    for i, (t, op) in enumerate(((T, BEGIN), (T + 2 * STEP, END))):
        rows[i]["t_ns"], rows[i]["tid"], rows[i]["pid"] = t, 101, 100
        rows[i]["op"], rows[i]["rid"] = op, rid
    return rows, list(names.items)


def test_two_busy_processes_get_shares_equal_to_their_busy_time(recording) -> None:
    path, pkg, dram = recording
    with open_recording(path) as rec:
        r = build_report(rec)
    a = r["energy_attribution"]
    assert a["estimate"] and "time it ran" in a["rule"]
    doms = {d["domain"]: d for d in a["domains"]}
    assert doms["package-0"]["energy_j"] == pytest.approx(pkg)
    assert doms["dram-0"]["energy_j"] == pytest.approx(dram)
    procs = {p["pid"]: p for p in r["processes"]}
    total = pkg + dram
    # Busy shares of the package's PU time: 30 % and 15 % (within 2 %).
    assert procs[100]["energy_j"] / total == pytest.approx(0.30, rel=0.02)
    assert procs[200]["energy_j"] / total == pytest.approx(0.15, rel=0.02)
    assert procs[100]["energy"]["package-0"] == pytest.approx(0.30 * pkg, rel=0.02)
    tasks = {t["tid"]: t for t in r["tasks"]}
    assert tasks[101]["energy_j"] == pytest.approx(procs[100]["energy_j"])
    # The phase: 101's 60 ms of each of the first two intervals (60 W, then 20 W; DRAM 5 W).
    setup = next(g for g in r["regions"] if g["name"] == "setup")
    assert setup["energy_j"] == pytest.approx((6.0 + 2.0 + 2 * 0.5) * 0.06 / 0.2, rel=1e-6)
    for d in a["domains"]:   # the parts always add up to what was measured
        assert d["traced_j"] + d["other_j"] + d["idle_j"] == pytest.approx(d["energy_j"])
        assert d["other_j"] == pytest.approx(0.075 * d["energy_j"], rel=0.02)
    text = format_report(r)
    assert "Energy attributed (estimate" in text and "Rule:" in text
    assert any(x.split()[:3] == ["101", "solver", f"{tasks[101]['energy_j']:.2f}"]
               for x in text.splitlines())
    assert all(len(x) <= 80 for x in text.splitlines()[1:])


def test_a_window_gets_the_energy_of_its_threads_time_inside(recording) -> None:
    path, _, _ = recording
    with open_recording(path) as rec:
        ld = load(rec)
        cs = curves(list(rec.samples()), ld.topology)
    # Steps 0 and 1 (60 W then 20 W package, 5 W DRAM), 101's first 30 ms of each.
    w = [(101, T, T + 30 * 10**6), (101, T + STEP, T + STEP + 30 * 10**6)]
    want = (6.0 + 2.0) * 0.03 / 0.2 + 2 * 0.5 * 0.03 / 0.2
    assert window_energy(ld.intervals, cs, w) == pytest.approx(want, rel=1e-6)
    assert window_energy(ld.intervals, cs, [(201, T, T + 10 * 10**6)]) == 0.0


def test_without_rapl_energy_is_n_a_with_why(tmp_path: Path) -> None:
    path = write_recording(tmp_path / "n.rec", synthetic_topology(1, 1, 2, 1), _events(),
                           header={"backend": "test"})
    out = subprocess.run([sys.executable, "-m", "snumap_tui.cli", "report", "--json",
                          str(path)], capture_output=True, text=True, check=True).stdout
    r = json.loads(out)
    assert "no RAPL energy" in r["energy_attribution"]["why"]
    assert all(p["energy_j"] is None for p in r["processes"])
