"""The metric catalogue and users' TOML metric files."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from topo_factory import make_topology

from snumap_tui.errors import SnumapError
from snumap_tui.model.derive import derive
from snumap_tui.model.metrics import COUNTERS, Catalogue, default_catalogue, make_metric
from snumap_tui.model.sample import Sample
from snumap_tui.model.usermetrics import config_path, load_catalogue, parse_metrics


def test_every_builtin_reads_known_counters_and_has_a_scale() -> None:
    cat = default_catalogue()
    assert len(cat) >= 30
    for m in cat:
        assert m.needs <= set(COUNTERS), m.name
        assert m.rule in ("sum", "mean")
        assert m.scale in ("linear", "log") and m.vmax > m.vmin
        assert m.unit and m.description
        d = m.to_dict()
        assert d["needs"] and d["formula"]


def test_thresholds_mark_problems() -> None:
    cat = default_catalogue()
    ipc = cat["ipc"]
    assert ipc.level(0.3) == "warn" and ipc.level(1.5) is None and ipc.level(None) is None
    assert ipc.warn == 0.5
    steal = cat["steal_pct"]
    levels = steal.levels(np.array([1.0, 10.0, 50.0, np.nan]))
    assert levels.tolist() == [0, 1, 2, 0]
    assert cat["mpki"].level(60) == "crit"


def test_colour_scale() -> None:
    cat = default_catalogue()
    util = cat["util_pct"].normalize(np.array([0.0, 50.0, 150.0, np.nan]))
    assert util[:3].tolist() == [0.0, 0.5, 1.0] and math.isnan(util[3])
    mpki = cat["mpki"]          # log scale 0.1 .. 100
    assert mpki.log and mpki.normalize(np.array([1.0]))[0] == pytest.approx(1 / 3)


def test_mean_rule_refuses_object_counters() -> None:
    with pytest.raises(SnumapError, match="not a per-PU counter"):
        make_metric("x", "mem_used / dt", rule="mean", unit="", description="")
    with pytest.raises(SnumapError, match="'sum' or 'mean'"):
        make_metric("x", "cycles", rule="median", unit="", description="")


GOOD = """
events = ["LLC-load-misses", "r01a1"]

[metric.llc_load_mpki]
obj = "L3"
ctr = "1000 * llc_load_misses / instructions"
unit = "MPKI"
logscale = true
min = 0.1
max = 100
warn_above = 10

[metric.busy_share]
formula = "100 * busy_ticks / total_ticks"
rule = "mean"
object = ["Core", "Package"]
crit_above = 99

