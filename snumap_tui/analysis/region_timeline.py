"""Run intervals coloured by region, for the core-vs-time view's "by region" mode.

Each thread's time is cut into segments by the innermost region it is in (a barrier inside a
parallel region's body inside the master's GOMP_parallel span); each run interval on a PU is
then cut at those segments' edges, and a piece takes its segment's key: 1 + the index of the
region's name in ``names``, or ``SERIAL`` (0) outside any region. A thread whose part of a
parallel region is done while the region is still open (the closing barrier: the report's
waiting time) is in the region's wait key (``wait_key``), drawn as waiting in its colour.
Calls the kernel summed (critical sections: no record a call, ``Regions.sums``) are drawn
from each summary's first entry to its last return in a summed key (``summed_key``) whose
level says how much of that stretch the thread spent inside (the summary's time inside over
its span: a density, hatched lighter to denser), so a phase that waits in a critical section
does not draw as the region's solid colour. Pieces of work outside the traced tree keep their
negative tid, so the view shows them as "other" as in the other modes; ``tids`` keeps who ran
each piece, for the typed filter. An instance open at the recording's start or end counts
clipped to it, as in the report (``regions.instances``): its thread's time up to the edge is
the region's, and ``clipped`` marks its region "<" (entered before the recording began) or ">"
(still inside when it ended).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from snumap_tui.analysis.intervals import Intervals
from snumap_tui.analysis.regions import Instances, closing_barriers, instances
from snumap_tui.store.regions import Regions
from snumap_tui.trace.region_catalog import BEGIN, MARK

SERIAL = 0


@dataclass
class RegionTimeline:
    intervals: Intervals                      # tid column holds the region key
    names: list[str]                          # key k >= 1 is names[k - 1]
    wait: set[int] = field(default_factory=set)       # keys drawn as waiting (┄)
    marks: list[tuple[int, str]] = field(default_factory=list)   # user marker ticks
    tids: list[np.ndarray] = field(default_factory=list)   # per row: who ran each piece
    summed: dict[int, int] = field(default_factory=dict)  # summed keys: their density level
    clipped: dict[int, str] = field(default_factory=dict)  # region key: "<", ">" or "<>"
    # per tid: its innermost-region segments (``thread_segments``), which the counter figures
    # read again: kept, not made again from the recording's regions
    segments: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict)

    def key_name(self, key: int) -> str:
        """A region's name; a wait or summed key (``wait_key``, ``summed_key``) is its
        region's name."""
        if key == SERIAL:
            return "no region"
        n = len(self.names)
        return self.names[self.base(key) - 1] if 1 <= key <= (2 + DENSITY_LEVELS) * n else "?"

    def base(self, key: int) -> int:
        """The region key of ``key``: itself, or the region a wait or summed key is of."""
        n = len(self.names)
        return (key - 1) % n + 1 if n and key > n else key

    def clip_mark(self, key: int) -> str:
        """"<" when an instance of ``key``'s region was open at the recording's start, ">"
        at its end (both: "<>"), "" when none."""
        return self.clipped.get(self.base(key), "") if key > SERIAL else ""


def wait_key(key: np.ndarray | int, n_names: int) -> np.ndarray | int:
    """The key of the time a thread waits at the end of region ``key`` (its body done, the
    region still open): drawn as waiting, in the region's colour."""
    return key + n_names


DENSITY_LEVELS = 3     # summed stretches: < 1/3, < 2/3, >= 2/3 of the time inside


def summed_key(key: np.ndarray | int, level: np.ndarray | int, n_names: int
               ) -> np.ndarray | int:
    """The key of a stretch of calls of region ``key`` summed in the kernel whose time inside
    is at density LEVEL (1 ... DENSITY_LEVELS) of the stretch."""
    return key + n_names * (1 + level)


def _none() -> Instances:
    z = np.zeros(0, np.int64)
    return Instances(z, z, z, z, z)


def summed_pieces(reg: Regions, key_of_rid: np.ndarray, n_names: int) -> Instances:
    """The kernel's summaries as instances (rid column: their summed key) per thread: first
    entry to last return, keyed by how much of it the thread was inside."""
    s = reg.sums[reg.sums["count"] > 0] if len(reg.sums) else reg.sums
    s = s[s["t_last"] > s["t_first"]] if len(s) else s
    if not len(s):
        return _none()
    st, en = s["t_first"].astype(np.int64), s["t_last"].astype(np.int64)
    dens = s["sum_ns"].astype(np.float64) / (en - st)
    level = np.clip((dens * DENSITY_LEVELS).astype(np.int64) + 1, 1, DENSITY_LEVELS)
    key = summed_key(key_of_rid[s["rid"].astype(np.int64)], level, n_names)
    return Instances(np.asarray(key, np.int64), s["tid"].astype(np.int64),
                     s["pid"].astype(np.int64), st, en)


