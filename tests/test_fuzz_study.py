"""tests/fuzz_study.py for ~30 s with a fixed seed: crafted study directories (manifest, run
files, frequency restore files: fields dropped or swapped, NaN/Infinity, deep nesting, FIFOs,
links, huge files) through `scale report`, --json, the view, every export, --extrap, --plot
and a resume. Every run ends in data or one line; none in a traceback or a hang (issue 30).
The longer run is `python bench/fuzz.py` (docs/benchmarks.md)."""

from __future__ import annotations

from pathlib import Path

from test_fuzz import fuzz


def test_fuzzed_study_directories_end_in_data_or_one_line(tmp_path: Path) -> None:
    p, got, report = fuzz("fuzz_study.py", 30, 5, tmp_path)
    targets = ("manifest", "run files", "restore files")
    for target in targets:
        t = got[target]
        assert t["cases"] >= 3 and t["runs"] >= 20, (target, report)
        assert t["tracebacks"] == 0 and t["hangs"] == 0, (target, report)
        assert t["multi_line_errors"] == 0, (target, report)
        assert t["peak_rss_mib"] < 2048, (target, report)
    # both outcomes seen: crafted manifests are refused in one line, damaged run files are
    # counted and the rest of the study reported
    assert got["manifest"]["clean_errors"] > 0 and got["manifest"]["data"] > 0, report
    assert got["run files"]["data"] > 0, report
    assert p.returncode == 0, report
