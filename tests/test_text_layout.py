"""The text layout of `report` and `scale report` (issue 30 item 17): names as wide as the
output allows and cut in the middle keeping their (file:line), headers never cut, task-clock
with its unit, page faults as integers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from snumap_tui.analysis.attribution_text import format_counters
from snumap_tui.analysis.regions import format_regions
from snumap_tui.analysis.textcols import event_text, fit_name, output_width
from snumap_tui.study.figures import format_figures

LONG = "phase_critical._omp_fn.0 (twophase.c:212)"


def test_a_long_name_is_cut_in_the_middle_keeping_its_line() -> None:
    assert fit_name(LONG, 80) == LONG
    cut = fit_name(LONG, 30)
    assert len(cut) == 30 and cut.endswith("(twophase.c:212)") and "…" in cut
    plain = fit_name("a" * 20 + "b" * 20, 11)
    assert plain == "aaaaa…bbbbb"


def test_figures_have_units_and_counts_are_whole() -> None:
    assert event_text("task-clock", 6.9e9) == "6.90s"
    assert event_text("task-clock", 509e6) == "509ms"
    assert event_text("page-faults", 8.84) == "9"
    assert event_text("page-faults", 123_456) == "123k"
    assert event_text("instructions", None) == "n/a"


def test_a_count_rounding_up_to_1000_takes_the_next_unit() -> None:
    """999,999 reads 1M, never 1e+03k (the unit picked before the rounding was)."""
    assert event_text("page-faults", 999_999) == "1M"
    assert event_text("instructions", 999_600_000) == "1G"
    assert event_text("instructions", 999_400_000) == "999M"
    assert event_text("instructions", 2.5e12) == "2.5T"


def test_piped_output_is_wide() -> None:
    import io
    assert output_width(io.StringIO()) >= 1000


REGIONS = {"regions": [{"name": LONG, "kind": "omp", "count": 3, "wall_s": 1.5,
                        "imbalance": 1.1, "wait_s": 0.2}]}


def test_region_names_are_whole_when_wide_and_keep_their_line_when_narrow() -> None:
    wide = "\n".join(format_regions(REGIONS, width=10_000))
    assert LONG in wide
    narrow = [ln for ln in format_regions({"regions": [dict(REGIONS["regions"][0],
                                                            name="x" * 60 + " (f.c:9)")]},
                                          width=80) if "(f.c:9)" in ln]
    assert narrow and all(len(ln) <= 80 for ln in narrow), narrow


COUNTERS = {"available": True, "events": ["task-clock", "page-faults", "instructions"],
            "source": "libbpf", "threads": [], "processes": [], "phases": [],
            "regions": [{"name": LONG, "on_cpu_s": 6.9,
                         "events": {"task-clock": 6.9e9, "page-faults": 8.84,
                                    "instructions": 5e6}, "ipc": None, "ghz": None,
                         "mpki": None, "migrations": None}]}


def test_counter_tables_show_whole_headers_units_and_names() -> None:
    text = "\n".join(format_counters(COUNTERS, width=10_000))
    assert "task-clock" in text and "page-faults" in text and "instructions" in text
    row = next(ln for ln in text.splitlines() if "twophase" in ln)
    assert LONG in row and "6.90s" in row and " 9 " in row and "8.84" not in row


def test_scale_report_counter_headers_whole_and_task_clock_in_time() -> None:
    row = {"places": "compact", "threads": 2, "memory": {},
           "counters": {"events": {"task-clock": 509e6, "LLC-load-misses": 12.4},
                        "on_cpu_s": 0.5, "ipc": 1.0, "ghz": 2.0, "mpki": 1.0}}
    lines = format_figures([{"region": LONG, "depth": 0, "rows": [row]}], ["places"])
    text = "\n".join(lines)
    assert "LLC-load-misses" in text and "509ms" in text and " 12" in text
    assert "12.4" not in text


def test_report_piped_keeps_long_region_names(tmp_path: Path) -> None:
    from snumap_tui.analysis.synth import synthetic_topology, write_recording
    from snumap_tui.trace.events import EVENT_DTYPE, SWITCH, TaskInfo
    from snumap_tui.trace.region_catalog import BEGIN, END, REGION_DTYPE, RegionName

    ev = np.zeros(2, dtype=EVENT_DTYPE)
    ev[0] = (1000, 0, SWITCH, 0, 101, 0, 100, 0)
    ev[1] = (10**6, 0, SWITCH, 101, 0, 100, 0, 1)
    reg = np.array([(2000, 101, 100, BEGIN, 0), (9000, 101, 100, END, 0)], dtype=REGION_DTYPE)
    rec = write_recording(tmp_path / "r.rec", synthetic_topology(1, 1, 1, 1), ev,
                          tasks=[TaskInfo(101, 100, "p", 1, 1000)],
                          regions=(reg, [RegionName(LONG, "user", "call")]))
    # Piped, and no COLUMNS asked for (pytest-textual-snapshot sets COLUMNS=80 here).
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    p = subprocess.run([sys.executable, "-m", "snumap_tui.cli", "report", str(rec)],
                       capture_output=True, text=True, timeout=120, check=False, env=env)
    assert p.returncode == 0, p.stderr
    assert LONG in p.stdout
