"""A study handed to Extra-P (text format) and drawn (matplotlib SVG/PNG, Textual view)."""


import pytest

from snumap_tui.study import extrap, plots


def _measurements(places=("compact",), inputs=(("small", 100.0),), energy=True):
    out = []
    for pl in places:
        for name, value in inputs:
            for t in (1, 2, 4):
                for rep in (0, 1):
                    base = value / 100.0
                    for region, parent, time in (
                            ("(program)", None, base * (0.2 + 1.0 / t)),
                            ("main._omp_fn.0", "(program)", base * 1.0 / t),
                            ("main._omp_fn.1", "(program)", base * 0.2),
                            ("critical", "main._omp_fn.1", base * 0.15)):
                        out.append({"region": region, "parent": parent, "threads": t,
                                    "ranks": None, "places": pl, "input": name,
                                    "input_value": value, "freq": None, "repeat": rep,
                                    "time_s": time * (1 + 0.01 * rep),
                                    "energy_j": 10.0 * time if energy else None,
                                    "status": "ok", "recording": f"r{t}-{rep}.rec"})
    return out


def _parse_text(text):
    """The text format's rules (Extra-P's reader): points, then DATA per region in order."""
    params, points, regions, metric = [], [], {}, None
    current = None
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        field, _, value = line.partition(" ")
        if field == "PARAMETER":
            params = value.split()
        elif field == "POINTS":
            points = value.replace(") (", ")(").strip("()").split(")(") if "(" in value \
                else value.split()
        elif field == "METRIC":
            metric = value
        elif field == "REGION":
            current = regions.setdefault((metric, value), [])
        elif field == "DATA":
            current.append([float(x) for x in value.split()])
        else:
            raise AssertionError(f"unknown field {field}")
    return params, points, regions


def test_extrap_text_one_file(tmp_path):
    ms = _measurements()
    ms.append(dict(ms[0], region="only_at_1", parent=None))      # not at every point
    ms.append(dict(ms[0], status="failed", time_s=99.0))         # failed runs stay out
    paths = extrap.write_extrap(tmp_path / "study.txt", ms, measure="mean")
    assert paths == [tmp_path / "study.txt"]
    text = paths[0].read_text()
    params, points, regions = _parse_text(text)
    assert params == ["threads"] and points == ["1.0", "2.0", "4.0"]
    assert set(regions) == {(m, r) for m in ("time", "energy") for r in (
        "program", "program->main._omp_fn.0", "program->main._omp_fn.1",
        "program->main._omp_fn.1->critical")}
    data = regions[("time", "program->main._omp_fn.0")]
    assert data == [[1.0, 1.01], [0.5, 0.505], [0.25, 0.2525]]
    assert "# left out (not measured at every point): program->only_at_1" in text
    assert "99.0" not in text
    # --measure median: each point's median is its one repetition (Extra-P models means)
    med = extrap.write_extrap(tmp_path / "median.txt", ms)[0].read_text()
    assert _parse_text(med)[2][("time", "program->main._omp_fn.0")] == \
        [[1.005], [0.5025], [0.25125]]
    assert "--options allow_negative_exponents=True" in med.splitlines()[1]


def test_extrap_files_per_placement_and_numeric_inputs(tmp_path):
    ms = _measurements(places=("compact", "spread"), inputs=(("s", 100.0), ("l", 200.0)),
                       energy=False)
    paths = extrap.write_extrap(tmp_path / "study.txt", ms)
    assert sorted(p.name for p in paths) == ["study-compact.txt", "study-spread.txt"]
    params, points, regions = _parse_text(paths[0].read_text())
    assert params == ["threads", "input"] and len(points) == 6
    assert points[0] == "1.0 100.0"
    assert {m for m, _ in regions} == {"time"}          # no energy measured: no metric


