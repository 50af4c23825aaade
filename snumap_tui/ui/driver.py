"""A terminal driver whose input thread sleeps until something happens.

Textual's Linux driver reads the keyboard in a thread that wakes every 100 ms (a select with a
timeout) to see whether the app is stopping and whether a lone Escape has waited long enough
to be a key of its own. In an app that redraws once a second that polling was the third
biggest cost: ~1.1 ms of CPU a second here (ten wake-ups, each taking the GIL back), a sixth
of `snumap top`'s whole cost (bench/top_cpu.py).

This driver's thread blocks on the terminal and on a pipe instead: stopping writes to the
pipe (the driver's ``exit_event`` does it when set), and the select times out only while the
key parser waits for the rest of an escape sequence. Everything else -- modes, mouse, resize,
output -- is Textual's driver unchanged.
"""

from __future__ import annotations

import os
import selectors
import threading
from codecs import getincrementaldecoder
from typing import Any

from textual._time import get_time
from textual._xterm_parser import XTermParser
from textual.driver import Driver
from textual.drivers.linux_driver import LinuxDriver

# Poll this often when the parser gives no deadline (a Textual without the attribute).
FALLBACK_POLL_S = 0.1


class WakingEvent(threading.Event):
    """An Event that also writes a byte to a pipe when set, to wake a thread in select."""

    def __init__(self, wake_fd: int) -> None:
        super().__init__()
        self._wake_fd = wake_fd

    def set(self) -> None:
        super().set()
        try:
            os.write(self._wake_fd, b"x")
        except OSError:
            pass


def parser_timeout(parser: Any, now: float) -> float | None:
    """How long the input thread may sleep: until the parser's pending escape times out,
    forever when nothing is pending."""
    if not hasattr(parser, "_timeout_time"):
        return FALLBACK_POLL_S
    deadline = parser._timeout_time
    return None if deadline is None else max(0.0, deadline - now)


class QuietLinuxDriver(LinuxDriver):
    """Textual's Linux driver with an input thread that sleeps until input or a stop."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._wake_fds: tuple[int, ...] = (self._wake_r, self._wake_w)   # () once closed
        self.exit_event = WakingEvent(self._wake_w)

    def run_input_thread(self) -> None:
        parser = XTermParser(self._debug)
        decode = getincrementaldecoder("utf-8")().decode
        sel = selectors.DefaultSelector()
        sel.register(self.fileno, selectors.EVENT_READ, "tty")
        sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        try:
            while not self.exit_event.is_set():
                for key, _mask in sel.select(parser_timeout(parser, get_time())):
                    if key.data == "wake":
                        try:
                            os.read(self._wake_r, 512)
                        except BlockingIOError:
                            pass
                        continue
                    data = os.read(self.fileno, 4096)
                    if not data:                 # end of input: wait for the stop only
                        sel.unregister(self.fileno)
                        continue
                    text = decode(data)
                    if not text:                 # the start of a multi-byte character
                        continue
                    for event in parser.feed(text):
                        self.process_message(event)
                for event in parser.tick():
                    self.process_message(event)
        finally:
            sel.close()

    def close(self) -> None:
        super().close()
        fds, self._wake_fds = self._wake_fds, ()
        for fd in fds:                  # once: a second close could hit a reused number
            try:
                os.close(fd)
            except OSError:
                pass


def quiet(driver_class: type[Driver]) -> type[Driver]:
    """The driver an app should use: this quiet one where Textual would use its plain Linux
    driver, Textual's choice otherwise (TEXTUAL_DRIVER, headless, inline)."""
    return QuietLinuxDriver if driver_class is LinuxDriver else driver_class


class QuietDriverMixin:
    """For an App: the quiet driver wherever Textual would pick its plain Linux one."""

    def get_driver_class(self) -> type[Driver]:
        return quiet(super().get_driver_class())  # type: ignore[misc]
