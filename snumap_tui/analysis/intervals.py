"""Run intervals per CPU, built from scheduling events in bulk.

An interval is "tid ran on this CPU from start to end": from a sched_switch that switched it in
to the next sched_switch on the same CPU. Idle (tid 0, the per-CPU "swapper/N") is not stored:
the gaps between intervals are idle time. Intervals are kept per CPU in three parallel arrays
(start int64 ns, end int64 ns, tid int32: 20 bytes per interval) so that a 10-million-event
recording fits in a few hundred megabytes and a CPU's intervals are sorted and never overlap,
which the binning relies on (``searchsorted`` over ``end``).

Events arrive in time windows (``IntervalBuilder.feed``) so a recording never has to be held in
memory whole; the builder carries each CPU's last switch across windows.

Tasks outside the traced tree (switch partners the tracer marked ``OUTSIDE``, events.py) run
as the one pseudo-task ``UNTRACED`` (tid -2): "other (not traced)" time, never a task's.

Edges of the recording: the first switch seen on a CPU says who ran before it (its prev tid);
that partial interval starts at the recording's start. The last switch's next tid runs until
the recording's end.

Switch-ins the kernel did not trace (events.py: arg -1, inferred from the latest evidence
that the task was not running; arg -2, seen where the switch completed) start intervals like
any other; the run time of those started by an inferred one is summed per tid
(``Intervals.inferred_ns``), so a report can say how much of a task's time rests on them.

/proc-polled recordings carry RUN events ("tid ran arg ns on cpu, ending at t"): the polled CPU
time is laid out back to back before t on that CPU, so threads sharing a CPU in one polling
interval do not overlap. This is approximate and marked so (``Intervals.approximate``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from snumap_tui.trace.events import DENSE_TID_MAX, INFERRED_SWITCH_IN, OUTSIDE, RUN, SWITCH

# The tid of run intervals of work outside the traced tree (a recording of a command, not
# --system-wide): switch partners marked ``OUTSIDE`` by the tracer, all counted as one "other".
UNTRACED = -2

# The columns RUN events need (the store can decode just the columns asked for).
_RUN_FIELDS = ("t_ns", "cpu", "tid", "pid", "arg")
INTERVAL_FIELDS = ("t_ns", "cpu", "kind", "tid", "tid2", "pid", "pid2", "arg")
INTERVAL_FIELDS_LEAN = ("t_ns", "cpu", "kind", "tid2", "pid2")


@dataclass
class Intervals:
    """Run intervals per CPU. ``cpus`` are OS indexes; row i of the per-CPU lists is cpus[i]."""

    cpus: np.ndarray
    start: list[np.ndarray]
    end: list[np.ndarray]
    tid: list[np.ndarray]
    t0: int
    t1: int
    approximate: bool = False
    pid_of_tid: dict[int, int] = field(default_factory=dict)
    # tid -> ns of run time in intervals an inferred switch-in started (see above)
    inferred_ns: dict[int, int] = field(default_factory=dict)
    _cum: dict[int, np.ndarray] = field(default_factory=dict, repr=False)

    def cum(self, r: int) -> np.ndarray:
        """Row r's busy-time prefix sum (len n + 1), built on first use and kept: 8 bytes per
        interval buys utilisation over any range in one searchsorted per row."""
        c = self._cum.get(r)
        if c is None:
            c = np.zeros(len(self.start[r]) + 1, dtype=np.int64)
            np.cumsum(self.end[r] - self.start[r], out=c[1:])
            self._cum[r] = c
        return c

    def row(self, cpu: int) -> int:
        """Row of a CPU OS index; KeyError if it is not in the recording."""
        idx = int(np.searchsorted(self.cpus, cpu))
        if idx >= len(self.cpus) or int(self.cpus[idx]) != cpu:
            raise KeyError(cpu)
        return idx

    def __len__(self) -> int:
        return int(sum(len(s) for s in self.start))

    @property
    def nbytes(self) -> int:
        return int(sum(a.nbytes for arrs in (self.start, self.end, self.tid) for a in arrs))

    def flat(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """All intervals as (cpu, start, end, tid) arrays, ordered by CPU then time. Allocates:
        for the report, not the replay's hot path."""
        cpu = np.repeat(self.cpus.astype(np.int64), [len(s) for s in self.start])
        cat = (lambda arrs, dt: np.concatenate(arrs) if arrs else np.zeros(0, dt))
        return (cpu, cat(self.start, np.int64), cat(self.end, np.int64),
                cat(self.tid, np.int32))

    def busy_ns(self) -> np.ndarray:
        """Busy time per CPU row (ns): the last of each row's prefix sum (``cum``), which
        later busy-time lookups then reuse."""
        return np.array([int(self.cum(r)[-1]) for r in range(len(self.start))],
                        dtype=np.int64)

    def pids(self, tids: np.ndarray) -> np.ndarray:
        """Process id (tgid) of each tid, -1 when unknown."""
        if not self.pid_of_tid:
            return np.full(len(tids), -1, dtype=np.int64)
        keys = np.fromiter(self.pid_of_tid.keys(), dtype=np.int64, count=len(self.pid_of_tid))
        vals = np.fromiter(self.pid_of_tid.values(), dtype=np.int64, count=len(keys))
        order = np.argsort(keys)
        keys, vals = keys[order], vals[order]
        pos = np.clip(np.searchsorted(keys, tids), 0, len(keys) - 1)
        return np.where(keys[pos] == tids, vals[pos], -1)


