"""Tracers that fail part-way hold nothing afterwards, and the rings' edge cases.

- a tracer whose start() fails after it attached/opened closes what it opened (checked on
  the real kernel by this process's open file descriptors, which hold every perf event, BPF
  program and map), and start_tracer stops a failed tracer before the next one;
- PerfTracer.stop() closes its events even when PERF_EVENT_IOC_DISABLE fails;
- a perf ring overrun (head more than a ring ahead of tail) is counted as lost, not decoded;
- both rings close twice without an error;
- the bcc backend's in-kernel switch-ins move to the not-running evidence (reconstruct.py).
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
from snumap_tui.native.perf_event import MMAP_PAGE_DATA_HEAD
from snumap_tui.native.perf_ring import PerfRing

from snumap_tui.sources.base import SourceStatus
from snumap_tui.trace import events as ev
from snumap_tui.trace import select
from snumap_tui.trace.base import Tracer
from snumap_tui.trace.bpf_ring import BpfRingReader, BpfRingSet
from snumap_tui.trace.reconstruct import NotRunning, place_kernel_switch_ins
from snumap_tui.trace.tracefs import mount_tracefs, tracefs_root
from tests.test_trace_reconstruct import events

SLEEPING = 1


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def available_or_skip(name: str) -> None:
    if tracefs_root() is None and os.geteuid() == 0:
        mount_tracefs()
    st = select.tracer_class(name).status()
    if not st.available:
        pytest.skip(f"{name} backend unavailable here: {st.reason}")


# ---- failure after attach, on the real kernel ------------------------------------------------

def test_perf_start_failing_after_open_closes_every_event(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    available_or_skip("perf")
    from snumap_tui.trace import perf

    real_ioctl = perf.pe.ioctl
    calls = {"enable": 0}

    def failing_ioctl(fd: int, req: int, arg: int = 0) -> int:
        if req == perf.pe.PERF_EVENT_IOC_ENABLE:
            calls["enable"] += 1
            if calls["enable"] == 3:          # some events already enabled: fail mid-way
                raise OSError(5, "injected")
        return real_ioctl(fd, req, arg)

    monkeypatch.setattr(perf.pe, "ioctl", failing_ioctl)
    before = open_fds()
    tracer = perf.PerfTracer()
    with pytest.raises(OSError, match="injected"):
        tracer.start(None)
    assert calls["enable"] == 3
    assert tracer._fds == [] and tracer._rings == {}
    assert open_fds() == before
    tracer.stop()                              # what start_tracer does: harmless now
    assert open_fds() == before


def test_perf_stop_closes_even_when_disable_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    available_or_skip("perf")
    from snumap_tui.trace import perf

    before = open_fds()
    tracer = perf.PerfTracer()
    tracer.start(None)
    assert len(open_fds()) > len(before)
    real_ioctl = perf.pe.ioctl

    def failing_ioctl(fd: int, req: int, arg: int = 0) -> int:
        if req == perf.pe.PERF_EVENT_IOC_DISABLE:
            raise OSError(5, "injected")
        return real_ioctl(fd, req, arg)

    monkeypatch.setattr(perf.pe, "ioctl", failing_ioctl)
    with pytest.raises(OSError, match="injected"):
        tracer.stop()
    assert open_fds() == before


def test_bcc_start_failing_after_attach_detaches_everything(monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    available_or_skip("bcc")
    from snumap_tui.trace import bcc

    def failing_reader(*_a: object, **_k: object) -> BpfRingReader:
        raise OSError(12, "injected after the programs were attached")

    monkeypatch.setattr(bcc, "BpfRingReader", failing_reader)
    before = open_fds()
    tracer = bcc.BccTracer()
    seen: dict[str, int] = {}
    real_attach = tracer._attach

    def attach_and_count(*a: object) -> None:
        seen["fds"] = len(open_fds())          # the programs are loaded and attached here
        real_attach(*a)                        # type: ignore[arg-type]

    tracer._attach = attach_and_count          # type: ignore[method-assign]
    with pytest.raises(OSError, match="injected"):
        tracer.start([os.getpid()])
    assert seen["fds"] > len(before) + 5       # 7 programs, their perf links, the maps
    assert tracer._bpf is None
    assert open_fds() == before


def test_libbpf_start_failing_after_attach_detaches_everything(monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    available_or_skip("libbpf")
    from snumap_tui.native import libbpf as native_libbpf

    from snumap_tui.trace import libbpf

    native_libbpf.lib()                        # the library's own fds stay open
    seen: dict[str, int] = {}

    def failing_rings(*_a: object, **_k: object) -> BpfRingSet:
        seen["fds"] = len(open_fds())          # the programs are loaded and attached here
        raise OSError(12, "injected after the programs were attached")

    monkeypatch.setattr(libbpf, "BpfRingSet", failing_rings)
    before = open_fds()
    tracer = libbpf.LibbpfTracer()
    with pytest.raises(OSError, match="injected"):
        tracer.start([os.getpid()])
    assert seen["fds"] > len(before) + 10      # 7 programs, their links, 5 maps, BTF, rings
    assert tracer._obj is None
    assert open_fds() == before
    assert tracer.stop().events.size == 0      # stopping a tracer that never started


class _Fails(Tracer):
    """Starts half-way (holds a pipe) and then fails; stop() releases the pipe."""

    name = "bcc"
    stopped = 0
    fds: ClassVar[list[int]] = []

    @classmethod
    def status(cls) -> SourceStatus:
        return SourceStatus("trace:bcc", True)

    def start(self, pids: Iterable[int] | None = None) -> None:
        type(self).fds = list(os.pipe())
        raise RuntimeError("injected: cannot compile")

    def read(self) -> ev.EventBatch:
        return ev.EventBatch()

    def stop(self) -> ev.EventBatch:
        type(self).stopped += 1
        for fd in type(self).fds:
            os.close(fd)
        type(self).fds = []
        raise OSError("stop fails too")       # guarded: the next backend is still tried


class _Works(_Fails):
    name = "perf"

    @classmethod
    def status(cls) -> SourceStatus:
        return SourceStatus("trace:perf", True)

    def start(self, pids: Iterable[int] | None = None) -> None:
        pass


class _Absent(_Works):
    name = "libbpf"

    @classmethod
    def status(cls) -> SourceStatus:
        return SourceStatus("trace:libbpf", False, "no kernel BTF")


def test_start_tracer_stops_a_failed_tracer_before_the_next(monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    monkeypatch.setattr(select, "tracer_class",
                        lambda name: {"libbpf": _Absent, "bcc": _Fails,
                                      "perf": _Works}.get(name, _Works))
    lines: list[str] = []
    tracer, choice = select.start_tracer("auto", None, say=lines.append)
    assert isinstance(tracer, _Works) and _Fails.stopped == 1 and _Fails.fds == []
    assert choice[0] == "libbpf not used: no kernel BTF"
    assert "bcc not used: failed to start: injected: cannot compile" in choice[1]
    assert lines == [choice[-1]]
    _Fails.stopped = 0
    with pytest.raises(select.SnumapError, match="bcc backend failed to start"):
        select.start_tracer("bcc", None, say=lines.append)
    assert _Fails.stopped == 1 and _Fails.fds == []


# ---- the rings ------------------------------------------------------------------------------

def ring_file(tmp_path: Path, pages: int, head: int, tail: int) -> int:
    page = os.sysconf("SC_PAGE_SIZE")
    path = tmp_path / "ring"
    path.write_bytes(b"\x55" * (1 + pages) * page)
    fd = os.open(path, os.O_RDWR)
    with mmap.mmap(fd, (1 + pages) * page) as m:
        struct.pack_into("<QQQQ", m, MMAP_PAGE_DATA_HEAD, head, tail, page, pages * page)
    return fd


def test_perf_ring_overrun_is_lost_not_decoded(tmp_path: Path) -> None:
    size = os.sysconf("SC_PAGE_SIZE")
    fd = ring_file(tmp_path, 1, head=5 * size + 24, tail=4 * size)   # 24 bytes too many
    try:
        ring = PerfRing(fd, 1)
        assert ring.read() == b"" and ring.lost_bytes == size + 24
        assert ring.pending() == 0 and ring.read() == b""
        ring.close()
        ring.close()                            # twice: nothing happens
    finally:
        os.close(fd)
    fd = ring_file(tmp_path, 1, head=5 * size, tail=4 * size)        # exactly full: all valid
    try:
        ring = PerfRing(fd, 1)
        assert len(ring.read()) == size and ring.lost_bytes == 0
        ring.close()
    finally:
        os.close(fd)


def test_perf_tracer_reports_an_overrun_as_lost_events() -> None:
    from snumap_tui.trace.perf import PerfTracer

    class Overrun:
        lost_bytes = 0

        def read(self) -> bytes:
            self.lost_bytes += 1000
            return b""

    tracer = PerfTracer()
    tracer._record_max = 104
    tracer._rings = {1: Overrun()}             # type: ignore[dict-item]
    batch = tracer.read()
    assert batch.lost == {1: 1000 // 104}
    assert tracer.read().lost == {1: 1000 // 104}      # each overrun once
    tracer._rings = {}


def test_bpf_ring_reader_closes_twice(tmp_path: Path) -> None:
    page = os.sysconf("SC_PAGE_SIZE")
    path = tmp_path / "bpfring"
    path.write_bytes(b"\0" * 4 * page)
    fd = os.open(path, os.O_RDWR)
    try:
        reader = BpfRingReader(fd, page, np.dtype([("x", "<u8")]))
        assert reader.pending() == 0 and len(reader.read()) == 0
        reader.close()
        reader.close()
    finally:
        os.close(fd)


# ---- bcc's kernel-made switch-ins, placed by the shared rule ---------------------------------

def test_kernel_switch_in_moves_to_the_wakeup_new() -> None:
    # The program put idle -> 42 on CPU 1 at the previous switch there (1000); 42 was only
    # created and woken at 50010, so that is where it can first have run.
    e = events((1000, 1, ev.SWITCH, 7, 0, SLEEPING),
             (1000, 1, ev.SWITCH, 0, 42, -1),
             (50010, 1, ev.WAKEUP_NEW, 42, 0, 0),
             (60000, 1, ev.SWITCH, 42, 0, SLEEPING))
    out = place_kernel_switch_ins(e, NotRunning())
    assert out["t_ns"].tolist() == [1000, 50010, 50010, 60000]
    assert out["arg"].tolist() == [SLEEPING, 0, -1, SLEEPING]   # after the event of its time
    assert out[2]["tid2"] == 42


def test_kernel_switch_in_evidence_across_batches_and_lower_bound() -> None:
    state = NotRunning()
    # Batch 1: 42 blocks on CPU 0 at 900 and is woken at 5000.
    place_kernel_switch_ins(events((900, 0, ev.SWITCH, 42, 0, SLEEPING),
                                 (5000, 0, ev.WAKEUP, 42, 0, 0)), state)
    # Batch 2: CPU 1's previous switch was at 3000; the switch-out at 9000 reveals the miss.
    out = place_kernel_switch_ins(events((3000, 1, ev.SWITCH, 0, 42, -1),
                                       (9000, 1, ev.SWITCH, 42, 0, SLEEPING)), state)
    assert out["t_ns"].tolist() == [5000, 9000]
    # Evidence older than the previous switch on the CPU does not move it earlier.
    out = place_kernel_switch_ins(events((100, 0, ev.WAKEUP_NEW, 43, 0, 0),
                                       (7000, 1, ev.SWITCH, 0, 43, -1),
                                       (8000, 1, ev.SWITCH, 43, 0, SLEEPING)), NotRunning())
    assert out["t_ns"].tolist() == [100, 7000, 8000]
    # Evidence after the switch-out does not count (its next wakeup at 9500).
    out = place_kernel_switch_ins(events((7000, 1, ev.SWITCH, 0, 44, -1),
                                       (7500, 1, ev.MIGRATE, 44, 0, 0),
                                       (8000, 1, ev.SWITCH, 44, 0, SLEEPING),
                                       (9500, 0, ev.WAKEUP, 44, 0, 0)), NotRunning())
    assert out["t_ns"].tolist() == [7500, 7500, 8000, 9500]
