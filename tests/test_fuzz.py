"""The fuzzer (tests/fuzz_harness.py), bounded to about 45 s: damaged and crafted recordings of
every backend (and one with counters, memory and regions) through the API, report, export
(chrome, csv, Perfetto, Parquet) and the replay's load, and formulas and metrics
files through their parsers. Every run must end with data or one clear line; none with a
traceback or a hang. The longer run is `python bench/fuzz.py` (docs/benchmarks.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def fuzz(script: str, seconds: int, seed: int, tmp_path: Path
         ) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], str]:
    """Run tests/SCRIPT for SECONDS: (the process, its counts, the end of what it printed)."""
    out = tmp_path / "counts.json"
    p = subprocess.run([sys.executable, str(REPO / "tests" / script), "--seconds",
                        str(seconds), "--seed", str(seed), "--json", str(out)],
                       capture_output=True, text=True, timeout=600, check=False)
    assert out.exists(), p.stdout + p.stderr
    return p, json.loads(out.read_text()), p.stdout[-3000:]


def test_fuzzed_recordings_and_formulas_end_in_data_or_one_line(tmp_path: Path) -> None:
    p, got, report = fuzz("fuzz_harness.py", 45, 17, tmp_path)
    rec, form = got["recordings"], got["formulas"]
    assert rec["tracebacks"] == 0 and form["tracebacks"] == 0, report
    assert rec["hangs"] == 0 and form["hangs"] == 0, report
    assert rec["multi_line_errors"] == 0 and form["multi_line_errors"] == 0, report
    # The run did real work: seeds from the API and at least the /proc backend, many cases,
    # and both outcomes seen (a fuzzer that only ever gets data, or only errors, tests little).
    assert "api" in got["seeds"] and "proc" in got["seeds"], got["skipped_backends"]
    assert got["seed_damage"] == {}, got["seed_damage"]     # what snumap writes reads clean
    assert rec["cases"] >= 20 and form["cases"] >= 200, report
    assert rec["data"] > 0 and rec["clean_errors"] > 0, report
    assert form["data"] > 0 and form["clean_errors"] > 0, report
    assert p.returncode == 0, report
    # Memory: no bomb inflated (the process runs under a 3 GiB address-space limit, and its
    # peak resident size stays far below what the bombs would make).
    assert rec["peak_rss_mib"] < 1024, report


def test_fuzzed_headers_topologies_metrics_fsroots_and_markers(tmp_path: Path) -> None:
    """tests/fuzz_inputs.py for ~32 s with a fixed seed: every family of input a user or
    another user can hand snumap besides a recording's chunks (issue 23), and crafted thread
    counters and process memory chunks, merged headers and fsroot numbers (issue 30)."""
    p, got, report = fuzz("fuzz_inputs.py", 32, 3, tmp_path)
    fams = ("headers", "topologies", "metrics", "fsroot", "markers", "chunks", "merged",
            "fsnumbers")
    for fam in fams:
        t = got[fam]
        assert t["cases"] >= 1 and t["runs"] >= 1, (fam, report)
        assert t["tracebacks"] == 0 and t["crashes"] == 0, (fam, report)
        assert t["hangs"] == 0 and t["multi_line_errors"] == 0, (fam, report)
        assert t["peak_rss_mib"] < 2048, (fam, report)
    assert sum(got[f]["data"] for f in fams) > 0 and \
        sum(got[f]["clean_errors"] for f in fams) > 0, report
    assert got["topologies"]["cases"] >= 10 and got["metrics"]["cases"] >= 30, report
    assert p.returncode == 0, report
