"""Energy apportioned by cycles (packages) and LLC misses (DRAM) where the recording has counters
per run interval (analysis/energy.py ``weigh``), and RAPL domains that never advance (a virtual
machine's power PMU reads 0) shown as n/a in the report and in the scaling studies -- on the
fake RAPL tree of tests/fakefs.py read by the real RAPL source."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from snumap_tui.analysis.report import build_report, format_report
from snumap_tui.analysis.synth import synthetic_topology, write_recording
from snumap_tui.model.sample import Sample
from snumap_tui.sources.rapl import RaplSource
from snumap_tui.store import open as open_recording
from snumap_tui.study.measure import energy_j
from snumap_tui.study.synth import make_study
from snumap_tui.trace.counters import counter_dtype
from snumap_tui.trace.events import SWITCH, TaskInfo
from tests.fakefs import FakeRoot
from tests.test_analysis import make_events
from tests.test_energy_attribution import _phase

T = 10**9
MS = 10**6
STEP = 100 * MS
STEPS = 10
# Per step: 101 (process 100) runs 50 ms on PU 0, 201 (process 200) 50 ms on PU 1 -- equal
# busy time -- and an untraced task 15 ms on PU 1.
RUNS = [(0, 101, 100, 0, 50), (1, 201, 200, 20, 70), (1, 55, -2, 75, 90)]
# Counts per run interval: 101 runs 3x the cycles of 201, 201 4x the LLC misses of 101.
COUNTS = {101: (3_000_000, 1_000), 201: (1_000_000, 4_000), 55: (9_000_000, 9_000)}
LIBBPF = "libbpf sched_switch: exact per run interval"


def _events() -> np.ndarray:
    rows = []
    for k in range(STEPS):
        base = T + k * STEP
        for cpu, tid, pid, a, b in RUNS:
            rows.append((base + a * MS, SWITCH, cpu, 0, tid, 0, pid, 0))
            rows.append((base + b * MS, SWITCH, cpu, tid, 0, pid, 0, 1))
    return make_events(rows)


def _counters(events: list[str]) -> np.ndarray:
    """One row per run interval of RUNS with its COUNTS for EVENTS (cycles, LLC misses)."""
    rows = np.zeros(STEPS * len(RUNS), counter_dtype(len(events)))
    i = 0
    for k in range(STEPS):
        for cpu, tid, pid, a, b in RUNS:
            r = rows[i]
            r["tid"], r["pid"], r["cpu"] = tid, pid, cpu
            r["t_start"], r["t_end"] = T + k * STEP + a * MS, T + k * STEP + b * MS
            r["value"] = [COUNTS[tid][0] if e == "cycles" else COUNTS[tid][1] for e in events]
            r["enabled"] = r["running"] = [(b - a) * MS] * len(events)
            r["n"] = len(events)
            i += 1
    return rows


def _samples(tmp_path: Path, pkg_w: float = 40.0, dram_w: float = 5.0
             ) -> list[Sample]:
    """The fake tree's readings every 100 ms, package drawing PKG_W (its cores half of it),
    DRAM DRAM_W (0: the counter never advances)."""
    fake = FakeRoot(tmp_path / "fake", cpus=2, packages=1, smt=1)
    src = RaplSource(fake.root, reader=fake.reader)
    zones = {v["name"]: z for z, v in fake.rapl_zones.items()}
    pkg = dram = 0
    out = []
    for k in range(STEPS + 1):
        fake.set_energy(zones["package-0"], pkg)
        fake.set_energy(zones["core"], pkg // 2)
        fake.set_energy(zones["dram"], dram)
        out.append(Sample(T + k * STEP, T + k * STEP, {"rapl": src.read()}))
        pkg += int(pkg_w * 0.1 * 1e6)
        dram += int(dram_w * 0.1 * 1e6)
    return out


def _record(tmp_path: Path, events: list[str] | None, source: str = LIBBPF, **watts: float
            ) -> Path:
    header: dict = {"backend": "test"}
    if events is not None:
        header["counters"] = {"events": events, "source": source, "dropped": []}
    return write_recording(tmp_path / "w.rec", synthetic_topology(1, 1, 2, 1), _events(),
                           samples=_samples(tmp_path, **watts),
                           tasks=[TaskInfo(101, 100, "solver"), TaskInfo(201, 200, "io")],
                           header=header, regions=_phase(),
                           counters=(_counters(events), events) if events else None)


def _report(path: Path) -> dict:
    with open_recording(path) as rec:
        return build_report(rec)


def _doms(r: dict) -> dict[str, dict]:
    doms = {d["domain"]: d for d in r["energy_attribution"]["domains"]}
    for d in doms.values():          # the parts always add up to what was measured
        assert d["traced_j"] + d["other_j"] + d["idle_j"] == pytest.approx(d["energy_j"],
                                                                             rel=1e-9)
    return doms


def test_cycles_share_a_package_3_to_1_where_busy_time_is_equal(tmp_path: Path) -> None:
    r = _report(_record(tmp_path, ["cycles", "instructions"]))
    doms = _doms(r)
    pkg, dram = doms["package-0"], doms["dram-0"]
    assert pkg["energy_j"] == pytest.approx(40.0) and dram["energy_j"] == pytest.approx(5.0)
    tasks = {t["tid"]: t for t in r["tasks"]}
    p101, p201 = tasks[101]["energy"]["package-0"], tasks[201]["energy"]["package-0"]
    # The traced pool is the busy-time part (100 of 200 PU-ms): 20 J, shared 3:1 by cycles.
    assert p101 / p201 == pytest.approx(3.0, rel=0.01)
    assert pkg["rule"] == "cycles" and dram["rule"] == "busy time"   # no LLC misses counted
    assert doms["core-0"]["rule"] == "cycles"
    assert tasks[101]["energy"]["core-0"] == pytest.approx(3 * tasks[201]["energy"]["core-0"],
                                                           rel=0.01)
    assert p101 + p201 == pytest.approx(0.5 * 40.0, rel=1e-9)
    # Other and idle as by busy time: 15 and 85 of the 200 PU-ms.
    assert pkg["other_j"] == pytest.approx(0.075 * 40.0, rel=1e-9)
    assert pkg["idle_j"] == pytest.approx(0.425 * 40.0, rel=1e-9)
    # DRAM by busy time: equal.
    assert tasks[101]["energy"]["dram-0"] == pytest.approx(tasks[201]["energy"]["dram-0"])
    # The phase "setup" (101, first two sample intervals) is priced by 101's own curve.
    setup = next(g for g in r["regions"] if g["name"] == "setup")
    assert setup["energy_j"] == pytest.approx(2 * (0.375 * 4.0 + 0.25 * 0.5), rel=1e-6)
    text = format_report(r)
    assert any(x.split()[:1] == ["package-0"] and x.split()[-1] == "cycles"
               for x in text.splitlines())
    assert all(len(x) <= 80 for x in text.splitlines()[1:])


def test_llc_misses_share_dram_where_counted(tmp_path: Path) -> None:
    r = _report(_record(tmp_path, ["cycles", "LLC-load-misses"]))
    doms = _doms(r)
    tasks = {t["tid"]: t for t in r["tasks"]}
    d101, d201 = tasks[101]["energy"]["dram-0"], tasks[201]["energy"]["dram-0"]
    assert d201 / d101 == pytest.approx(4.0, rel=0.01)
    assert doms["dram-0"]["rule"] == "LLC-load-misses"
    assert d101 + d201 == pytest.approx(0.5 * 5.0, rel=1e-9)
    procs = {p["pid"]: p for p in r["processes"]}
    assert procs[100]["energy_j"] == pytest.approx(0.75 * 20.0 + 0.2 * 2.5, rel=1e-6)


@pytest.mark.parametrize("events,source", [
    (None, LIBBPF),                                   # no counters at all
    (["task-clock", "instructions"], LIBBPF),         # counters, but no cycles
    (["cycles"], "perf: per-thread counters read at each sample"),   # not per run interval
])
def test_without_cycles_per_run_interval_busy_time_as_before(tmp_path: Path, events, source
                                                             ) -> None:
    r = _report(_record(tmp_path, events, source))
    doms = _doms(r)
    assert {d["rule"] for d in doms.values()} == {"busy time"}
    tasks = {t["tid"]: t for t in r["tasks"]}
    assert tasks[101]["energy"]["package-0"] == pytest.approx(0.25 * 40.0, rel=1e-9)
    assert tasks[201]["energy"]["package-0"] == pytest.approx(0.25 * 40.0, rel=1e-9)


def test_counters_that_never_advance_are_n_a_not_zero(tmp_path: Path) -> None:
    """A virtual machine's power PMU reads 0 throughout: the report printed "0.00 J avg
    0.0 W" and an attribution table of zeros; now n/a with why, and no table."""
    path = _record(tmp_path, ["cycles"], pkg_w=0.0, dram_w=0.0)
    out = subprocess.run([sys.executable, "-m", "snumap_tui.cli", "report", "--json",
                          str(path)], capture_output=True, text=True, check=True).stdout
    r = json.loads(out)
    why = "package-0 reads 0 throughout: no real RAPL here, e.g. a virtual machine"
    e = {d["domain"]: d for d in r["energy"]}
    assert e["package-0"]["energy_j"] is None and e["package-0"]["why"] == why
    assert e["package-0"]["avg_w"] is None and e["dram-0"]["energy_j"] is None
    a = r["energy_attribution"]
    assert "domains" not in a and why in a["why"]
    assert all(p["energy_j"] is None for p in r["processes"])
    text = subprocess.run([sys.executable, "-m", "snumap_tui.cli", "report", str(path)],
                          capture_output=True, text=True, check=True).stdout
    assert "0.00 J" not in text and "MEASURED" not in text
    assert "n/a (no RAPL domain's counter advanced: see Energy (RAPL))" in text
    assert "package-0      n/a (package-0 reads 0 throughout: no real RAPL here, e.g. a" in text
    assert all(len(x) <= 80 for x in text.splitlines()[1:])
    with open_recording(path) as rec:
        assert energy_j(rec, rec.t_start, rec.t_end) == (None, why)


