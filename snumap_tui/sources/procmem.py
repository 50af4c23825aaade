"""Memory per NUMA node of a set of processes, cheap enough for every recording interval.

Sources and their cost (measured on a 2-PU KVM guest, a process with 1 GiB resident in 4 KiB
pages; docs/benchmarks.md "Process memory"):

- ``/proc/PID/numa_maps``: pages per node of every mapping -- exact, but a page-table walk of
  the whole address space: ~80 ms at 1 GiB (``smaps_rollup`` is a walk too, ~67 ms).
- ``/proc/PID/statm``: resident pages (RSS), a counter the kernel keeps: ~0.01 ms.
- ``/proc/PID/status``: the same RSS (VmRSS) beside the kernel's peak (VmHWM), ~0.03 ms.

So every interval reads ``statm``, or ``status`` where the peaks are wanted (``peaks``: the
recorder; one file a process either way); the split over nodes comes from ``numa_maps``, read
again only when the RSS moved by more than ``MOVED`` (a 1/32nd, at least 2 MiB) since the last walk,
or ``REFRESH_S`` passed (pages migrate without the RSS changing), and never sooner than
``COST_FACTOR`` times what the last walk of that process took (a walk of 80 ms waits 0.8 s:
the walks cost at most a tenth of a CPU, whatever the interval). Between walks the RSS is
spread over the nodes in the last walk's proportions, and the row says so (``exact`` False).
Where the machine has one node with memory, every resident page is on it: the RSS is exact at
every interval and no walk is needed.

Rows: ``(pid, node, bytes, exact)`` per process and node, plus one row per process with node
``RSS_NODE`` (-1): its RSS. Parsing is ``tasks.parse_numa_maps``.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from snumap_tui.sources._io import count_of, parse_cpulist, reason_of
from snumap_tui.sources.numa import node_dirs
from snumap_tui.sources.tasks import parse_numa_maps

RSS_NODE = -1
MOVED = 1 / 32
MOVED_MIN = 2 << 20
REFRESH_S = 5.0
COST_FACTOR = 10.0


def parse_statm_resident(text: str) -> int:
    """/proc/PID/statm (``size resident shared text lib data dt``, in pages) -> resident
    pages; ValueError when it is not that, ProcessLookupError for a process without memory
    (a zombie's statm is all zeros)."""
    parts = text.split()
    size, resident = (count_of(parts[0]), count_of(parts[1])) if len(parts) >= 2 else (None, None)
    if size is None or resident is None:
        raise ValueError(f"not a statm line: {text[:40]!r}")
    if size == 0:
        raise ProcessLookupError("no address space (exited)")   # a zombie: all zeros
    return resident


def memory_nodes(root: Path) -> list[int]:
    """The NUMA nodes that have memory (``has_memory``), else every node directory, else
    [0] (a kernel without NUMA: one node)."""
    base = root / "sys/devices/system/node/has_memory"
    try:
        nodes = parse_cpulist(base.read_text())
        if nodes:
            return sorted(nodes)
    except (OSError, ValueError):
        pass
    return [n for n, _ in node_dirs(root)] or [0]


def _status_bytes(status: str, key: str) -> int | None:
    """Bytes of the ``KEY`` line of /proc/PID/status text ("VmHWM:  1234 kB"); None when
    there is none (a zombie, a kernel thread) or it is not a count of kB."""
    at = status.find("\n" + key)
    if at < 0 and not status.startswith(key):
        return None
    at += 1
    end = status.find("\n", at)
    parts = status[at + len(key):end if end >= 0 else len(status)].split()
    kb = count_of(parts[0]) if parts else None
    return None if kb is None else kb * 1024


def parse_vmhwm(status: str) -> int | None:
    """Bytes of the ``VmHWM:`` line of /proc/PID/status text: the kernel's peak RSS; None
    when there is none (a zombie, a kernel thread)."""
    return _status_bytes(status, "VmHWM:")


def parse_status_memory(status: str) -> tuple[int, int | None]:
    """(RSS, VmHWM) in bytes from /proc/PID/status text: VmRSS is statm's resident pages
    (the same counters, in kB), so one read gives both; ProcessLookupError for a process
    without memory (a zombie has neither line)."""
    rss = _status_bytes(status, "VmRSS:")
    if rss is None:
        if "VmRSS:" not in status:
            raise ProcessLookupError("no address space (exited)")
        raise ValueError("not a VmRSS line in /proc/PID/status")
    return rss, parse_vmhwm(status)


@dataclass
class _Walk:
    """The last numa_maps walk of one process."""

    at: float = -math.inf           # when (monotonic seconds)
    cost: float = 0.0               # how long it took
    rss: int = 0                    # the RSS (bytes) when it was taken
    split: dict[int, int] = field(default_factory=dict)   # node -> bytes


class ProcessMemory:
    """Memory per node of the processes given to ``watch`` (the recorder's traced tree)."""

    name = "process memory"

    def __init__(self, root: Path = Path("/"), *, clock: Callable[[], float] = time.perf_counter,
                 page_bytes: int | None = None, peaks: bool = False) -> None:
        self.root = Path(root)
        self._proc = str(self.root / "proc")
        self.clock = clock
        self.page = page_bytes or os.sysconf("SC_PAGE_SIZE")
        self.nodes = memory_nodes(self.root)
        self.one_node = len(self.nodes) == 1
        self.pids: set[int] = set()
        self._walks: dict[int, _Walk] = {}
        self.walks = 0                  # numa_maps reads so far
        self.walk_s = 0.0               # and their total time
        self.errors: dict[int, str] = {}
        # PEAKS: the RSS from /proc/PID/status instead of statm, which has the kernel's own
        # high-water mark (VmHWM, proc(5)) beside it: the true peak so far, which samples
        # miss when it is shorter than their interval; pid -> the largest read (one file a
        # sample either way).
        self.track_peaks = peaks
        self.peaks: dict[int, int] = {}

    def watch(self, pids: Iterable[int]) -> None:
        self.pids = set(pids)
        self._walks = {p: w for p, w in self._walks.items() if p in self.pids}

    def _file(self, pid: int, name: str) -> str:
        path = f"{self._proc}/{pid}/{name}"
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        try:
            parts = []
            while True:
                b = os.read(fd, 1 << 16)
                if not b:
                    break
                parts.append(b)
        finally:
            os.close(fd)
        return b"".join(parts).decode("ascii", "replace")

    def _due(self, w: _Walk, rss: int, now: float) -> bool:
        if now - w.at < w.cost * COST_FACTOR:
            return False
        moved = abs(rss - w.rss) > max(MOVED_MIN, w.rss * MOVED)
        return moved or now - w.at >= REFRESH_S

    def read_pid(self, pid: int) -> list[tuple[int, int, int, bool]]:
        """This process's rows (empty once it is gone); raises OSError when it cannot be read
        (another user's process without the capability)."""
        if self.track_peaks:
            rss, hwm = parse_status_memory(self._file(pid, "status"))
            if hwm is not None:
                self.peaks[pid] = max(hwm, self.peaks.get(pid, 0))
        else:
            rss = parse_statm_resident(self._file(pid, "statm")) * self.page
        rows = [(pid, RSS_NODE, rss, True)]
        if self.one_node:
            rows.append((pid, self.nodes[0], rss, True))
            return rows
        w = self._walks.setdefault(pid, _Walk())
        now = self.clock()
        exact = self._due(w, rss, now)
        if exact:
            pages = parse_numa_maps(self._file(pid, "numa_maps"), self.page // 1024)
            end = self.clock()
            w.at, w.cost, w.rss = end, end - now, rss
            w.split = {n: p * self.page for n, p in pages.items()}
            self.walks += 1
            self.walk_s += end - now
            split = w.split
        else:
            total = sum(w.split.values())
            split = {n: round(rss * b / total) for n, b in w.split.items()} if total else {}
        rows += [(pid, n, b, exact) for n, b in sorted(split.items())]
        return rows

    def read(self) -> list[tuple[int, int, int, bool]]:
        """Rows of every watched process that is still there."""
        out: list[tuple[int, int, int, bool]] = []
        for pid in sorted(self.pids):
            try:
                out += self.read_pid(pid)
            except (FileNotFoundError, ProcessLookupError):
                continue                       # it exited
            except (OSError, ValueError) as exc:
                self.errors[pid] = reason_of(exc) if isinstance(exc, OSError) else str(exc)
        return out

    def describe(self) -> str:
        rss = "/proc/PID/status (VmRSS, VmHWM)" if self.track_peaks else "/proc/PID/statm"
        if self.one_node:
            return (f"{rss} every interval; one node with memory (node "
                    f"{self.nodes[0]}): exact")
        return (f"{rss} every interval, split over nodes by /proc/PID/numa_maps "
                f"(read again when the RSS moves by 1/32 or every {REFRESH_S:g} s, at most a "
                f"{1 / COST_FACTOR:.0%} of a CPU; rows between walks are scaled: estimates)")
