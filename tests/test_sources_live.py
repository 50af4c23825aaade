"""Sources on this machine, for real: a busy loop pinned to PU 1 shows in /proc/stat,
software perf events count context switches, hardware events are absent (not zero) without a
hardware PMU."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from snumap_tui.sources.perf import PerfSource, core_pmus
from snumap_tui.sources.procstat import ProcStatSource, busy_fraction
from snumap_tui.sources.tasks import TasksSource

LOOP = "while True: pass"


@pytest.fixture
def busy_pu1():
    if 1 not in os.sched_getaffinity(0):
        pytest.skip("PU 1 is not available to this process")
    cmd = [sys.executable, "-c", LOOP]
    if shutil.which("taskset"):
        cmd = ["taskset", "-c", "1", *cmd]
    proc = subprocess.Popen(cmd)
    if not shutil.which("taskset"):
        os.sched_setaffinity(proc.pid, {1})
    time.sleep(0.2)                       # let it start spinning
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_procstat_shows_a_pinned_busy_loop(busy_pu1: subprocess.Popen) -> None:
    src = ProcStatSource()
    a = src.read()
    time.sleep(0.5)
    b = src.read()
    assert busy_fraction(a, b)[1] > 0.9


def test_tasks_sees_the_loop_on_pu1(busy_pu1: subprocess.Popen) -> None:
    r = TasksSource().read()
    th = r["threads"]
    i = th["tid"].tolist().index(busy_pu1.pid)
    assert th["last_cpu"][i] == 1 and th["state"][i] == "R"
    assert r["processes"][busy_pu1.pid]["affinity"] == [1]


def test_software_events_count_context_switches() -> None:
    src = PerfSource(Path("/"))
    try:
        if "context-switches" not in src.status().detail.get("events", []):
            pytest.skip(f"no per-CPU software events here: {src.status().reason}")
        a = src.read()
        old = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {0})
        try:
            for _ in range(100):
                time.sleep(0.0005)
        finally:
            os.sched_setaffinity(0, old)
        b = src.read()
        j = b["events"].index("context-switches")
        row = b["cpus"].tolist().index(0)
        assert b["value"][row, j] - a["value"][row, j] >= 100
        assert np.all(b["running"][:, j] > 0)
    finally:
        src.close()


def test_hardware_events_are_unavailable_not_zero() -> None:
    if core_pmus(Path("/")):
        pytest.skip("this machine has a hardware PMU")
    src = PerfSource(Path("/"))
    try:
        r = src.read()
        assert "cycles" not in r["events"] and "instructions" not in r["events"]
        st = {s.name: s for s in src.statuses()}
        assert not st["perf:cycles"].available
        assert st["perf:cycles"].reason and "hardware PMU" in st["perf:cycles"].reason
    finally:
        src.close()
