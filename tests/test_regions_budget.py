"""The region probe budget (issue 29 item 3): a function called too often to trap has its
probes detached, what was counted until then stays exact, and record, the recording and the
report say what the probes cost; below the budget nothing changes. Also what replay draws of
calls summed in the kernel (issue 30 item 18)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from snumap_tui.analysis.region_timeline import summed_key, thread_segments
from snumap_tui.analysis.regions import (
    WARN_SHARE,
    format_probes,
    most_calls,
    probe_costs,
    probe_findings,
    probe_section,
    region_stats,
)
from snumap_tui.recording.regions import COST_COLUMNS, _share, cost_note
from snumap_tui.store.regions import Regions
from snumap_tui.trace import region_catalog as C
from snumap_tui.trace.region_catalog import BEGIN, END, REGION_DTYPE, SUM_DTYPE, RegionNames

SNUMAP = [sys.executable, "-m", "snumap_tui.cli"]
PROGRAM = Path(__file__).parent / "programs" / "critical.c"
MS = 1_000_000


def _info(rows: list[list[Any]]) -> list[dict[str, Any]]:
    return [{"what": "region probes", "columns": list(COST_COLUMNS), "rows": rows}]


# ---- the budget's arithmetic ------------------------------------------------------------------

def test_budget_option_is_a_percentage_and_refuses_nonsense() -> None:
    assert _share("1") == pytest.approx(0.01)
    assert _share("0.5%") == pytest.approx(0.005)
    assert _share("0") == 0
    for bad in ("-1", "101", "lots"):
        with pytest.raises(argparse.ArgumentTypeError):
            _share(bad)


def test_the_kernel_spend_per_hit_follows_the_share_and_spares_user_probes() -> None:
    """One counting site per function (its entry, or its return when it has no entry probe)
    spends call_ns / share of a thread's credit a hit; --probe functions never."""
    from snumap_tui.trace.probe_budget import ENTRY_NS, RETURN_NS, STEPPED_NS
    from snumap_tui.trace.regions import RegionTracer

    got: list[Any] = []

    class Fake:
        kind = "ebpf"

        def add_many(self, probes: list[Any]) -> list[Any]:
            got.extend(probes)
            return []

    tr = RegionTracer("auto", [], RegionNames(), lambda _s: None)
    tr.budget = 0.02
    tr.uprobes = Fake()
    from snumap_tui.trace.regions import Plan

    plan = Plan()
    crit = next(e for e in C.GNU_OMP if e.symbol == "GOMP_critical_start")
    end = next(e for e in C.GNU_OMP if e.symbol == "GOMP_parallel_end")
    tr._add(plan, "/lib/libgomp.so.1", 0x100, crit, emulated=True)
    tr._add(plan, "/lib/libgomp.so.1", 0x200, end, emulated=True)
    tr._add(plan, "/bin/prog", 0x300, C.EntryPoint("solve", "user"), emulated=False)
    tr._add(plan, "/bin/prog", 0x400, C.EntryPoint("main._omp_fn.0", "omp", "body"),
            emulated=False)
    tr.attach(plan)
    spend = {(p.offset, p.ret): p.spend_ns for p in got}
    assert spend[(0x100, False)] == int((ENTRY_NS + RETURN_NS) / 0.02)
    assert spend[(0x100, True)] == 0                     # the return does not count again
    assert spend[(0x200, True)] == int(RETURN_NS / 0.02)     # return-only: it counts
    assert spend[(0x300, False)] == spend[(0x300, True)] == 0    # --probe: never detached
    assert spend[(0x400, False)] == int((STEPPED_NS + RETURN_NS) / 0.02)
    groups = {p.offset: p.group for p in got}
    assert groups[0x100] == "fn:GOMP_critical_start" and groups[0x400] == "body"
    tr.budget = 0                                        # --probe-budget 0: no budget
    got.clear()
    tr.attach(plan)
    assert all(p.spend_ns == 0 for p in got)


