"""The quiet terminal driver (ui/driver.py): its input thread sleeps until input or a stop,
still turns bytes into keys (a lone Escape too), and stops at once when asked."""

from __future__ import annotations

import asyncio
import os
import pty
import select
import signal
import threading
import time
import tty
from typing import Any

from textual import events
from textual.drivers.headless_driver import HeadlessDriver
from textual.drivers.linux_driver import LinuxDriver

from snumap_tui.ui import driver as D


class _Parser:
    pass


def test_the_sleep_lasts_until_the_parsers_deadline() -> None:
    p: Any = _Parser()
    assert D.parser_timeout(p, 10.0) == D.FALLBACK_POLL_S         # unknown parser: poll
    p._timeout_time = None
    assert D.parser_timeout(p, 10.0) is None                     # nothing pending: block
    p._timeout_time = 10.25
    assert abs(D.parser_timeout(p, 10.0) - 0.25) < 1e-9
    assert D.parser_timeout(p, 11.0) == 0.0


def test_waking_event_makes_the_pipe_readable() -> None:
    r, w = os.pipe()
    try:
        ev = D.WakingEvent(w)
        assert select.select([r], [], [], 0)[0] == []
        ev.set()
        assert ev.is_set() and select.select([r], [], [], 1.0)[0] == [r]
    finally:
        os.close(r)
        os.close(w)


def test_only_the_plain_linux_driver_is_replaced() -> None:
    assert D.quiet(LinuxDriver) is D.QuietLinuxDriver
    assert D.quiet(HeadlessDriver) is HeadlessDriver


class _Collecting(D.QuietLinuxDriver):
    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.got: list[Any] = []

    def process_message(self, message: Any) -> None:
        self.got.append(message)


def test_input_thread_reads_keys_sleeps_and_stops(monkeypatch: Any) -> None:
    saved = {s: signal.getsignal(s) for s in (signal.SIGTSTP, signal.SIGCONT)}
    master, slave = pty.openpty()
    tty.setraw(slave)                   # as the driver's application mode leaves the terminal
    timeouts: list[float | None] = []
    real = D.parser_timeout

    def spy(parser: Any, now: float) -> float | None:
        t = real(parser, now)
        timeouts.append(t)
        return t

    monkeypatch.setattr(D, "parser_timeout", spy)

    async def make() -> _Collecting:    # a driver wants the running loop
        return _Collecting(object())    # type: ignore[arg-type]

    drv = asyncio.run(make())
    drv.fileno = slave
    th = threading.Thread(target=drv.run_input_thread)
    try:
        th.start()
        os.write(master, b"\xc3")        # the first byte of "é" alone in a read
        time.sleep(0.2)
        os.write(master, b"\xa9a")
        time.sleep(0.2)
        os.write(master, b"\x1b")       # a lone Escape: a key once the parser's wait is over
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and len(
                [m for m in drv.got if isinstance(m, events.Key)]) < 3:
            time.sleep(0.02)
        keys = [m for m in drv.got if isinstance(m, events.Key)]
        assert [k.character for k in keys[:2]] == ["é", "a"], keys
        assert len(keys) == 3 and keys[2].key == "escape", keys
        n = len(timeouts)
        time.sleep(0.5)                 # idle: the thread must not wake
        assert len(timeouts) == n and timeouts[-1] is None, timeouts[-5:]
        t0 = time.monotonic()
        drv.exit_event.set()
        th.join(2)
        assert not th.is_alive() and time.monotonic() - t0 < 0.5
    finally:
        drv.exit_event.set()
        th.join(2)
        drv.close()
        os.close(master)
        os.close(slave)
        for s, h in saved.items():
            signal.signal(s, h)
