"""A catalogue compiled for derive: every metric of every object in a few numpy operations.

Evaluating each metric's formula one by one over dicts of arrays cost most of a sweep (35
metrics, each a handful of numpy calls on arrays of a few hundred values: the work is the
call overhead, not the arithmetic). So derive hands the counters over as one matrix (a row per
counter, a column per object or PU) and this module

- decides once per *set of available counters* which formulas can be evaluated (a formula
  whose counters a sample lacks is never run: its metric is NaN, "not available");
- groups the formulas by shape (``expr.template``) and evaluates each shape once on the
  stacked rows of all its formulas;
- applies the fallback chains (``ghz``: APERF/MPERF, else cpufreq, else cycles/s) where a
  metric has several formulas, and collects the flags of the counters each metric read.

The plan is cached per catalogue (by the identity of its metrics, so a catalogue a user
extends later is recompiled) and per counter set (a few per session: sources come and go).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from snumap_tui.model.expr import SLOT, Evaluator, Node, compile_tree, template
from snumap_tui.model.metrics import Catalogue, Metric


@dataclass
class _Group:
    """Formulas of one shape: evaluated together, each into its row of the output."""

    fn: Evaluator
    slots: list[np.ndarray]          # per counter slot: the env row of each member
    consts: list[np.ndarray]         # per number slot: [g, 1] column of the members' numbers
    targets: np.ndarray              # output row of each member


@dataclass
class RulePlan:
    """The formulas of one aggregation rule ("sum" at objects, "mean" per PU) that the
    available counters allow.

    Output rows: row i < len(metrics) is metric i's first evaluable formula (NaN when it has
    none), then one row per fallback formula; ``chains`` fills a metric's gaps from them."""

    metrics: list[str]
    groups: list[_Group]
    nrows: int
    chains: list[tuple[int, list[tuple[int, frozenset[str]]]]]
    first_needs: dict[str, list[str]]      # counter -> metrics whose first formula reads it

    def run(self, rows: np.ndarray, scalars: Mapping[str, float], width: int,
            flags: Mapping[str, set[str]], out_flags: dict[str, set[str]],
            out: np.ndarray | None = None) -> np.ndarray:
        """Every metric of the rule: rows [0, len(metrics)) of the result ([nrows, width],
        or ``out``: the frame's matrix, so no temporary of that size). ``rows`` holds the
        counters, one row each in the order the plan was made for; ``flags`` are the
        counters' flags ("multiplexed"), passed on to the metrics that read them."""
        if out is None:
            out = np.empty((self.nrows, width))
        out.fill(np.nan)
        env: dict[str, np.ndarray | float] = dict(scalars)
        for g in self.groups:
            for i, idx in enumerate(g.slots):
                env[f"{SLOT}c{i}"] = rows[idx]          # fancy index: a fresh [g, width] copy
            for j, col in enumerate(g.consts):
                env[f"{SLOT}k{j}"] = col
            v = np.asarray(g.fn(env), dtype=np.float64)
            if v.shape != (len(g.targets), width):      # a formula of numbers and scalars only
                v = np.broadcast_to(v, (len(g.targets), width))
            out[g.targets] = v
        bad = ~np.isfinite(out)
        if bad.any():
            out[bad] = np.nan                 # x/0 is NaN already; inf from overflow too
        if flags:
            for counter, what in flags.items():
                for name in self.first_needs.get(counter, ()):
                    out_flags.setdefault(name, set()).update(what)
        for mrow, rest in self.chains:
            v = out[mrow]
            for erow, needs in rest:
                gap = np.isnan(v)
                if not gap.any():
                    break
                v[gap] = out[erow][gap]
                for c in needs:
                    if c in flags:
                        out_flags.setdefault(self.metrics[mrow], set()).update(flags[c])
        return out