def edges(*times: np.ndarray) -> np.ndarray:
    """The distinct times of these arrays, sorted: one sort and a neighbour compare
    (np.unique's hash-based path took 0.35 s for 400,000 times here, this 0.03 s)."""
    pts = np.sort(np.concatenate(times))
    return pts[np.concatenate(([True], pts[1:] != pts[:-1]))] if len(pts) else pts


def last_open(s: np.ndarray, e: np.ndarray, t: np.ndarray) -> np.ndarray:
    """For each time ``t[q]``: the largest index j with ``s[j] <= t[q] < e[j]`` (-1: none),
    for intervals sorted by start (any overlaps: nested, disjoint or crossing).

    Binary lifting over a sparse table of running maxima of the ends: ``top[k][j]`` is the
    latest end among intervals j-2^k+1..j. From the last interval started by t, whole blocks
    of intervals that all ended by t are skipped, the largest block first, so a query costs
    log2(n) vectorised steps whatever the number of finished intervals in between (a parallel
    region holding thousands of finished critical sections)."""
    n = len(s)
    pos = np.searchsorted(s, t, "right") - 1
    if not n or not len(t):
        return pos
    top = [e]
    while (1 << len(top)) <= n:
        k = len(top) - 1
        prev = top[k]
        step = 1 << k
        nxt = prev.copy()
        nxt[step:] = np.maximum(prev[step:], prev[:-step])
        top.append(nxt)
    for k in range(len(top) - 1, -1, -1):
        step = 1 << k
        ok = pos - step + 1 >= 0
        pc = np.clip(pos, 0, n - 1)
        skip = ok & (top[k][pc] <= t)
        pos = np.where(skip, pos - step, pos)
    found = pos >= 0
    found[found] = e[pos[found]] > t[found]
    return np.where(found, pos, -1)


def end_waits(inst: Instances, key_of_rid: np.ndarray, reg: Regions, n_names: int) -> Instances:
    """Per parallel region's body: the time from its end to the end of the span it ran in,
    as an instance of the region's wait key (rid column). The report counts this time as the
    thread's waiting in the region (``closing_barriers``); a thread spinning there
    (OMP_WAIT_POLICY=active) is the region's, not serial work."""
    role = np.array([n.role for n in reg.names] or ["-"])
    key = key_of_rid[inst.rid]
    span = np.flatnonzero(role[inst.rid] == "span")
    body = np.flatnonzero(role[inst.rid] == "body")
    out: list[tuple[np.ndarray, ...]] = []
    for k in np.unique(key[span]).tolist():
        bo, span_end = closing_barriers(inst, span[key[span] == k], body[key[body] == k])
        w = span_end > inst.end[bo]
        bo = bo[w]
        out.append((np.full(len(bo), wait_key(k, n_names), np.int64), inst.tid[bo],
                    inst.pid[bo], inst.end[bo], span_end[w]))
    if not out:
        z = np.zeros(0, np.int64)
        return Instances(z, z, z, z, z)
    return Instances(*(np.concatenate(c) for c in zip(*out)))


Segments = dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]


def thread_segments(reg: Regions, bounds: tuple[int, int] | None = None
                    ) -> tuple[Segments, list[str], set[int]]:
    """Per tid: (start, end, key) of its innermost-region segments, non-overlapping, sorted;
    the region names (key k is names[k - 1]) and the keys drawn as waiting. BOUNDS: the
    recording's (start, end), to which instances open at either are clipped."""
    segs, names, wait, _clipped = _segments(reg, bounds)
    return segs, names, wait


