"""`snumap export`: parsed back and checked against what was recorded.

The `perfetto` wheel on PyPI runs trace_processor_shell, which it downloads on first use, so it
cannot check a trace offline; the Chrome trace is checked against the Trace Event Format's
rules instead (every event has ph, pid, tid; complete events have name, ts, dur >= 0 in
microseconds; metadata events name their track).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest

from snumap_tui.analysis.synth import synthetic_topology, write_recording
from snumap_tui.cli import main
from snumap_tui.export.chrome import CPU_PID, METRICS_PID
from snumap_tui.model.sample import Sample
from snumap_tui.trace.events import OUTSIDE, SWITCH
from tests.test_analysis import EXPECTED, SCENARIO, T0, T1, make_events
from tests.test_report import TASKS


@pytest.fixture()
def recording(tmp_path: Path) -> Path:
    s = Sample(T0 + 500, 42, {"procstat": {"cpus": np.array([0, 1]),
                                           "ticks": np.array([[1, 2], [3, 4]])},
                              "rapl": {"domains": ["package-0"], "energy_uj": np.array([np.nan])}})
    return write_recording(tmp_path / "known.rec", synthetic_topology(2, 1, 1, 1, host="h"),
                           make_events(SCENARIO), tasks=TASKS, samples=[s],
                           markers=[(T0, "start"), (T1, "exit 0")])


def test_chrome_trace_has_one_track_per_cpu_and_the_known_slices(
        recording: Path, tmp_path: Path) -> None:
    out = tmp_path / "trace.json"
    assert main(["export", str(recording), "--format", "chrome", "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    evs = doc["traceEvents"]
    for e in evs:
        assert e["ph"] in ("X", "M", "i", "C") and isinstance(e["pid"], int)
        assert isinstance(e["tid"], int) and isinstance(e["name"], str)
        if e["ph"] == "X":
            assert isinstance(e["ts"], (int, float)) and e["dur"] >= 0
    tracks = {e["tid"]: e["args"]["name"] for e in evs
              if e["name"] == "thread_name" and e["pid"] == CPU_PID}
    assert tracks == {1: "CPU 0", 2: "CPU 1"}
    # One time base: ts is the recording's CLOCK_MONOTONIC clock in microseconds.
    for cpu, want in EXPECTED.items():
        got = [(round(e["ts"] * 1e3), round((e["ts"] + e["dur"]) * 1e3),
                e["args"]["tid"]) for e in evs
               if e["ph"] == "X" and e["pid"] == CPU_PID and e["tid"] == cpu + 1]
        assert got == want
    names = {e["name"] for e in evs if e["ph"] == "X" and e["pid"] == CPU_PID}
    assert names == {"solver 101", "solver-w 102", "io 201"}
    # Per-thread tracks: each thread's intervals under its real pid and tid, named by CPU.
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in evs
               if e["name"] == "thread_name" and e["pid"] != CPU_PID}
    assert threads == {(100, 101): "solver 101", (100, 102): "solver-w 102", (200, 201): "io 201"}
    procs = {e["pid"]: e["args"]["name"] for e in evs if e["name"] == "process_name"}
    assert procs[100] == "?" or procs[100] in ("solver", "pid 100")
    mine = sorted((round(e["ts"] * 1e3), round((e["ts"] + e["dur"]) * 1e3), e["name"])
                  for e in evs if e["ph"] == "X" and e["tid"] == 101 and e["pid"] == 100)
    assert mine == [(2000, 5000, "CPU 0"), (6000, 10000, "CPU 1")]
    assert [e["name"] for e in evs if e["ph"] == "i"] == ["start", "exit 0"]
    assert doc["otherData"]["host"] == "h"
    assert "CLOCK_MONOTONIC" in doc["otherData"]["time_base"]


def test_chrome_counter_tracks(tmp_path: Path) -> None:
    from tests.test_export_perfetto import _samples

    rec = write_recording(tmp_path / "c.rec", synthetic_topology(2, 1, 1, 1, host="h"),
                          make_events(SCENARIO), tasks=TASKS, samples=_samples())
    out = tmp_path / "c.json"
    assert main(["export", str(rec), "--format", "chrome", "-o", str(out)]) == 0
    evs = json.loads(out.read_text())["traceEvents"]
    got = [(e["name"], round(e["ts"] * 1e3), e["args"]["value"]) for e in evs if e["ph"] == "C"]
    assert [g for g in got if g[0] == "PU 0 utilisation %"] == [
        ("PU 0 utilisation %", T0 + 2000, 50.0), ("PU 0 utilisation %", T0 + 3000, 100.0)]
    assert {e["pid"] for e in evs if e["ph"] == "C"} == {METRICS_PID}


def test_chrome_refuses_big_recordings_and_names_perfetto(
        recording: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from snumap_tui.commands import export as cmd

    monkeypatch.setattr(cmd, "CHROME_MAX_EVENTS", 5)
    out = tmp_path / "big.json"
    assert main(["export", str(recording), "--format", "chrome", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--format perfetto" in err[0] and "8 events" in err[0]
    assert not out.exists()
    assert main(["export", str(recording), "--format", "chrome", "-o", str(out),
                 "--force"]) == 0
    assert json.loads(out.read_text())["traceEvents"]


def test_without_o_the_output_is_named_after_the_input(
        recording: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for fmt, name in (("chrome", "known.chrome.json"), ("csv", "known.csv"),
                      ("perfetto", "known.pftrace"), ("parquet", "known.parquet")):
        assert main(["export", str(recording), "--format", fmt]) == 0
        assert (recording.parent / name).exists(), fmt
        assert capsys.readouterr().out == ""          # nothing on the terminal
        assert main(["export", str(recording), "--format", fmt]) == 2   # never overwritten
        assert "already exists" in capsys.readouterr().err
    assert main(["export", str(recording), "--format", "csv", "--table", "samples"]) == 0
    assert (recording.parent / "known.samples.csv").exists()
    assert main(["export", str(recording), "--format", "perfetto", "-o", "-"]) == 2
    assert "standard output" in capsys.readouterr().err


def test_csv_intervals_parse_back(recording: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(recording), "--format", "csv", "-o", "-"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    got = {c: [(int(r["start_ns"]), int(r["end_ns"]), int(r["tid"])) for r in rows
               if int(r["cpu"]) == c] for c in (0, 1)}
    assert got == EXPECTED
    assert all(int(r["dur_ns"]) == int(r["end_ns"]) - int(r["start_ns"]) for r in rows)
    assert {r["comm"] for r in rows} == {"solver", "solver-w", "io"}
    assert {int(r["pid"]) for r in rows} == {100, 200}


def test_csv_readings_and_events(recording: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(recording), "--format", "csv", "--table", "readings",
                 "-o", "-"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    ticks = {r["index"]: int(r["value"]) for r in rows if r["field"] == "ticks"}
    assert ticks == {"0.0": 1, "0.1": 2, "1.0": 3, "1.1": 4}
    nan = [r for r in rows if r["field"] == "energy_uj"]
    assert nan and nan[0]["value"] == ""          # unreadable stays empty, never 0
    # A RAPL domain's (a device's) name is the row's index, never a value; the value
    # column holds numbers only.
    assert nan[0]["index"] == "package-0"
    assert not [r for r in rows if r["field"] in ("domains", "cpus")]
    for r in rows:
        if r["value"]:
            float(r["value"])
    assert main(["export", str(recording), "--format", "csv", "--table", "events", "-o", "-"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == len(SCENARIO)
    assert [r["kind"] for r in rows[:2]] == ["wakeup", "switch"]


def test_export_refuses_to_overwrite(recording: Path, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "x.csv"
    out.write_text("keep")
    assert main(["export", str(recording), "--format", "csv", "-o", str(out)]) == 2
    assert out.read_text() == "keep"
    assert "already exists" in capsys.readouterr().err


def _cut(src: Path, dst: Path, size: int) -> Path:
    dst.write_bytes(src.read_bytes()[:size])
    return dst


def test_export_of_a_truncated_recording_warns_what_was_skipped(
        recording: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Cut inside the events chunk (as a crash during `record` leaves it): rc 0, the rows
    # that survive are written, and stderr says which part was skipped.
    from snumap_tui.store import chunks as C

    ev = next(h for h in C.scan(recording.read_bytes()).chunks if h.kind == C.K_EVENTS)
    cut = _cut(recording, tmp_path / "cut.rec", (ev.offset + ev.end) // 2)
    out = tmp_path / "cut.csv"
    assert main(["export", str(cut), "--format", "csv", "-o", str(out)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert all(e.startswith("snumap: ") for e in err)
    warnings = [e for e in err if e.startswith("snumap: warning: ")]
    assert any("damaged: truncated" in w and str(cut) in w for w in warnings)
    assert any(str(out) in w and "skipped" in w for w in warnings)
    # An intact recording exports without a warning.
    assert main(["export", str(recording), "--format", "csv", "-o", str(tmp_path / "ok.csv")]) \
        == 0
    assert "warning" not in capsys.readouterr().err


def test_a_100_byte_recording_says_it_is_truncated(
        recording: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stub = _cut(recording, tmp_path / "stub.rec", 100)
    for argv in (["export", str(stub), "--format", "chrome", "-o", "-"], ["report", str(stub)],
                 ["report", str(stub), "--json"]):
        assert main(argv) == 2
        out = capsys.readouterr()
        err = out.err.strip().splitlines()
        assert out.out == "" and len(err) == 1, argv
        assert "truncated" in err[0] and "no topology" not in err[0] and str(stub) in err[0]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full here")
def test_export_to_a_full_device_names_the_file(
        recording: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["export", str(recording), "--format", "chrome", "-o", "/dev/full", "--force"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "/dev/full" in err[0] and "No space left" in err[0]


def test_untraced_time_is_named_other_in_chrome_and_csv(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """CPU 1's first switch-out is of a task the tracer marked OUTSIDE the traced tree: its
    interval belongs to the untraced pseudo-task (tid -2), shown with the report's words."""
    rows = [r if r[0] != 3000 else (3000, SWITCH, 1, 201, 0, OUTSIDE, 0, 1) for r in SCENARIO]
    rec = write_recording(tmp_path / "untraced.rec", synthetic_topology(2, 1, 1, 1, host="h"),
                          make_events(rows), tasks=TASKS, markers=[(T0, "start")])
    out = tmp_path / "trace.json"
    assert main(["export", str(rec), "--format", "chrome", "-o", str(out)]) == 0
    slices = [e for e in json.loads(out.read_text())["traceEvents"]
              if e["ph"] == "X" and e["pid"] == CPU_PID]
    other = [e for e in slices if e["args"]["tid"] == -2]
    assert [(e["name"], e["tid"]) for e in other] == [("other (not traced)", 2)]
    assert {e["name"] for e in slices} == {"solver 101", "solver-w 102", "other (not traced)"}
    capsys.readouterr()
    assert main(["export", str(rec), "--format", "csv", "-o", "-"]) == 0
    got = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [(r["cpu"], r["tid"], r["comm"]) for r in got if r["tid"] == "-2"] == [
        ("1", "-2", "other (not traced)")]


def test_chrome_export_does_not_take_the_report_json_name(
        recording: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`report --json known.rec > known.json` then `export --format chrome known.rec`: both
    files, neither in the other's way."""
    assert main(["report", str(recording), "--json"]) == 0
    report = recording.with_suffix(".json")
    report.write_text(capsys.readouterr().out)
    assert main(["export", str(recording), "--format", "chrome"]) == 0, capsys.readouterr().err
    assert "traceEvents" not in json.loads(report.read_text())      # the report, intact
    trace = recording.parent / "known.chrome.json"
    assert json.loads(trace.read_text())["traceEvents"]
