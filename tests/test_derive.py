"""derive(): every metric on hand-made Samples, aggregation rules, NaN for what is missing."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from topo_factory import make_topology

from snumap_tui.model.derive import counters, derive
from snumap_tui.model.sample import Sample
from snumap_tui.topology.model import Topology

S = 1_000_000_000
EVENTS = ["cycles", "instructions", "cache-references", "cache-misses", "branch-instructions",
          "branch-misses"]


def perf(cpus: list[int], rows: list[list[float]], events: list[str] = EVENTS,
         running_frac: float | list[float] = 1.0, t: float = 1e9) -> dict[str, Any]:
    n, k = len(cpus), len(events)
    frac = np.broadcast_to(np.asarray(running_frac, dtype=np.float64).reshape(-1, 1)
                           if np.ndim(running_frac) else running_frac, (n, k))
    return {"cpus": np.array(cpus), "events": list(events),
            "value": np.array(rows, dtype=np.float64),
            "enabled": np.full((n, k), t), "running": np.full((n, k), t) * frac}


def perf0(cpus: list[int], events: list[str] = EVENTS) -> dict[str, Any]:
    z = np.zeros((len(cpus), len(events)))
    return {"cpus": np.array(cpus), "events": list(events), "value": z, "enabled": z,
            "running": z}


def ticks(cpus: list[int], rows: list[list[int]]) -> dict[str, Any]:
    arr = np.zeros((len(cpus), 10), dtype=np.uint64)
    for i, r in enumerate(rows):
        arr[i, :len(r)] = r
    return {"cpus": np.array(cpus), "ticks": arr, "hz": 100, "ctxt": 0,
            "procs_running": 1, "procs_blocked": 0}


def frame_of(topo: Topology, before: dict[str, Any], after: dict[str, Any], dt_s: float = 1.0):
    return derive(Sample(5 * S, 0, before), Sample(5 * S + int(dt_s * S), 7, after), topo)


@pytest.fixture()
def smt() -> Topology:
    """1 package, 2 cores x 2 PUs, each core with its own L2 shared by its two PUs."""
    return make_topology(packages=1, cores_per_numa=2, pus_per_core=2)


def test_miss_ratio_at_a_shared_l2_is_a_ratio_of_sums(smt: Topology) -> None:
    # PU 0: 10 misses / 100 references (10 %), PU 1: 10 / 900 (1.1 %): the L2 they share
    # has 20 / 1000 = 2 %, not the mean of 10 % and 1.1 %.
    cpus = [0, 1, 2, 3]
    ev = ["cache-references", "cache-misses"]
    f = frame_of(smt, {"perf": perf0(cpus, ev)},
                 {"perf": perf(cpus, [[100, 10], [900, 10], [0, 0], [0, 0]], ev)})
    l2 = smt.caches_of(0)[1]
    assert l2.type == "L2Cache" and l2.cpuset == {0, 1}
    assert f.get("cache_miss_pct", l2.id) == pytest.approx(2.0)
    assert f.get("cache_miss_pct", smt.pu(0).id) == pytest.approx(10.0)
    assert f.get("cache_miss_pct", smt.pu(1).id) == pytest.approx(100 * 10 / 900)
    # The other core's PUs saw no references: 0/0 is not available, not 0.
    assert f.get("cache_miss_pct", smt.pu(2).id) is None
    assert f.get("cache_miss_pct", smt.root.id) == pytest.approx(2.0)


def test_package_ipc_is_sum_over_sum(smt: Topology) -> None:
    cpus = [0, 1, 2, 3]
    rows = [[1e9, 3e9, 0, 0, 0, 0], [1e9, 1e9, 0, 0, 0, 0], [2e9, 0.5e9, 0, 0, 0, 0],
            [0, 0, 0, 0, 0, 0]]
    f = frame_of(smt, {"perf": perf0(cpus)}, {"perf": perf(cpus, rows)})
    pkg = smt.by_type("Package")[0]
    assert f.get("ipc", pkg.id) == pytest.approx(4.5 / 4.0)     # not mean(3, 1, 0.25)
    assert f.get("ipc", smt.pu(0).id) == pytest.approx(3.0)
    assert f.get("ipc", smt.pu(3).id) is None                   # no cycles: 0/0
    assert f.get("ipc", smt.core_of(0).id) == pytest.approx(2.0)
    assert f.get("gips", pkg.id) == pytest.approx(4.5)
    assert "multiplexed" not in f.flags.get("ipc", set())


def test_all_perf_metrics_on_one_pu() -> None:
    topo = make_topology(cores_per_numa=1)
    ev = EVENTS + ["stalled-cycles-frontend", "stalled-cycles-backend", "context-switches",
                   "cpu-migrations", "page-faults"]
    row = [2e9, 1e9, 1e6, 2e5, 1e8, 1e6, 5e8, 2.5e8, 500, 20, 3000]
    f = frame_of(topo, {"perf": perf0([0], ev)}, {"perf": perf([0], [row], ev, t=2e9)},
                 dt_s=2.0)
    pu = topo.pu(0).id
    want = {"ipc": 0.5, "mpki": 0.2, "cache_miss_pct": 20.0, "branch_miss_pct": 1.0,
            "branch_mpki": 1.0, "frontend_stall_pct": 25.0, "backend_stall_pct": 12.5,
            "gips": 0.5, "ctxsw_per_s": 250.0, "migrations_per_s": 10.0,
            "faults_per_s": 1500.0, "ghz": 1.0}
    for name, value in want.items():
        assert f.get(name, pu) == pytest.approx(value), name


def test_multiplexed_counts_are_scaled_and_flagged(smt: Topology) -> None:
    cpus = [0, 1, 2, 3]
    rows = [[1e9, 2e9, 0, 0, 0, 0]] * 4
    # Each counter was on the PMU half the time it was enabled: the estimate doubles it.
    f = frame_of(smt, {"perf": perf0(cpus)}, {"perf": perf(cpus, rows, running_frac=0.5)})
    assert f.get("gips", smt.root.id) == pytest.approx(16.0)
    assert f.get("ipc", smt.root.id) == pytest.approx(2.0)
    assert "multiplexed" in f.flags["ipc"]
    assert "multiplexed" in f.flags["gips"]
    assert "util_pct" not in f.flags


def test_never_scheduled_counter_is_not_zero(smt: Topology) -> None:
    cpus = [0, 1, 2, 3]
    rows = [[1e9, 2e9, 0, 0, 0, 0]] * 4
    frac = [1.0, 0.0, 1.0, 1.0]     # PU 1's group never got onto the PMU
    f = frame_of(smt, {"perf": perf0(cpus)}, {"perf": perf(cpus, rows, running_frac=frac)})
    assert f.get("ipc", smt.pu(1).id) is None
    assert f.get("gips", smt.pu(1).id) is None
    # Its core still has PU 0's counts.
    assert f.get("gips", smt.core_of(1).id) == pytest.approx(2.0)


def test_utilisation_per_pu_and_averaged(smt: Topology) -> None:
    cpus = [0, 1, 2, 3]
    # user nice system idle iowait irq softirq steal guest guest_nice
    before = ticks(cpus, [[0] * 10] * 4)
    after = ticks(cpus, [[60, 10, 10, 20, 0, 0, 0, 0, 30, 0],    # guest is inside user
                         [0, 0, 0, 100],
                         [0, 0, 5, 50, 40, 5],
                         [20, 0, 0, 50, 0, 0, 0, 30]])
    f = frame_of(smt, {"procstat": before}, {"procstat": after})
    got = [f.get("util_pct", smt.pu(c).id) for c in cpus]
    assert got == [pytest.approx(80.0), 0.0, pytest.approx(10.0), pytest.approx(50.0)]
    assert f.get("user_pct", smt.pu(0).id) == pytest.approx(70.0)
    assert f.get("system_pct", smt.pu(2).id) == pytest.approx(10.0)
    assert f.get("iowait_pct", smt.pu(2).id) == pytest.approx(40.0)
    assert f.get("steal_pct", smt.pu(3).id) == pytest.approx(30.0)
    assert f.get("util_pct", smt.core_of(0).id) == pytest.approx(40.0)
    assert f.get("util_pct", smt.root.id) == pytest.approx(35.0)
    assert smt.get("Package", 0)
    assert f.metrics()[0] == "util_pct"


def test_offline_pu_is_unavailable_and_left_out_of_the_mean(smt: Topology) -> None:
    before = ticks([0, 1, 2, 3], [[0] * 10] * 4)
    after = ticks([0, 1, 3], [[100, 0, 0, 0], [0, 0, 0, 100], [50, 0, 0, 50]])  # PU 2 offline
    f = frame_of(smt, {"procstat": before}, {"procstat": after})
    assert f.get("util_pct", smt.pu(2).id) is None
    assert f.get("util_pct", smt.core_of(2).id) == pytest.approx(50.0)
    assert f.get("util_pct", smt.root.id) == pytest.approx(50.0)


def test_alignment_by_os_index_not_position() -> None:
    topo = make_topology(cores_per_numa=2, pus_per_core=2, smt_os_split=True)
    assert topo.pu_os_indexes == (0, 2, 1, 3)
    # The source lists CPUs in OS order; only OS CPU 2 (second thread of core 0) is busy.
    before = ticks([0, 1, 2, 3], [[0] * 10] * 4)
    after = ticks([0, 1, 2, 3], [[0, 0, 0, 100], [0, 0, 0, 100], [100, 0, 0, 0],
                                 [0, 0, 0, 100]])
    f = frame_of(topo, {"procstat": before}, {"procstat": after})
    assert f.get("util_pct", topo.pu(2).id) == pytest.approx(100.0)
    assert f.get("util_pct", topo.core_of(2).id) == pytest.approx(50.0)
    assert f.get("util_pct", topo.core_of(1).id) == pytest.approx(0.0)


def test_unavailable_is_none_never_zero(smt: Topology) -> None:
    f = frame_of(smt, {}, {})
    for name in f.metrics():
        assert all(f.get(name, o.id) is None for o in smt), name
    assert f.to_dict()["objects"]["Machine:0"] == {}


def test_first_sample_of_a_source_gives_no_rates(smt: Topology) -> None:
    cpus = [0, 1, 2, 3]
    f = frame_of(smt, {}, {"perf": perf(cpus, [[1e9, 2e9, 0, 0, 0, 0]] * 4),
                           "procstat": ticks(cpus, [[10, 0, 0, 10]] * 4)})
    assert f.get("ipc", smt.root.id) is None
    assert f.get("util_pct", smt.root.id) is None


def test_zero_interval_is_none(smt: Topology) -> None:
    cpus = [0, 1, 2, 3]
    s = {"perf": perf(cpus, [[1e9, 2e9, 0, 0, 0, 0]] * 4)}
    f = derive(Sample(S, 0, {"perf": perf0(cpus)}), Sample(S, 0, s), smt)
    assert f.get("gips", smt.root.id) is None
    assert f.get("ipc", smt.root.id) == pytest.approx(2.0)   # a ratio needs no time


def test_ghz_prefers_aperf_mperf_then_cpufreq_then_cycles(smt: Topology) -> None:
    cpus = [0, 1, 2, 3]
    nan = math.nan
    freq0 = {"cpus": np.array(cpus), "aperf": np.zeros(4), "mperf": np.zeros(4),
             "base_khz": np.full(4, 2_000_000.0), "cur_khz": np.full(4, nan)}
    freq1 = {"cpus": np.array(cpus), "aperf": np.array([3e9, nan, nan, nan]),
             "mperf": np.array([2e9, nan, nan, nan]), "base_khz": np.full(4, 2_000_000.0),
             "cur_khz": np.array([nan, 1_500_000.0, nan, nan])}
    ev = ["cycles"]
    f = frame_of(smt, {"freq": freq0, "perf": perf0(cpus, ev)},
                 {"freq": freq1, "perf": perf(cpus, [[0], [0], [2.5e9], [nan]], ev)})
    assert f.get("ghz", smt.pu(0).id) == pytest.approx(3.0)      # 2 GHz x 3/2
    assert f.get("ghz", smt.pu(1).id) == pytest.approx(1.5)      # cpufreq
    assert f.get("ghz", smt.pu(2).id) == pytest.approx(2.5)      # cycles / s
    assert f.get("ghz", smt.pu(3).id) is None
    assert f.get("ghz", smt.root.id) == pytest.approx((3.0 + 1.5 + 2.5) / 3)


def test_aperf_mperf_base_from_tsc(smt: Topology) -> None:
    cpus = np.array([0, 1, 2, 3])
    z = np.zeros(4)
    f = frame_of(smt, {"freq": {"cpus": cpus, "aperf": z, "mperf": z, "tsc": z}},
                 {"freq": {"cpus": cpus, "aperf": np.full(4, 1.2e9), "mperf": np.full(4, 1e9),
                           "tsc": np.full(4, 2.5e9)}})
    assert f.get("ghz", smt.pu(3).id) == pytest.approx(3.0)      # 2.5 GHz TSC x 1.2


def rapl(energy: list[float], max_uj: float = 262143328850.0) -> dict[str, Any]:
    return {"domains": ["package-0", "core-0", "dram-0", "package-1", "dram-1", "psys"],
            "objects": [["Package", 0], ["Package", 0], ["Package", 0], ["Package", 1],
                        ["Package", 1], ["Machine", 0]],
            "energy_uj": np.array(energy, dtype=np.float64),
            "max_uj": np.full(len(energy), max_uj), "via": "powercap"}


def test_rapl_power_on_packages_and_machine() -> None:
    topo = make_topology(packages=2)
    f = frame_of(topo, {"rapl": rapl([0, 0, 0, 0, 0, 0])},
                 {"rapl": rapl([200e6, 50e6, 20e6, 100e6, 10e6, 400e6])}, dt_s=2.0)
    p0, p1 = topo.get("Package", 0).id, topo.get("Package", 1).id
    assert f.get("power_pkg_w", p0) == pytest.approx(100.0)
    assert f.get("power_pkg_w", p1) == pytest.approx(50.0)
    assert f.get("power_pkg_w", topo.root.id) == pytest.approx(150.0)
    assert f.get("power_dram_w", p0) == pytest.approx(10.0)
    assert f.get("power_dram_w", topo.root.id) == pytest.approx(15.0)
    assert f.get("power_core_w", p0) == pytest.approx(25.0)
    assert f.get("power_core_w", p1) is None                     # package 1 has no core zone
    assert f.get("power_psys_w", topo.root.id) == pytest.approx(200.0)
    assert f.get("power_psys_w", p0) is None
    assert f.get("power_pkg_w", topo.pu(0).id) is None           # not a per-PU quantity
    assert "wrapped" not in f.flags.get("power_pkg_w", set())


def test_rapl_wraparound() -> None:
    topo = make_topology(packages=2)
    top = 262143328850.0
    f = frame_of(topo, {"rapl": rapl([top - 30e6, 0, 0, 0, 0, 0])},
                 {"rapl": rapl([70e6, 0, 0, 0, 0, 0])})
    assert f.get("power_pkg_w", topo.get("Package", 0).id) == pytest.approx(100.0)
    assert "wrapped" in f.flags["power_pkg_w"]


def test_rapl_domain_missing_in_one_sample_is_skipped() -> None:
    topo = make_topology(packages=2)
    before = rapl([0, 0, 0, 0, 0, 0])
    after = rapl([1e6, 0, 0, 5e6, 0, 0])
    after["energy_uj"][0] = np.nan            # energy_uj unreadable this time
    f = frame_of(topo, {"rapl": before}, {"rapl": after})
    assert f.get("power_pkg_w", topo.get("Package", 0).id) is None
    assert f.get("power_pkg_w", topo.root.id) == pytest.approx(5.0)


def numa(nodes: list[int], hit: list[float], miss: list[float], used: list[float],
         total: float = 8 << 30) -> dict[str, Any]:
    m = len(nodes)
    return {"nodes": np.array(nodes), "mem_total": np.full(m, float(total)),
            "mem_used": np.array(used, dtype=np.float64),
            "mem_free": total - np.array(used, dtype=np.float64),
            "numa_hit": np.array(hit, dtype=np.float64),
            "numa_miss": np.array(miss, dtype=np.float64),
            "numa_foreign": np.zeros(m), "interleave_hit": np.zeros(m),
            "local_node": np.array(hit, dtype=np.float64),
            "other_node": np.array(miss, dtype=np.float64)}


def test_numa_memory_and_rates() -> None:
    topo = make_topology(packages=2, numa_per_package=2)
    nodes = [0, 1, 2, 3]
    g = 1 << 30
    f = frame_of(topo, {"numa": numa(nodes, [0] * 4, [0] * 4, [g] * 4)},
                 {"numa": numa(nodes, [900, 1000, 0, 500], [100, 0, 0, 500],
                               [2 * g, 4 * g, 0, 8 * g])}, dt_s=0.5)
    n0, n3 = topo.get("NUMANode", 0).id, topo.get("NUMANode", 3).id
    p0 = topo.get("Package", 0).id
    assert f.get("mem_used_bytes", n0) == 2 * g
    assert f.get("mem_used_bytes", p0) == 6 * g
    assert f.get("mem_total_bytes", topo.root.id) == 32 * g
    assert f.get("mem_used_pct", topo.root.id) == pytest.approx(100 * 14 / 32)
    assert f.get("mem_used_pct", n3) == pytest.approx(100.0)
    assert f.get("numa_hit_per_s", n0) == pytest.approx(1800.0)
    assert f.get("numa_miss_pct", n0) == pytest.approx(10.0)
    assert f.get("numa_miss_pct", p0) == pytest.approx(100 * 100 / 2000)
    assert f.get("numa_miss_pct", topo.get("NUMANode", 2).id) is None   # 0 / 0
    assert f.get("numa_remote_pct", n3) == pytest.approx(50.0)
    # A core is not above a NUMA node: memory is not a per-core quantity.
    assert f.get("mem_used_bytes", topo.core_of(0).id) is None
    cat = __import__("snumap_tui.model.metrics", fromlist=["x"]).default_catalogue()
    assert cat["numa_miss_pct"].level(f.get("numa_miss_pct", n3)) == "crit"
    assert cat["numa_miss_pct"].level(f.get("numa_miss_pct", n0)) == "warn"


def test_numa_node_unknown_to_the_topology_is_ignored() -> None:
    topo = make_topology()
    f = frame_of(topo, {"numa": numa([0, 7], [0, 0], [0, 0], [1, 1])},
                 {"numa": numa([0, 7], [10, 10], [0, 0], [1, 1])})
    assert f.get("numa_hit_per_s", topo.root.id) == pytest.approx(10.0)


def test_counters_that_go_backwards_are_not_negative(smt: Topology) -> None:
    cpus = [0, 1, 2, 3]
    ev = ["cycles", "instructions"]
    f = frame_of(smt, {"perf": perf(cpus, [[5e9, 5e9]] * 4, ev)},
                 {"perf": perf(cpus, [[1e9, 1e9]] * 4, ev, t=2e9)})
    assert f.get("ipc", smt.root.id) is None


def test_machine_ctxt_fallback(smt: Topology) -> None:
    cpus = [0, 1, 2, 3]
    a, b = ticks(cpus, [[0] * 10] * 4), ticks(cpus, [[0, 0, 0, 100]] * 4)
    a["ctxt"], b["ctxt"] = 1000, 3000
    f = frame_of(smt, {"procstat": a}, {"procstat": b}, dt_s=2.0)
    assert f.get("ctxsw_per_s", smt.root.id) == pytest.approx(1000.0)
    assert f.get("ctxsw_per_s", smt.pu(0).id) is None


def test_counters_are_reported_per_pu(smt: Topology) -> None:
    cpus = [0, 1, 2, 3]
    c = counters(Sample(0, 0, {"procstat": ticks(cpus, [[0] * 10] * 4)}),
                 Sample(S, 0, {"procstat": ticks(cpus, [[1, 2, 3, 4, 5, 6, 7, 8, 1, 1]] * 4)}),
                 smt)
    assert c.pu["total_ticks"].tolist() == [36.0] * 4
    assert c.pu["busy_ticks"].tolist() == [27.0] * 4
    assert c.scalars["dt"] == 1.0 and c.scalars["hz"] == 100.0


def test_frame_to_dict_is_json(smt: Topology) -> None:
    import json
    cpus = [0, 1, 2, 3]
    f = frame_of(smt, {"procstat": ticks(cpus, [[0] * 10] * 4)},
                 {"procstat": ticks(cpus, [[50, 0, 0, 50]] * 4)})
    d = json.loads(json.dumps(f.to_dict()))
    assert d["objects"]["PU:0"]["util_pct"] == 50.0
    assert "ipc" not in d["objects"]["PU:0"]
    assert d["dt_s"] == 1.0 and d["wall_ns"] == 7


def test_plan_cache_lets_a_topology_go() -> None:
    """plan_for caches one Plan per live topology and forgets it when the topology dies."""
    import gc

    from snumap_tui.model.aggregate import _PLANS, plan_for

    topo = make_topology(packages=1, cores_per_numa=2, pus_per_core=2)
    plan_for(topo)
    key = id(topo)
    assert key in _PLANS and _PLANS[key][1].topology is topo
    del topo
    gc.collect()
    assert key not in _PLANS