def test_one_domain_that_never_advances_is_left_out_of_the_sums(tmp_path: Path) -> None:
    r = _report(_record(tmp_path, None, dram_w=0.0))
    e = {d["domain"]: d for d in r["energy"]}
    assert e["package-0"]["energy_j"] == pytest.approx(40.0)
    assert e["dram-0"]["why"] == "dram-0 reads 0 throughout: not measured on this machine"
    a = r["energy_attribution"]
    assert [d["domain"] for d in a["domains"]] == ["package-0", "core-0"]
    assert a["unmeasured"] == [{"domain": "dram-0", "why": e["dram-0"]["why"]}]
    assert a["summed"] == ["package-0"]
    procs = {p["pid"]: p for p in r["processes"]}
    assert procs[100]["energy_j"] == pytest.approx(10.0, rel=1e-9)
    assert "dram-0         n/a (dram-0 reads 0 throughout" in format_report(r)


def _scale_report(study: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "snumap_tui.cli", "scale", "report",
                           str(study), *args], capture_output=True, text=True, check=True)


def test_scale_report_shows_no_energy_for_runs_whose_counters_stayed_at_0(tmp_path: Path
                                                                          ) -> None:
    """Runs measured on a virtual machine stored 0 J: the scale report printed ENERGY J
    0.00 and EDP 0.000 for every configuration."""
    study = make_study(tmp_path / "s", threads=[1, 2], serial={"a": 0.5})

    def store(joules: dict[int, float]) -> None:
        for run in study.plan():
            st = json.loads((tmp_path / "s" / "runs" / f"{run.id}.json").read_text())
            st["measurements"]["program"].update(energy_j=joules[run.config.threads],
                                                 energy_note=None)
            study.write_run(run.id, st)
        study.save()

    store({1: 0.0, 2: 0.0})
    text = _scale_report(tmp_path / "s").stdout
    assert "Energy and EDP: n/a: energy reads 0 throughout: no real RAPL here" in text
    assert "ENERGY" not in text
    j = json.loads(_scale_report(tmp_path / "s", "--json").stdout)
    assert j["energy"] == {"available": False,
                           "why": "energy reads 0 throughout: no real RAPL here, e.g. a "
                                  "virtual machine"}
    store({1: 8.0, 2: 0.0})
    lines = _scale_report(tmp_path / "s").stdout.splitlines()
    at = lines.index("(program)")
    assert lines[at + 1].split()[-4:] == ["ENERGY", "J", "EDP", "J*s"]
    rows = {x.split()[1]: x.split() for x in lines[at + 2:at + 4]}
    assert rows["1"][-2:] == ["8.00", f"{8.0 * 1.01:.3f}"]
    assert rows["2"][-2:] == ["-", "-"]
    j = json.loads(_scale_report(tmp_path / "s", "--json").stdout)
    prog = {a["threads"]: a for a in j["regions"][0]["rows"]}
    assert prog[1]["energy_j"] == 8.0 and prog[2]["energy_j"] is None
    assert prog[2]["edp"] is None


