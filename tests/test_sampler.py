"""The sampler on a fake /sys + /proc tree (counters that advance) and on this machine."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from fakefs import FakeRoot

from snumap_tui.errors import SnumapError
from snumap_tui.model.frame import Frame
from snumap_tui.model.sampler import Sampler, check_interval
from snumap_tui.sources.base import SourceStatus
from snumap_tui.topology.model import Topology

S = 1_000_000_000


class FakeClock:
    """Simulated monotonic time: the fake tree's counters advance by simulated seconds, so the
    Sample timestamps must too."""

    def __init__(self) -> None:
        self.t = 10 * S

    def __call__(self) -> int:
        return self.t

    def tick(self, seconds: float) -> None:
        self.t += int(seconds * S)


def fake_sources(fake: FakeRoot) -> list[Any]:
    from snumap_tui.sources.freq import FreqSource
    from snumap_tui.sources.numa import NumaSource
    from snumap_tui.sources.procstat import ProcStatSource
    from snumap_tui.sources.rapl import RaplSource
    from snumap_tui.sources.tasks import TasksSource
    r = fake.reader
    # max_age_s=0: the fake clock jumps, real time does not; read cpufreq at every sweep.
    return [ProcStatSource(fake.root, reader=r), FreqSource(fake.root, reader=r, max_age_s=0),
            RaplSource(fake.root, reader=r), NumaSource(fake.root, reader=r),
            TasksSource(fake.root, reader=r)]


def topology_of(fake: FakeRoot) -> Topology:
    from snumap_tui.topology.build import load_topology
    return load_topology(fsroot=fake.root)


@pytest.fixture()
def machine(tmp_path: Path) -> tuple[FakeRoot, Topology]:
    fake = FakeRoot(tmp_path / "fs", cpus=8, nodes=2, packages=2)
    return fake, topology_of(fake)


def step(fake: FakeRoot, clock: FakeClock, seconds: float, **kw: Any) -> None:
    fake.advance(seconds, **kw)
    clock.tick(seconds)


def test_frames_from_a_fake_machine(machine: tuple[FakeRoot, Topology]) -> None:
    fake, topo = machine
    clock = FakeClock()
    s = Sampler(topo, fake.root, sources=fake_sources(fake), clock=clock)
    assert s.frame() is None                       # the first sweep has nothing to compare
    step(fake, clock, 2.0, busy={1: 1.0})
    f = s.frame()
    assert f is not None and f.dt_s == 2.0
    assert f.get("util_pct", topo.pu(1).id) == pytest.approx(100.0)
    assert f.get("util_pct", topo.pu(0).id) == pytest.approx(2.0)
    assert f.get("ghz", topo.pu(1).id) == pytest.approx(3.0)        # cpufreq
    busy_pkg = topo.package_of(1)
    idle_pkg = next(p for p in topo.by_type("Package") if p is not busy_pkg)
    assert f.get("power_pkg_w", busy_pkg.id) == pytest.approx(120.0)
    assert f.get("power_pkg_w", idle_pkg.id) == pytest.approx(40.0)
    assert f.get("power_dram_w", topo.root.id) == pytest.approx(26.0)
    assert f.get("power_pkg_w", topo.pu(1).id) is None
    node1 = topo.get("NUMANode", 1)
    assert f.get("numa_hit_per_s", node1.id) == pytest.approx(10_000.0)
    assert f.get("numa_miss_per_s", node1.id) == pytest.approx(100.0)
    assert f.get("mem_total_bytes", topo.root.id) == pytest.approx(2 * 16 * 2**30)
    assert f.get("ipc", topo.root.id) is None       # no perf source on a fake tree
    assert f.sources["procstat"].available
    # Tasks: lmp_mpi has a thread on PU 1 that ran the whole interval.
    row = next(t for t in f.tasks if t.pid == 4200)
    assert row.cpu_pct == pytest.approx(100.0) and row.last_cpu == 1 and row.nthreads == 4
    assert row.job == "slurm:1234" and row.affinity == frozenset({0, 1, 2, 3})
    assert f.tasks[0].pid == 4200                   # busiest first
    s.close()


def test_rapl_wraparound_on_the_fake_tree(machine: tuple[FakeRoot, Topology]) -> None:
    fake, topo = machine
    clock = FakeClock()
    s = Sampler(topo, fake.root, sources=fake_sources(fake), clock=clock, tasks=False)
    fake.set_energy("intel-rapl:0", fake.rapl_max_uj - 10_000_000)    # 10 J below the top
    s.sweep()
    step(fake, clock, 1.0, watts={"intel-rapl:0": 55.0})
    f = s.frame()
    assert f is not None
    assert fake.energy_uj("intel-rapl:0") < 50_000_000                 # it did wrap
    assert f.get("power_pkg_w", topo.get("Package", 0).id) == pytest.approx(55.0, rel=1e-5)
    assert "wrapped" in f.flags["power_pkg_w"]
    assert not f.tasks


def test_root_only_energy_is_unavailable_not_zero(tmp_path: Path) -> None:
    fake = FakeRoot(tmp_path / "fs", cpus=4, nodes=1, packages=1, power_pmu=False)
    fake.deny("sys/class/powercap/intel-rapl:0/energy_uj")
    topo = topology_of(fake)
    clock = FakeClock()
    s = Sampler(topo, fake.root, sources=fake_sources(fake), clock=clock)
    s.sweep()
    step(fake, clock, 1.0)
    f = s.frame()
    assert f is not None
    assert f.get("power_pkg_w", topo.get("Package", 0).id) is None
    assert f.get("util_pct", topo.root.id) is not None


def test_pu_going_offline(machine: tuple[FakeRoot, Topology]) -> None:
    fake, topo = machine
    clock = FakeClock()
    s = Sampler(topo, fake.root, sources=fake_sources(fake), clock=clock, tasks=False)
    s.sweep()
    fake.set_online(3, False)
    step(fake, clock, 1.0, busy={2: 1.0})
    f = s.frame()
    assert f is not None
    assert f.get("util_pct", topo.pu(3).id) is None
    assert f.get("util_pct", topo.pu(2).id) == pytest.approx(100.0)
    fake.set_online(3, True)
    step(fake, clock, 1.0)
    f = s.frame()      # back, but the previous sweep did not have it: still no interval
    assert f is not None and f.get("util_pct", topo.pu(3).id) is None
    step(fake, clock, 1.0)
    f = s.frame()
    assert f is not None and f.get("util_pct", topo.pu(3).id) == pytest.approx(2.0)


class Broken:
    """A source whose reads fail the way a vanished file does, then the way a bug does."""

    name = "broken"
    root = Path("/")

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc
        self.closed = False

    def status(self) -> SourceStatus:
        return SourceStatus(self.name, True)

    def read(self) -> dict[str, Any]:
        raise self.exc

    def close(self) -> None:
        self.closed = True


def test_a_failing_read_marks_the_source_and_goes_on(machine: tuple[FakeRoot, Topology]) -> None:
    fake, topo = machine
    broken = Broken(FileNotFoundError(2, "No such file or directory"))
    s = Sampler(topo, fake.root, sources=[*fake_sources(fake), broken], clock=FakeClock())
    sample = s.sweep()
    assert "broken" not in sample.readings and "procstat" in sample.readings
    st = s.statuses()["broken"]
    assert not st.available and "read failed" in (st.reason or "")
    s.close()
    assert broken.closed


def test_runner_delivers_frames_and_stops(machine: tuple[FakeRoot, Topology]) -> None:
    fake, topo = machine
    s = Sampler(topo, fake.root, interval_s=0.02, sources=fake_sources(fake)[:1])
    frames: list[Frame] = []
    samples: list[Any] = []
    got = threading.Event()

    def on_frame(f: Frame) -> None:
        frames.append(f)
        if len(frames) >= 3:
            got.set()

    s.start(on_frame, on_sample=samples.append)
    assert s.running
    with pytest.raises(RuntimeError):
        s.start(on_frame)
    assert got.wait(5.0), "no frames from the runner"
    s.set_interval(0.05)
    s.stop()
    assert not s.running
    n = len(frames)
    time.sleep(0.1)
    assert len(frames) == n                        # nothing after stop
    assert len(samples) >= n + 1                   # every sweep's Sample, the first included
    ts = [x.t_ns for x in samples]
    assert ts == sorted(ts)
    assert all(f.dt_s > 0 for f in frames)
    assert s.error is None


def test_runner_hands_errors_to_the_consumer(machine: tuple[FakeRoot, Topology]) -> None:
    fake, topo = machine
    s = Sampler(topo, fake.root, interval_s=0.01, sources=[Broken(RuntimeError("bug"))])
    errors: list[BaseException] = []
    done = threading.Event()
    s.start(lambda f: None, on_error=lambda e: (errors.append(e), done.set()))
    assert done.wait(5.0)
    s.stop()
    assert isinstance(errors[0], RuntimeError) and s.error is errors[0]


@pytest.mark.parametrize("bad", [0.001, 0, -1, 1e9, "fast"])
def test_interval_bounds(bad: Any) -> None:
    with pytest.raises(SnumapError):
        check_interval(bad)
    assert check_interval(0.01) == 0.01


# ---- this machine, for real ---------------------------------------------------------------
def _this_machine() -> Topology:
    from snumap_tui.topology.build import load_topology
    try:
        return load_topology()
    except SnumapError as exc:
        pytest.skip(f"hwloc cannot load this machine: {exc}")


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2 or 1 not in os.sched_getaffinity(0),
                    reason="needs PU 1")
def test_busy_loop_pinned_to_pu1_shows_on_pu1() -> None:
    topo = _this_machine()
    code = ("import os, time\nos.sched_setaffinity(0, {1})\nend = time.time() + 3\n"
            "while time.time() < end: pass\n")
    busy = subprocess.Popen([sys.executable, "-c", code])
    try:
        time.sleep(0.3)
        s = Sampler(topo, Path("/"))
        s.sweep()
        time.sleep(0.6)
        f = s.frame()
        assert f is not None
        assert f.get("util_pct", topo.pu(1).id) > 90.0
        # Software perf events count context switches on a VM; hardware ones are None.
        if s.statuses().get("perf") and s.statuses()["perf"].available:
            assert (f.get("ctxsw_per_s", topo.root.id) or 0) > 0
        assert f.get("mem_total_bytes", topo.root.id) or not topo.numa_nodes
        if "tasks" in f.sources and f.sources["tasks"].available:
            row = next(t for t in f.tasks if t.pid == busy.pid)
            assert row.affinity == frozenset({1}) and row.last_cpu == 1
            # Its share of PU 1: others' work may run there too on a shared 2-PU machine.
            assert row.cpu_pct is not None and 30 < row.cpu_pct < 110
        s.close()
    finally:
        busy.kill()
        busy.wait()


def test_hardware_metrics_are_none_without_a_pmu() -> None:
    topo = _this_machine()
    s = Sampler(topo, Path("/"), tasks=False)
    s.sweep()
    time.sleep(0.05)
    f = s.frame()
    assert f is not None
    assert f.get("util_pct", topo.root.id) is not None
    if not Path("/sys/bus/event_source/devices/cpu").exists():
        assert f.get("ipc", topo.root.id) is None
        assert f.get("mpki", topo.root.id) is None
    s.close()


# ---- the corpus: real machines' gathered trees --------------------------------------------
@pytest.mark.parametrize("name, nodes", [("64amd64-4s2n4ca2co", 8), ("16amd64-8n2c", 8),
                                         ("fakeheteromemtiers", 7)])
def test_corpus_machines_load_with_their_nodes_memory(corpus: Path, tmp_path: Path, name: str,
                                                      nodes: int) -> None:
    import tarfile

    from snumap_tui.sources.numa import NumaSource
    from snumap_tui.sources.procstat import ProcStatSource
    from snumap_tui.topology.build import load_topology

    with tarfile.open(corpus / "fsroot" / f"{name}.tar.bz2", "r:bz2") as tf:
        tf.extractall(tmp_path, filter="data")
    root = tmp_path / name
    topo = load_topology(fsroot=root)
    clock = FakeClock()
    s = Sampler(topo, root, sources=[ProcStatSource(root), NumaSource(root)], clock=clock)
    s.sweep()
    clock.tick(1.0)
    f = s.frame()
    assert f is not None
    want: dict[int, float] = {}
    for d in sorted((root / "sys/devices/system/node").glob("node[0-9]*")):
        for line in (d / "meminfo").read_text().splitlines():
            if "MemTotal:" in line:                   # "Node 0 MemTotal:  16769836 kB"
                want[int(d.name[4:])] = int(line.split()[3]) * 1024
    assert len(want) == nodes == len(topo.numa_nodes)
    for os_index, total in want.items():
        assert f.get("mem_total_bytes", topo.get("NUMANode", os_index).id) == total
    assert f.get("mem_total_bytes", topo.root.id) == sum(want.values())
    for pkg in topo.by_type("Package"):
        below = [n.os_index for n in topo.numa_nodes if n.cpuset and n.cpuset <= pkg.cpuset
                 and n.os_index is not None]
        if below and all(topo.ancestor_of_type(topo.get("NUMANode", b), "Package") is pkg
                         for b in below):
            assert f.get("mem_total_bytes", pkg.id) == sum(want[b] for b in below)
    # The gathered /proc/stat does not move: no interval, so no utilisation (not 0 %).
    assert f.get("util_pct", topo.root.id) is None


def test_watched_pids_get_their_numa_pages(machine: tuple[FakeRoot, Topology]) -> None:
    fake, topo = machine
    clock = FakeClock()
    s = Sampler(topo, fake.root, sources=fake_sources(fake), clock=clock)
    s.watch_pids({4200})
    s.sweep()
    step(fake, clock, 1.0)
    f = s.frame()
    assert f is not None
    rows = {t.pid: t for t in f.tasks}
    pages = rows[4200].numa_pages
    assert pages is not None and set(pages) == {0} and pages[0] >= 5000   # fakefs: N0=5000+
    assert rows[4300].numa_pages is None            # not asked for
    s.watch_pids(set())
    step(fake, clock, 1.0)
    f = s.frame()
    assert f is not None and next(t for t in f.tasks if t.pid == 4200).numa_pages is None


def test_process_list_on_a_slower_cadence(machine: tuple[FakeRoot, Topology]) -> None:
    """Between full sweeps only the watched process is fresh; the others keep the last full
    rows; the next full sweep's CPU % is over the time since the last full one (no spike)."""
    from snumap_tui.sources.tasks import TasksSource

    fake, topo = machine
    clock = FakeClock()
    srcs = [*fake_sources(fake)[:-1],
            TasksSource(fake.root, reader=fake.reader, refresh_s=1000.0,
                        clock=lambda: clock.t / S)]
    s = Sampler(topo, fake.root, sources=srcs, clock=clock)
    s.watch_pids({4300})
    s.set_tasks_cadence(5.0)
    s.sweep()                                              # full (the first one)
    step(fake, clock, 1.0, busy={1: 1.0})
    f = s.frame()
    assert f is not None and s.last is not None and "partial" in s.last.readings["tasks"]
    assert f.task(4300) is not None and f.task(4300).cpu_pct is not None
    assert f.task(4200) is not None and f.task(4200).cpu_pct is None   # from the full sweep
    assert {t.pid for t in f.tasks} == {1, 880, 4200, 4300}
    for _ in range(3):
        step(fake, clock, 1.0, busy={1: 1.0})
        f = s.frame()
        assert f is not None and f.task(4200).cpu_pct is None
    step(fake, clock, 1.0, busy={1: 1.0})                  # 5 s since the full sweep
    f = s.frame()
    assert f is not None and "partial" not in s.last.readings["tasks"]
    assert f.task(4200).cpu_pct == pytest.approx(100.0)   # 500 ticks over 5 s, not 500 %
    assert f.tasks[0].pid == 4200
    step(fake, clock, 1.0)
    f = s.frame()                                          # partial again: 4200 as last seen
    assert f is not None and f.task(4200).cpu_pct == pytest.approx(100.0)
    s.set_tasks_cadence(0.0)                               # the list is on screen: in full
    step(fake, clock, 1.0)
    f = s.frame()
    assert f is not None and "partial" not in s.last.readings["tasks"]
    assert f.task(4200).cpu_pct == pytest.approx(0.0, abs=1e-9)
    s.close()


