"""The catalogue's formulas in PromQL: the recording rules come from ``model.metrics``.

A formula reads interval deltas of counters (and ``dt``). In PromQL each counter becomes the
``rate()`` of its family summed over the aggregation labels, which is its delta over one
second: so ``dt`` is 1, and the formula keeps its meaning (the formulas are ratios of deltas or
deltas over ``dt``). Ticks are exported as seconds, which is ticks with ``hz`` = 1. Instant
counters (memory, frequency) are gauges, summed (memory) or averaged (frequency).

- rule ``sum``: ``sum by (instance, package) (rate(snumap_instructions_total[1m])) / sum by
  (instance, package) (rate(snumap_cycles_total[1m]))``: the ratio of sums, never a mean of
  ratios, exactly as ``derive`` evaluates a package;
- rule ``mean``: the formula per core, then ``avg by (instance, package)``;
- several formulas (``ghz``: APERF/MPERF, else cpufreq, else cycles/s) are joined with
  ``or``: per series the first that has a value wins, as in ``derive``.

``snumap exporter --print-rules`` prints the rules file of the catalogue (user metrics
included); ``deploy/prometheus/snumap-rules.yml`` is its output for the built-in one.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

from snumap_tui.errors import SnumapError
from snumap_tui.exporter.families import (
    CPU_MODES,
    CPU_SECONDS,
    ENERGY,
    OBJ_FAMILIES,
    PU_FAMILIES,
)
from snumap_tui.model.expr import BinOp, Name, Neg, Node, Num
from snumap_tui.model.metrics import Catalogue, Metric, default_catalogue
from snumap_tui.textsafe import safe_text

WINDOW = "1m"
CORE = ("package", "numa_node", "core")
# Aggregation levels of the rules: name -> labels kept (instance always).
LEVELS: dict[str, tuple[str, ...]] = {"package": ("package",), "numa_node": ("numa_node",),
                                      "instance": ()}
# Metrics shown on packages and up only (RAPL: a NUMA node has no power counter).
_MACHINE_ONLY = frozenset({"ctxt"})


class Untranslatable(Exception):
    """A formula reads a counter the exporter does not publish at that level."""


def _by(labels: tuple[str, ...]) -> str:
    return "by (" + ", ".join(("instance", *labels)) + ")"


def selector(counter: str, labels: tuple[str, ...], window: str = WINDOW) -> tuple[str, float]:
    """PromQL for one counter at the aggregation ``labels``, and the factor that turns the
    exported unit back into the catalogue's (e.g. 1e6: joules -> µJ)."""
    by = _by(labels)
    if counter in CPU_MODES:
        return f'sum {by} (rate({CPU_SECONDS}_total{{mode="{counter}"}}[{window}]))', 1.0
    if counter == "total_ticks":
        return f"sum {by} (rate({CPU_SECONDS}_total[{window}]))", 1.0
    if counter == "busy_ticks":
        return (f'sum {by} (rate({CPU_SECONDS}_total{{mode!~"idle|iowait"}}[{window}]))',
                1.0)
    fam = PU_FAMILIES.get(counter) or OBJ_FAMILIES.get(counter)
    if fam is None or (counter in _MACHINE_ONLY and labels):
        raise Untranslatable(counter)
    if fam.kind == "gauge":
        agg = "avg" if counter in PU_FAMILIES else "sum"
        return f"{agg} {by} ({fam.exposed})", 1.0 / fam.scale
    sel = fam.exposed
    if fam.label is not None:
        sel += f'{{{fam.label[0]}="{fam.label[1]}"}}'
    return f"sum {by} (rate({sel}[{window}]))", 1.0 / fam.scale


def _num(v: float) -> str:
    return f"{v:.12g}"


def _scaled(text: str | None, factor: float) -> str:
    if text is None:
        return _num(factor)
    return text if factor == 1.0 else f"{_num(factor)} * {text}"


def translate(node: Node, labels: tuple[str, ...], window: str = WINDOW) -> str:
    """One formula tree as PromQL (raises Untranslatable)."""

    def go(n: Node) -> tuple[str | None, float]:
        """(text, factor): the value is factor x text; text None is the constant factor."""
        if isinstance(n, Num):
            return None, n.value
        if isinstance(n, Name):
            if n.name in ("dt", "hz"):
                return None, 1.0
            return selector(n.name, labels, window)
        if isinstance(n, Neg):
            t, f = go(n.arg)
            return t, -f
        assert isinstance(n, BinOp)
        (lt, lf), (rt, rf) = go(n.left), go(n.right)
        if n.op == "*":
            if lt is None or rt is None:
                return (rt if lt is None else lt), lf * rf
            return f"({lt} * {rt})", lf * rf
        if n.op == "/":
            if rf == 0:                  # a user's formula dividing by the constant 0
                raise Untranslatable("divides by the constant 0")
            if rt is None:
                return lt, lf / rf
            return (f"(1 / {rt})" if lt is None else f"({lt} / {rt})"), lf / rf
        if lt is None and rt is None:
            return None, lf + rf if n.op == "+" else lf - rf
        if lt is not None and rt is not None and lf == rf:
            return f"({lt} {n.op} {rt})", lf
        return f"({_scaled(lt, lf)} {n.op} {_scaled(rt, rf)})", 1.0

    text, factor = go(node)
    if not math.isfinite(factor):        # a user's formula overflowing a float
        raise Untranslatable("a constant factor that is not a finite number")
    return _scaled(text, factor)


