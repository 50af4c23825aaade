"""A job merged from two nodes keeps both nodes' metric samples for every reader: one sample
per step on the job's topology (PUs, NUMA nodes, packages and device names moved per node),
so the report has I/O and energy per node, the CSV samples have rows, the replay has frames.
Before, the merged recording's ``samples()`` was empty: "I/O not recorded", a header-only
CSV, "no samples recorded here"."""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path

import pytest

from snumap_tui import store
from snumap_tui.analysis.report import build_report, format_report
from snumap_tui.cli import main
from snumap_tui.model.derive import derive
from snumap_tui.store.jobsamples import type_bases
from snumap_tui.store.merge import merge

sys.path.insert(0, str(Path(__file__).parent))
from jobrecs import MB, WALL, with_samples

S = 1_000_000_000


@pytest.fixture()
def job(tmp_path: Path) -> Path:
    # b's monotonic clock is 5 s behind a's at the same wall time, its samples 0.3 s later.
    a = with_samples(tmp_path / "a.rec", "a", 100 * S, WALL, 0.5, 1 * MB, 20.0)
    b = with_samples(tmp_path / "b.rec", "b", 95 * S + 3 * S // 10, WALL + 5 * S, 1.0,
                     4 * MB, 50.0)
    merge([a, b], tmp_path / "job.rec")
    return tmp_path / "job.rec"


def test_merged_samples_hold_both_nodes_on_the_job_topology(job: Path) -> None:
    with store.open(job) as rec:
        got = list(rec.samples())
        assert len(got) == 4 and len(rec.sample_times) == 4
        assert [s.t_ns for s in got] == rec.sample_times.tolist()
        last = got[-1].readings
        assert last["procstat"]["cpus"].tolist() == [0, 1, 2, 3]
        assert last["numa"]["nodes"].tolist() == [0, 1]
        assert last["net"]["names"] == ["a:eth0", "b:eth0"]
        assert last["net"]["numa"].tolist() == [0, 1]
        assert last["rapl"]["domains"] == ["package-0", "package-1"]
        assert last["rapl"]["objects"] == [["Package", 0], ["Package", 1]]
        assert "tasks" not in last
        f = derive(got[1], got[2], rec.topology)
        pu = {p.os_index: f.get("util_pct", p.id) for p in rec.topology.pus}
        assert pu[0] == pytest.approx(50.0) and pu[2] == pytest.approx(100.0)
        assert pu[1] == pytest.approx(0.0) and pu[3] == pytest.approx(0.0)
        pkg = {p.os_index: f.get("power_pkg_w", p.id) for p in rec.topology.by_type("Package")}
        assert pkg == {0: pytest.approx(20.0), 1: pytest.approx(50.0)}
        mem = {n.os_index: f.get("mem_used_bytes", n.id) for n in rec.topology.numa_nodes}
        assert mem == {0: 2.0**30, 1: 2.0**30}
        # A window of steps reads as the whole does.
        part = list(rec.samples(got[1].t_ns, got[2].t_ns + 1))
        assert [s.t_ns for s in part] == [got[1].t_ns, got[2].t_ns]
        assert part[-1].readings["net"]["names"] == ["a:eth0", "b:eth0"]


def test_type_bases_are_the_merges(job: Path) -> None:
    with store.open(job) as rec:
        bases = type_bases(rec.topology)
        assert [b.get("PU", 0) for b in bases] == [int(n["cpu_base"]) for n in rec.nodes.nodes]
        assert bases[1]["NUMANode"] == 1 and bases[1]["Package"] == 1


def test_report_csv_and_replay_see_both_nodes(job: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from snumap_tui.ui.replay_data import load_replay

    with store.open(job) as rec:
        report = build_report(rec)
        text = format_report(report)
        data = load_replay(rec)
    dev = {d["name"]: d for d in report["io"]}
    assert set(dev) == {"a:eth0", "b:eth0"}
    # b samples 0.3 s after a: each of b's samples joins a's nearest step, so its rates are
    # its own (no false peak from pairing samples a second apart in a shorter step).
    assert dev["b:eth0"]["in_bytes"] == pytest.approx(3 * 4 * MB)
    assert dev["b:eth0"]["in_peak"] == pytest.approx(4 * MB)
    assert dev["a:eth0"]["in_bytes"] == pytest.approx(3 * 1 * MB)
    assert "I/O not recorded" not in text and "b:eth0" in text
    assert {s.name for s in data.series} >= {"pwr P0", "pwr P1", "mem N0", "mem N1"}
    assert main(["export", str(job), "--format", "csv", "--table", "samples", "-o", "-"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    util = {(r["object_type"], r["os_index"]) for r in rows if r["metric"] == "util_pct"}
    assert {("PU", "0"), ("PU", "2"), ("Machine", "0"), ("Machine", "1")} <= util


def test_a_node_without_enabled_times_stacks_with_one_that_has_them() -> None:
    """A 1 ms recording's grid samples leave out enabled/running where nothing was
    multiplexed; beside another node's sweep sample at the same step they still stack
    (once they did not, and derive() raised on the job's tables). Two nodes of 2 PUs and
    2 events: the event list is not taken for a per-PU field."""
    import numpy as np

    from snumap_tui.store.jobsamples import combine_readings

    a = {"perf": {"cpus": np.array([0, 1]), "events": ["context-switches"],
                  "value": np.array([[1.0], [2.0]]), "enabled": np.array([[5.0], [5.0]]),
                  "running": np.array([[5.0], [5.0]])}}
    b = {"perf": {"cpus": np.array([2, 3]), "events": ["context-switches", "page-faults"],
                  "value": np.array([[3.0, 7.0], [4.0, 8.0]])}}
    got = combine_readings([a, b])["perf"]
    assert got["cpus"].tolist() == [0, 1, 2, 3]
    assert got["events"] == ["context-switches", "page-faults"]
    assert got["value"].shape == (4, 2)
    assert np.isnan(got["value"][:2, 1]).all() and got["value"][2:, 1].tolist() == [7.0, 8.0]
    assert "enabled" not in got and "running" not in got
    both = combine_readings([a, a])["perf"]
    assert both["enabled"].shape == (4, 1) and both["running"].shape == (4, 1)