def _rule_plan(metrics: Sequence[Metric], rows: tuple[str, ...],
               scalars: frozenset[str]) -> RulePlan:
    """``rows``: the counter of each row of the matrix the plan will read (a name given twice
    is read from its last row)."""
    names = [m.name for m in metrics]
    index = {c: i for i, c in enumerate(rows)}
    have = frozenset(index) | scalars
    shapes: dict[Node, list[tuple[int, tuple[str, ...], tuple[float, ...]]]] = {}
    chains: list[tuple[int, list[tuple[int, frozenset[str]]]]] = []
    first_needs: dict[str, list[str]] = {}
    nrows = len(metrics)
    for mi, m in enumerate(metrics):
        live = [e for e in m.exprs if e.needs <= have]
        rest: list[tuple[int, frozenset[str]]] = []
        for k, e in enumerate(live):
            row = mi if k == 0 else nrows
            if k:
                rest.append((row, e.needs))
                nrows += 1
            else:
                for c in e.needs:
                    first_needs.setdefault(c, []).append(m.name)
            shape, slots, nums = template(e.tree, scalars)
            shapes.setdefault(shape, []).append((row, slots, nums))
        if rest:
            chains.append((mi, rest))
    groups = []
    for shape, members in shapes.items():
        nslot, nnum = len(members[0][1]), len(members[0][2])
        groups.append(_Group(
            fn=compile_tree(shape),
            slots=[np.array([index[mb[1][i]] for mb in members], dtype=np.int64)
                   for i in range(nslot)],
            consts=[np.array([[mb[2][j]] for mb in members], dtype=np.float64)
                    for j in range(nnum)],
            targets=np.array([mb[0] for mb in members], dtype=np.int64)))
    return RulePlan(names, groups, nrows, chains, first_needs)


@dataclass
class Compiled:
    """One catalogue, compiled: its metrics split by rule, and a RulePlan per counter set."""

    metrics: tuple[Metric, ...]
    names: list[str] = field(init=False)
    sum_metrics: list[Metric] = field(init=False)
    mean_metrics: list[Metric] = field(init=False)
    hide_types: list[tuple[int, frozenset[str]]] = field(init=False)
    _plans: dict[tuple[str, tuple[str, ...], frozenset[str]], RulePlan] = field(
        init=False, default_factory=dict)
    _rows: dict[int, list[int]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.names = [m.name for m in self.metrics]
        self.sum_metrics = [m for m in self.metrics if m.rule != "mean"]
        self.mean_metrics = [m for m in self.metrics if m.rule == "mean"]
        self.hide_types = [(i, m.objects) for i, m in enumerate(self.metrics)
                           if m.objects is not None]

    def frame_rows(self, nsum: int) -> list[int]:
        """Row of each metric (catalogue order) in derive's frame matrix: the ``sum`` plan's
        ``nsum`` rows (metrics, then fallback formulas), then the ``mean`` metrics."""
        hit = self._rows.get(nsum)
        if hit is None:
            si = iter(range(len(self.sum_metrics)))
            mi = iter(range(nsum, nsum + len(self.mean_metrics)))
            hit = self._rows[nsum] = [next(mi) if m.rule == "mean" else next(si)
                                      for m in self.metrics]
        return hit

    def plan(self, rule: str, rows: tuple[str, ...], scalars: frozenset[str]) -> RulePlan:
        """The plan of one rule for a matrix whose rows are the counters ``rows``."""
        key = (rule, rows, scalars)
        hit = self._plans.get(key)
        if hit is None:
            if len(self._plans) > 32:         # sources flapping: keep the cache small
                self._plans.clear()
            ms = self.sum_metrics if rule == "sum" else self.mean_metrics
            hit = self._plans[key] = _rule_plan(ms, rows, scalars)
        return hit


_COMPILED: dict[int, Compiled] = {}


def compiled(cat: Catalogue) -> Compiled:
    """The compiled form of a catalogue. Keyed by the catalogue's identity and checked against
    its metrics (the Compiled holds them, so their identities cannot be reused): adding a
    metric to a catalogue recompiles it."""
    metrics = tuple(cat.metrics.values())
    hit = _COMPILED.get(id(cat))
    if hit is not None and hit.metrics == metrics:
        return hit
    if len(_COMPILED) > 16:
        _COMPILED.clear()
    hit = _COMPILED[id(cat)] = Compiled(metrics)
    return hit


__all__ = ["Compiled", "RulePlan", "compiled"]