def test_a_function_past_its_budget_is_detached_once_and_said() -> None:
    from snumap_tui.trace.regions import RegionTracer, Site

    detached: list[tuple[str, bool]] = []

    class Fake:
        def __init__(self) -> None:
            self.over = [(0, 5 * MS), (1, 6 * MS), (0, 7 * MS)]

        def detach(self, group: str, wait: bool = True) -> None:
            detached.append((group, wait))

        def hits_by_tag(self, n: int) -> dict[int, int]:
            return {0: 12_345, 1: 12_345}

        def hits_of(self, tag: int) -> int:
            return self.hits_by_tag(tag + 1).get(tag, 0)

    names = RegionNames()
    rid = names.intern("GOMP_critical_start", "omp", "call", True)
    crit = next(e for e in C.GNU_OMP if e.symbol == "GOMP_critical_start")
    tr = RegionTracer("auto", [], names, lambda _s: None)
    tr.sites = [Site(crit, False, rid, "/lib/libgomp.so.1", 1550, True),
                Site(crit, True, rid, "/lib/libgomp.so.1", 1550, False)]
    tr.uprobes = Fake()
    tr._over_budget()
    assert detached == [("fn:GOMP_critical_start", False)]    # in the background, once
    assert tr.detached == {"fn:GOMP_critical_start": (5 * MS, 12_345)}
    (t, text), = tr.notes
    assert t == 5 * MS and "GOMP_critical_start: probes detached after 12,345 calls" in text
    assert "1% of a thread's time" in text
    costs = tr.probe_costs()
    assert costs == {"GOMP_critical_start": {"hits": 12_345, "probe_ns": 12_345 * 1550,
                                             "call_ns": 1550, "detached_ns": 5 * MS}}


def test_cost_note_gives_the_share_and_says_when_it_is_too_much() -> None:
    costs = {"GOMP_critical_start": {"hits": 10_000, "probe_ns": 15 * MS, "call_ns": 1500,
                                     "detached_ns": 9},
             "GOMP_barrier": {"hits": 10, "probe_ns": 15_000, "call_ns": 1500,
                              "detached_ns": 0}}
    text, over = cost_note(costs, 1000 * MS) or ("", True)
    assert not over and "~15.0 ms (1.5% of the program's CPU time)" in text
    assert "detached past the budget: GOMP_critical_start" in text
    text, over = cost_note(costs, 100 * MS) or ("", False)
    assert over and "(15% of the program's CPU time (!))" in text
    assert cost_note({}, 100) is None
    text, over = cost_note(costs, None) or ("", True)     # --pid: no CPU time known
    assert not over and "%" not in text.split(",")[0]


def test_the_report_reads_the_costs_and_warns_past_the_share() -> None:
    infos = _info([["GOMP_critical_start", 10_000, 15 * MS, 1500, 9],
                   ["GOMP_barrier", 10, 15_000, 1500, 0],
                   ["broken", -1, 0, 0, 0], ["short"]]) + [{"what": "clock end"}]
    costs = probe_costs(infos)
    assert set(costs) == {"GOMP_critical_start", "GOMP_barrier"}
    sec = probe_section(costs, 0.1, 0.01)
    assert sec is not None and sec["detached"] == ["GOMP_critical_start"]
    assert sec["share"] == pytest.approx(0.15015) and sec["over_budget"]
    (f,) = probe_findings(sec)
    assert f["kind"] == "probe_cost" and "15%" in f["text"]
    calm = probe_section(costs, 100.0, 0.01)
    assert calm is not None and calm["share"] < WARN_SHARE and probe_findings(calm) == []
    assert probe_section({}, 1.0, 0.01) is None


def _one_thread_critical(calls: int, each_ns: int, detached: bool) -> tuple[Regions, list]:
    """One thread, alone, in a critical section CALLS times (summed in the kernel), each call
    EACH_NS long as the probes measured it: no one to wait for."""
    names = RegionNames()
    crit = names.intern("GOMP_critical_start", "omp", "call", True)
    sums = np.zeros(1, SUM_DTYPE)
    sums[0] = (1000 * MS, 1000 * MS + 4 * calls * each_ns, calls * each_ns, calls * each_ns,
               7, 7, crit, calls)
    reg = Regions(np.zeros(0, REGION_DTYPE), names.items, sums)
    return reg, _info([["GOMP_critical_start", calls, calls * 1550, 1550,
                        2000 * MS if detached else 0]])


