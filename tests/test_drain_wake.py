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
