"""Per-process counters on request, for real on this machine (software events work on a VM):
context switches of a process that sleeps and wakes in a loop reach its TaskRow as a rate
through Sampler.watch_counters, and the counters of threads that ended are closed."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from snumap_tui.sources.perf import ThreadCounters
from snumap_tui.sources.tasks import TasksSource

S = 1_000_000_000

# A process that sleeps 2 ms at a time: each sleep is a voluntary context switch (~500/s).
SLEEPER = "import time\nwhile True:\n    time.sleep(0.002)\n"
# A process whose threads come and go: a new short-lived thread every 20 ms.
CHURN = ("import threading, time\n"
         "while True:\n"
         "    t = threading.Thread(target=time.sleep, args=(0.01,))\n"
         "    t.start(); time.sleep(0.02); t.join()\n")


def _can_count_threads() -> bool:
    c = ThreadCounters(Path("/"), hw_events=(), sw_events=("context-switches",))
    import os
    c.watch(os.getpid())
    ok = c.open_fds() > 0
    c.close()
    return ok


pytestmark = pytest.mark.skipif(sys.platform != "linux" or not _can_count_threads(),
                                reason="perf_event_open on threads not allowed here")


@pytest.fixture()
def child(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    procs: list[subprocess.Popen[bytes]] = []

    def start(code: str) -> subprocess.Popen[bytes]:
        p = subprocess.Popen([sys.executable, "-c", code])
        procs.append(p)
        time.sleep(0.2)        # past the interpreter's start-up
        return p

    yield start
    for p in procs:
        p.kill()
        p.wait()


def _this_machine():  # type: ignore[no-untyped-def]
    from snumap_tui.topology.build import load_topology
    return load_topology()


def test_context_switch_rate_reaches_the_task_row(child) -> None:  # type: ignore[no-untyped-def]
    from snumap_tui.model.sampler import Sampler

    p = child(SLEEPER)
    tasks = TasksSource(Path("/"))
    s = Sampler(_this_machine(), sources=[tasks])
    try:
        s.set_tasks_cadence(3600.0)              # only the watched process in each sweep
        s.watch_pids([p.pid], counters=True)
        s.frame()
        s.frame()
        time.sleep(0.5)
        f = s.frame()
        assert f is not None
        row = f.task(p.pid)
        assert row is not None and row.counter_rates is not None
        # ~500 sleeps a second; a loaded 2-PU machine wakes it late, so a wide band.
        assert row.ctx_switches_s is not None and 50 < row.ctx_switches_s < 2000
        assert row.counter_rates["context-switches"] == row.ctx_switches_s
        # No hardware PMU on a VM: IPC is unavailable, not 0 (with one it is a ratio).
        assert row.ipc is None or row.ipc > 0
        s.watch_counters([])                      # off again: no rates, no fds
        assert tasks._counters is None or tasks._counters.open_fds() == 0
        s.frame()
        f = s.frame()
        assert f is not None and f.task(p.pid) is not None
        assert f.task(p.pid).ctx_switches_s is None  # type: ignore[union-attr]
    finally:
        s.close()


def test_counters_of_ended_threads_are_closed_and_kept(child) -> None:  # type: ignore[no-untyped-def]
    p = child(CHURN)
    c = ThreadCounters(Path("/"), hw_events=(), sw_events=("context-switches",))
    try:
        c.watch(p.pid)
        last = -1.0
        most = 0
        for _ in range(15):
            time.sleep(0.05)
            r = c.read(p.pid)
            assert r is not None and r["events"] == ["context-switches"]
            total = float(r["value"][0])
            assert total >= last          # ended threads' counts stay in the total
            last = total
            most = max(most, c.open_fds(p.pid))
        # ~40 threads came and went; only the live ones (main + at most one) hold an fd.
        assert most <= 3 and c.open_fds(p.pid) <= 3
        p.kill()
        p.wait()
        c.read(p.pid)                      # the process is gone: everything closed
        assert c.open_fds(p.pid) == 0
    finally:
        c.close()
