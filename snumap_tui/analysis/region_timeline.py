"""Run intervals coloured by region, for the core-vs-time view's "by region" mode.

Each thread's time is cut into segments by the innermost region it is in (a barrier inside a
parallel region's body inside the master's GOMP_parallel span); each run interval on a PU is
then cut at those segments' edges, and a piece takes its segment's key: 1 + the index of the
region's name in ``names``, or ``SERIAL`` (0) outside any region. Pieces of work outside the
traced tree keep their negative tid, so the view shows them as "other" as in the other modes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from snumap_tui.analysis.intervals import Intervals
from snumap_tui.analysis.regions import pair
from snumap_tui.store.regions import Regions
from snumap_tui.trace.region_catalog import BEGIN, MARK

SERIAL = 0


@dataclass
class RegionTimeline:
    intervals: Intervals                      # tid column holds the region key
    names: list[str]                          # key k >= 1 is names[k - 1]
    wait: set[int] = field(default_factory=set)       # keys of synchronisation regions
    marks: list[tuple[int, str]] = field(default_factory=list)   # user marker ticks

    def key_name(self, key: int) -> str:
        if key == SERIAL:
            return "no region"
        if 1 <= key <= len(self.names):
            return self.names[key - 1]
        return "?"


def thread_segments(reg: Regions) -> tuple[dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]],
                                           list[str], set[int]]:
    """Per tid: (start, end, key) of its innermost-region segments, non-overlapping, sorted."""
    inst = pair(reg.rows)
    names: list[str] = []
    index: dict[str, int] = {}
    wait: set[int] = set()
    key_of_rid = np.zeros(max(len(reg.names), 1), np.int64)
    for rid, n in enumerate(reg.names):
        if n.name not in index:
            index[n.name] = len(names)
            names.append(n.name)
        key_of_rid[rid] = index[n.name] + 1
        if n.wait:
            wait.add(index[n.name] + 1)
    out: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    if not len(inst):
        return out, names, wait
    order = np.lexsort((inst.start, inst.tid))
    tid, st, en = inst.tid[order], inst.start[order], inst.end[order]
    key = key_of_rid[inst.rid[order]]
    cuts = np.flatnonzero(np.diff(tid)) + 1
    for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), len(tid)]):
        # Every instance edge is a boundary; in each elementary piece the latest-started
        # instance still open is the innermost one.
        s, e, k = st[a:b], en[a:b], key[a:b]
        pts = np.unique(np.concatenate([s, e]))
        ps, pe = pts[:-1], pts[1:]
        if not len(ps):
            continue
        mid = (ps + pe) // 2
        best = np.full(len(ps), -1, np.int64)
        # Instances sorted by start: the last one starting at or before mid that is still
        # open. Nesting depth is small, so look back a few instances at most.
        j = np.searchsorted(s, mid, "right") - 1
        for back in range(8):
            jj = j - back
            ok = (jj >= 0) & (best < 0)
            jc = np.clip(jj, 0, len(s) - 1)
            hit = ok & (e[jc] > mid)
            best[hit] = jc[hit]
        keep = best >= 0
        out[int(tid[a])] = (ps[keep], pe[keep], k[best[keep]])
    return out, names, wait


def region_timeline(iv: Intervals, reg: Regions) -> RegionTimeline | None:
    """The run intervals cut and keyed by region (None when the recording has no regions)."""
    if not len(reg):
        return None
    segs, names, wait = thread_segments(reg)
    starts, ends, keys = [], [], []
    for r in range(len(iv.cpus)):
        s, e, t = iv.start[r], iv.end[r], iv.tid[r].astype(np.int64)
        ps, pe, pk = [s[t < 0]], [e[t < 0]], [t[t < 0]]
        seen = np.unique(t[t >= 0])
        for tid in seen.tolist():
            m = t == tid
            S, E = s[m], e[m]
            seg = segs.get(int(tid))
            if seg is None:
                ps.append(S)
                pe.append(E)
                pk.append(np.full(len(S), SERIAL, np.int64))
                continue
            gs, ge, gk = seg
            pts = np.unique(np.concatenate([S, E, gs, ge]))
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
        S2, E2, K2 = np.concatenate(ps), np.concatenate(pe), np.concatenate(pk)
        o = np.argsort(S2, kind="stable")
        starts.append(S2[o].astype(np.int64))
        ends.append(E2[o].astype(np.int64))
        keys.append(K2[o].astype(np.int32))
    riv = Intervals(iv.cpus, starts, ends, keys, iv.t0, iv.t1, iv.approximate)
    marker_rows = reg.rows[reg.rows["op"] == MARK]
    marks = [(int(r["t_ns"]), reg.names[int(r["rid"])].name) for r in marker_rows]
    begins = reg.rows[reg.rows["op"] == BEGIN]
    marks += [(int(r["t_ns"]), reg.names[int(r["rid"])].name) for r in begins
              if reg.names[int(r["rid"])].kind == "marker"]
    return RegionTimeline(riv, names, wait, sorted(marks))
