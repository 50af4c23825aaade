"""`snumap scale`'s counter and memory figures per region without running a program: medians
over repeats with the ratios taken from the median totals (attribution's formulas), the n/a
reasons, the report's text, the exports' columns, and `--events` refused before any run."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from snumap_tui import study as study_api
from snumap_tui.study.figures import OLD_RUN, combine
from snumap_tui.study.synth import make_study
from tests.test_scale import _digest, _refused, scale


def _counters(cycles: float, instructions: float, on_cpu: float) -> dict[str, Any]:
    return {"on_cpu_s": on_cpu, "events": {"cycles": cycles, "instructions": instructions},
            "multiplexed": [], "dropped": []}


def test_combine_medians_and_ratios_of_the_median_totals() -> None:
    rows = [{"counters": _counters(100.0, 200.0, 1.0),
             "memory": {"samples": 2, "rss_bytes": 10 << 20, "nodes": {"0": 10 << 20}}},
            {"counters": _counters(300.0, 500.0, 3.0),
             "memory": {"samples": 0, "why": "no memory sample inside it"}},
            {"counters": _counters(200.0, 350.0, 2.0),
             "memory": {"samples": 1, "rss_bytes": 30 << 20, "nodes": {"0": 30 << 20}}}]
    got = combine(rows, time_s=2.0)
    c = got["counters"]
    assert c["n"] == 3 and c["events"] == {"cycles": 200.0, "instructions": 350.0}
    assert c["on_cpu_s"] == 2.0
    # IPC of the median totals (350/200), not the median of the runs' IPCs (2, 1.67, 1.75)
    assert c["ipc"] == pytest.approx(1.75) and c["ghz"] == pytest.approx(200 / 2e9)
    assert c["events_per_s"] == {"cycles": 100.0, "instructions": 175.0}
    assert c["mpki"] is None and "LLC-load-misses" in c["na"]["mpki"]
    assert got["memory"] == {"n": 2, "rss_max_bytes": 20 << 20, "nodes": {"0": 20 << 20}}
    none = combine([{"counters": {"why": "recorded without --events"},
                     "memory": {"samples": 0, "why": "not recorded"}}], 1.0)
    assert none == {"counters": {"why": "recorded without --events"},
                    "memory": {"why": "not recorded"}}
    assert combine([{}], 1.0)["counters"] == {"why": OLD_RUN}      # a run from before


def test_report_and_exports_carry_the_figures(tmp_path: Path) -> None:
    st = tmp_path / "s"
    make_study(st, threads=[1, 2], serial={"a": 0.0}, repeats=2, figures=True)
    rep = json.loads(scale("report", str(st), "--json").stdout)
    node = next(n for n in rep["regions"] if n["region"] == "a")
    by_p = {a["threads"]: a for a in node["rows"]}
    assert by_p[1]["counters"]["events"]["cycles"] == pytest.approx(1e9)
    assert by_p[2]["counters"]["events"]["cycles"] == pytest.approx(1e9)  # 2 x 0.5 s
    assert by_p[2]["counters"]["ipc"] == pytest.approx(2.0)
    assert by_p[2]["counters"]["events_per_s"]["cycles"] == pytest.approx(2e9)
    assert by_p[2]["memory"]["rss_max_bytes"] == 128 << 20
    text = scale("report", str(st)).stdout
    assert "Counters and memory per region" in text and "cycles" in text
    lines = text.splitlines()
    sec = next(i for i, ln in enumerate(lines) if ln.startswith("Counters and memory"))
    a = next(i for i in range(sec, len(lines)) if lines[i].strip() == "a")
    cells = next(ln for ln in lines[a:] if ln.split()[:2] == ["compact", "2"]).split()
    assert cells[2:5] == ["1.000", "2.00", "1.00"] and cells[-1] == "128.0"

    data = study_api.load(st)
    for fmt in ("csv", "json", "parquet"):
        out = tmp_path / f"m.{fmt}"
        r = scale("export", str(st), "--format", fmt, "-o", str(out))
        if fmt == "parquet" and "pyarrow" in r.stderr:
            continue
        assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader((tmp_path / "m.csv").open()))
    assert len(rows) == len(data.measurements) == 2 * 2 * 2
    for row in rows:
        assert float(row["event:cycles"]) == pytest.approx(1e9 * float(row["time_s"])
                                                           * int(row["threads"]))
        assert float(row["ipc"]) == pytest.approx(2.0) and row["counters_why"] == ""
        assert int(row["mem_rss_max_bytes"]) == (64 << 20) * int(row["threads"])
    doc = json.loads((tmp_path / "m.json").read_text())
    assert all(m["counters"]["events"]["instructions"] > 0 for m in doc["measurements"])
    pq = pytest.importorskip("pyarrow.parquet")
    t = pq.read_table(tmp_path / "m.parquet").to_pydict()
    assert t["event:cycles"] == [float(x["event:cycles"]) for x in rows]
    assert t["mem_rss_max_bytes"] == [int(x["mem_rss_max_bytes"]) for x in rows]


def test_runs_without_figures_say_why(tmp_path: Path) -> None:
    st = tmp_path / "s"
    make_study(st, threads=[1, 2], serial={"a": 0.5})      # measured before: no figures
    rep = json.loads(scale("report", str(st), "--json").stdout)
    for node in rep["regions"]:
        for a in node["rows"]:
            assert a["counters"] == {"why": OLD_RUN} and a["memory"] == {"why": OLD_RUN}
    assert f"counters: n/a ({OLD_RUN})" in scale("report", str(st)).stdout
    rows = list(csv.DictReader(_export_csv(st, tmp_path)))
    assert {r["counters_why"] for r in rows} == {OLD_RUN} and rows[0]["on_cpu_s"] == ""


def _export_csv(st: Path, tmp: Path) -> Any:
    out = tmp / "m.csv"
    assert scale("export", str(st), "--format", "csv", "-o", str(out)).returncode == 0
    return out.open()


def test_bad_events_refused_before_any_run(tmp_path: Path) -> None:
    """A bad name, a raw event with a bad field, too many events: one line, exit 2, no study
    directory made, an existing study untouched."""
    _refused(scale("--events", "task-clock,no-such-event", "-o", str(tmp_path / "new"), "--",
                   "true"), "--events: unknown event 'no-such-event'")
    _refused(scale("--events", "cpu/event=0xzz/", "-o", str(tmp_path / "new"), "--", "true"),
             "--events: event 'cpu/event=0xzz/'")
    _refused(scale("--events", ",".join(["task-clock"] * 2), "-o", str(tmp_path / "new"), "--",
                   "true"), "task-clock is named twice")
    assert not (tmp_path / "new").exists()
    st = tmp_path / "study"
    make_study(st, threads=[1], serial={"a": 0.5})
    before = _digest(st)
    _refused(scale("--events", "bogus", "-o", str(st), "--", "prog"), "unknown event 'bogus'")
    assert _digest(st) == before


def test_models_of_another_metric(tmp_path: Path) -> None:
    """--metric fits the PMNF models to a counter instead of time: a region whose time
    follows Amdahl's law with serial fraction 0.5 spends cycles 1e9 x (0.5 p + 0.5), a
    perfectly scaling one a constant 1e9; an unknown name is one line, exit 2."""
    st = tmp_path / "s"
    make_study(st, threads=[1, 2, 4, 8], serial={"a": 0.0, "b": 0.5}, figures=True)
    rep = json.loads(scale("report", str(st), "--json", "--metric", "cycles", "--predict",
                           "16").stdout)
    mo = rep["models"]
    assert mo["metric"] == "cycles" and mo["available"]
    assert mo["models"]["b"]["formula"] == "5e+08 + 5e+08 * threads"
    assert mo["models"]["b"]["at_predict"]["value"] == pytest.approx(8.5e9, rel=1e-6)
    assert mo["models"]["a"]["at_predict"]["value"] == pytest.approx(1e9, rel=1e-6)
    text = scale("report", str(st), "--metric", "memory").stdout
    assert "Models (PMNF, memory bytes, median over repeats, as a function of the thread count" in text
    timed = json.loads(scale("report", str(st), "--json").stdout)["models"]
    assert timed["metric"] == "time" and "time_s" in timed["models"]["b"]["at_cores"]
    _refused(scale("report", str(st), "--metric", "LLC-load-misses"),
             "--metric LLC-load-misses: choose from time, energy")


def test_damaged_recording_keeps_the_run() -> None:
    """A recording whose counters or memory cannot be read: those figures are n/a with why,
    and nothing raises (the run's times are kept; it is not marked failed)."""
    from snumap_tui.study.figures import run_figures

    class Damaged:
        def __init__(self) -> None:
            self.header = {"counters": {"events": [{"name": "task-clock"}]},
                           "process_memory": {}}

        def regions(self) -> Any:
            raise ValueError("no region chunk")

        def thread_counters(self) -> Any:
            raise ValueError("bad chunk")

        @property
        def topology(self) -> Any:
            raise KeyError("topology")

    got = run_figures(Damaged(), (0, 1), ["r"])
    assert set(got) == {"(program)", "r"}
    for figs in got.values():
        assert figs == {"counters": {"why": "counters unreadable (ValueError)"},
                        "memory": {"why": "memory unreadable (KeyError)"}}
