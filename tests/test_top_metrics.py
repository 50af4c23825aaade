"""`snumap top --metrics FILE`: a user's TOML metrics reach the sampler (batch JSON and text),
the metric picker of the TUI, and a bad file is one error line with exit status 2."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest
from fakefs import FakeRoot
from test_top_batch import run_while_busy  # 0.1 s steps: 10 ticks, 9 user + 1 system

from snumap_tui.cli import main
from snumap_tui.model.sampler import _request_events
from snumap_tui.model.usermetrics import load_catalogue
from snumap_tui.sources.perf import PerfSource
from snumap_tui.ui.metricspec import heatmap_metrics, use_catalogue, view_for

METRICS = """
events = ["bus-cycles", "LLC-load-misses"]

[metric.kernel_share]
object = ["Machine", "Package", "PU"]
formula = "100 * system / total_ticks"
unit = "%"
rule = "mean"
description = "share of time in the kernel"
min = 0
max = 50
warn_above = 20
"""


@pytest.fixture
def metrics_file(tmp_path: Path) -> Path:
    p = tmp_path / "metrics.toml"
    p.write_text(METRICS)
    return p


@pytest.fixture(autouse=True)
def _builtin_views() -> object:
    yield
    use_catalogue(None)           # the views' catalogue is process-wide: leave the built-ins


def test_batch_json_has_the_user_metric(tmp_path: Path, metrics_file: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    fr = FakeRoot(tmp_path / "fs", cpus=4, nodes=1, packages=1)
    out = run_while_busy(fr, ["top", "--fsroot", str(fr.root), "--batch", "--json",
                               "--count", "1", "--interval", "0.3",
                               "--metrics", str(metrics_file)], capsys, 0.1)
    objs = json.loads(out.splitlines()[-1])["objects"]
    assert objs["PU:0"]["kernel_share"] == pytest.approx(10.0, abs=2.0)
    assert objs["PU:3"]["kernel_share"] < 5.0
    assert 0 < objs["Machine:0"]["kernel_share"] < objs["PU:0"]["kernel_share"]


def test_batch_text_prints_the_user_metric(tmp_path: Path, metrics_file: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    fr = FakeRoot(tmp_path / "fs", cpus=2, nodes=1, packages=1)
    out = run_while_busy(fr, ["top", "--fsroot", str(fr.root), "--batch", "--count", "1",
                               "--interval", "0.3", "--metrics", str(metrics_file)], capsys, 0.1)
    line = next(x for x in out.splitlines() if x.startswith("kernel_share"))
    assert line.startswith("kernel_share (%): Machine:0=") and "PU:1=" in line


@pytest.mark.parametrize("text, msg", [
    ("[metric.x\n", "not valid TOML"),
    ('[metric.x]\nformula = "1000 * no_such_counter / instructions"\n', "no_such_counter"),
    ('[metric.x]\nformula = "cycles"\nobject = "Socket2"\n', "unknown object type"),
    ('[metric.x]\nformula = "cycles"\nmin = 5\nmax = 1\n', "min < max"),
])
def test_a_bad_metrics_file_is_one_line(tmp_path: Path, text: str, msg: str,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(text)
    assert main(["top", "--batch", "--count", "1", "--metrics", str(bad)]) == 2
    err = capsys.readouterr().err
    assert msg in err and str(bad) in err and err.count("\n") == 1


def test_a_missing_metrics_file_is_one_line(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["top", "--metrics", str(tmp_path / "nope.toml")]) == 2
    err = capsys.readouterr().err
    assert "not found" in err and err.count("\n") == 1


def test_extra_events_go_to_the_perf_source(tmp_path: Path, metrics_file: Path) -> None:
    cat = load_catalogue([metrics_file], user_config=False)
    src = PerfSource(tmp_path)                 # not opened: construction only
    _request_events([src], cat.extra_counters)
    # every event a metrics file names goes to the perf source (native/perf_spec.py parses
    # cache events like LLC-load-misses too): hardware ones to the hardware group
    assert src.hw_events[-2:] == ("bus-cycles", "LLC-load-misses") or \
        src.hw_events[-2:] == ("LLC-load-misses", "bus-cycles")
    assert "LLC-load-misses" not in src.sw_events


def test_the_picker_offers_the_user_metric_with_its_scale(metrics_file: Path) -> None:
    cat = load_catalogue([metrics_file], user_config=False)
    values = {"util_pct": np.zeros(3), "iowait_pct": np.zeros(3), "kernel_share": np.zeros(3)}
    # without the file it is just another metric, after the others
    assert [m.key for m in heatmap_metrics(values)] == ["util_pct", "iowait_pct", "kernel_share"]
    use_catalogue(cat)
    keys = [m.key for m in heatmap_metrics(values)]
    assert keys == ["util_pct", "kernel_share", "iowait_pct"]      # the user's right after
    v = view_for("kernel_share")
    assert (v.label, v.unit, v.lo, v.hi, v.warn) == ("kernel_share", "%", 0.0, 50.0, 20.0)
    assert v.description == "share of time in the kernel"
    assert v.is_problem(25.0) and not v.is_problem(10.0)


def test_the_tui_cycles_to_the_user_metric(metrics_file: Path) -> None:
    from snumap_tui.ui.app import TopApp
    from snumap_tui.ui.demo import demo_frame, synthetic_topology

    topo = synthetic_topology(1, 1, 1, 2, 2)
    cat = load_catalogue([metrics_file], user_config=False)
    frame = demo_frame(topo, 0)
    frame.values["kernel_share"] = np.linspace(0, 40, len(topo))

    async def go() -> list[str]:
        app = TopApp(topo, catalogue=cat)
        seen = []
        async with app.run_test(size=(100, 30)) as pilot:
            app.push_frame(frame)
            for _ in range(len(heatmap_metrics(frame.values))):
                seen.append(app.metric.key)
                await pilot.press("m")
        return seen

    keys = asyncio.run(go())
    assert "kernel_share" in keys
    assert keys.index("kernel_share") == next(i for i, k in enumerate(keys)
                                              if k not in {"util_pct", "ipc", "ghz", "mpki",
                                                           "cache_miss_pct", "power_pkg_w",
                                                           "mem_used_pct", "numa_miss_pct",
                                                           "system_pct", "steal_pct",
                                                           "ctxsw_per_s"})


def test_every_builtin_metric_has_a_unique_readable_name() -> None:
    """The picker's names: one per metric, never a cut word, the unit once."""
    from snumap_tui.model.metrics import default_catalogue

    use_catalogue(None)
    titles = {view_for(m.name).title: m.name for m in default_catalogue()}
    assert len(titles) == len(default_catalogue())
    assert {"mem free", "NUMA miss %", "power pkg W", "power dram W", "clock GHz",
            "frontend stall %"} <= set(titles)
    for t in titles:
        words = t.split()
        assert len(words) == len(set(words)), t            # no "GHz GHz", "Watt W"


def test_memory_metrics_are_humanised() -> None:
    use_catalogue(None)
    v = view_for("mem_used_bytes")
    assert v.fmt(7342338.0 * 1024, 0) == "7.0GiB"
    assert view_for("mem_free_bytes").fmt(512 * 2**20, 0) == "512MiB"
    assert v.title.startswith("mem used")                 # without the cache, as the tree
