"""The tasks source's cost model: one /proc/PID/stat per process per sweep, thread files only for
processes that ran, and status (user, affinity) on a slower cadence -- with the same readings
as reading everything every time."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from fakefs import FakeRoot

from snumap_tui.sources.tasks import PF_KTHREAD, TasksSource, parse_stat


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def fake(tmp_path: Path) -> FakeRoot:
    return FakeRoot(tmp_path, cpus=8, nodes=2, packages=1, caches=False)


def counting(fake: FakeRoot) -> tuple[list[str], object]:
    seen: list[str] = []

    def reader(path: Path) -> str:
        seen.append(str(path.relative_to(fake.root)))
        return fake.reader(path)

    return seen, reader


def same_threads(a: dict, b: dict) -> None:
    ta, tb = a["threads"], b["threads"]
    for k in ("pid", "tid", "ppid", "uid", "last_cpu", "utime", "stime", "nice"):
        assert ta[k].tolist() == tb[k].tolist(), k
    assert ta["state"] == tb["state"] and ta["comm"] == tb["comm"]


def test_only_processes_that_ran_have_their_threads_read(fake: FakeRoot) -> None:
    seen, reader = counting(fake)
    clock = Clock()
    src = TasksSource(fake.root, reader=reader, refresh_s=1000.0, clock=clock)
    everything = TasksSource(fake.root, reader=fake.reader, refresh_s=0.0)
    src.read()
    assert sum("/task/" in p for p in seen) == 7          # 4 + 1 + 1 + 1 threads
    seen.clear()
    fake.advance(1.0, busy={1: 1.0})                       # thread 4201 of lmp_mpi runs
    clock.t += 1
    r = src.read()
    task_reads = sorted(p for p in seen if "/task/" in p)
    assert task_reads and all(p.startswith("proc/4200/task/") for p in task_reads)
    assert not any(p.endswith("/status") for p in seen)    # not due yet
    assert sum(p.endswith("/stat") and "/task/" not in p for p in seen) == 4
    same_threads(r, everything.read())
    i = r["threads"]["tid"].tolist().index(4201)
    assert r["threads"]["state"][i] == "R" and r["threads"]["utime"][i] == 90


def test_a_thread_that_stops_running_is_not_shown_running(fake: FakeRoot) -> None:
    clock = Clock()
    src = TasksSource(fake.root, reader=fake.reader, refresh_s=1000.0, clock=clock)
    src.read()
    fake.advance(1.0, busy={1: 1.0})
    src.read()
    fake.advance(1.0)                                      # idle: its CPU time does not move
    r = src.read()
    i = r["threads"]["tid"].tolist().index(4201)
    assert r["threads"]["state"][i] == "S"
    same_threads(r, TasksSource(fake.root, reader=fake.reader).read())


def test_affinity_is_refreshed_on_the_slow_cadence(fake: FakeRoot) -> None:
    clock = Clock()
    src = TasksSource(fake.root, reader=fake.reader, refresh_s=5.0, clock=clock)
    assert src.read()["processes"][880]["affinity"] == list(range(8))
    sshd = next(p for p in fake.processes if p.pid == 880)
    sshd.affinity = [2, 3]
    fake.advance(1.0)
    clock.t += 1.0
    src.read()           # within the cadence: may still be the old mask
    clock.t += 5.0
    assert src.read()["processes"][880]["affinity"] == [2, 3]


def test_a_recycled_pid_is_a_new_process(fake: FakeRoot) -> None:
    src = TasksSource(fake.root, reader=fake.reader, refresh_s=1000.0, clock=Clock())
    assert src.read()["processes"][4300]["cmdline"] == "./a.out x y"
    proc = next(p for p in fake.processes if p.pid == 4300)
    proc.cmdline = ["./b.out"]
    fake.advance(1.0)
    assert src.read()["processes"][4300]["cmdline"] == "./a.out x y"   # same process: cached
    stat = fake.root / "proc/4300/stat"
    head, _, tail = stat.read_text().rpartition(") ")
    fields = tail.split(" ")
    fields[19] = "99999"                   # field 22 (fields count from the last ')'): starttime
    stat.write_text(head + ") " + " ".join(fields))
    assert src.read()["processes"][4300]["cmdline"] == "./b.out"


def test_ended_processes_are_forgotten(fake: FakeRoot) -> None:
    src = TasksSource(fake.root, reader=fake.reader, clock=Clock())
    src.read()
    import shutil
    shutil.rmtree(fake.root / "proc/4300")
    r = src.read()
    assert 4300 not in r["processes"] and 4300 not in r["threads"]["pid"].tolist()
    assert all(k[0] != 4300 for k in src._procs)


def test_kernel_threads_on_this_machine() -> None:
    """kthreadd (pid 2) is a kernel thread: flag PF_KTHREAD, no command line."""
    try:
        text = Path("/proc/2/stat").read_text()
    except OSError:
        pytest.skip("no /proc/2 here")
    assert parse_stat(text)["flags"] & PF_KTHREAD
    procs = TasksSource().read()["processes"]
    assert procs[2]["cmdline"] is None and procs[2]["nthreads"] == 1
    assert isinstance(TasksSource().read()["threads"]["utime"], np.ndarray)


def test_between_full_sweeps_only_the_kept_processes_are_read(fake: FakeRoot) -> None:
    seen, reader = counting(fake)
    clock = Clock()
    src = TasksSource(fake.root, reader=reader, refresh_s=1000.0, clock=clock)
    src.set_cadence(5.0, keep={4300})
    full = src.read()                                      # never read in full yet: full
    assert "partial" not in full and len(full["processes"]) == 4
    seen.clear()
    fake.advance(1.0, busy={1: 1.0})
    clock.t += 1
    part = src.read()
    assert part["partial"] == [4300] and set(part["processes"]) == {4300}
    assert set(part["threads"]["pid"].tolist()) == {4300}
    assert seen and all(p.startswith("proc/4300/") for p in seen)   # no listing, no others
    seen.clear()
    clock.t += 4                                           # 5 s since the full sweep
    assert "partial" not in src.read() and any(p.startswith("proc/4200/") for p in seen)
    clock.t += 1
    assert "partial" in src.read()
    src.set_cadence(0.0)                                   # the list is on screen again
    assert "partial" not in src.read()


def test_a_kept_process_that_ended_is_left_out(fake: FakeRoot) -> None:
    src = TasksSource(fake.root, reader=fake.reader, refresh_s=1000.0, clock=Clock())
    src.set_cadence(5.0, keep={999_999})
    src.read()
    part = src.read()
    assert part["partial"] == [999_999] and part["processes"] == {}
    assert part["threads"]["pid"].size == 0
