"""`snumap record` when things go wrong: bad arguments are found before any tracer starts, and
whatever fails (the loop, the writer's close, the tracer's stop) every resource is still
closed and the first error is the one reported. In-process, with the tracer, the sampler and
the Writer replaced by recorders of what was called (the real ones are exercised by
test_record_cli.py and test_trace_backends.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from snumap_tui import store
from snumap_tui.cli import build_parser
from snumap_tui.commands import record
from snumap_tui.errors import SnumapError
from snumap_tui.model.sample import Sample
from snumap_tui.recording import session
from snumap_tui.trace import events as ev
from snumap_tui.trace import select


class Calls(list):
    """What was done, in order."""


class FakeTracer:
    name, approximate = "fake", False

    def __init__(self, calls: Calls, fail_stop: bool = False) -> None:
        self.calls, self.fail_stop = calls, fail_stop

    def drain(self) -> None:
        return None

    def decode(self, _raw: Any) -> ev.EventBatch:
        return ev.EventBatch()

    def stop(self) -> ev.EventBatch:
        self.calls.append("tracer.stop")
        if self.fail_stop:
            raise OSError("injected stop failure")
        return ev.EventBatch()


class FakeSampler:
    def __init__(self, calls: Calls, fail_sweep: bool = False) -> None:
        self.calls, self.fail_sweep = calls, fail_sweep
        self.sweeps = 0

    def sweep(self) -> Sample:
        self.sweeps += 1
        if self.fail_sweep and self.sweeps > 1:    # the first is the set-up's, before the loop
            raise RuntimeError("injected loop failure")
        return Sample(t_ns=1, wall_ns=1, readings={})

    def watch_pids(self, pids: Any) -> None:
        self.calls.append(("watch", sorted(pids)))

    def close(self) -> None:
        self.calls.append("sampler.close")


class FakeWriter:
    fail_close = False

    def __init__(self, calls: Calls) -> None:
        self.calls = calls
        self.lost_total = self.events_written = self.bytes_written = 0

    def add_marker(self, *_a: Any) -> None: ...
    def span_ns(self) -> tuple[int, int] | None:
        return None
    def add_sample(self, *_a: Any) -> None: ...
    def add_events(self, *_a: Any) -> None: ...
    def add_process_memory(self, *_a: Any) -> None: ...
    def add_info(self, *_a: Any) -> None: ...
    def flush(self) -> None: ...

    def close(self) -> None:
        self.calls.append("writer.close")
        if self.fail_close:
            raise OSError(28, "No space left on device")


def setup(monkeypatch: pytest.MonkeyPatch, *, fail_sweep: bool = False,
          fail_close: bool = False, fail_stop: bool = False) -> Calls:
    calls = Calls()
    tracer = FakeTracer(calls, fail_stop)

    def start_tracer(*_a: Any, **_k: Any) -> tuple[FakeTracer, list[str]]:
        calls.append("start_tracer")
        return tracer, ["tracing with fake"]

    def writer(*_a: Any, **_k: Any) -> FakeWriter:
        w = FakeWriter(calls)
        w.fail_close = fail_close
        return w

    monkeypatch.setattr(select, "start_tracer", start_tracer)
    monkeypatch.setattr(store, "Writer", writer)
    monkeypatch.setattr(session, "make_sampler",
                        lambda *_a: (FakeSampler(calls, fail_sweep), []))
    monkeypatch.setattr(session, "backend_statuses", list)
    return calls


def run(tmp_path: Path, *extra: str) -> int:
    args = build_parser().parse_args(["record", "--synthetic", "2", "-o",
                                      str(tmp_path / "r.rec"), *extra])
    return record.run(args)


def test_bad_interval_and_output_are_refused_before_any_tracer(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls = setup(monkeypatch)
    with pytest.raises(SnumapError, match="interval 0.0001s is out of range"):
        run(tmp_path, "--interval", "100us", "--duration", "1s")
    with pytest.raises(SnumapError, match="is not a directory"):
        args = build_parser().parse_args(["record", "--synthetic", "2", "-o",
                                          str(tmp_path / "nowhere" / "r.rec")])
        record.run(args)
    with pytest.raises(SnumapError, match="is a directory"):
        args = build_parser().parse_args(["record", "--synthetic", "2", "-o", str(tmp_path)])
        record.run(args)
    assert calls == []


def test_a_loop_failure_still_stops_the_tracer_and_closes_everything(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture
        ) -> None:
    calls = setup(monkeypatch, fail_sweep=True, fail_close=True)
    with pytest.raises(RuntimeError, match="injected loop failure"):   # not the disk-full
        run(tmp_path, "--duration", "1s")
    assert calls == ["start_tracer", "writer.close", "tracer.stop", "sampler.close"]
    assert "closing" in capsys.readouterr().err     # the close failure is still said
    assert (tmp_path / "r.rec").exists()            # the recording had started: kept


def test_an_output_the_kernel_refuses_is_found_before_any_tracer(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """/proc is a directory root may "write" by its mode bits, yet nothing can be created
    there: the file is opened before any tracer starts (or says "tracing with ...")."""
    calls = setup(monkeypatch)
    args = build_parser().parse_args(["record", "--synthetic", "2", "-o",
                                      "/proc/snumap-test.rec", "--duration", "1s"])
    with pytest.raises(SnumapError, match=r"^cannot (create|write) /proc/snumap-test.rec: "):
        record.run(args)
    assert calls == []


def test_a_tracer_that_cannot_start_removes_only_the_file_this_run_created(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls = setup(monkeypatch)

    def no_tracer(*_a: Any, **_k: Any) -> None:
        calls.append("start_tracer")
        raise SnumapError("no tracer works here")

    monkeypatch.setattr(select, "start_tracer", no_tracer)
    with pytest.raises(SnumapError, match="no tracer works here"):
        run(tmp_path, "--duration", "1s")
    assert calls == ["start_tracer", "sampler.close"]
    assert not (tmp_path / "r.rec").exists()
    (tmp_path / "r.rec").write_bytes(b"an older recording")
    with pytest.raises(SnumapError, match="no tracer works here"):
        run(tmp_path, "--duration", "1s", "--force")
    assert (tmp_path / "r.rec").read_bytes() == b"an older recording"


def test_a_failing_close_neither_skips_the_others_nor_goes_unreported(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls = setup(monkeypatch, fail_close=True)
    with pytest.raises(SnumapError, match="closing .*r.rec failed: .*No space left"):
        run(tmp_path, "--duration", "0.2s")
    assert calls[-3:] == ["tracer.stop", "writer.close", "sampler.close"]


def test_a_failing_stop_still_closes_the_writer_and_the_sampler(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls = setup(monkeypatch, fail_stop=True)
    with pytest.raises(OSError, match="injected stop failure"):
        run(tmp_path, "--duration", "0.2s")
    assert calls[-3:] == ["tracer.stop", "writer.close", "sampler.close"]
    assert calls.count("tracer.stop") == 1


def test_the_traced_tree_is_watched_every_sample(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    calls = setup(monkeypatch)
    assert run(tmp_path, "--", "true") == 0
    assert calls[0] == "start_tracer" and calls[1][0] == "watch" and len(calls[1][1]) == 1
    assert calls[2:] == ["tracer.stop", "writer.close", "sampler.close"]


def test_tree_watch_follows_forks_and_exits() -> None:
    calls = Calls()
    w = session.TreeWatch(FakeSampler(calls), [10])
    e = ev.empty_events(1)
    e[0] = (5, 0, ev.EXIT, 11, -1, 11, -1, 0)
    w.update(ev.EventBatch(tasks=[ev.TaskInfo(11, 11, "child"), ev.TaskInfo(12, 10, "thr")]))
    assert w.pids == {10, 11}
    w.update(ev.EventBatch(events=e))
    assert w.pids == {10}
    assert [c[1] for c in calls] == [[10], [10, 11], [10]]
    none = session.TreeWatch(FakeSampler(calls), [])          # system-wide: nothing watched
    none.update(ev.EventBatch(tasks=[ev.TaskInfo(11, 11, "x")]))
    assert none.pids == set() and len(calls) == 3
