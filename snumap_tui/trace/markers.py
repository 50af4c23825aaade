"""User markers: lines written to the FIFO named by ``SNUMAP_MARKERS`` in the traced command's
environment, from any language (``echo "begin load" > "$SNUMAP_MARKERS"``).

A line is ``begin NAME``, ``end NAME`` or ``mark NAME``, optionally ending in `` @TID`` (the
writing thread; ``snumap_tui.phase`` and the C snippet in the README add it: a FIFO does not
tell who wrote to it). snumap stamps each line with CLOCK_MONOTONIC when it reads it: a thread
blocks on the FIFO, so a line is stamped within microseconds of its write on an idle machine,
within a scheduling delay on a busy one. A write of one line (at most PIPE_BUF, 4096 bytes) is
atomic, so lines of several writers never interleave.

Bounded whatever the writers do: lines longer than ``MAX_LINE`` are refused, at most
``MAX_PER_S`` lines a second are kept (the rest are read and counted as dropped, so a flooding
writer neither blocks nor grows snumap's memory), and at most ``MAX_OPEN`` begins wait for
their end.
"""

from __future__ import annotations

import os
import re
import select
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from snumap_tui.trace.region_catalog import BEGIN, END, MARK, REGION_DTYPE, RegionNames

ENV = "SNUMAP_MARKERS"
MAX_LINE = 1024
MAX_NAME = 200
MAX_PER_S = 100_000
MAX_OPEN = 10_000
MAX_NAMES = 10_000     # distinct marker names kept; lines naming others are counted, not kept
MAX_TID = (1 << 22)    # Linux's largest pid_max: a larger @TID is no thread
_VERBS = {"begin": BEGIN, "end": END, "mark": MARK}
_TID = re.compile(r"\s+@(\d{1,10})$")


class BadMarker(ValueError):
    pass


def parse_marker_line(line: str) -> tuple[int, str, int | None]:
    """(op, name, tid or None) of one marker line; BadMarker says what is wrong."""
    text = line.rstrip("\r\n")
    verb, _, rest = text.strip().partition(" ")
    op = _VERBS.get(verb)
    if op is None:
        raise BadMarker("not 'begin NAME', 'end NAME' or 'mark NAME'")
    tid = None
    m = _TID.search(rest)
    if m:
        tid = int(m.group(1))
        if tid > MAX_TID:
            raise BadMarker(f"@{tid} is no thread id (at most {MAX_TID})")
        rest = rest[:m.start()]
    name = " ".join(rest.split())
    if not name:
        raise BadMarker(f"'{verb}' without a NAME")
    if len(name) > MAX_NAME:
        raise BadMarker(f"NAME longer than {MAX_NAME} characters")
    return op, name, tid


@dataclass
class MarkerStats:
    lines: int = 0
    bad: int = 0
    bad_examples: list[str] = field(default_factory=list)
    unmatched_end: int = 0
    dropped: int = 0
    names_dropped: int = 0

    def problems(self) -> list[str]:
        out = []
        if self.bad:
            ex = ", ".join(repr(b) for b in self.bad_examples)
            out.append(f"{self.bad} marker line(s) ignored (not begin/end/mark NAME): {ex}")
        if self.unmatched_end:
            out.append(f"{self.unmatched_end} marker 'end' line(s) without a 'begin' ignored")
        if self.dropped:
            out.append(f"{self.dropped} marker line(s) dropped: more than {MAX_PER_S} a second "
                       "(a writer flooding the marker path)")
        if self.names_dropped:
            out.append(f"{self.names_dropped} marker line(s) dropped: they named more than "
                       f"{MAX_NAMES} distinct markers")
        return out