[metric.ipc]
formula = "instructions / cycles"
description = "replaces the built-in"
min = 0
max = 8
"""


def test_user_metrics_parse_like_dynamic_lstopo_counter_files() -> None:
    metrics, events = parse_metrics(GOOD, "mine.toml")
    assert events == ["LLC-load-misses", "r01a1"]
    by = {m.name: m for m in metrics}
    llc = by["llc_load_mpki"]
    assert llc.objects == {"L3Cache"} and llc.scale == "log"
    assert (llc.vmin, llc.vmax) == (0.1, 100.0)
    assert llc.needs == {"llc_load_misses", "instructions"}
    assert llc.level(20) == "warn" and llc.user
    assert by["busy_share"].rule == "mean"
    assert by["busy_share"].objects == {"Core", "Package"}
    assert by["busy_share"].level(100) == "crit"


def test_user_metric_evaluates_at_its_object_type(tmp_path: Path) -> None:
    f = tmp_path / "m.toml"
    f.write_text(GOOD)
    cat = load_catalogue([f], user_config=False)
    assert cat["ipc"].vmax == 8.0 and cat["ipc"].user
    assert "llc_load_mpki" in cat and cat.extra_counters == {"LLC-load-misses", "r01a1"}
    topo = make_topology(cores_per_numa=2, pus_per_core=1)
    cpus = np.array([0, 1])
    ev = ["instructions", "cycles", "LLC-load-misses"]
    z = np.zeros((2, 3))
    one = np.full((2, 3), 1e9)
    v = np.array([[1e9, 1e9, 2e6], [3e9, 1e9, 0.0]])
    before = Sample(0, 0, {"perf": {"cpus": cpus, "events": ev, "value": z, "enabled": z,
                                    "running": z}})
    after = Sample(10**9, 0, {"perf": {"cpus": cpus, "events": ev, "value": v, "enabled": one,
                                       "running": one}})
    fr = derive(before, after, topo, cat)
    l3 = topo.by_type("L3Cache")[0]
    assert fr.get("llc_load_mpki", l3.id) == pytest.approx(1000 * 2e6 / 4e9)
    assert fr.get("llc_load_mpki", topo.pu(0).id) is None       # shown on L3 only
    assert fr.get("ipc", topo.root.id) == pytest.approx(2.0)


@pytest.mark.parametrize("text, words", [
    ("[metric.x\nformula = 'cycles'", "not valid TOML"),
    ("[metric.x]\nunit = 'W'", "needs a 'formula'"),
    ("[metric.x]\nformula = 'cycles.real'", "attribute access"),
    ("[metric.x]\nformula = 'open(cycles)'", "calls are not allowed"),
    ("[metric.x]\nformula = 'cycels / dt'", "unknown counter 'cycels'"),
    ("[metric.x]\nformula = 'cycles'\nobject = 'Socket9'", "unknown object type"),
    ("[metric.x]\nformula = 'cycles'\nmin = 'low'", "'min' must be a number"),
    ("[metric.x]\nformula = 'cycles'\nmin = 5\nmax = 1", "needs min < max"),
    ("[metric.x]\nformula = 'cycles'\nlogscale = true\nmin = 0", "min > 0 on a log scale"),
    ("[metric.x]\nformula = 'cycles'\nscale = 'cubic'", "'linear' or 'log'"),
    ("[metric.x]\nformula = 'cycles'\ncolour = 'red'", "unknown key 'colour'"),
    ("[metric.x]\nformula = 'mem_used'\nrule = 'mean'", "not a per-PU counter"),
    ("[metric.x]\nformula = [1, 2]", "string or a list of strings"),
    ("events = 'cycles'", "'events' must be a list"),
    ("metrics = 1", "unknown top-level key 'metrics'"),
    ("metric = 3", "must be tables"),
    ("[metric.'a b']\nformula = 'cycles'", "may only hold letters"),
])
def test_bad_files_give_one_line_errors(text: str, words: str) -> None:
    with pytest.raises(SnumapError) as ei:
        parse_metrics(text, "bad.toml")
    msg = str(ei.value)
    assert words in msg, msg
    assert msg.startswith("bad.toml") and "\n" not in msg


def test_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SnumapError, match="metrics file not found"):
        load_catalogue([tmp_path / "nope.toml"], user_config=False)


def test_user_config_is_read_from_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert config_path() == tmp_path / "snumap" / "metrics.toml"
    assert "busy_share" not in load_catalogue()
    config_path().parent.mkdir(parents=True)
    config_path().write_text(GOOD)
    cat = load_catalogue()
    assert "busy_share" in cat and "util_pct" in cat
    assert isinstance(cat, Catalogue)


def test_colour_position_and_problem_level_are_the_models() -> None:
    """Metric.normalize / Metric.level are the one copy of the colour scale and thresholds
    the views use (ui/metricspec.py delegates to them)."""
    cat = default_catalogue()
    util = cat["util_pct"]                                   # linear 0..100
    pos = util.normalize(np.array([-5.0, 25.0, 100.0, 250.0, math.nan]))
    assert pos[:4].tolist() == [0.0, 0.25, 1.0, 1.0] and math.isnan(pos[4])
    assert float(util.normalize(50.0)) == 0.5                # a scalar works too
    log = next(m for m in cat if m.scale == "log")
    lo, hi = float(log.normalize(log.vmin)), float(log.normalize(log.vmax))
    assert (lo, hi) == (0.0, 1.0)
    mid = float(log.normalize(math.sqrt(max(log.vmin, 1e-12) * log.vmax)))
    assert mid == pytest.approx(0.5, abs=0.01)               # geometric middle of a log scale
    ipc = cat["ipc"]
    assert ipc.level(None) is None and ipc.level(2.0) is None
    assert ipc.level(0.1) in ("warn", "crit")