def test_run_intervals_across_sample_boundaries_keep_every_total() -> None:
    """Random run intervals that straddle sample times, sample intervals where no traced
    thread counted cycles and one with no RAPL reading (a gap): per sample interval the traced
    threads together keep their busy-time worth, each thread's total is the sum of its
    windows', and the parts add up to the measured energy."""
    from snumap_tui.analysis.energy import Curve, attribute, weigh, window_energy
    from snumap_tui.analysis.intervals import UNTRACED, Intervals
    from snumap_tui.store.counters import ThreadCounters

    rnd = np.random.default_rng(7)
    knots = np.array([0.0, 100.0, 200.0, 200.0, 300.0, 400.0, 500.0]) * MS
    knots[3] += 50 * MS                                # a gap [200, 250) ms: no reading
    cum = np.concatenate([[0.0], np.cumsum([3.0, 5.0, 0.0, 2.0, 7.0, 1.0])]) / 2
    starts, ends, tids, rows = [], [], [], []
    for cpu in (0, 1):
        edges = np.sort(rnd.choice(np.arange(1, 500), 40, replace=False)) * MS
        s, e = edges[0::2], edges[1::2]
        t = rnd.choice([11, 12, 13, UNTRACED], len(s))
        starts.append(s.astype(np.int64))
        ends.append(e.astype(np.int64))
        tids.append(t.astype(np.int32))
        for a, b, tid in zip(s, e, t):
            quiet = 300 * MS <= a < 400 * MS           # no cycles counted here
            rows.append((tid, 1 if tid > 0 else -2, cpu, a, b,
                         0 if quiet else int(rnd.integers(1, 10**6))))
    iv = Intervals(np.array([0, 1]), starts, ends, tids, 0, int(500 * MS))
    tc_rows = np.zeros(len(rows), counter_dtype(1))
    for i, (tid, pid, cpu, a, b, v) in enumerate(rows):
        tc_rows[i]["tid"], tc_rows[i]["pid"], tc_rows[i]["cpu"] = tid, pid, cpu
        tc_rows[i]["t_start"], tc_rows[i]["t_end"] = a, b
        tc_rows[i]["value"] = [v]
        tc_rows[i]["enabled"] = tc_rows[i]["running"] = [b - a]
        tc_rows[i]["n"] = 1

    class Rec:
        def __init__(self) -> None:
            self.header = {"counters": {"source": LIBBPF}}

        def thread_counters(self) -> ThreadCounters:
            return ThreadCounters(["cycles"], tc_rows)

    def curve() -> Curve:
        return Curve("package-0", frozenset({0, 1}), knots.copy(), cum.copy(), float(cum[-1]))

    plain, weighed = curve(), curve()
    weigh([weighed], iv, Rec())
    assert weighed.rule == "cycles" and plain.rule == "busy time"
    (by_time,), (by_cycles,) = attribute(iv, [plain]), attribute(iv, [weighed])
    assert by_cycles["tids"] != pytest.approx(by_time["tids"])
    assert sum(by_cycles["tids"].values()) == pytest.approx(sum(by_time["tids"].values()))
    assert by_cycles["other_j"] == pytest.approx(by_time["other_j"])
    assert sum(by_cycles["tids"].values()) + by_cycles["other_j"] + by_cycles["idle_j"] == \
        pytest.approx(weighed.energy_j)
    for k in range(len(knots) - 1):               # per sample interval, the pool is kept
        w = [(t, int(knots[k]), int(knots[k + 1])) for t in (11, 12, 13)]
        assert window_energy(iv, [weighed], w) == pytest.approx(
            window_energy(iv, [plain], w), abs=1e-12)
    for t, j in by_cycles["tids"].items():
        assert window_energy(iv, [weighed], [(t, 0, int(500 * MS))]) == pytest.approx(j)
    # In [300, 400) ms no cycles were counted: busy-time shares there.
    for t in (11, 12, 13):
        w = [(t, int(300 * MS), int(400 * MS))]
        assert window_energy(iv, [weighed], w) == pytest.approx(
            window_energy(iv, [plain], w), abs=1e-12)


@pytest.mark.parametrize("dram_w,want", [(5.0, {"Package 0 power W", "Package 0 DRAM power W"}),
                                         (0.0, {"Package 0 power W"})])
def test_exports_leave_out_the_power_of_a_domain_that_never_advances(
        tmp_path: Path, dram_w: float, want: set[str]) -> None:
    """The Perfetto/Chrome/Parquet counter tracks drew a flat 0 W for a counter that never
    advanced; now no track, as the report says n/a."""
    from snumap_tui.export.counters import counter_values

    with open_recording(_record(tmp_path, None, dram_w=dram_w)) as rec:
        tracks, values = counter_values(rec)
        got = {tracks[i].name: v for _, idx, vals in values
               for i, v in zip(idx.tolist(), vals.tolist()) if "power" in tracks[i].name}
    assert set(got) == want
    assert got["Package 0 power W"] == pytest.approx(40.0)
