"""Per-PU counters every millisecond without waking the recorder every millisecond.

Below 10 ms, ``snumap record`` no longer reads each PU's perf groups itself at every sample
(one read() a group, about 15 us each beside the program, plus Python's wake-up: a fifth of a
core at 1 ms). Each group gets one more member instead, a cpu-clock with that period and
PERF_SAMPLE_READ (sources/perf.py ``Group``): the kernel's timer writes the whole group's
counts, with their enabled and running times, into the clock's ring buffer every period, as
``perf record -e '{...}:S'`` does. The recorder wakes every 100 ms for its other sources (one
read of the groups among them) and turns what the rings hold into the samples between.

Each PU's timer has its own phase (the kernel starts it when the group starts), so the
samples are put on one grid of the interval, anchored at the first sample after the sampling
began: each group's counts at a grid time are linearly interpolated between the two exact
readings around it, 1 ms apart or less (its own kernel samples, and the recorder's direct
reads at its sweeps, each at the time it was made). Grid times within half an interval of a
sweep are left to it, and the sweep's own sample gets its counters at its time the same way.

An idle PU's timer does not fire (on Linux 6.18 in a KVM guest: samples 100-350 ms apart
while the PU idled, though the clock counted all of it): across such a stretch the counts,
which barely move there, are interpolated too. A stretch the kernel could not write (a full
ring) is counted in ``lost`` and said at the end of the recording. A reading holds what ``PerfSource.read()`` gives (without the enabled and running
times where no group was multiplexed: they would scale nothing), so every consumer derives
the same figures from them.

A ring is 16 pages (64 KiB): at 1 ms, a group of 3 events (and its clock) writes 72 bytes a
millisecond, so the ring holds 0.9 s of samples for a drain every 100 ms. A record the kernel could not
write is counted in ``lost`` (PERF_RECORD_LOST), never guessed.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from snumap_tui.native.perf_event import PERF_RECORD_LOST, PERF_RECORD_SAMPLE
from snumap_tui.native.perf_ring import PerfRing, gather, split_records_walk

if TYPE_CHECKING:
    from snumap_tui.sources.perf import Group

RING_PAGES = 16
# PERF_SAMPLE_TIME | PERF_SAMPLE_READ with PERF_FORMAT_GROUP | TOTAL_TIME_ENABLED |
# TOTAL_TIME_RUNNING: header(8), time(8), nr(8), time_enabled(8), time_running(8), nr values.
HEAD_WORDS = 5


def record_size(members: int) -> int:
    return 8 * (HEAD_WORDS + members)


def decode(buf: bytes, members: int) -> tuple[np.ndarray, np.ndarray, int]:
    """The samples in BUF (the group's sampling clock's records): times (int64 ns) and a
    matrix [samples, 2 + members] of time_enabled, time_running and the members' counts,
    and the number of records lost. Pure."""
    size = record_size(members)
    n = len(buf) // size
    words = None
    if n and len(buf) == n * size:
        w = np.frombuffer(buf, dtype="<u8").reshape(n, size // 8)
        head = w[:, 0]
        want = np.uint64(PERF_RECORD_SAMPLE | (size << 48))
        if ((head & np.uint64(0xFFFF0000FFFFFFFF)) == want).all() and \
                (w[:, 2] == members).all():
            words = w
    lost = 0
    if words is None:                       # a LOST record or another layout in between
        types, offs, sizes = split_records_walk(buf)
        keep = (types == PERF_RECORD_SAMPLE) & (sizes == size)
        lost_at = offs[types == PERF_RECORD_LOST]
        if len(lost_at):
            lw = np.frombuffer(buf, dtype="<u8")
            lost = int(lw[(lost_at + 16) // 8].sum())     # header, id, then u64 lost
        words = gather(buf, offs[keep], np.dtype([("w", "<u8", (size // 8,))]))["w"]
        words = words.reshape(-1, size // 8)
        words = words[words[:, 2] == members]
    t = words[:, 1].astype(np.int64)
    vals = words[:, 3:].astype(np.float64)
    return t, vals, lost


def interpolate(t: np.ndarray, vals: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """VALS (rows at the increasing times T) linearly interpolated at each GRID time inside
    [T[0], T[-1]]; NaN rows outside. Pure."""
    out = np.full((len(grid), vals.shape[1]), np.nan)
    if len(t) < 2 or not len(grid):
        return out
    inside = (grid >= t[0]) & (grid <= t[-1])
    g = grid[inside]
    hi = np.clip(np.searchsorted(t, g, side="left"), 1, len(t) - 1)
    lo = hi - 1
    span = (t[hi] - t[lo]).astype(np.float64)
    w = np.where(span > 0, (g - t[lo]) / np.where(span > 0, span, 1.0), 0.0)
    out[inside] = vals[lo] + (vals[hi] - vals[lo]) * w[:, None]
    return out


def grid_times(anchor: int, period: int, after: int, before: int) -> np.ndarray:
    """The grid's times (ANCHOR + k PERIOD) more than half a period after AFTER and before
    BEFORE: the samples between two direct reads. Pure."""
    half = period // 2
    k0 = -(-(after + half + 1 - anchor) // period)
    k1 = (before - half - 1 - anchor) // period
    if k1 < k0:
        return np.zeros(0, dtype=np.int64)
    return anchor + period * np.arange(k0, k1 + 1, dtype=np.int64)


@dataclass
class _Ring:
    cpu: int
    group: Group
    ring: PerfRing
    row: int                      # the PU's row in the readings
    cols: np.ndarray              # the group's events' columns in the readings
    t: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    vals: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))


class KernelSampled:
    """The rings of a PerfSource's sampling clocks, turned into readings on a grid."""

    def __init__(self, groups: list[tuple[int, Group]], cpus: list[int], events: list[str],
                 period_ns: int) -> None:
        self.period = int(period_ns)
        self.cpus = np.array(cpus, dtype=np.int64)
        self.events = list(events)
        row = {c: i for i, c in enumerate(cpus)}
        col = {e: j for j, e in enumerate(events)}
        self.rings: list[_Ring] = []
        for cpu, g in groups:
            try:
                ring = PerfRing(g.sampler, RING_PAGES)
            except (OSError, ValueError):
                continue        # over the locked-memory limit: this PU at the sweeps only
            self.rings.append(_Ring(cpu, g, ring, row[cpu],
                                    np.array([col[e] for e in g.events], dtype=np.int64)))
        self.lost = 0
        self.samples = 0
        self.anchor: int | None = None
        self.last_t: int | None = None

    def __bool__(self) -> bool:
        return bool(self.rings)

    def _take(self, r: _Ring) -> None:
        t, vals, lost = decode(r.ring.read(), r.group.members)
        self.lost += lost
        if len(t):
            vals = vals[:, :2 + len(r.group.events)]
            r.t = np.concatenate([r.t, t]) if len(r.t) else t
            r.vals = np.concatenate([r.vals, vals]) if len(r.vals) else vals

    def between(self, t_ns: int, reading: dict[str, Any], read_ns: np.ndarray | None = None
                ) -> tuple[list[tuple[int, dict[str, Any]]], dict[str, Any] | None]:
        """The readings on the grid since the last sweep, and the reading at the sweep's
        time T_NS itself, given the sweep's direct read READING (``PerfSource.read()``) and
        when each PU's groups were read (READ_NS, its rows; T_NS for all when None: a PU
        read a few ms into the sweep of a large node would otherwise be taken for its
        state at the sweep's start). The first call only anchors the grid."""
        direct = _direct(reading, self.cpus, self.events)
        out: list[tuple[int, dict[str, Any]]] = []
        grid = np.zeros(0, dtype=np.int64)
        if self.anchor is None:
            self.anchor = t_ns
        elif self.last_t is not None:
            grid = grid_times(self.anchor, self.period, self.last_t, t_ns)
        times = np.append(grid, np.int64(t_ns))          # the grid, then the sweep's time
        k = len(self.events)
        shape = (len(times), len(self.cpus), k)
        value, enabled, running = (np.full(shape, np.nan) for _ in range(3))
        for r in self.rings:
            self._take(r)
            if direct is not None:
                # the direct read: the right bracket of the last grid times and of the
                # sweep's, and the left one of the next
                v, e, n = (a[r.row, r.cols] for a in direct)
                if len(v) and not (np.isnan(v).any() or np.isnan(e).any()
                                   or np.isnan(n).any()):
                    at_ns = t_ns if read_ns is None else int(read_ns[r.row])
                    row = np.concatenate([[e.max()], [n.max()], v])
                    at = int(np.searchsorted(r.t, at_ns)) if len(r.t) else 0
                    r.t = np.insert(r.t, at, at_ns) if len(r.t) else np.array([at_ns])
                    r.vals = np.insert(r.vals, at, row, axis=0) if len(r.vals) \
                        else row[None, :]
            got = interpolate(r.t, r.vals, times)
            enabled[:, r.row, r.cols] = got[:, :1]
            running[:, r.row, r.cols] = got[:, 1:2]
            value[:, r.row, r.cols] = got[:, 2:]
            # keep from the last point at or before T_NS on: the next grid's left bracket
            keep = max(0, int(np.searchsorted(r.t, t_ns, side="right")) - 1)
            r.t, r.vals = r.t[keep:], r.vals[keep:]
        # one PU list and event list for all of them (the readings are only encoded); the
        # enabled and running times only when some group was multiplexed meanwhile (running
        # short of enabled): otherwise they scale nothing (derive() takes the counts as
        # they are when a sample has none), and they were a third of the encoding at 1 ms
        cpus, events = self.cpus, self.events
        filled = ~np.isnan(value).all(axis=(1, 2))
        scaled = not np.array_equal(enabled[:-1], running[:-1], equal_nan=True)
        for i, g in enumerate(grid.tolist()):
            if filled[i]:
                row_of: dict[str, Any] = {"cpus": cpus, "events": events, "value": value[i]}
                if scaled:
                    row_of["enabled"], row_of["running"] = enabled[i], running[i]
                out.append((g, row_of))
        self.samples += len(out)
        self.last_t = t_ns
        at_sweep = None
        if direct is not None and filled[-1]:
            # the sweep's own reading at its time, from the brackets around it; a PU
            # without them keeps its direct read
            at_sweep = dict(reading)
            for name, arr, d in (("value", value, direct[0]), ("enabled", enabled, direct[1]),
                                 ("running", running, direct[2])):
                at_sweep[name] = np.where(np.isnan(arr[-1]), d, arr[-1])
        return out, at_sweep

    def close(self) -> None:
        for r in self.rings:
            with contextlib.suppress(BufferError, OSError):
                r.ring.close()
        self.rings = []


def _direct(reading: dict[str, Any], cpus: np.ndarray, events: list[str]
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The direct read's value, enabled and running matrices in the grid's rows and columns
    (None when it is not the same PUs and events)."""
    if not reading or list(reading.get("events", ())) != events:
        return None
    if not np.array_equal(np.asarray(reading.get("cpus")), cpus):
        return None
    return (np.asarray(reading["value"], dtype=np.float64),
            np.asarray(reading["enabled"], dtype=np.float64),
            np.asarray(reading["running"], dtype=np.float64))


__all__ = ["KernelSampled", "decode", "grid_times", "interpolate", "record_size"]
