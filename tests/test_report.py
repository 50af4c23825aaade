"""`snumap report` on recordings written through the store API with known run times."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from snumap_tui.analysis.load import load
from snumap_tui.analysis.report import build_report, format_report, rapl_energy
from snumap_tui.analysis.synth import synthetic_topology, write_recording
from snumap_tui.cli import main
from snumap_tui.model.sample import Sample
from snumap_tui.store import open as open_recording
from snumap_tui.trace.events import TaskInfo
from tests.test_analysis import SCENARIO, T0, T1, make_events

TASKS = [TaskInfo(101, 100, "solver"), TaskInfo(102, 100, "solver-w"), TaskInfo(201, 200, "io")]


def rapl_sample(t: int, uj: list[float]) -> Sample:
    return Sample(t, t, {"rapl": {"domains": ["package-0", "package-1"],
                                  "objects": [["Package", 0], ["Package", 1]],
                                  "energy_uj": np.array(uj), "max_uj": np.array([1000.0, 1e9]),
                                  "via": "powercap"}})


@pytest.fixture()
def recording(tmp_path: Path) -> Path:
    # Two PUs, one per package and NUMA node: the move of 101 from PU 0 to PU 1 crosses nodes.
    topo = synthetic_topology(2, 1, 1, 1, host="testhost")
    return write_recording(tmp_path / "known.rec", topo, make_events(SCENARIO), tasks=TASKS,
                           markers=[(T0, "start"), (T1, "exit 0")], header={"backend": "test"},
                           lost={1: 3})


def test_report_figures_equal_the_known_run_times(recording: Path) -> None:
    with open_recording(recording) as rec:
        r = build_report(rec)
    assert r["duration_s"] == pytest.approx((T1 - T0) / 1e9)
    assert r["sched_events"] == 5 and r["lost_events"] == 3 and r["backend"] == "test"
    assert r["host"] == "testhost"
    tasks = {t["tid"]: t for t in r["tasks"]}
    assert tasks[101]["runtime_s"] == pytest.approx(7000e-9)
    assert tasks[101]["cpus"] == {"0": pytest.approx(3000e-9), "1": pytest.approx(4000e-9)}
    assert tasks[101]["numa"] == {"0": pytest.approx(3000e-9), "1": pytest.approx(4000e-9)}
    assert tasks[101]["migrations"] == 1 and tasks[101]["numa_migrations"] == 1
    assert tasks[101]["kernel_migrations"] == 1
    assert tasks[101]["pid"] == 100 and tasks[101]["comm"] == "solver"
    assert tasks[101]["pus"] == "0-1"
    # Wakeups at 1500 and 5500, switched in at 2000 and 6000: 0.5 us each.
    assert tasks[101]["runqueue_latency_us"]["p50"] == pytest.approx(0.5)
    assert tasks[102]["runtime_s"] == pytest.approx(2000e-9)
    assert tasks[102]["migrations"] == 0
    assert tasks[201]["runtime_s"] == pytest.approx(2000e-9)
    assert tasks[201]["cpus"] == {"1": pytest.approx(2000e-9)}
    assert [(c["cpu"], c["busy_s"]) for c in r["cpus"]] == [(0, pytest.approx(5000e-9)),
                                                            (1, pytest.approx(6000e-9))]
    assert r["cpus"][0]["preemptions"] == 1     # 101 -> 102 with prev_state 0
    procs = {p["pid"]: p for p in r["processes"]}
    assert procs[100]["runtime_s"] == pytest.approx(9000e-9) and procs[100]["threads"] == 2
    kinds = {f["kind"] for f in r["findings"]}
    assert {"lost_events", "numa_migration"} <= kinds
    text = format_report(r)
    assert "solver" in text and "lost 3" in text
    assert all(len(line) <= 80 for line in text.splitlines()[1:])   # [0] is the path


def test_report_json_cli_has_the_contract_keys(recording: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(recording), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    for key in ("duration_s", "sched_events", "lost_events", "backend", "tasks", "cpus"):
        assert key in data
    t = data["tasks"][0]
    assert {"pid", "tid", "comm", "runtime_s", "cpus", "migrations"} <= set(t)
    assert {"cpu", "busy_s"} <= set(data["cpus"][0])
    # Event kinds by name, not by their numbers in the file format.
    assert data["event_kinds"]["switch"] == data["sched_events"] == 5
    assert all(not k.isdigit() for k in data["event_kinds"])
    assert main(["report", str(recording)]) == 0
    assert "Findings:" in capsys.readouterr().out


def test_report_of_a_missing_or_bad_file_is_one_line(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path / "nope.rec")]) == 2
    bad = tmp_path / "bad.rec"
    bad.write_bytes(b"this is not a recording at all" * 10)
    assert main(["report", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(e.startswith("snumap: ") for e in err)


def test_rapl_energy_corrects_wraparound() -> None:
    samples = [rapl_sample(0, [800.0, 0.0]), rapl_sample(10**9 // 2, [900.0, 5e6]),
               rapl_sample(10**9, [100.0, 1e7])]
    e = {d["domain"]: d for d in rapl_energy(samples, synthetic_topology(2, 1, 1, 1))}
    assert e.keys() == {"package-0", "package-1"}
    assert e["package-0"]["energy_j"] == pytest.approx(300e-6)   # +100, then +200 across wrap
    assert e["package-1"]["energy_j"] == pytest.approx(10.0)
    assert e["package-1"]["avg_w"] == pytest.approx(10.0)
    assert e["package-0"]["object"] == ["Package", 0]


def test_rapl_energy_in_the_report_of_a_recording(tmp_path: Path) -> None:
    """The report's energy is what the live view's power adds up to: Σ power × dt of the
    recorded samples (the model's metric series), wrap included."""
    from snumap_tui.store import metric_series

    topo = synthetic_topology(2, 1, 1, 1)
    samples = [rapl_sample(0, [800.0, 0.0]), rapl_sample(10**9 // 2, [900.0, 5e6]),
               rapl_sample(10**9, [100.0, 1e7])]
    path = write_recording(tmp_path / "rapl.rec", topo, make_events(SCENARIO), samples=samples)
    with open_recording(path) as rec:
        energy = {d["domain"]: d["energy_j"] for d in build_report(rec)["energy"]}
        series = metric_series(rec, ["power_pkg_w"])
    watts = series.values["power_pkg_w"]
    for pkg in (0, 1):
        oid = topo.get("Package", pkg).id
        assert energy[f"package-{pkg}"] == pytest.approx(float((watts[:, oid] *
                                                                series.dt_s).sum()))
    assert energy["package-0"] == pytest.approx(300e-6)


def test_idle_pus_while_a_thread_waits_is_a_finding(tmp_path: Path) -> None:
    from tests.test_analysis import SWITCH, WAKEUP
    # 301 wakes at 1000 ns on PU 0 (busy with 302) and runs only at 3_001_000; PU 1 is idle.
    ev = make_events([(0, SWITCH, 0, 0, 302, 0, 300, 0),
                      (1000, WAKEUP, 0, 301, -1, 300, -1, 0),
                      (3_001_000, SWITCH, 0, 302, 301, 300, 300, 0),
                      (4_000_000, SWITCH, 1, 0, 0, 0, 0, 0)])
    path = write_recording(tmp_path / "wait.rec", synthetic_topology(1, 1, 2, 1), ev)
    with open_recording(path) as rec:
        r = build_report(rec, load(rec, details=True))
    f = [f for f in r["findings"] if f["kind"] == "idle_while_waiting"]
    assert f and f[0]["waits"] == 1


def test_an_unknown_pid_is_a_question_mark_in_text_and_minus_one_in_json(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """perf can see a thread switch in before anything names its process: the JSON keeps the
    documented -1, the text shows "?" (a "-1" there reads as a pid)."""
    events = make_events(SCENARIO)
    for tid_col, pid_col in (("tid", "pid"), ("tid2", "pid2")):
        events[pid_col][events[tid_col] == 201] = -1
    path = write_recording(tmp_path / "nopid.rec", synthetic_topology(2, 1, 1, 1),
                           events, tasks=TASKS[:2])
    assert main(["report", str(path), "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert {p["pid"] for p in r["processes"]} == {100, -1}
    assert main(["report", str(path)]) == 0
    text = capsys.readouterr().out
    rows = text.split("Processes (by run time):\n")[1].split("\n\n")[0].splitlines()[1:]
    assert [row.split()[0] for row in rows] == ["100", "?"]
    assert not any(tok == "-1" for tok in text.split())


def test_a_full_disk_names_standard_output(tmp_path: Path) -> None:
    """`snumap report FILE > /dev/full`: the same line as export, not a bare strerror."""
    import subprocess
    import sys

    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    path = write_recording(tmp_path / "r.rec", synthetic_topology(2, 1, 1, 1),
                           make_events(SCENARIO), tasks=TASKS)
    for extra in ([], ["--json"]):
        with open("/dev/full", "w") as full:
            p = subprocess.run([sys.executable, "-m", "snumap_tui.cli", "report", str(path),
                                *extra], stdout=full, stderr=subprocess.PIPE, text=True,
                               check=False, timeout=60)
        assert p.returncode == 2
        assert p.stderr == ("snumap: cannot write standard output: No space left on "
                            "device\n")


def test_a_process_is_named_by_its_main_thread_even_when_only_workers_ran(
        tmp_path: Path) -> None:
    """Issue 15: PID 1 showed as its busiest thread `tokio-rt-worker`; the process is
    `process_api` (its main thread's name), as ps says."""
    tasks = [TaskInfo(100, 100, "process_api"), TaskInfo(101, 100, "tokio-rt-worker"),
             TaskInfo(102, 100, "tokio-rt-worker"), TaskInfo(201, 200, "io")]
    path = write_recording(tmp_path / "main.rec", synthetic_topology(2, 1, 1, 1),
                           make_events(SCENARIO), tasks=tasks)
    with open_recording(path) as rec:
        r = build_report(rec)
    names = {p["pid"]: p["comm"] for p in r["processes"]}
    assert names[100] == "process_api"              # thread 100 itself never ran
    assert {t["comm"] for t in r["tasks"] if t["pid"] == 100} == {"tokio-rt-worker"}
    assert names[200] == "io"
