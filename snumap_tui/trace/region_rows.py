"""What a region probe's hit means: RegionTracer's part that turns the traced tree's hits into
REGION_DTYPE rows. A static site's hit carries its operation and region in tables by tag; a
summed probe's exact calls come as two records under its return's tag (``ret`` 0 the entry);
a span opener's region is resolved per hit from its argument (the outlined function
GOMP_parallel is given) to its symbol and file:line through the process's /proc/PID/maps,
and its closer takes the region its opener pushed on the thread's stack.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from snumap_tui.trace import elfsyms as E
from snumap_tui.trace import region_catalog as C
from snumap_tui.trace.probe_budget import ENTRY_NS, RETURN_NS


@dataclass
class Site:
    """What one probe (tag) means."""

    entry: C.EntryPoint
    ret: bool
    rid: int                    # -1: resolved per hit from the argument
    path: str
    call_ns: int = ENTRY_NS + RETURN_NS     # what the function's probes cost a call
    counting: bool = False      # the site whose hits count the function's calls (budget)


class RowsMixin:
    """RegionTracer's hits to rows: its tables, stacks, maps and names are the tracer's."""

    static_op: np.ndarray
    static_rid: np.ndarray
    _agg_tag: np.ndarray
    sites: list[Site]
    stacks: dict[tuple[int, str], list[int]]
    maps: dict[int, list[E.Mapping]]
    resolved: dict[tuple[int, int], int]
    names: C.RegionNames

    def _regions(self, rec: np.ndarray) -> np.ndarray:
        out = np.zeros(len(rec), C.REGION_DTYPE)
        if not len(rec):
            return out
        tag = rec["tag"].astype(np.int64)
        out["t_ns"], out["tid"], out["pid"] = rec["t_ns"], rec["tid"], rec["pid"]
        out["op"] = self.static_op[tag]
        # A summed probe's exact calls: both records under its return's tag, ``ret`` 0 the
        # entry (bpf/regions.bpf.c exact_call).
        agg = self._agg_tag[tag]
        if agg.any():
            out["op"][agg] = np.where(rec["ret"][agg] == 0, C.BEGIN, C.END)
        rid = self.static_rid[tag].copy()
        for i in np.flatnonzero(rid < 0).tolist():
            rid[i] = self._dynamic(rec[i], self.sites[int(tag[i])])
        keep = rid >= 0
        out["rid"] = np.where(keep, rid, 0)
        return out[keep]

    def _dynamic(self, r: np.void, site: Site) -> int:
        """The rid of a span opener's hit (from its argument) or closer (the opener's)."""
        key = (int(r["tid"]), site.entry.stack or site.entry.symbol)
        stack = self.stacks.setdefault(key, [])
        if site.ret or not site.entry.on_entry:
            return stack.pop() if stack else -1
        arg = site.entry.arg
        rid = self.names.intern(site.entry.symbol, site.entry.kind, site.entry.role)
        if arg is not None and int(r["arg"]):
            rid = self._resolve(int(r["pid"]), int(r["arg"]), site)
        if len(stack) < 64:
            stack.append(rid)
        return rid

    def _resolve(self, pid: int, addr: int, site: Site) -> int:
        got = self.resolved.get((pid, addr))
        if got is not None:
            return got
        maps = self.maps.get(pid)
        if maps is None or not any(m.start <= addr < m.end for m in maps):
            maps = E.read_maps(pid) or maps or []
            self.maps[pid] = maps
        _file, sym, line = E.resolve_address(maps, addr)
        label = C.region_label(sym, line, f"{site.entry.symbol} region at {addr:#x}")
        rid = self.names.intern(label, site.entry.kind, "span")
        self.resolved[(pid, addr)] = rid
        return rid


__all__ = ["RowsMixin", "Site"]