def test_back_to_a_full_list_sweeps_at_once(machine: tuple[FakeRoot, Topology]) -> None:
    fake, topo = machine
    # Tasks only (no /proc/stat to wait for): one short first gap, then 30 s to the next.
    s = Sampler(topo, fake.root, interval_s=30.0, sources=fake_sources(fake)[-1:])
    s.set_tasks_cadence(5.0)
    frames: list[Frame] = []
    got = threading.Event()
    s.start(lambda f: (frames.append(f), got.set()))
    try:
        assert got.wait(5.0)
        got.clear()
        n = len(frames)
        assert s.last is not None and "partial" in s.last.readings["tasks"]
        s.set_tasks_cadence(0.0)
        assert got.wait(5.0) and len(frames) > n
        assert s.last is not None and "partial" not in s.last.readings["tasks"]
    finally:
        s.close()


def test_task_rows_are_built_only_when_read(machine: tuple[FakeRoot, Topology]) -> None:
    """derive's rows are lazy: one process looked up builds one row; reading them all (the
    batch JSON) gives the same rows as a list would."""
    import json

    fake, topo = machine
    clock = FakeClock()
    s = Sampler(topo, fake.root, sources=fake_sources(fake), clock=clock)
    s.sweep()
    step(fake, clock, 1.0, busy={1: 1.0})
    f = s.frame()
    assert f is not None and len(f.tasks) == 4
    row = f.task(4200)
    assert row is not None and row.cpu_pct == pytest.approx(100.0)
    assert getattr(f.tasks, "_rows", "no cache") is None          # nothing else built yet
    rows = list(f.tasks)
    assert f.tasks == rows and rows[0] == row and f.task(1) == next(t for t in rows if t.pid == 1)
    out = json.loads(json.dumps(f.to_dict(), default=sorted))
    assert [t["pid"] for t in out["tasks"]] == [t.pid for t in rows]
    assert f.task(123456) is None
    s.close()