def metric_expr(metric: Metric, level: str, window: str = WINDOW) -> str | None:
    """The PromQL of a catalogue metric at a level (None when none of its formulas can be
    written from the published counters)."""
    labels = LEVELS[level]
    parts = []
    for e in metric.exprs:
        try:
            if metric.rule == "mean":
                parts.append(f"avg {_by(labels)} ({translate(e.tree, CORE, window)})")
            else:
                parts.append(translate(e.tree, labels, window))
        except Untranslatable:
            continue
    if not parts:
        return None
    return " or ".join(f"({p})" for p in parts) if len(parts) > 1 else parts[0]


def rule_name(metric: Metric, level: str) -> str:
    return f"{level if level == 'instance' else 'instance_' + level}:snumap_{metric.name}:" \
           f"rate{WINDOW}"


def _applies(metric: Metric, level: str) -> bool:
    if metric.objects is None:
        return True
    want = {"package": "Package", "numa_node": "NUMANode", "instance": "Machine"}[level]
    return want in metric.objects


def rules(catalogue: Catalogue | None = None,
          levels: Iterable[str] = ("package", "numa_node", "instance")
          ) -> list[tuple[str, str, Metric]]:
    """(record name, expression, metric) for every metric at every level it applies to."""
    cat = catalogue if catalogue is not None else default_catalogue()
    out = []
    for level in levels:
        for m in cat:
            if not _applies(m, level):
                continue
            expr = metric_expr(m, level)
            if expr is not None:
                out.append((rule_name(m, level), expr, m))
    return out


# Prometheus metric names (recording rules' names included; the colon is for rules).
METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def _yaml_str(s: str) -> str:
    """A YAML single-quoted scalar; one line (a line break in one is folded into a space
    by YAML, so it is refused rather than changed)."""
    if any(c in s for c in "\n\r\x85\u2028\u2029"):
        raise ValueError(f"a rule expression holds a line break: {s!r}")
    return "'" + s.replace("'", "''") + "'"


def _comment(text: str) -> str:
    """Text for one YAML comment line: a description is the user's (a metrics file), and a
    line break in it would end the comment and start YAML of its own (a rule of its
    choosing). Every run of whitespace, line breaks included, becomes one space, and what is
    left of the controls is escaped."""
    return safe_text(" ".join(text.split()))


def _record_name(rec: str) -> str:
    """``rec`` checked against Prometheus' metric name syntax: a name that is not one would
    make promtool (and Prometheus) refuse the whole file."""
    if not METRIC_NAME.fullmatch(rec):
        raise SnumapError(f"metric {rec!r}: not a valid Prometheus name "
                          f"([a-zA-Z_:][a-zA-Z0-9_:]*)")
    return rec


def rules_yaml(catalogue: Catalogue | None = None) -> str:
    """The recording-rules file (Prometheus rule file format, one group per level)."""
    lines = ["# Recording rules for snumap exporter: every metric of snumap's catalogue",
             "# (IPC, MPKI, GHz, watts, NUMA miss ratio, ...) per package, per NUMA node and",
             "# per machine, from the exported counters' rates: ratios of sums, as snumap top.",
             "# Generated by `snumap exporter --print-rules`; check: promtool check rules FILE",
             "groups:"]
    by_level: dict[str, list[tuple[str, str, Metric]]] = {}
    for rec, expr, m in rules(catalogue):
        by_level.setdefault(rec.split(":", 1)[0], []).append((rec, expr, m))
    for level, items in by_level.items():
        lines += [f"  - name: snumap_{level}", "    rules:"]
        for rec, expr, m in items:
            lines += [f"      # {_comment(f'{m.description} ({m.unit})')}",
                      f"      - record: {_record_name(rec)}",
                      f"        expr: {_yaml_str(expr)}"]
    return "\n".join(lines) + "\n"


__all__ = ["ENERGY", "metric_expr", "rules", "rules_yaml", "selector", "translate"]