def test_probe_cost_is_not_reported_as_waiting_at_one_thread() -> None:
    """A call's own probe cost taken out of the time inside: at one thread, calls that took
    no longer than the probes make no waiting; a function detached past the budget is
    marked partial."""
    reg, infos = _one_thread_critical(5000, 1550, detached=True)
    plain = {g["name"]: g for g in region_stats(reg)}["GOMP_critical_start"]
    assert plain["wait_s"] == pytest.approx(5000 * 1550 / 1e9)      # what it was before
    row = {g["name"]: g for g in region_stats(reg, probes=probe_costs(infos))}[
        "GOMP_critical_start"]
    assert row["wait_s"] == 0 and row["wall_s"] == 0 and row["calls"] == 5000
    assert row["partial"] and row["probe_ns_per_call_removed"] == 1550
    assert most_calls(reg, "GOMP_critical_start") == 5000
    # Real waiting stays: calls of 10 us with probes of 1.55 us each.
    reg, infos = _one_thread_critical(5000, 10_000, detached=False)
    row = {g["name"]: g for g in region_stats(reg, probes=probe_costs(infos))}[
        "GOMP_critical_start"]
    assert row["wait_s"] == pytest.approx(5000 * (10_000 - 1550) / 1e9)
    assert "partial" not in row


# ---- replay: the kernel's sums drawn as a density --------------------------------------------

def test_summed_calls_draw_as_their_density_not_the_regions_colour() -> None:
    names = RegionNames()
    body = names.intern("main._omp_fn.0", "omp", "body")
    crit = names.intern("GOMP_critical_start", "omp", "call", True)
    t0 = 1000 * MS
    rows = np.array([(t0, 5, 5, BEGIN, body), (t0 + 300 * MS, 5, 5, END, body)],
                    dtype=REGION_DTYPE)
    sums = np.zeros(2, SUM_DTYPE)
    # 100 ms of calls 90 % inside, then 100 ms 10 % inside.
    sums[0] = (t0 + 50 * MS, t0 + 150 * MS, 90 * MS, 0, 5, 5, crit, 4096)
    sums[1] = (t0 + 150 * MS, t0 + 250 * MS, 10 * MS, 0, 5, 5, crit, 4096)
    segs, got_names, _wait = thread_segments(Regions(rows, names.items, sums))
    s, e, k = segs[5]
    by: dict[int, int] = {}
    for key, d in zip(k.tolist(), (e - s).tolist()):
        by[int(key)] = by.get(int(key), 0) + int(d)
    n, ck = len(got_names), got_names.index("GOMP_critical_start") + 1
    assert by[int(summed_key(ck, 3, n))] == 100 * MS       # dense: ▓
    assert by[int(summed_key(ck, 1, n))] == 100 * MS       # sparse: ░
    assert by[got_names.index("main._omp_fn.0") + 1] == 100 * MS    # the rest of the body


def test_the_gantt_hatches_summed_keys_and_says_what_they_are() -> None:
    from snumap_tui.analysis.intervals import Intervals
    from snumap_tui.analysis.region_timeline import region_timeline
    from snumap_tui.ui import gantt

    names = RegionNames()
    crit = names.intern("GOMP_critical_start", "omp", "call", True)
    sums = np.zeros(1, SUM_DTYPE)
    sums[0] = (1000 * MS, 1100 * MS, 50 * MS, 50 * MS, 5, 5, crit, 4096)
    reg = Regions(np.zeros(0, REGION_DTYPE), names.items, sums)
    iv = Intervals([0], [np.array([1000 * MS], np.int64)], [np.array([1100 * MS], np.int64)],
                   [np.array([5], np.int32)], 1000 * MS, 1100 * MS, False)
    rt = region_timeline(iv, reg)
    assert rt is not None
    key = int(summed_key(1, 2, 1))
    assert rt.summed[key] == 2 and rt.key_name(key) == "GOMP_critical_start"
    assert rt.base(key) == 1 and key in set(rt.intervals.tid[0].tolist())

    class St:
        mode = "region"

    class Data:
        regions = rt

    orig = gantt.counter_rows.region_on
    try:
        gantt.counter_rows.region_on = lambda *_a: False     # type: ignore[assignment]
        assert gantt._summed(Data(), St(), key) == "▒"     # type: ignore[arg-type]
        assert gantt._summed(Data(), St(), 1) is None       # type: ignore[arg-type]
    finally:
        gantt.counter_rows.region_on = orig                 # type: ignore[assignment]