def test_extrap_reader_accepts_the_file(tmp_path):
    """Extra-P's own text reader, from its own venv (.venv-extrap, made by setup.sh test)."""
    import os
    import subprocess
    from pathlib import Path

    beside = Path(__file__).resolve().parents[1] / ".venv-extrap" / "bin" / "python"
    python = os.environ.get("SNUMAP_EXTRAP_PYTHON") or (str(beside) if beside.exists() else "")
    if not python:
        pytest.skip("no Extra-P: scripts/setup.sh test installs it in .venv-extrap")
    path = extrap.write_extrap(tmp_path / "study.txt",
                               _measurements(inputs=(("s", 100.0), ("l", 200.0))))[0]
    code = ("import sys; from extrap.fileio.file_reader.text_file_reader import TextFileReader;"
            "e = TextFileReader().read_experiment(sys.argv[1]);"
            "print(len(e.parameters), len(e.coordinates), len(e.callpaths), len(e.metrics))")
    out = subprocess.run([python, "-c", code, str(path)], capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["2", "6", "4", "2"]


def test_efficiency_grid_and_plots(tmp_path):
    rows = []
    for pl in ("compact", "spread"):
        for t in (1, 2, 4):
            for region, eff in (("(program)", 0.9), ("slow", 1.0 / t)):
                rows.append({"region": region, "threads": t, "places": pl, "input": "s",
                             "freq": None, "efficiency": eff if t > 1 else 1.0,
                             "speedup": eff * t, "time_median_s": 1.0 / (eff * t),
                             "energy_j": 5.0 * t, "edp": 5.0 * t / (eff * t)})
    labels, threads, grid = plots.efficiency_grid(rows, "slow")
    assert labels == ["compact", "spread"] and threads == [1, 2, 4]
    assert grid[0] == pytest.approx([1.0, 0.5, 0.25])
    pytest.importorskip("matplotlib")
    files = plots.write_plots(tmp_path / "plots", rows)
    names = sorted(p.name for p in files)
    assert names == sorted(f"{stem}.{ext}" for stem in (
        "efficiency-program", "efficiency-slow", "speedup", "energy") for ext in ("svg", "png"))
    svg = (tmp_path / "plots" / "efficiency-slow.svg").read_text()
    assert "<svg" in svg and "0.25" in svg
    assert (tmp_path / "plots" / "speedup.png").read_bytes()[:4] == b"\x89PNG"


def test_view_shows_the_diagram():
    import asyncio

    from snumap_tui.ui.scale_view import ScaleViewApp, diagram

    rows = [{"region": r, "threads": t, "places": "compact", "input": None, "freq": None,
             "efficiency": e, "speedup": e * t, "time_median_s": 1 / (e * t)}
            for r, effs in (("(program)", (1.0, 0.9)), ("bad\x1b]0;x\x07", (1.0, 0.3)))
            for t, e in zip((1, 2), effs)]
    text = diagram(rows, "bad\x1b]0;x\x07").plain
    assert "0.30" in text and "1.00" in text and "threads" in text

    async def run():
        app = ScaleViewApp(rows, {"(program)": ["model: 0.1 + 0.9 * p^(-1)"]}, title="t")
        async with app.run_test(size=(120, 30)) as pilot:
            await pilot.pause()
            first = str(app.query_one("#diagram").render())
            await pilot.press("down")
            await pilot.pause()
            second = str(app.query_one("#diagram").render())
            await pilot.press("h")
            await pilot.pause()
            helped = str(app.query_one("#diagram").render())
        return first, second, helped
    first, second, helped = asyncio.run(run())
    assert "(program)" in first and "0.90" in first
    assert "0.30" in second and "\x1b" not in second
    assert "red < 0.5" in helped


def _two_placements() -> list[dict]:
    """Two regions, two placements, 1-4 threads: six configurations a region."""
    return [{"region": r, "threads": t, "places": pl, "input": None, "freq": None,
             "efficiency": e, "speedup": e * t, "time_median_s": 1 / (e * t),
             "time_min_s": 0.9 / (e * t), "time_max_s": 1.1 / (e * t), "karp_flatt": 0.1,
             "energy_j": 12.0}
            for r, effs in (("(program)", (1.0, 0.9, 0.8)), ("slow", (1.0, 0.3, 0.2)))
            for pl in ("compact", "spread") for t, e in zip((1, 2, 4), effs)]


def test_view_at_80x24_keeps_one_line_per_configuration():
    """The table at 80x24 wrapped every row onto two lines (issue 30 item 19): one line per
    configuration, the detail pane scrolling sideways instead."""
    import asyncio

    from snumap_tui.ui.scale_view import ScaleViewApp

    rows = _two_placements()

    async def run():
        app = ScaleViewApp(rows, {}, title="t")
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            return app.query_one("#table").size.height
    assert asyncio.run(run()) == 1 + 6 + 1    # the header, six configurations, the last newline


def test_snapshot_scale_view_80x24(snap_compare):
    """scale view at 80x24: one line per configuration (issue 30 item 19)."""
    from snumap_tui.ui.scale_view import ScaleViewApp

    rows = _two_placements()
    app = ScaleViewApp(rows, {"(program)": ["model: 0.1 + 0.9 * p^(-1)"]}, title="t")
    assert snap_compare(app, terminal_size=(80, 24))
