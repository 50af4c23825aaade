"""Cumulative counters for Prometheus, from the raw Samples through ``derive.counters``.

Prometheus wants counters that only grow and computes rates itself. The model already turns
two Samples into interval counters (step 1 of ``derive``: aligned by OS index, perf counts
scaled by Δenabled/Δrunning, RAPL unwrapped through ``max_energy_range_uj``, a counter that
went backwards dropped): the exporter adds those intervals up. Its counters therefore start
at 0 when the exporter starts (a restart is a counter reset, which ``rate()`` handles), and a
RAPL wrap is never a false reset. Summing the per-PU totals over a core uses the model's
``Plan`` (step 2), so no counter is computed twice.

What was never delivered stays NaN (absent from the exposition), never 0.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field

import numpy as np

from snumap_tui.exporter.families import CPU_MODES, OBJ_FAMILIES, PU_FAMILIES
from snumap_tui.model.aggregate import plan_for
from snumap_tui.model.derive import counters
from snumap_tui.model.sample import Sample
from snumap_tui.topology.model import Topology

_TICKS = frozenset(CPU_MODES)
# Per-PU counters of derive that are not published: sums of others, or already in user/nice.
_NOT_EXPORTED = frozenset({"total_ticks", "busy_ticks", "guest", "guest_nice", "tsc"})


@dataclass
class Snapshot:
    """Everything the collector renders, as of one sweep (replaced, never mutated)."""

    seq: int = 0
    wall_ns: int = 0
    pu: dict[str, np.ndarray] = field(default_factory=dict)      # counter -> per-PU values
    hz: float = math.nan         # USER_HZ: the CPU-mode counters are kept in ticks (exact)
    obj: dict[str, np.ndarray] = field(default_factory=dict)     # counter -> per-object values


class NodeTotals:
    """Accumulates the interval counters of successive Samples on one topology."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.plan = plan_for(topology)
        self._acc_pu: dict[str, np.ndarray] = {}
        self._acc_obj: dict[str, np.ndarray] = {}
        self._prev: Sample | None = None
        self.hz = math.nan
        self._lock = threading.Lock()
        self.snapshot = Snapshot()

    def add(self, sample: Sample) -> Snapshot:
        """Take one more Sample (the sampler thread calls this); returns the new snapshot."""
        prev, self._prev = self._prev, sample
        if prev is None:
            return self.snapshot
        c = counters(prev, sample, self.topology)
        hz = c.scalars.get("hz", math.nan)
        # What this sweep delivered: a source that stopped has its series absent (a gap in
        # Prometheus), not frozen; its totals are kept for when it comes back.
        pu: dict[str, np.ndarray] = {}
        obj: dict[str, np.ndarray] = {}
        for name, col in c.pu.items():
            if name in _TICKS:
                if not hz > 0:
                    continue
                self.hz = hz
                pu[name] = self._accumulate(self._acc_pu, name, col)
            elif name in PU_FAMILIES and PU_FAMILIES[name].kind == "gauge":
                pu[name] = col.copy()
            elif name not in _NOT_EXPORTED:     # every other counter, a perf event too
                pu[name] = self._accumulate(self._acc_pu, name, col)
        for name, row in c.obj.items():
            fam = OBJ_FAMILIES.get(name)
            if fam is None:
                continue
            obj[name] = row.copy() if fam.kind == "gauge" else \
                self._accumulate(self._acc_obj, name, row)
        snap = Snapshot(seq=self.snapshot.seq + 1, wall_ns=sample.wall_ns, hz=self.hz,
                        pu=pu, obj=obj)
        with self._lock:
            self.snapshot = snap
        return snap

    @staticmethod
    def _accumulate(acc: dict[str, np.ndarray], name: str, delta: np.ndarray) -> np.ndarray:
        """acc += delta where delta is a number (a slot stays NaN until its first number);
        returns a copy of the totals for the snapshot."""
        cur = acc.get(name)
        ok = ~np.isnan(delta)
        if cur is None or cur.shape != delta.shape:
            cur = acc[name] = np.full(delta.shape, np.nan)
        if ok.any():
            start = ok & np.isnan(cur)
            cur[start] = 0.0
            cur[ok] += delta[ok]
        return cur.copy()

    def per_object(self, snap: Snapshot, counter: str, ids: list[int]) -> np.ndarray:
        """A per-PU counter of ``snap`` at the objects ``ids``: summed over their PUs (a
        counter) or averaged (a gauge: a frequency); NaN where no PU has a value. CPU-mode
        ticks are turned into seconds here, after the sum (integers add up exactly)."""
        vals = snap.pu[counter]
        fam = PU_FAMILIES.get(counter)
        if fam is not None and fam.kind == "gauge":
            return self.plan.mean_pus(vals.reshape(1, -1))[0, ids]
        out = self.plan.sum_pus(vals.reshape(1, -1))[0, ids]
        return out / snap.hz if counter in _TICKS else out
