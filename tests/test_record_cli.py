"""`snumap record` as a user runs it: arguments, exit status, refusing to overwrite, and a
recorder killed with SIGKILL leaving a readable file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from snumap_tui import store
from snumap_tui.commands.options import parse_duration
from snumap_tui.errors import SnumapError
from snumap_tui.recording.runtime import merge_drains

PY = sys.executable


def record(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "snumap_tui.cli", "record", *args], check=False,
                          capture_output=True, text=True, timeout=timeout)


def test_durations() -> None:
    assert parse_duration("100ms") == pytest.approx(0.1)
    assert parse_duration("2s") == 2.0 and parse_duration("1.5") == 1.5
    assert parse_duration("1m") == 60.0 and parse_duration("250us") == pytest.approx(250e-6)
    for bad in ("", "fast", "-1s", "0", "3 parsecs"):
        with pytest.raises(SnumapError):
            parse_duration(bad)


def test_drains_are_merged_in_order_per_cpu() -> None:
    """The main thread decodes one merged drain per poll: a perf drain's bytes joined per CPU
    in drain order (whole records, so still one record stream), bcc record arrays joined."""
    import numpy as np

    perf = merge_drains([{0: b"a0", 1: b"b0"}, {1: b"b1"}, {0: b"a1", 1: b"b2"}])
    assert perf == [{0: b"a0a1", 1: b"b0b1b2"}]
    recs = [np.arange(3, dtype="<u8"), np.arange(3, 5, dtype="<u8")]
    (joined,) = merge_drains(recs)
    assert joined.tolist() == [0, 1, 2, 3, 4]
    assert merge_drains([{0: b"x"}]) == [{0: b"x"}]
    assert merge_drains([None]) == [None]
    mixed = [np.zeros(1, "<u8"), np.zeros(1, "<u4")]
    assert merge_drains(mixed) is mixed          # different layouts are left alone
    # A backlog is joined in pieces of at most LIMIT bytes (48 per eBPF record), in order.
    parts = merge_drains([np.arange(i, i + 2, dtype="<u8") for i in range(0, 10, 2)], limit=200)
    assert [p.tolist() for p in parts] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_drain_thread_comes_back_at_once_after_a_drain_that_hit_its_budget(monkeypatch) -> None:
    """A drain that stopped at its budget (small: one busy ring's share) is followed at once
    by the next, not after the 10 ms pause, which let that ring overflow while the others
    were empty."""
    import numpy as np

    from snumap_tui.recording.runtime import Drainer
    from snumap_tui.trace.base import Tracer

    class Busy(Tracer):
        name = "busy"

        def __init__(self) -> None:
            self.drains = 0

        @classmethod
        def status(cls):  # type: ignore[no-untyped-def]
            raise NotImplementedError

        def start(self, pids=None) -> None:  # type: ignore[no-untyped-def]
            pass

        def read(self):  # type: ignore[no-untyped-def]
            raise NotImplementedError

        def stop(self):  # type: ignore[no-untyped-def]
            raise NotImplementedError

        def drain(self) -> np.ndarray:
            self.drains += 1
            return np.zeros(10, dtype=np.uint64)        # far below Drainer.BIG

        def drain_capped(self) -> bool:
            return self.drains < 6                      # budget-bound for the first five

    monkeypatch.setattr(Drainer, "DRAIN_S", 30.0)       # a pause would outlast the test
    tracer = Busy()
    d = Drainer(tracer)
    try:
        deadline = time.monotonic() + 10
        while tracer.drains < 6 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        assert tracer.drains == 6               # five at once, the sixth, then the pause
    finally:
        d._stop.set()

    class Stuck(Busy):
        """Budget-bound but nothing comes out (a record still being written at the head):
        no busy loop."""

        def drain(self) -> np.ndarray:
            self.drains += 1
            return np.zeros(0, dtype=np.uint64)

        def drain_capped(self) -> bool:
            return True

    stuck = Stuck()
    d = Drainer(stuck)
    try:
        time.sleep(0.3)
        assert stuck.drains == 1
    finally:
        d._stop.set()


def test_drainer_backs_off_while_idle_and_comes_back_with_data() -> None:
    """Empty drains double the period up to IDLE_DRAIN_S (a program that switches little no
    longer wakes the thread 100 times a second); the first drain with records brings it back
    to DRAIN_S."""
    import numpy as np

    from snumap_tui.recording.runtime import Drainer

    class Quiet:
        def __init__(self) -> None:
            self.calls: list[float] = []
            self.busy = False

        def drain(self) -> np.ndarray:
            self.calls.append(time.monotonic())
            return np.zeros(10 if self.busy else 0, dtype=np.uint64)

        def drain_capped(self) -> bool:
            return False

    tracer = Quiet()
    d = Drainer(tracer)
    try:
        time.sleep(1.0)
        idle = len(tracer.calls)
        tracer.busy = True
        time.sleep(0.1 + Drainer.IDLE_DRAIN_S)
        n0, t0 = len(tracer.calls), time.monotonic()
        time.sleep(0.5)
        busy = (len(tracer.calls) - n0) / (time.monotonic() - t0)
    finally:
        d._stop.set()
    assert idle <= 1.0 / Drainer.IDLE_DRAIN_S + 6          # ~12 a second idle, not 100
    assert busy >= 0.5 / Drainer.DRAIN_S                   # back to every 10 ms (slack: load)


def test_drainer_stop_hands_over_what_the_buffers_still_hold() -> None:
    """Records written after the thread's last drain (a traced program's last region hits,
    just before it exited) come out of stop(), not left in the kernel buffer."""
    import numpy as np

    from snumap_tui.recording.runtime import Drainer

    class Late:
        def __init__(self) -> None:
            self.stopping = False
            self.left = [np.arange(5, dtype=np.uint64), np.arange(3, dtype=np.uint64)]

        def drain(self) -> np.ndarray:
            if self.stopping and self.left:
                return self.left.pop(0)
            return np.zeros(0, dtype=np.uint64)

        def drain_capped(self) -> bool:
            return False

    tracer = Late()
    d = Drainer(tracer)
    time.sleep(0.05)
    tracer.stopping = True
    got = [r for r in d.stop() if r is not None]
    assert sum(len(r) for r in got) == 8 and not tracer.left


def test_exit_status_and_no_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "x.rec"
    p = record("-o", str(out), "--backend", "proc", "--", "sh", "-c", "exit 3")
    assert p.returncode == 3, p.stderr
    assert "backend proc (approximate)" in p.stderr
    with store.open(out) as rec:
        assert [m for _, m in rec.markers][-1] == "command exit: status 3"
        assert rec.header["command"] == ["sh", "-c", "exit 3"]
        assert rec.header["backend"] == "proc" and rec.header["topology"]
    again = record("-o", str(out), "--backend", "proc", "--", "true")
    assert again.returncode == 2 and "already exists (use --force" in again.stderr
    assert "Traceback" not in again.stderr
    forced = record("-o", str(out), "--force", "--backend", "proc", "--", "true")
    assert forced.returncode == 0, forced.stderr


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    p = record("-o", str(tmp_path / "y.rec"), "--interval", "soon", "--", "true")
    assert p.returncode == 2 and "bad duration" in p.stderr and "Traceback" not in p.stderr
    assert p.stderr.startswith("snumap: --interval soon: ")
    assert not (tmp_path / "y.rec").exists()
    p = record("-o", str(tmp_path / "z.rec"), "--backend", "proc", "--",
               "no-such-command-here")
    assert p.returncode == 2 and "cannot run no-such-command-here" in p.stderr


def test_durations_name_their_option(tmp_path: Path) -> None:
    out = str(tmp_path / "d.rec")
    p = record("-o", out, "--interval", "0", "--duration", "1s")
    assert p.returncode == 2
    assert p.stderr == ("snumap: --interval 0: interval 0s is out of range "
                        "(1 ms to 3600 s)\n")
    p = record("-o", out, "--duration", "0")
    assert p.stderr == "snumap: --duration 0: duration must be positive\n"
    p = record("-o", out, "--buffer-size", "12")
    assert p.stderr.startswith("snumap: --buffer-size 12: size '12' is below one page")
    assert not Path(out).exists()


def test_a_command_that_cannot_run_leaves_no_file(tmp_path: Path) -> None:
    """The recording never started: the file this run created goes, so that the corrected
    rerun is not refused with "already exists"; a file that was there (--force) stays."""
    out = tmp_path / "rx.rec"
    p = record("-o", str(out), "--backend", "proc", "--", str(tmp_path / "nonexistent"))
    assert p.returncode == 2 and p.stderr.endswith(
        f"cannot run {tmp_path / 'nonexistent'}: No such file or directory\n"), p.stderr
    assert not out.exists()
    ok = record("-o", str(out), "--backend", "proc", "--", "true")
    assert ok.returncode == 0, ok.stderr
    p = record("-o", str(out), "--force", "--backend", "proc", "--",
               str(tmp_path / "nonexistent"))
    assert p.returncode == 2 and out.exists()      # not ours to remove


def test_sigkill_leaves_a_readable_file(tmp_path: Path) -> None:
    from test_trace_backends import backend_or_skip

    backend_or_skip("perf")
    out = tmp_path / "killed.rec"
    t0 = time.monotonic_ns()
    p = subprocess.Popen([PY, "-m", "snumap_tui.cli", "record", "-o", str(out), "--backend",
                          "perf", "--system-wide"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    # Wait for the header (the tracer is running by then), then 3 s more.
    deadline = time.monotonic() + 30
    while (not out.exists() or out.stat().st_size == 0) and time.monotonic() < deadline:
        time.sleep(0.05)
    started = time.monotonic_ns()
    time.sleep(3.0)
    os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=10)
    assert p.returncode == -signal.SIGKILL
    with store.open(out) as rec:
        assert not rec.complete                      # no clean-close trailer
        assert rec.header["backend"] == "perf" and t0 <= rec.header["start_monotonic_ns"]
        first2 = (started, started + 2_000_000_000)
        ev = rec.events(*first2)
        assert len(ev) > 100                         # a 2-CPU machine switches far more
        assert ev["t_ns"].max() > started + 1_500_000_000
        times = [s.t_ns for s in rec.samples(*first2)]
        assert len(times) >= 15                      # 100 ms samples over those 2 s
        assert rec.events().size >= ev.size


def test_the_end_of_a_recording_keeps_the_run_intervals_begun_before_it() -> None:
    """record cuts the tracer's last batch at the stop time: events after it go, and so do run
    intervals begun after it, but the others stay (they were dropped with the events, and a
    command that ended before the first drain lost every counter)."""
    import numpy as np

    from snumap_tui.recording.session import _until
    from snumap_tui.trace.counters import counter_dtype
    from snumap_tui.trace.events import EVENT_DTYPE, EventBatch

    ev = np.zeros(3, EVENT_DTYPE)
    ev["t_ns"] = [10, 20, 30]
    c = np.zeros(3, counter_dtype(1))
    c["t_start"], c["t_end"] = [5, 15, 26], [9, 28, 40]
    got = _until(EventBatch(events=ev, counters=c, lost={0: 2}), 25)
    assert got.events["t_ns"].tolist() == [10, 20] and got.lost == {0: 2}
    assert got.counters is not None and got.counters["t_start"].tolist() == [5, 15]
    same = EventBatch(events=ev[:2], counters=c[:2])
    assert _until(same, 25) is same
