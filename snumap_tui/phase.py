"""Markers from Python: ``with snumap_tui.phase("assemble"): ...`` and ``snumap_tui.mark("x")``.

Under ``snumap record`` the traced command's environment names a FIFO in ``SNUMAP_MARKERS``;
each call writes one line to it (``begin NAME @TID``, docs in trace/markers.py). Without a
recording the variable is absent and a call costs one dictionary lookup; a full FIFO (snumap
busy) drops the line rather than block the program.
"""

from __future__ import annotations

import os
import threading
from contextlib import ContextDecorator
from typing import Any

_state: dict[str, Any] = {"fd": None, "checked": False}


def _fd() -> int | None:
    if not _state["checked"]:
        _state["checked"] = True
        path = os.environ.get("SNUMAP_MARKERS")
        if path:
            try:
                _state["fd"] = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError:
                _state["fd"] = None          # no reader (snumap gone): stay silent
    fd: int | None = _state["fd"]
    return fd


def _send(verb: str, name: str) -> None:
    fd = _fd()
    if fd is None:
        return
    clean = " ".join(str(name).split())[:200] or "?"
    try:
        os.write(fd, f"{verb} {clean} @{threading.get_native_id()}\n".encode())
    except BlockingIOError:
        pass                                  # FIFO full: this marker is lost, not the run
    except OSError:
        _state["fd"] = None


def mark(name: str) -> None:
    """One instant marker NAME (a tick on replay's time axis)."""
    _send("mark", name)


class phase(ContextDecorator):
    """A begin/end pair around a block (or a decorated function) named NAME."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> phase:  # noqa: PYI034
        _send("begin", self.name)
        return self

    def __exit__(self, *exc: object) -> None:
        _send("end", self.name)