class Hung:
    """A source whose read blocks until released (a hung procfs/sysfs read), recording the
    order of reads and closes."""

    name = "hung"
    root = Path("/")

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.log: list[str] = []

    def status(self) -> SourceStatus:
        return SourceStatus(self.name, True)

    def read(self) -> dict[str, Any]:
        self.log.append("read")
        self.entered.set()
        self.release.wait(10.0)
        self.log.append("read done")
        return {"x": 1}

    def close(self) -> None:
        self.log.append("close")


def test_close_never_closes_sources_under_a_sweep(machine: tuple[FakeRoot, Topology]) -> None:
    fake, topo = machine
    hung = Hung()
    s = Sampler(topo, fake.root, interval_s=0.01, sources=[hung])
    s.start(lambda f: None)
    assert hung.entered.wait(5.0)
    s.close(timeout=0.05)              # the runner is stuck in read(): nothing closed yet
    assert s.running and "close" not in hung.log
    hung.release.set()
    deadline = time.monotonic() + 5.0
    while s.running and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not s.running
    assert hung.log[-2:] == ["read done", "close"]   # closed by the runner, after its sweep


def test_watch_pids_waits_for_the_sweep_in_progress(machine: tuple[FakeRoot, Topology]) -> None:
    fake, topo = machine
    hung = Hung()
    s = Sampler(topo, fake.root, interval_s=0.01, sources=[hung, *fake_sources(fake)])
    s.start(lambda f: None)
    assert hung.entered.wait(5.0)
    done = threading.Event()
    t = threading.Thread(target=lambda: (s.watch_pids([1]), done.set()))
    t.start()
    # The tasks source's watched sets must not change while the sampler thread sweeps it.
    assert not done.wait(0.1)
    hung.release.set()
    assert done.wait(5.0)
    t.join()
    s.close()
    tasks = next(x for x in s.sources if x.name == "tasks")
    assert tasks.numa_pids == {1}


