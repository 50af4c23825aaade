"""Core-vs-time rows of a job recorded on several nodes: node > package > NUMA > core > PU,
and whole nodes folded into one row.

A merged recording's topology is a System of Machines (topology/combine.py); each display row
is a PU, labelled with its node and with indexes local to that node (node k's package 0 is
"P0", not the merged OS index). A folded node is one row that stands for all of its PUs: each
cell shows how busy the node's PUs were on average and who ran the most there
(``fold_bins``), so a 64-node job fits a screen as 64 rows and opens node by node.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from snumap_tui.analysis.binning import IDLE, OTHER, GanttBins
from snumap_tui.topology.combine import ROOT_TYPE
from snumap_tui.topology.model import Topology, TopoObject


@dataclass
class NodeRow:
    """A display row: one PU of ``node`` (``members`` empty), or a whole folded node
    (``members``: the display rows of all its PUs when unfolded)."""

    node: str | None
    package: int | None
    numa: int | None
    core: int | None
    pu: int
    members: tuple[int, ...] = ()


def node_rows(topology: Topology) -> list[NodeRow] | None:
    """One row per PU with node-local indexes, or None for a one-machine topology."""
    if topology.root.type != ROOT_TYPE:
        return None
    rows: list[NodeRow] = []
    for mid in topology.root.children:
        m = topology[mid]
        name = m.name or f"node{m.os_index}"
        mins: dict[str, int] = {}
        for o in topology.walk(m):
            if o.os_index is not None:
                mins[o.type] = min(mins.get(o.type, o.os_index), o.os_index)
        for pu in topology.pus[m.pu_range[0]:m.pu_range[1]]:
            os_i = int(pu.os_index or 0)
            pkg, numa, core = (topology.package_of(os_i), topology.numa_of(os_i),
                               topology.core_of(os_i))
            rows.append(NodeRow(name, _local(pkg, mins), _local(numa, mins),
                                _local(core, mins), os_i - mins.get("PU", 0)))
    return rows


def _local(o: TopoObject | None, mins: dict[str, int]) -> int | None:
    """O's OS index within its node (the merge added a per-type base)."""
    if o is None or o.os_index is None:
        return None
    return int(o.os_index) - mins.get(o.type, 0)


def display(rows: Sequence[NodeRow], folded: set[str]) -> tuple[list[NodeRow], list[int]]:
    """(the rows shown, and for each the index into ``rows`` of its PU, -1 for a folded node)."""
    out: list[NodeRow] = []
    idx: list[int] = []
    i = 0
    while i < len(rows):
        r = rows[i]
        if r.node in folded:
            j = i
            while j < len(rows) and rows[j].node == r.node:
                j += 1
            out.append(NodeRow(r.node, None, None, None, -1, tuple(range(i, j))))
            idx.append(-1)
            i = j
            continue
        out.append(r)
        idx.append(i)
        i += 1
    return out, idx


def fold_bins(g: GanttBins, groups: Sequence[Sequence[int]], rows: np.ndarray) -> GanttBins:
    """Reduce the bins of every PU row to one row per group (a group of one is the row itself):
    busy is the mean over the group's PUs, the key the one with the most busy time summed
    over them (idle only where all were idle; OTHER where only untraced work ran)."""
    n, cols = len(groups), g.key.shape[1]
    key = np.full((n, cols), IDLE, dtype=g.key.dtype)
    busy = np.zeros((n, cols), dtype=g.busy.dtype)
    share = np.zeros((n, cols), dtype=g.share.dtype)
    for i, grp in enumerate(groups):
        sel = list(grp)
        k, b, s = g.key[sel], g.busy[sel], g.share[sel]
        busy[i] = b.mean(axis=0)
        if len(sel) == 1:
            key[i], share[i] = k[0], s[0]
            continue
        live = k != IDLE
        if not live.any():
            continue
        # every live cell as (column, key, weight); sum the weights of equal (column, key),
        # then per column the key with the most, tasks before OTHER
        _, cc = np.nonzero(live)
        kk = k[live].astype(np.int64)
        ww = (b * s)[live]
        order = np.lexsort((kk, cc))
        cc, kk, ww = cc[order], kk[order], ww[order]
        start = np.flatnonzero(np.r_[True, (cc[1:] != cc[:-1]) | (kk[1:] != kk[:-1])])
        sc, sk, sw = cc[start], kk[start], np.add.reduceat(ww, start)
        pick = np.lexsort((-sw, sk == OTHER, sc))      # per column: tasks first, then most
        first = pick[np.r_[True, sc[pick][1:] != sc[pick][:-1]]]
        key[i, sc[first]] = sk[first]
        total = b.sum(axis=0)
        share[i, sc[first]] = sw[first] / np.maximum(total[sc[first]], 1e-12)
    return GanttBins(g.t0, g.t1, g.edges, rows, key, busy, share)