def untraced_as_other(tids: np.ndarray, pids: np.ndarray) -> np.ndarray:
    """TIDS with the tasks their PIDS mark outside the traced tree (``OUTSIDE``) replaced by
    ``UNTRACED``: one "other" task for all of them."""
    out = pids == OUTSIDE
    if not out.any():
        return tids
    return np.where(out, UNTRACED, tids).astype(tids.dtype, copy=False)


def busy_before(start: np.ndarray, end: np.ndarray, x: np.ndarray,
                cum: np.ndarray | None = None) -> np.ndarray:
    """Busy ns before each time x on one CPU row (sorted, non-overlapping intervals): a prefix
    sum and one searchsorted, so a window's busy time is busy_before(t1) - busy_before(t0).
    ``cum`` is the row's prefix sum if the caller keeps one (``Intervals.cum``)."""
    if not len(start):
        return np.zeros(len(x), dtype=np.int64)
    if cum is None:
        cum = np.concatenate([[0], np.cumsum(end - start)])
    # Computed in place (a window per waiting thread makes x long). Before the row's first
    # start, prev is 0: the overlap clips to 0 and cum[0] is 0.
    prev = np.searchsorted(start, x, "right")
    prev -= 1
    np.maximum(prev, 0, out=prev)
    s = start[prev]
    inside = x - s
    np.maximum(inside, 0, out=inside)
    np.minimum(inside, end[prev] - s, out=inside)
    inside += cum[prev]
    return inside