def _segments(reg: Regions, bounds: tuple[int, int] | None
              ) -> tuple[Segments, list[str], set[int], dict[int, str]]:
    """``thread_segments`` and per region key its clip mark (``RegionTimeline.clipped``)."""
    inst, cut = instances(reg.rows, bounds)
    names: list[str] = []
    index: dict[str, int] = {}
    wait_names: set[int] = set()
    key_of_rid = np.zeros(max(len(reg.names), 1), np.int64)
    for rid, n in enumerate(reg.names):
        if n.name not in index:
            index[n.name] = len(names)
            names.append(n.name)
        key_of_rid[rid] = index[n.name] + 1
        if n.wait:
            wait_names.add(index[n.name] + 1)
    nn = len(names)
    wait = wait_names | {int(wait_key(k, nn)) for k in range(1, nn + 1)}
    clipped: dict[int, str] = {}
    for k, c in set(zip(key_of_rid[inst.rid[cut != 0]].tolist(), cut[cut != 0].tolist())):
        clipped[k] = "".join(sorted(clipped.get(k, "") + ("<" if c < 0 else ">")))
    out: Segments = {}
    sp = summed_pieces(reg, key_of_rid, nn)
    if not len(inst) and not len(sp):
        return out, names, wait, clipped
    ew = end_waits(inst, key_of_rid, reg, nn) if len(inst) else _none()
    tid = np.concatenate([inst.tid, ew.tid, sp.tid])
    st = np.concatenate([inst.start, ew.start, sp.start])
    en = np.concatenate([inst.end, ew.end, sp.end])
    key = np.concatenate([key_of_rid[inst.rid], ew.rid, sp.rid])
    order = np.lexsort((st, tid))
    tid, st, en, key = tid[order], st[order], en[order], key[order]
    cuts = np.flatnonzero(np.diff(tid)) + 1
    for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), len(tid)]):
        # Every instance edge is a boundary; in each elementary piece the latest-started
        # instance still open is the innermost one.
        s, e, k = st[a:b], en[a:b], key[a:b]
        pts = edges(s, e)
        ps, pe = pts[:-1], pts[1:]
        if not len(ps):
            continue
        best = last_open(s, e, (ps + pe) // 2)
        keep = best >= 0
        out[int(tid[a])] = (ps[keep], pe[keep], k[best[keep]])
    return out, names, wait, clipped


def region_timeline(iv: Intervals, reg: Regions) -> RegionTimeline | None:
    """The run intervals cut and keyed by region (None when the recording has no regions)."""
    if not len(reg) and not len(reg.sums):
        return None
    segs, names, wait, clipped = _segments(reg, (iv.t0, iv.t1))
    starts, ends, keys, owners = [], [], [], []
    for r in range(len(iv.cpus)):
        s, e, t = iv.start[r], iv.end[r], iv.tid[r].astype(np.int64)
        ps, pe, pk, pt = [s[t < 0]], [e[t < 0]], [t[t < 0]], [t[t < 0]]
        seen = np.unique(t[t >= 0])
        for tid in seen.tolist():
            m = t == tid
            S, E = s[m], e[m]
            seg = segs.get(int(tid))
            if seg is None or not len(seg[0]):     # none, or only instances of no length
                ps.append(S)
                pe.append(E)
                pk.append(np.full(len(S), SERIAL, np.int64))
                pt.append(np.full(len(S), tid, np.int64))
                continue
            gs, ge, gk = seg
            pts = edges(S, E, gs, ge)
            a, b = pts[:-1], pts[1:]
            mid = (a + b) // 2
            i = np.searchsorted(S, mid, "right") - 1
            run = (i >= 0) & (E[np.clip(i, 0, len(E) - 1)] > mid)
            g = np.searchsorted(gs, mid, "right") - 1
            gc = np.clip(g, 0, len(ge) - 1)
            inside = (g >= 0) & (ge[gc] > mid)
            k = np.where(inside, gk[gc], SERIAL)
            ps.append(a[run])
            pe.append(b[run])
            pk.append(k[run])
            pt.append(np.full(int(run.sum()), tid, np.int64))
        S2, E2, K2 = np.concatenate(ps), np.concatenate(pe), np.concatenate(pk)
        o = np.argsort(S2, kind="stable")
        starts.append(S2[o].astype(np.int64))
        ends.append(E2[o].astype(np.int64))
        keys.append(K2[o].astype(np.int32))
        owners.append(np.concatenate(pt)[o].astype(np.int32))
    riv = Intervals(iv.cpus, starts, ends, keys, iv.t0, iv.t1, iv.approximate)
    marker_rows = reg.rows[reg.rows["op"] == MARK]
    marks = [(int(r["t_ns"]), reg.names[int(r["rid"])].name) for r in marker_rows]
    begins = reg.rows[reg.rows["op"] == BEGIN]
    marks += [(int(r["t_ns"]), reg.names[int(r["rid"])].name) for r in begins
              if reg.names[int(r["rid"])].kind == "marker"]
    nn = len(names)
    summed = {int(summed_key(k, lv, nn)): lv for k in range(1, nn + 1)
              for lv in range(1, DENSITY_LEVELS + 1)}
    return RegionTimeline(riv, names, wait, sorted(marks), owners, summed, clipped, segs)