def test_record_samples_down_to_1_ms_and_reads_the_slow_sources_every_10_ms(
        machine: tuple[FakeRoot, Topology]) -> None:
    from snumap_tui.model.sampler import RECORD_MIN_INTERVAL_S

    assert check_interval(0.001, RECORD_MIN_INTERVAL_S) == 0.001
    with pytest.raises(SnumapError, match=r"1 ms to"):
        check_interval(0.0005, RECORD_MIN_INTERVAL_S)
    fake, topo = machine
    clock = FakeClock()
    s = Sampler(topo, fake.root, interval_s=0.001, sources=fake_sources(fake), clock=clock,
                tasks=False)
    s.set_slow_sources(0.01, ["numa"])
    got = []
    for _ in range(25):
        got.append(s.sweep().readings)
        step(fake, clock, 0.001)
    assert sum("numa" in r for r in got) == 3            # at 0, 10 and 20 ms
    assert all("procstat" in r for r in got)
    s.close()


def test_a_recording_of_a_command_reads_the_io_devices_once_a_second() -> None:
    """record's sampler (recording/session.make_sampler) on this machine: with a command the
    I/O devices' counters (the node's, not the traced tree's) are read once a second at the
    default 100 ms, and at 1 ms with the other slow sources every 10 ms; --system-wide keeps
    them at the interval. What is read at every sample (the per-PU CPU times) stays."""
    from snumap_tui.recording.session import IO_SOURCES, make_sampler
    from snumap_tui.topology.build import load_topology

    topo = load_topology()
    for interval, whole, want_io, want_cpu in ((0.1, False, 3, 21), (0.1, True, 21, 21),
                                              (0.001, False, 1, 21)):
        s, _ = make_sampler(topo, Path("/"), interval, whole)
        io = [x.name for x in s._active if x.name in IO_SOURCES]
        if not io or "procstat" not in {x.name for x in s._active}:
            s.close()
            pytest.skip("no I/O device or /proc/stat source here")
        clock = FakeClock()
        s._clock = clock
        got = []
        for _ in range(21):
            got.append(s.sweep().readings)
            clock.tick(max(interval, 0.01))
        s.close()
        for name in io:
            assert sum(name in r for r in got) == want_io, (interval, whole, name)
        assert sum("procstat" in r for r in got) == want_cpu, (interval, whole)
