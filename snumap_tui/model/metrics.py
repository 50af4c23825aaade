"""The metric catalogue: what snumap can show, how it aggregates, how it is coloured.

A metric is a formula over *counters* (see ``COUNTERS``) plus the rule that carries it up the
topology tree (``derive`` implements the rules):

- ``sum``: the counters are summed over the object (its PUs for per-PU counters, the NUMA nodes
  / RAPL domains below it for object counters) and the formula is evaluated at the object. This
  is Dynamic lstopo's rule: a package's IPC is Σinstructions / Σcycles, never a mean of IPCs;
  power and memory are sums because their formulas are linear.
- ``mean``: the formula is evaluated per PU and averaged over the object's PUs that have a
  value (utilisation and frequency percentages: "how busy is this L3's set of PUs").

A metric may list several formulas: per object (per PU for ``mean``) the first one that gives a
value wins. That is how GHz falls back from APERF/MPERF to cpufreq to cycles per second, without
any conditional in the formula language.

Thresholds mark a value as a problem (a low IPC, a high NUMA miss rate, steal time); the colour
scale (linear/log between min and max) is what a view maps values onto.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from snumap_tui.errors import SnumapError
from snumap_tui.model.expr import Expr, parse
from snumap_tui.model.iometrics import IO_COUNTERS, io_metrics

# ---- counters -----------------------------------------------------------------------------
# name -> (scope, description). Scope "pu": one value per PU, summed (or averaged) over an
# object's PUs. Scope "obj": attached to NUMA nodes, packages or the machine, summed over the
# subtree. Scope "scalar": one number per frame. Deltas are over the frame's interval.
PU, OBJ, SCALAR = "pu", "obj", "scalar"

COUNTERS: dict[str, tuple[str, str]] = {
    # /proc/stat per CPU, USER_HZ ticks (Documentation/filesystems/proc.rst, "1.7 Miscellaneous
    # kernel statistics"). guest/guest_nice are already included in user/nice.
    "user": (PU, "ticks in user mode"),
    "nice": (PU, "ticks in user mode at low priority"),
    "system": (PU, "ticks in kernel mode"),
    "idle": (PU, "ticks idle"),
    "iowait": (PU, "ticks idle waiting for I/O"),
    "irq": (PU, "ticks servicing interrupts"),
    "softirq": (PU, "ticks servicing softirqs"),
    "steal": (PU, "ticks stolen by the hypervisor"),
    "guest": (PU, "ticks running a guest (already in user)"),
    "guest_nice": (PU, "ticks running a niced guest (already in nice)"),
    "total_ticks": (PU, "user+nice+system+idle+iowait+irq+softirq+steal"),
    "busy_ticks": (PU, "total_ticks - idle - iowait"),
    # perf_event_open per PU (perf_event_open(2)), scaled by Δenabled/Δrunning when multiplexed.
    "cycles": (PU, "CPU cycles"),
    "instructions": (PU, "instructions retired"),
    "cache_references": (PU, "last-level cache references"),
    "cache_misses": (PU, "last-level cache misses"),
    "branches": (PU, "branch instructions"),
    "branch_misses": (PU, "mispredicted branches"),
    "stalled_cycles_frontend": (PU, "cycles stalled in the front end"),
    "stalled_cycles_backend": (PU, "cycles stalled in the back end"),
    "ref_cycles": (PU, "reference cycles (constant rate)"),
    "context_switches": (PU, "context switches (software event)"),
    "cpu_migrations": (PU, "migrations onto this PU (software event)"),
    "page_faults": (PU, "page faults (software event)"),
    # Frequency: cpufreq (Documentation/admin-guide/pm/cpufreq.rst) and the msr PMU.
    "cur_khz": (PU, "cpufreq scaling_cur_freq, instantaneous (kHz)"),
    "aperf": (PU, "APERF: actual cycles while not halted"),
    "mperf": (PU, "MPERF: reference (base-rate) cycles while not halted"),
    "base_khz": (PU, "the rate MPERF counts at (base frequency, kHz)"),
    # RAPL (Documentation/power/powercap/powercap.rst): energy over the interval, µJ, wrap fixed.
    "energy_package": (OBJ, "RAPL package energy (µJ)"),
    "energy_core": (OBJ, "RAPL core (PP0) energy (µJ)"),
    "energy_uncore": (OBJ, "RAPL uncore (PP1) energy (µJ)"),
    "energy_dram": (OBJ, "RAPL DRAM energy (µJ)"),
    "energy_psys": (OBJ, "RAPL platform (psys) energy (µJ)"),
    # NUMA nodes (Documentation/admin-guide/numastat.rst, node meminfo): bytes now / pages delta.
    "mem_total": (OBJ, "node memory (bytes)"),
    "mem_free": (OBJ, "node free memory (bytes)"),
    "mem_used": (OBJ, "node used memory (bytes)"),
    "file_pages": (OBJ, "page cache (bytes)"),
    "anon_pages": (OBJ, "anonymous memory (bytes)"),
    "shmem": (OBJ, "shared memory (bytes)"),
    "hugepages_total": (OBJ, "huge pages reserved (bytes)"),
    "hugepages_free": (OBJ, "huge pages free (bytes)"),
    "numa_hit": (OBJ, "pages allocated on the intended node"),
    "numa_miss": (OBJ, "pages allocated here though intended elsewhere"),
    "numa_foreign": (OBJ, "pages intended here but allocated elsewhere"),
    "interleave_hit": (OBJ, "interleaved pages allocated on the intended node"),
    "local_node": (OBJ, "pages allocated here by a process running here"),
    "other_node": (OBJ, "pages allocated here by a process running elsewhere"),
    # Machine-wide /proc/stat line "ctxt": context switches since boot (on the Machine object).
    "ctxt": (OBJ, "context switches, machine-wide (/proc/stat ctxt)"),
    # One per frame.
    "dt": (SCALAR, "seconds between the two samples"),
    "hz": (SCALAR, "USER_HZ ticks per second"),
    # NICs, InfiniBand ports, disks and GPUs where they attach (model/iometrics.py).
    **IO_COUNTERS,
}


def perf_counter_name(event: str) -> str:
    """The counter name of a perf event ("cache-misses" -> "cache_misses"); perf's two names
    for branches map to one counter."""
    name = "".join(c if c.isalnum() else "_" for c in event.strip().lower())
    return {"branch_instructions": "branches", "cs": "context_switches",
            "migrations": "cpu_migrations", "faults": "page_faults"}.get(name, name)


# ---- metrics ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Threshold:
    """``value op limit`` marks a problem of ``level`` ("warn" or "crit")."""

    op: str            # ">" or "<"
    limit: float
    level: str = "warn"
    why: str = ""

    def hit(self, values: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore"):
            return values > self.limit if self.op == ">" else values < self.limit


LEVELS = {"warn": 1, "crit": 2}


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    description: str
    exprs: tuple[Expr, ...]          # tried in order; per element the first value wins
    rule: str = "sum"                # "sum" (evaluate on summed counters) | "mean" (over PUs)
    scale: str = "linear"            # "linear" | "log"
    vmin: float = 0.0
    vmax: float = 100.0
    thresholds: tuple[Threshold, ...] = ()
    objects: frozenset[str] | None = None   # object types it is shown on; None = every type
    group: str = "cpu"               # what a view groups it under: cpu, pmu, power, memory, os
    user: bool = False               # defined in a user's TOML file

    @property
    def needs(self) -> frozenset[str]:
        """The counters any of the formulas reads."""
        out: frozenset[str] = frozenset()
        for e in self.exprs:
            out |= e.needs
        return out

    @property
    def formula(self) -> str:
        return " | ".join(e.text for e in self.exprs)

    def evaluate(self, env: Mapping[str, np.ndarray], size: int) -> np.ndarray:
        """The formulas on these counters (``size`` values each), per element the first that
        gives a value; a formula reading a counter ``env`` lacks is skipped; NaN where none
        gives one. For a few values outside a sweep (derive evaluates the whole catalogue at
        once, evaluate.py)."""
        out = np.full(size, np.nan)
        for e in self.exprs:
            if e.needs <= env.keys():
                out = np.where(np.isnan(out), e.evaluate(env, size), out)
        return out

    def levels(self, values: np.ndarray) -> np.ndarray:
        """0 (fine), 1 (warn) or 2 (crit) per value; NaN is 0 (nothing to flag)."""
        out = np.zeros(np.shape(values), dtype=np.int8)
        for t in self.thresholds:
            np.maximum(out, np.where(t.hit(values), LEVELS.get(t.level, 1), 0), out=out)
        return out

    def level(self, value: float | None) -> str | None:
        if value is None:
            return None
        lv = int(self.levels(np.array([value], dtype=np.float64))[0])
        return {1: "warn", 2: "crit"}.get(lv)

    def normalize(self, values: np.ndarray | float) -> np.ndarray:
        """Position on the colour scale in [0, 1]; NaN stays NaN."""
        v = np.asarray(values, dtype=np.float64)
        with np.errstate(all="ignore"):
            if self.scale == "log":
                lo = np.log10(max(self.vmin, 1e-12))
                hi = np.log10(max(self.vmax, self.vmin * 10, 1e-11))
                x = (np.log10(np.maximum(v, 1e-12)) - lo) / (hi - lo)
            else:
                span = self.vmax - self.vmin or 1.0
                x = (v - self.vmin) / span
        return np.clip(x, 0.0, 1.0)

    # Plain names for the views (snumap_tui.ui.metricspec reads min/max/log/warn).
    @property
    def min(self) -> float:
        return self.vmin

    @property
    def max(self) -> float:
        return self.vmax

    @property
    def log(self) -> bool:
        return self.scale == "log"

    @property
    def warn(self) -> float | None:
        """The limit of the first "warn" threshold (None if the metric has none)."""
        return next((t.limit for t in self.thresholds if t.level == "warn"), None)

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "unit": self.unit, "description": self.description,
                "formula": self.formula, "rule": self.rule, "scale": self.scale,
                "min": self.vmin, "max": self.vmax, "group": self.group,
                "objects": sorted(self.objects) if self.objects else None,
                "thresholds": [{"op": t.op, "limit": t.limit, "level": t.level, "why": t.why}
                               for t in self.thresholds],
                "needs": sorted(self.needs), "user": self.user}


def make_metric(name: str, formulas: str | Iterable[str], *, known: Iterable[str] | None = None,
                **kw: object) -> Metric:
    """Build a metric, parsing its formulas against the known counters; a ``mean`` metric can
    only read per-PU counters (it is evaluated per PU)."""
    texts = [formulas] if isinstance(formulas, str) else list(formulas)
    if not texts:
        raise SnumapError(f"metric {name!r} has no formula")
    known_set = set(COUNTERS) if known is None else set(known)
    exprs = tuple(parse(t, known_set) for t in texts)
    rule = kw.get("rule", "sum")
    if rule not in ("sum", "mean"):
        raise SnumapError(f"metric {name!r}: aggregation rule must be 'sum' or 'mean', "
                          f"not {rule!r}")
    if rule == "mean":
        bad = sorted(n for e in exprs for n in e.needs if COUNTERS.get(n, (PU,))[0] == OBJ)
        if bad:
            raise SnumapError(f"metric {name!r}: rule 'mean' averages over PUs but {bad[0]!r} "
                              f"is not a per-PU counter (use rule 'sum')")
    return Metric(name=name, exprs=exprs, **kw)  # type: ignore[arg-type]


def _t(op: str, limit: float, level: str = "warn", why: str = "") -> Threshold:
    return Threshold(op, limit, level, why)


_PCT: dict[str, Any] = {"unit": "%", "rule": "mean", "vmin": 0.0, "vmax": 100.0}
_PKG_UP = frozenset({"Machine", "Package", "Group", "Die"})


def _builtin() -> list[Metric]:
    m = make_metric
    return [
        # -- CPU time (/proc/stat), averaged over PUs
        m("util_pct", "100 * busy_ticks / total_ticks", description="CPU utilisation "
          "(not idle, not iowait)", **_PCT),
        m("user_pct", "100 * (user + nice) / total_ticks", description="time in user mode",
          **_PCT),
        m("system_pct", "100 * (system + irq + softirq) / total_ticks",
          description="time in the kernel, interrupts included", **_PCT),
        m("iowait_pct", "100 * iowait / total_ticks", description="idle waiting for I/O",
          thresholds=(_t(">", 20, "warn", "PUs idle waiting for I/O"),), **_PCT),
        m("steal_pct", "100 * steal / total_ticks", description="time stolen by the "
          "hypervisor", thresholds=(_t(">", 5, "warn", "the hypervisor takes CPU time"),
                                    _t(">", 20, "crit", "the hypervisor takes CPU time")),
          **_PCT),
        # -- frequency: APERF/MPERF x base, else cpufreq, else cycles per second
        m("ghz", ["aperf / mperf * base_khz / 1000000", "cur_khz / 1000000",
                  "cycles / dt / 1000000000"], unit="GHz", rule="mean", vmin=0.0, vmax=5.0,
          description="clock frequency (APERF/MPERF, else cpufreq, else cycles/s)"),
        # -- hardware counters: ratios of sums
        m("ipc", "instructions / cycles", unit="IPC", vmin=0.0, vmax=4.0, group="pmu",
          description="instructions per cycle",
          thresholds=(_t("<", 0.5, "warn", "low instructions per cycle (stalls, misses)"),)),
        m("mpki", "1000 * cache_misses / instructions", unit="MPKI", scale="log", vmin=0.1,
          vmax=100.0, group="pmu", description="cache misses per 1000 instructions",
          thresholds=(_t(">", 10, "warn", "many cache misses per instruction"),
                      _t(">", 50, "crit", "memory bound: very many cache misses"))),
        m("cache_miss_pct", "100 * cache_misses / cache_references", unit="%", group="pmu",
          description="cache misses per cache reference",
          thresholds=(_t(">", 50, "warn", "most cache references miss"),)),
        m("branch_miss_pct", "100 * branch_misses / branches", unit="%", vmax=20.0,
          group="pmu", description="mispredicted branches per branch",
          thresholds=(_t(">", 5, "warn", "many branch mispredictions"),)),
        m("branch_mpki", "1000 * branch_misses / instructions", unit="MPKI", scale="log",
          vmin=0.1, vmax=100.0, group="pmu", description="branch misses per 1000 "
          "instructions"),
        m("frontend_stall_pct", "100 * stalled_cycles_frontend / cycles", unit="%",
          group="pmu", description="cycles stalled in the front end"),
        m("backend_stall_pct", "100 * stalled_cycles_backend / cycles", unit="%",
          group="pmu", description="cycles stalled in the back end"),
        m("gips", "instructions / dt / 1000000000", unit="Ginstr/s", scale="log", vmin=0.01,
          vmax=100.0, group="pmu", description="billions of instructions per second"),
        # -- scheduler (software events, or /proc/stat ctxt machine-wide)
        m("ctxsw_per_s", ["context_switches / dt", "ctxt / dt"], unit="/s", scale="log",
          vmin=1.0, vmax=1e6, group="os", description="context switches per second"),
        m("migrations_per_s", "cpu_migrations / dt", unit="/s", scale="log", vmin=0.1,
          vmax=1e5, group="os", description="task migrations per second"),
        m("faults_per_s", "page_faults / dt", unit="/s", scale="log", vmin=1.0, vmax=1e7,
          group="os", description="page faults per second"),
        # -- power (RAPL), summed over domains; package and DRAM on a Package, psys on Machine
        m("power_pkg_w", "energy_package / dt / 1000000", unit="W", vmax=400.0,
          group="power", objects=_PKG_UP, description="package power (RAPL)"),
        m("power_core_w", "energy_core / dt / 1000000", unit="W", vmax=400.0, group="power",
          objects=_PKG_UP, description="cores power (RAPL PP0)"),
        m("power_uncore_w", "energy_uncore / dt / 1000000", unit="W", vmax=100.0,
          group="power", objects=_PKG_UP, description="uncore/GPU power (RAPL PP1)"),
        m("power_dram_w", "energy_dram / dt / 1000000", unit="W", vmax=100.0, group="power",
          objects=_PKG_UP, description="DRAM power (RAPL)"),
        m("power_psys_w", "energy_psys / dt / 1000000", unit="W", vmax=1000.0,
          group="power", objects=frozenset({"Machine"}), description="platform power (psys)"),
        # -- memory per NUMA node, summed for objects that hold nodes
        m("mem_total_bytes", "mem_total", unit="B", vmax=2.0**40, group="memory",
          description="memory of the NUMA nodes"),
        # Used is what free(1) calls used: without the page cache. Node meminfo's MemUsed is
        # MemTotal - MemFree and counts the cache; FilePages is the node's page cache
        # (Documentation/filesystems/proc.rst). Without FilePages, MemUsed as it is.
        m("mem_used_bytes", ["mem_used - file_pages", "mem_used"], unit="B", vmax=2.0**40,
          group="memory", description="memory in use on the NUMA nodes, without the page "
          "cache (what free(1) calls used: MemTotal - MemFree - FilePages)"),
        m("mem_free_bytes", "mem_free", unit="B", vmax=2.0**40, group="memory",
          description="free memory on the NUMA nodes"),
        m("mem_used_pct", ["100 * (mem_used - file_pages) / mem_total",
                           "100 * mem_used / mem_total"], unit="%", group="memory",
          description="memory in use, without the page cache", thresholds=(_t(">", 90, "warn", "node memory almost "
                                                      "full"), _t(">", 98, "crit", "node "
                                                      "memory full"))),
        m("mem_anon_bytes", "anon_pages", unit="B", vmax=2.0**40, group="memory",
          description="anonymous memory"),
        m("mem_file_bytes", "file_pages", unit="B", vmax=2.0**40, group="memory",
          description="page cache"),
        m("numa_hit_per_s", "numa_hit / dt", unit="pages/s", scale="log", vmin=1.0,
          vmax=1e7, group="memory", description="allocations on the intended node"),
        m("numa_miss_per_s", "numa_miss / dt", unit="pages/s", scale="log", vmin=1.0,
          vmax=1e7, group="memory", description="allocations here meant for another node"),
        m("numa_foreign_per_s", "numa_foreign / dt", unit="pages/s", scale="log", vmin=1.0,
          vmax=1e7, group="memory", description="allocations meant here that went elsewhere"),
        m("numa_miss_pct", "100 * numa_miss / (numa_hit + numa_miss)", unit="%",
          group="memory", description="NUMA miss rate (allocations off their intended node)",
          thresholds=(_t(">", 5, "warn", "allocations land on other NUMA nodes"),
                      _t(">", 20, "crit", "many allocations land on other NUMA nodes"))),
        m("numa_remote_pct", "100 * other_node / (local_node + other_node)", unit="%",
          group="memory", description="pages allocated here for processes running elsewhere",
          thresholds=(_t(">", 20, "warn", "memory allocated from remote PUs"),)),
        *io_metrics(m),
    ]


@dataclass
class Catalogue:
    """An ordered set of metrics, built-ins first then the user's (a user metric with a
    built-in's name replaces it)."""

    metrics: dict[str, Metric] = field(default_factory=dict)
    extra_counters: frozenset[str] = frozenset()   # perf events a user's file asked for

    @classmethod
    def default(cls) -> Catalogue:
        return cls({mt.name: mt for mt in _builtin()})

    def add(self, metric: Metric) -> None:
        self.metrics[metric.name] = metric

    def extend(self, metrics: Iterable[Metric]) -> Catalogue:
        for mt in metrics:
            self.add(mt)
        return self

    def __getitem__(self, name: str) -> Metric:
        return self.metrics[name]

    def __contains__(self, name: object) -> bool:
        return name in self.metrics

    def __iter__(self) -> Iterator[Metric]:
        return iter(self.metrics.values())

    def __len__(self) -> int:
        return len(self.metrics)

    def names(self) -> list[str]:
        return list(self.metrics)

    def needs(self) -> frozenset[str]:
        out: frozenset[str] = frozenset()
        for mt in self:
            out |= mt.needs
        return out

    def to_dict(self) -> dict[str, Mapping[str, object]]:
        return {n: mt.to_dict() for n, mt in self.metrics.items()}


_DEFAULT: Catalogue | None = None


def default_catalogue() -> Catalogue:
    """The built-in catalogue (built once; treat it as read-only)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = Catalogue.default()
    return _DEFAULT


# The built-in metrics by name, for readers that want a plain mapping (the views).
METRICS: Mapping[str, Metric] = default_catalogue().metrics