# ---- a real OpenMP program, recorded -----------------------------------------------------------

needs_probes = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("gcc") is None, reason="needs root (uprobes) and gcc")


def _build(tmp: Path) -> Path:
    prog = tmp / "critical"
    r = subprocess.run(["gcc", "-O2", "-g", "-fopenmp", str(PROGRAM), "-o", str(prog)],
                       capture_output=True, text=True, check=False)
    if r.returncode:
        pytest.skip(f"gcc -fopenmp cannot build the program: {r.stderr[-200:]}")
    return prog


def _recorded(tmp: Path, threads: int, calls: int) -> tuple[Path, str, dict[str, Any]]:
    """The program recorded by default `snumap record` with THREADS and CALLS critical
    sections: the recording, record's stderr and the JSON report."""
    prog = _build(tmp)
    rec = tmp / "crit.rec"
    r = subprocess.run([*SNUMAP, "record", "-o", str(rec), "--", "env",
                        f"OMP_NUM_THREADS={threads}", str(prog), str(calls), "150000"],
                       capture_output=True, text=True, timeout=300, check=False, cwd=tmp)
    assert r.returncode == 0, r.stderr
    if "eBPF uprobe_multi" not in r.stderr:
        pytest.skip("the eBPF region path is not available here")
    rep = json.loads(subprocess.run([*SNUMAP, "report", str(rec), "--json"],
                                    capture_output=True, text=True, check=True).stdout)
    return rec, r.stderr, rep


@needs_probes
def test_a_critical_flood_is_detached_and_said_and_the_rest_stays_exact(tmp_path: Path) -> None:
    rec, err, rep = _recorded(tmp_path, 2, 2_000_000)
    last = err.strip().splitlines()[-1]
    assert last.startswith("snumap: recorded") and "region probes ~" in last, last
    assert "% of the program's CPU time" in last
    assert "detached past the budget: GOMP_critical_start" in last
    assert "GOMP_critical_start: probes detached after" in err
    probes = rep["region_probes"]
    assert probes["detached"] == ["GOMP_critical_start"] and 0 < probes["share"] < 1
    regs = {g["name"]: g for g in rep["regions"]}
    crit = regs["GOMP_critical_start"]
    assert crit["partial"] and 0 < crit["calls"] < 2_000_000
    # Below the budget: both parallel regions, exactly once, on both threads.
    par = [g for g in regs.values() if g["role"] == "parallel"]
    assert sorted(g["count"] for g in par) == [1, 1]
    assert all(len(g["threads"]) == 2 and "partial" not in g for g in par)
    text = subprocess.run([*SNUMAP, "report", str(rec)], capture_output=True, text=True,
                          check=True).stdout
    assert "GOMP_critical_start *" in text and "region probes cost ~" in text
    from snumap_tui import store

    with store.open(rec) as f:
        marks = [m for _t, m in f.markers]
    assert any("GOMP_critical_start: probes detached" in m for m in marks)


@needs_probes
def test_below_the_budget_a_critical_section_stays_exact(tmp_path: Path) -> None:
    """1,000 critical sections (500 a thread, within the burst a thread may make): never
    past the budget, every call counted."""
    _rec, err, rep = _recorded(tmp_path, 2, 1000)
    assert "detached" not in err
    crit = {g["name"]: g for g in rep["regions"]}["GOMP_critical_start"]
    assert crit["calls"] == 1000 and "partial" not in crit
    assert rep["region_probes"]["detached"] == []


