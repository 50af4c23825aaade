"""The selected process's devices in the processes view's details: which GPUs and adapters it
has open, on which package, and a finding when its threads run on the other package.

The feed computes them (``LiveFeed.process_io``: a readlink per open fd of that one process);
``ProcessIoLines`` asks again at most every ``every_s`` seconds, so a process with thousands
of fds does not cost a directory walk per frame. A feed without ``process_io`` (replay) shows
nothing here.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from rich.style import Style
from rich.text import Text

from snumap_tui.textsafe import safe_text
from snumap_tui.ui.palette import NA_STYLE

WARN_STYLE = Style(color="red", bold=True)


def devices_text(uses: Sequence[Any], findings: Sequence[Any], width: int) -> Text | None:
    """' devices: mlx5_0 pkg 1 NUMA 1 remote · nvidia0 pkg 0 local', then each finding on a
    line of its own; None when the process has no device open."""
    if not uses:
        return None
    out = Text(" devices: ")
    for i, u in enumerate(uses):
        if i:
            out.append(" · ")
        out.append(safe_text(u.device.name), style="bold")
        where = (f" pkg {u.package}" if u.package is not None else " place unknown") + \
            (f" NUMA {u.numa}" if u.numa is not None else "")
        out.append(where)
        if u.local is True:
            out.append(" local")
        elif u.local is False:
            out.append(" remote", style=WARN_STYLE)
        else:
            out.append(" ?", style=NA_STYLE)
    out.truncate(width, overflow="ellipsis")
    for f in findings:
        line = Text(" ⚠ " + f.text, style=WARN_STYLE)
        line.truncate(width, overflow="ellipsis")
        out.append("\n")
        out.append_text(line)
    return out


class ProcessIoLines:
    """Asks the feed for a process's devices, at most every ``every_s`` seconds per pid."""

    def __init__(self, every_s: float = 2.0) -> None:
        self.every_s = every_s
        self._last: tuple[int, float, tuple[list[Any], list[Any]]] | None = None

    def text(self, feed: Any, pid: int | None, width: int) -> Text | None:
        fn = getattr(feed, "process_io", None)
        if pid is None or not callable(fn):
            return None
        now = time.monotonic()
        if self._last is None or self._last[0] != pid or now - self._last[1] >= self.every_s:
            try:
                got = fn(pid)
            except OSError:
                got = ([], [])
            self._last = (pid, now, got)
        uses, findings = self._last[2]
        return devices_text(uses, findings, width)