class IntervalBuilder:
    """Turns windows of EVENT_DTYPE arrays (in time order per CPU) into ``Intervals``."""

    def __init__(self, cpus: np.ndarray | list[int], t0: int) -> None:
        self.cpus = np.unique(np.asarray(cpus, dtype=np.int64))
        self.t0 = int(t0)
        size = int(self.cpus.max()) + 1 if len(self.cpus) else 1
        # A dense cpu -> row table, unless a (crafted) topology names a PU whose number would
        # make it huge: then a binary search over the sorted cpus.
        self._row_of: np.ndarray | None = None
        if size <= 1 << 20:
            self._row_of = np.full(size, -1, dtype=np.int64)
            self._row_of[self.cpus] = np.arange(len(self.cpus))
        n = len(self.cpus)
        self._last_t = np.full(n, -1, dtype=np.int64)      # last switch time, -1 = none yet
        self._last_tid = np.zeros(n, dtype=np.int32)       # who it switched in
        self._last_inferred = np.zeros(n, dtype=bool)      # ... by an inferred switch-in
        self.inferred_ns: dict[int, int] = {}
        self._run_last_t = np.full(n, self.t0, dtype=np.int64)   # RUN: end of last poll
        # Each row's own span (a job merged from nodes: a CPU's node started and ended its
        # recording at its own times); the recording's t0 and t1 unless set_row_spans says.
        self._row_t0 = np.full(n, self.t0, dtype=np.int64)
        self._row_t1: np.ndarray | None = None
        # Blocks of intervals as appended (each ordered by row, then time within a row): kept
        # whole and sorted by row once in finish(), not split per CPU per window.
        # One list per column: row, start, end, tid.
        self._blocks: tuple[list[np.ndarray], ...] = ([], [], [], [])
        self._row_dtype = np.uint16 if n < 65536 else np.int64
        self._pid_lut = np.full(1 << 16, -1, dtype=np.int32)     # tid -> tgid
        self._pid_big: dict[int, int] = {}     # tid -> tgid of tids beyond the table
        self.approximate = False
        self.events = 0
        # Called with each new block of intervals (rows, starts, ends, tids) in time order of
        # their starts, for statistics that stream (analysis/streamstats.py).
        self.on_intervals: Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
                                    None] | None = None

    def rows(self, cpu: np.ndarray) -> np.ndarray:
        """Row of each CPU OS index, -1 for a CPU not in the recording."""
        c = cpu.astype(np.int64)
        if self._row_of is None:
            pos = np.searchsorted(self.cpus, c).clip(0, max(len(self.cpus) - 1, 0))
            if not len(self.cpus):
                return np.full(len(c), -1, dtype=np.int64)
            return np.where(self.cpus[pos] == c, pos, -1)
        ok = c < len(self._row_of)
        rows = np.full(len(c), -1, dtype=np.int64)
        rows[ok] = self._row_of[c[ok]]
        return rows

    def set_row_spans(self, t0: np.ndarray, t1: np.ndarray) -> None:
        """Per-row start and end (in ``self.cpus`` order), before the first ``feed``: a
        CPU's first interval starts no earlier, its last ends no later, so streamed statistics
        see the same intervals as ``finish`` returns."""
        self._row_t0 = np.maximum(np.asarray(t0, dtype=np.int64), self.t0)
        self._run_last_t = self._row_t0.copy()
        self._row_t1 = np.asarray(t1, dtype=np.int64)

    @property
    def needs_prev(self) -> bool:
        """Whether the next windows still need the prev-task columns (tid, pid): until every
        CPU has had a switch (its partial first interval) and for /proc-polled RUN events.
        Once False, a reader may decode only INTERVAL_FIELDS_LEAN."""
        return self.approximate or bool((self._last_t < 0).any())

    def feed(self, ev: Mapping[str, np.ndarray] | np.ndarray) -> None:
        """Add one window of events: an EVENT_DTYPE array or a dict of its columns (what the
        store's ``iter_event_columns`` yields). Only SWITCH and RUN events make intervals."""
        kind = ev["kind"]
        self.events += len(kind)
        sw = np.flatnonzero(kind == SWITCH)
        if len(sw):
            self._feed_switches(ev, sw)
        run = kind == RUN
        if run.any():
            self.approximate = True
            self._feed_runs({f: ev[f][run] for f in _RUN_FIELDS})

    def _remember_pids(self, tids: np.ndarray, pids: np.ndarray) -> None:
        """tid -> tgid as the events tell it, in a lookup table indexed by tid (a scatter per
        window; tids are below the kernel's pid_max, at most 4 M, so the table stays small).
        Larger ids (merged jobs' qualified ids, a crafted file's 2^31-1) go to a dict."""
        ok = (pids >= 0) & (tids > 0)
        if not ok.all():
            tids, pids = tids[ok], pids[ok]
        big = tids >= DENSE_TID_MAX
        if big.any():
            self._pid_big.update(zip(tids[big].tolist(), pids[big].tolist()))
            tids, pids = tids[~big], pids[~big]
        if not len(tids):
            return
        top = int(tids.max())
        if top >= len(self._pid_lut):
            grown = np.full(min(max(top + 1, 2 * len(self._pid_lut)), DENSE_TID_MAX), -1,
                            dtype=np.int32)
            grown[:len(self._pid_lut)] = self._pid_lut
            self._pid_lut = grown
        self._pid_lut[tids] = pids

    def _feed_switches(self, ev: Mapping[str, np.ndarray] | np.ndarray, idx: np.ndarray) -> None:
        rows = self.rows(ev["cpu"][idx])
        keep = rows >= 0
        if not keep.all():
            idx, rows = idx[keep], rows[keep]
            if not len(idx):       # every switch on a CPU the topology does not have
                return
        nxt_all = ev["tid2"][idx]
        pid2 = ev["pid2"][idx]
        self._remember_pids(nxt_all, pid2)
        nxt_all = untraced_as_other(nxt_all, pid2)
        # Stable sort by row keeps each CPU's time order (radix sort on 16-bit keys).
        key = rows.astype(np.uint16) if len(self.cpus) < 65536 else rows
        order = np.argsort(key, kind="stable")
        rows = rows[order]
        t = ev["t_ns"][idx[order]].view(np.int64)
        nxt = nxt_all[order]
        first = np.ones(len(rows), dtype=bool)
        first[1:] = rows[1:] != rows[:-1]
        fi = np.flatnonzero(first)
        fr = rows[fi]
        # Before each CPU's first switch of this window, a virtual switch-in: the carried one
        # from the previous window, or the partial interval from the recording's start of the
        # task the first switch switched out (its prev tid). That makes one interval per CPU
        # (virtual switch-in to first switch), appended before the window's other intervals
        # (consecutive switches on one CPU), which finish()'s stable sort by row keeps in order.
        had = self._last_t[fr] >= 0
        if had.all():
            prev_first = np.zeros(len(fi), dtype=np.int32)
        else:
            first_src = idx[order[fi]]
            prev_first = ev["tid"][first_src]
            self._remember_pids(prev_first, ev["pid"][first_src])
            prev_first = untraced_as_other(prev_first, ev["pid"][first_src])
        vt = np.where(had, self._last_t[fr], self._row_t0[fr])
        vtid = np.where(had, self._last_tid[fr], prev_first).astype(np.int32)
        ok = (vtid != 0) & (t[fi] > vt)
        virtual = (fr[ok], vt[ok], t[fi][ok], vtid[ok])
        self._append(*virtual)
        # Readers that decode the lean columns have no arg: nothing is marked then.
        names = getattr(ev, "dtype", None)
        has_arg = "arg" in (names.names or () if names is not None else ev)
        inferred = ev["arg"][idx[order]] == INFERRED_SWITCH_IN if has_arg else None
        if inferred is not None:
            vin = self._last_inferred[fr] & had
            self._count_inferred(virtual[3][vin[ok]], virtual[2][vin[ok]] - virtual[1][vin[ok]])
        last = np.flatnonzero(np.append(first[1:], True))     # each row's last switch
        self._last_t[rows[last]] = t[last]
        self._last_tid[rows[last]] = nxt[last]
        self._last_inferred[rows[last]] = inferred[last] if inferred is not None else False
        ok = ~first[1:]
        ok &= nxt[:-1] != 0
        ok &= t[1:] > t[:-1]
        sel = np.flatnonzero(ok)
        self._append(rows[sel], t[sel], t[sel + 1], nxt[sel].astype(np.int32, copy=False))
        if inferred is not None:
            m = sel[inferred[sel]]
            self._count_inferred(nxt[m], t[m + 1] - t[m])
        if self.on_intervals is not None:
            # Virtual intervals started before this window (by their starts), then this
            # window's by the position of their starting switch, which is time order.
            vo = np.argsort(virtual[1], kind="stable")
            rank = np.full(len(order), -1, dtype=np.int64)
            rank[order[sel]] = np.arange(len(sel))
            w = sel[rank[rank >= 0]]
            self.on_intervals(np.concatenate([virtual[0][vo], rows[w]]),
                              np.concatenate([virtual[1][vo], t[w]]),
                              np.concatenate([virtual[2][vo], t[w + 1]]),
                              np.concatenate([virtual[3][vo], nxt[w]]))

    def _count_inferred(self, tids: np.ndarray, ns: np.ndarray) -> None:
        """Add the run time NS of intervals of TIDS an inferred switch-in started."""
        for tid, d in zip(tids.tolist(), ns.tolist()):
            self.inferred_ns[tid] = self.inferred_ns.get(tid, 0) + int(d)

    def _append(self, rows: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                tids: np.ndarray) -> None:
        """Keep a block of intervals ordered by row (and by time within a row)."""
        if len(rows):
            for lst, a, dt in zip(self._blocks, (rows, starts, ends, tids),
                                  (self._row_dtype, np.int64, np.int64, np.int32)):
                lst.append(a.astype(dt, copy=False))

    def _feed_runs(self, run: dict[str, np.ndarray]) -> None:
        rows = self.rows(run["cpu"])
        keep = (rows >= 0) & (run["tid"] != 0)
        run, rows = {f: a[keep] for f, a in run.items()}, rows[keep]
        self._remember_pids(run["tid"], run["pid"])
        t = run["t_ns"].astype(np.int64)
        order = np.lexsort((run["tid"], t, rows))
        rows, t, dur, tid = rows[order], t[order], run["arg"][order].astype(np.int64), \
            run["tid"][order]
        dur = np.maximum(dur, 0)
        newg = np.ones(len(rows), dtype=bool)
        newg[1:] = (rows[1:] != rows[:-1]) | (t[1:] != t[:-1])
        gstart = np.flatnonzero(newg)
        gid = np.cumsum(newg) - 1
        csum = np.cumsum(dur)
        before = (csum - dur)[gstart][gid]         # run time laid before this one in its group
        end = t - (csum - dur - before)
        start = end - dur
        # No earlier than the previous poll on the same CPU (carried across windows).
        prev_t = np.empty(len(gstart), dtype=np.int64)
        grow = rows[gstart]
        firstrow = np.ones(len(gstart), dtype=bool)
        firstrow[1:] = grow[1:] != grow[:-1]
        prev_t[1:] = t[gstart][:-1]
        prev_t[firstrow] = self._run_last_t[grow[firstrow]]
        floor = prev_t[gid]
        start = np.maximum(start, floor)
        end = np.maximum(end, start)
        lastrow = np.ones(len(gstart), dtype=bool)
        lastrow[:-1] = firstrow[1:]
        self._run_last_t[grow[lastrow]] = t[gstart][lastrow]
        ok = end > start
        self._append(rows[ok], start[ok], end[ok], tid[ok].astype(np.int32))
        self._emit_sorted(rows[ok], start[ok], end[ok], tid[ok])

    def _emit_sorted(self, rows: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                     tids: np.ndarray) -> None:
        if self.on_intervals is not None and len(rows):
            o = np.argsort(starts, kind="stable")
            self.on_intervals(rows[o], starts[o], ends[o], tids[o])

    def _by_row(self) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
        """The appended blocks as per-row (start, end, tid) arrays. Each block is ordered by
        row, so no sort is needed: a count per row per block places each block's run of a row
        after the earlier blocks' runs of it (what a stable sort by row would do), and each
        column is scattered into place one block at a time, the blocks dropped as they go (the
        peak is the blocks plus one column)."""
        blocks, self._blocks = self._blocks, ([], [], [], [])
        n = len(self.cpus)
        row_parts = [r if _ascending(r) else self._sorted_block(r, blocks, b)
                     for b, r in enumerate(blocks[0])]
        counts = np.zeros((len(row_parts), n), dtype=np.int64)
        for b, r in enumerate(row_parts):
            counts[b] = np.bincount(r, minlength=n)[:n]
        bounds = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts.sum(axis=0), out=bounds[1:])
        # Block b's first interval of row r goes to bounds[r] + the earlier blocks' count of r;
        # it sits in the block after the block's intervals of the rows before r.
        shift = bounds[:n] + (np.cumsum(counts, axis=0) - counts) \
            - (np.cumsum(counts, axis=1) - counts)
        del row_parts
        cols: list[list[np.ndarray]] = []
        for parts, dt in zip(blocks[1:], (np.int64, np.int64, np.int32)):
            flat = np.empty(int(bounds[n]), dtype=dt)
            for b in range(len(parts)):
                dest = np.repeat(shift[b], counts[b])
                dest += np.arange(len(dest))
                flat[dest] = parts[b]
                parts[b] = flat[:0]          # dropped: the peak stays one column
            parts.clear()
            cols.append([flat[bounds[i]:bounds[i + 1]] for i in range(n)])
        return cols[0], cols[1], cols[2]

    @staticmethod
    def _sorted_block(rows: np.ndarray, blocks: tuple[list[np.ndarray], ...],
                      b: int) -> np.ndarray:
        """Block b ordered by row (stable), in place in ``blocks``: every block is appended
        ordered, so this is a guard, not a path."""
        o = np.argsort(rows, kind="stable")
        for parts in blocks[1:]:
            parts[b] = parts[b][o]
        return rows[o]

    def finish(self, t1: int) -> Intervals:
        """Close the last interval of each CPU at the recording's end."""
        end = np.full(len(self.cpus), int(t1), dtype=np.int64)
        if self._row_t1 is not None:
            end = np.minimum(end, self._row_t1)
        has = (self._last_t >= 0) & (self._last_tid != 0) & (self._last_t < end)
        r = np.flatnonzero(has)
        closing = (r, self._last_t[r], end[r], self._last_tid[r].astype(np.int32))
        self._append(*closing)
        cin = self._last_inferred[r]
        self._count_inferred(closing[3][cin], (closing[2] - closing[1])[cin])
        self._emit_sorted(*closing)
        self._last_t[r] = end[r]
        starts, ends, tids = self._by_row()
        for i, st in enumerate(starts):
            if len(st) > 1 and (np.diff(st) < 0).any():     # RUN intervals laid out late
                o = np.argsort(st, kind="stable")
                starts[i], ends[i], tids[i] = st[o], ends[i][o], tids[i][o]
        known = np.flatnonzero(self._pid_lut >= 0)
        pids = dict(zip(known.tolist(), self._pid_lut[known].tolist()))
        pids.update(self._pid_big)
        return Intervals(self.cpus, starts, ends, tids, self.t0, int(t1), self.approximate, pids,
                         dict(self.inferred_ns))


def _ascending(a: np.ndarray) -> bool:
    return len(a) < 2 or bool((a[1:] >= a[:-1]).all())


def build_intervals(events: np.ndarray, cpus: np.ndarray | list[int], t0: int,
                    t1: int) -> Intervals:
    """Intervals from one array of events (tests, small recordings)."""
    b = IntervalBuilder(cpus, t0)
    b.feed(events)
    return b.finish(t1)
