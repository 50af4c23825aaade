"""The drain thread sleeps until the kernel wakes it (sched.bpf.c wakes a ring's reader every
eighth of the ring written) or a long timeout passes: a few wake-ups a second on a quiet
machine, not one per 10-80 ms."""

from __future__ import annotations

import os
import time

import pytest

from snumap_tui.recording.runtime import Drainer, KernelWake
from snumap_tui.trace.libbpf import LibbpfTracer


def test_the_wait_is_edge_triggered() -> None:
    """Woken once per write to a descriptor, not while its data waits unread; interrupt()
    ends a wait at once."""
    r, w = os.pipe()
    wake = KernelWake([r])
    try:
        os.write(w, b"x")
        assert wake.wait(1.0)
        t0 = time.monotonic()
        assert not wake.wait(0.2)                  # the byte is still there: no new wakeup
        assert time.monotonic() - t0 >= 0.15
        os.write(w, b"y")
        assert wake.wait(1.0)
        wake.interrupt()
        t0 = time.monotonic()
        assert wake.wait(5.0) and time.monotonic() - t0 < 1.0
    finally:
        wake.close()
        os.close(r)
        os.close(w)


@pytest.mark.skipif(not LibbpfTracer.status().available,
                    reason="the libbpf backend cannot run here (root, BTF)")
def test_a_quiet_recording_wakes_the_drain_thread_a_few_times_a_second() -> None:
    """A tracer following one sleeping process: over 2 s the drain thread wakes about 8 times
    (its 0.25 s timeout), where the timer it had woke it 25-200 times."""
    tracer = LibbpfTracer()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child sleeps
        time.sleep(3)
        os._exit(0)
    try:
        tracer.start([pid])
        assert tracer.wait_fds()
        drainer = Drainer(tracer)
        time.sleep(2.0)
        list(drainer.stop())
        assert 2 <= drainer.wakeups <= 12, drainer.wakeups
    finally:
        tracer.stop()
        os.kill(pid, 9)
        os.waitpid(pid, 0)


def test_an_interrupt_is_read_once() -> None:
    """The interrupt pipe is emptied by the wait it ends (it is level-triggered): a guest's
    arrival interrupts the host's sleep, and the sleeps after it must still sleep."""
    r, w = os.pipe()
    wake = KernelWake([r])
    try:
        wake.interrupt()
        assert wake.wait(1.0)
        t0 = time.monotonic()
        assert not wake.wait(0.2)
        assert time.monotonic() - t0 >= 0.15
    finally:
        wake.close()
        os.close(r)
        os.close(w)


class _Host:
    """A tracer with a kernel buffer that never fills (drain: nothing) and a descriptor."""

    def __init__(self) -> None:
        self.r, self.w = os.pipe()
        self.drains = 0

    def drain(self) -> None:
        self.drains += 1

    def drain_capped(self) -> bool:
        return False

    def wait_fds(self) -> list[int]:
        return [self.r]


class _Guest(_Host):
    """A region ring: drained by its host's thread; with FDS its writes wake that thread."""

    def __init__(self, fds: bool) -> None:
        super().__init__()
        self.fds = fds
        self.times: list[float] = []

    def drain(self) -> None:
        self.times.append(time.monotonic())

    def wait_fds(self) -> list[int]:
        return [self.r] if self.fds else []


def _close(*tracers: _Host) -> None:
    for t in tracers:
        os.close(t.r)
        os.close(t.w)


def test_a_guest_whose_ring_wakes_the_thread_lets_it_sleep() -> None:
    """A guest with descriptors joins the host's epoll: over a second the thread wakes a few
    times (its 0.25 s timeout), not every 10 ms, and a write to the guest's descriptor (a
    held exec, a probe past its budget) has the guest drained at once."""
    host, guest = _Host(), _Guest(fds=True)
    drainer = Drainer(host)
    g = Drainer(guest, host=drainer)
    try:
        time.sleep(1.0)
        quiet = len(guest.times)
        assert quiet <= 10, quiet                  # 100 with the 10 ms cadence
        assert drainer.wakeups <= 10, drainer.wakeups
        t0 = time.monotonic()
        os.write(guest.w, b"x")
        deadline = t0 + 2.0
        while len(guest.times) == quiet and time.monotonic() < deadline:
            time.sleep(0.005)
        assert len(guest.times) > quiet and guest.times[quiet] - t0 < 0.2, guest.times[-3:]
        list(g.stop())
        assert guest.r not in drainer._wake.fds    # left the epoll with the guest
    finally:
        list(drainer.stop())
        _close(host, guest)


def test_a_guest_without_descriptors_is_drained_every_10_ms() -> None:
    """The perf path's probes have no ring to wake the thread: it comes for them every
    DRAIN_S, as before."""
    host, guest = _Host(), _Guest(fds=False)
    drainer = Drainer(host)
    g = Drainer(guest, host=drainer)
    try:
        time.sleep(1.0)
        list(g.stop())
        assert len(guest.times) >= 30, len(guest.times)
    finally:
        list(drainer.stop())
        _close(host, guest)


REGIONS_PROG = r"""
#include <omp.h>
static volatile double sink;
int main(void) {
    double t0 = omp_get_wtime();
    while (omp_get_wtime() - t0 < 1.5) {
        #pragma omp parallel num_threads(2)
        { for (int i = 0; i < 20000; i++) sink += i; }
    }
    return 0;
}
"""


def test_a_program_full_of_regions_does_not_wake_the_drain_thread_every_10_ms(
        tmp_path) -> None:
    """Thousands of parallel regions a second on the eBPF probes: the drain thread wakes a
    few times a second (the rings wake it every eighth written, and at once for a held exec),
    where it drained the probes' ring every 10 ms -- half the recorder's CPU beside a program
    using every PU. The figure is the recording's own ("recorder cost": wakeups)."""
    from tests.test_regions_programs import _compile, _record, needs_uprobes

    if needs_uprobes.args[0] or not LibbpfTracer.status().available:
        pytest.skip("needs root, the uprobe PMU and the libbpf backend")
    prog = _compile(["gcc", "-O1", "-fopenmp"], REGIONS_PROG, tmp_path / "many")
    report, err = _record(tmp_path, "many", [str(prog)])
    par = [g for g in report["regions"] if g["role"] == "parallel"]
    assert par and par[0]["calls"] > 1000, (par, err)
    c = report["recorder"]
    per_s = c["wakeups"] / c["recorded_s"]
    assert 1 <= per_s <= 15, (c["wakeups"], c["recorded_s"])