@needs_probes
def test_at_one_thread_the_probes_make_no_waiting(tmp_path: Path) -> None:
    _rec, _err, rep = _recorded(tmp_path, 1, 2_000_000)
    crit = {g["name"]: g for g in rep["regions"]}["GOMP_critical_start"]
    # Each counted call took ~1.6 us as the probes saw it: all of it probe cost, none
    # waiting (0.75 s of "waiting" was reported here at one thread before).
    assert crit["wait_s"] < 0.05 * crit["calls"] * 1.6e-6 + 1e-3, crit


def test_the_perf_path_detaches_past_the_budget_from_the_decoded_hits() -> None:
    """Without the eBPF path the budget is kept on the decoded hits: the busiest thread's
    calls over a window times a call's probe cost, against the budget's share."""
    from snumap_tui.trace.regions import RegionTracer, Site
    from snumap_tui.trace.uprobes import HIT

    detached: list[str] = []

    class Fake:
        def detach(self, group: str) -> None:
            detached.append(group)

    names = RegionNames()
    crit = next(e for e in C.GNU_OMP if e.symbol == "GOMP_critical_start")
    bar = next(e for e in C.GNU_OMP if e.symbol == "GOMP_barrier")
    tr = RegionTracer("auto", [], names, lambda _s: None)
    tr.sites = [Site(crit, False, names.intern(crit.symbol, "omp", "call", True), "/l", 1550,
                     True),
                Site(bar, False, names.intern(bar.symbol, "omp", "call", True), "/l", 1550,
                     True)]
    tr.uprobes, tr.path = Fake(), "perf"

    def hits(tag: int, n: int, t0: int, span: int) -> np.ndarray:
        h = np.zeros(n, HIT)
        h["t_ns"] = t0 + np.arange(n) * (span // n)
        h["tid"], h["pid"], h["tag"] = 9, 9, tag
        return h

    # 0.6 s: 10,000 critical sections (2.6 % of the thread) and 100 barriers (0.03 %).
    rec = np.concatenate([hits(0, 10_000, 1000 * MS, 600 * MS), hits(1, 100, 1000 * MS, 600 * MS)])
    tr._perf_budget(rec[np.argsort(rec["t_ns"], kind="stable")])
    assert detached == ["fn:GOMP_critical_start"]
    (t, text), = tr.notes
    assert "GOMP_critical_start: probes detached, past the budget (2.6% of" in text
    tr.count_rows(rec)
    costs = tr.probe_costs()
    assert costs["GOMP_critical_start"]["hits"] == 10_000 and costs["GOMP_critical_start"][
        "detached_ns"] == t
    assert costs["GOMP_barrier"] == {"hits": 100, "probe_ns": 155_000, "call_ns": 1550,
                                     "detached_ns": 0}


def test_the_probe_lines_fit_80_columns_and_say_why_hits_exceed_the_count() -> None:
    """Seen in a first-day try: the share line ran to 93 columns, and a detached critical
    section showed 10,480 hits beside a COUNT of 1,303 with nothing saying why."""
    costs = {"GOMP_critical_start": {"hits": 10_480, "probe_ns": 10_480 * 1550,
                                     "call_ns": 1550, "detached_ns": 5 * MS},
             "main._omp_fn.0": {"hits": 2, "probe_ns": 3100, "call_ns": 1550,
                                "detached_ns": 0}}
    lines = format_probes(probe_section(costs, 0.158, 0.01))
    assert lines and all(len(line) <= 80 for line in lines), [len(x) for x in lines]
    text = " ".join(x.strip() for x in lines)
    assert "10% of the traced processes' CPU time (!) above 5%" in text
    assert "--probe-budget 1%: a function's probes are detached past that share of a" \
        " thread" in text
    assert "CALLS stop at the budget" in text
    assert "COUNT" not in " ".join(format_probes(probe_section(
        {"main._omp_fn.0": costs["main._omp_fn.0"]}, 0.158, 0.01)))