class MarkerFifo:
    """The FIFO and the thread that reads it; ``take()`` hands the rows read so far."""

    def __init__(self, names: RegionNames, pid_of: dict[int, int] | None = None) -> None:
        self.names = names
        self.dir = tempfile.mkdtemp(prefix=f"snumap-{os.getpid()}-markers-")
        self.path = os.path.join(self.dir, "markers")
        os.mkfifo(self.path, 0o600)
        # Our own write end keeps the FIFO from reading EOF between writers.
        self._rfd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        self._wfd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        self.stats = MarkerStats()
        self.pid_of = pid_of if pid_of is not None else {}
        self._rows: list[tuple[int, int, int, int, int]] = []
        self._open: dict[tuple[int, str], int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._tail = b""
        self._skipping = False         # inside a line refused as too long
        self._marker_names: set[str] = set()
        self._second = (0, 0)          # (second, lines kept in it)
        self._thread = threading.Thread(target=self._run, name="snumap-markers", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            r, _, _ = select.select([self._rfd], [], [], 0.1)
            if r:
                self._read_once()

    def _read_once(self) -> None:
        try:
            data = os.read(self._rfd, 65536)
        except BlockingIOError:
            return
        except OSError:
            self._stop.set()
            return
        now = time.monotonic_ns()
        buf = self._tail + data
        lines = buf.split(b"\n")
        self._tail = lines.pop()
        if self._skipping:
            # The rest of a line refused as too long, up to its newline: not a marker.
            if lines:
                lines.pop(0)
                self._skipping = False
            else:
                self._tail = b""
        if len(self._tail) > MAX_LINE:
            lines.append(self._tail)       # refused as too long; its tail is skipped
            self._tail = b""
            self._skipping = True
        with self._lock:
            for raw in lines:
                self._line(raw, now)

    def _line(self, raw: bytes, now: int) -> None:
        st = self.stats
        if not raw.strip():
            return
        st.lines += 1
        sec = now // 1_000_000_000
        if self._second[0] != sec:
            self._second = (sec, 0)
        if self._second[1] >= MAX_PER_S:
            st.dropped += 1
            return
        self._second = (sec, self._second[1] + 1)
        text = raw.decode("utf-8", errors="replace")
        try:
            if len(raw) > MAX_LINE:
                raise BadMarker("too long")
            op, name, tid = parse_marker_line(text)
        except BadMarker:
            st.bad += 1
            if len(st.bad_examples) < 3:
                st.bad_examples.append(text[:40])
            return
        if name not in self._marker_names:
            # The recorder's name table (and every chunk's) holds each distinct name: bounded,
            # the rest counted (a flood of fresh names grew the recorder 540 MB in 10 s).
            if len(self._marker_names) >= MAX_NAMES:
                st.names_dropped += 1
                return
            self._marker_names.add(name)
        t = tid if tid is not None else 0
        key = (t, name)
        if op == BEGIN:
            if len(self._open) >= MAX_OPEN and key not in self._open:
                st.dropped += 1
                return
            self._open[key] = self._open.get(key, 0) + 1
        elif op == END:
            n = self._open.get(key, 0)
            if not n:
                st.unmatched_end += 1
                return
            if n == 1:
                del self._open[key]
            else:
                self._open[key] = n - 1
        rid = self.names.intern(name, "marker", "marker")
        self._rows.append((now, t, self.pid_of.get(t, 0), op, rid))

    def take(self) -> np.ndarray:
        with self._lock:
            rows, self._rows = self._rows, []
        out = np.zeros(len(rows), REGION_DTYPE)
        if rows:
            a = np.array(rows, dtype=np.int64)
            out["t_ns"], out["tid"], out["pid"] = a[:, 0], a[:, 1], a[:, 2]
            out["op"], out["rid"] = a[:, 3], a[:, 4]
        return out

    def stop(self) -> np.ndarray:
        """Read what is left, stop the thread; the last rows."""
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join()
            for _ in range(64):            # what writers left in the pipe
                before = self.stats.lines
                self._read_once()
                if self.stats.lines == before:
                    break
        return self.take()

    def close(self) -> None:
        self.stop()
        for fd in (self._rfd, self._wfd):
            try:
                os.close(fd)
            except OSError:
                pass
        self._rfd = self._wfd = -1
        shutil.rmtree(self.dir, ignore_errors=True)
