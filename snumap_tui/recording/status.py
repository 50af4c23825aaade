"""What `snumap record` tells the person at the terminal: a live status line on stderr while
it records (elapsed, events, lost, size, backend, how to stop), why the better tracing
backends were not used, and the closing summary, whose duration is the recording's own
(``Writer.span_ns``: the one `snumap report` and `replay` show; docs/format.md, "Duration").

The live line is drawn only when stderr is a terminal (a log file or a pipe gets the start and
summary lines and nothing else), at most twice a second, rewritten in place with ``\\r`` and
erased whole (with what the terminal echoed after it, ``^C``) before any other message so the
two never share a line.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from snumap_tui.textsafe import safe_lines, safe_text

REFRESH_S = 0.5


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


def status_text(elapsed_s: float, events: int, lost: int, size: int, backend: str,
                command: bool) -> str:
    """`` ● rec 12.3 s │ 48,210 events │ 0 lost │ 1.2 MiB │ bcc │ Ctrl-C to stop``."""
    stop = "Ctrl-C stops the command" if command else "Ctrl-C to stop"
    return (f"● rec {elapsed_s:.1f} s │ {events:,} events │ {lost:,} lost"
            f"{' (!)' if lost else ''} │ {_size(size)} │ {backend} │ {stop}")


class LiveStatus:
    """The status line; ``say`` prints a message above it (the record command's ``say``)."""

    def __init__(self, stream: TextIO | None = None, enabled: bool | None = None,
                 command: bool = False) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.command = command
        self.backend = "?"
        self._shown = 0            # width of the line on screen (0: none)
        self._at = 0.0

    def say(self, text: str) -> None:
        self.clear()
        print(safe_lines(f"snumap: {text}"), file=self.stream, flush=True)

    def update(self, elapsed_s: float, writer: Any, force: bool = False) -> None:
        """Redraw the line (at most every REFRESH_S unless ``force``)."""
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._at < REFRESH_S:
            return
        self._at = now
        line = safe_text(status_text(elapsed_s, int(writer.events_written),
                                     int(writer.lost_total), int(writer.bytes_written),
                                     self.backend, self.command))
        # Two columns spare: the terminal echoes Ctrl-C as ``^C`` after the line, which must
        # not wrap onto a line of its own.
        width = _columns(self.stream) - 2
        if len(line) > width - 1:
            line = line[:max(0, width - 2)] + "…"
        pad = max(0, self._shown - len(line))
        self.stream.write("\r" + line + " " * pad)
        self.stream.flush()
        self._shown = len(line)

    def clear(self) -> None:
        """Erase the whole line (ERASE LINE), the terminal's ``^C`` echo after the status
        text included: blanking only the status's width left a stray ``C`` after the
        summary."""
        if self._shown:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()
            self._shown = 0


def _columns(stream: TextIO) -> int:
    import os

    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return 80


def better_backends_note(chosen: str, asked: str) -> str | None:
    """With ``--backend NAME``, what the better backends would have been here: the user
    chose, but should know when bcc would have worked (or why not). With ``auto`` the
    tracer's own line says it (``tracing with perf (bcc not used: ...)``)."""
    if asked == "auto":
        return None
    from snumap_tui.trace.select import ORDER, describe, tracer_class

    better = ORDER[:ORDER.index(chosen)] if chosen in ORDER else ()
    notes = []
    for name in better:
        st = tracer_class(name).status()
        notes.append(f"{name} would work here too" if st.available
                     else f"{name} not available: {describe(st)}")
    return f"--backend {asked}: " + "; ".join(notes) if notes else None


def summary(writer: Any, tracer: Any, out: Any, elapsed_s: float,
            cost: dict[str, Any] | None = None) -> str:
    """The closing line. Its duration is the file's span (what report and replay say);
    ``elapsed_s`` (the wall time of the recording loop) only when nothing was written.
    COST: the recorder's own (analysis/recorder_cost.py), said last."""
    from snumap_tui.analysis.recorder_cost import cost_line

    span_of = getattr(writer, "span_ns", None)
    span = span_of() if callable(span_of) else None
    secs = (span[1] - span[0]) / 1e9 if span else elapsed_s
    lost = writer.lost_total
    return (f"recorded {secs:.3f} s, {writer.events_written} events, {lost} lost"
            f"{' (!)' if lost else ''}, {_size(writer.bytes_written)} to {out}, "
            f"backend {tracer.name}{' (approximate)' if tracer.approximate else ''}"
            + "".join(f"; {n}" for n in getattr(writer, "summary_notes", []))
            + (f"; {line}" if (line := cost_line(cost)) else ""))
