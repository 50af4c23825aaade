"""How the views show a metric: label, unit, formatting and the 0..1 colour position.

Why a UI-side table: the model's catalogue (``snumap_tui.model.metrics``) owns names, units,
scales and thresholds; the views additionally need a short column header and a fixed-width
formatter. ``view_for`` takes scale and thresholds from the catalogue when it has the metric
and falls back to the defaults below, so the UI keeps working (and tests stay deterministic)
whatever the catalogue adds. Headless: no textual, no rich (batch mode uses it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any


@dataclass(frozen=True)
class MetricView:
    key: str                  # name in Frame.values
    label: str                # readable name without its unit: "power pkg", "NUMA miss"
    unit: str                 # "%", "GHz", "W", ... ("" for ratios and for bytes)
    lo: float = 0.0
    hi: float = 100.0
    log: bool = False
    warn: float | None = None   # threshold that marks a problem
    warn_low: bool = False      # the problem is *below* warn (low IPC) rather than above
    digits: int = 1
    description: str = ""
    is_bytes: bool = False      # memory: shown as 2.9GiB, never as 3042338.0k

    @property
    def title(self) -> str:
        """Name and unit, the unit once: "clock GHz", "NUMA miss %", "mem free"."""
        return f"{self.label} {self.unit}" if self.unit and self.unit not in self.label \
            else self.label

    def fmt(self, v: float | None, width: int = 5) -> str:
        """Fixed width, right aligned; 'n/a' for a value that could not be measured."""
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "n/a".rjust(width)
        if self.is_bytes:
            s = fmt_bytes(v)
            s = s + "iB" if s[-1] in "KMGT" else s
        elif self.unit == "%":
            s = f"{v:.0f}%"
        elif abs(v) >= 1000:
            s = f"{v / 1000:.1f}k"
        else:
            s = f"{v:.{self.digits}f}"
        return s.rjust(width)

    def norm(self, v: float | None) -> float | None:
        """Position on the colour scale, clamped to 0..1; None for n/a."""
        if v is None or math.isnan(v):
            return None
        lo, hi = self.lo, self.hi
        if self.log:
            lo, hi = math.log10(max(lo, 1e-9)), math.log10(max(hi, 1e-9))
            v = math.log10(max(v, 1e-9))
        if hi <= lo:
            return 0.0
        return min(1.0, max(0.0, (v - lo) / (hi - lo)))

    def is_problem(self, v: float | None) -> bool:
        if v is None or self.warn is None or math.isnan(v):
            return False
        return v < self.warn if self.warn_low else v > self.warn


# Keys are the catalogue's names (snumap_tui.model.metrics); these are the names a user reads
# in the metric picker, the history line and the heatmap legend (unique, never cut, the unit
# apart so no line says "GHz GHz") and the number formats. Scale and thresholds come from the
# catalogue when it has them; these are the fallbacks.
_B = 2.0 ** 40
DEFAULTS: tuple[MetricView, ...] = (
    MetricView("util_pct", "CPU", "%", 0, 100, description="busy time of the PUs (non-idle)"),
    MetricView("ipc", "IPC", "", 0, 4, digits=2, warn=0.5, warn_low=True,
               description="instructions per cycle (sum of instructions / sum of cycles)"),
    MetricView("ghz", "clock", "GHz", 0, 5, digits=2, description="clock frequency"),
    MetricView("mpki", "cache MPKI", "", 0.1, 100, log=True, warn=10,
               description="cache misses per 1000 instructions"),
    MetricView("cache_miss_pct", "cache miss", "%", 0, 100, warn=50,
               description="cache misses / cache references"),
    MetricView("power_pkg_w", "power pkg", "W", 0, 400, digits=0,
               description="RAPL power of the package"),
    MetricView("mem_used_pct", "mem used+cache", "%", 0, 100, warn=90,
               description="memory used on the NUMA node, page cache included"),
    MetricView("numa_miss_pct", "NUMA miss", "%", 0, 100, warn=5,
               description="allocations that missed their intended NUMA node"),
    MetricView("system_pct", "system", "%", 0, 100, description="time in the kernel"),
    MetricView("steal_pct", "steal", "%", 0, 100, warn=5, description="time stolen by the "
               "hypervisor"),
    MetricView("ctxsw_per_s", "ctx switches", "/s", 1, 1e6, log=True, digits=0,
               description="context switches per second"),
    MetricView("user_pct", "user", "%", 0, 100, description="time in user mode"),
    MetricView("iowait_pct", "iowait", "%", 0, 100, description="idle waiting for I/O"),
    MetricView("branch_miss_pct", "branch miss", "%", 0, 20, description="mispredicted "
               "branches per branch"),
    MetricView("branch_mpki", "branch MPKI", "", 0.1, 100, log=True,
               description="branch misses per 1000 instructions"),
    MetricView("frontend_stall_pct", "frontend stall", "%", 0, 100,
               description="cycles stalled in the front end"),
    MetricView("backend_stall_pct", "backend stall", "%", 0, 100,
               description="cycles stalled in the back end"),
    MetricView("gips", "instructions", "G/s", 0.01, 100, log=True, digits=2,
               description="billions of instructions per second"),
    MetricView("migrations_per_s", "migrations", "/s", 0.1, 1e5, log=True, digits=0,
               description="task migrations per second"),
    MetricView("faults_per_s", "page faults", "/s", 1, 1e7, log=True, digits=0,
               description="page faults per second"),
    MetricView("power_core_w", "power cores", "W", 0, 400, digits=0,
               description="RAPL power of the cores (PP0)"),
    MetricView("power_uncore_w", "power uncore", "W", 0, 100, digits=0,
               description="RAPL power of the uncore/GPU (PP1)"),
    MetricView("power_dram_w", "power dram", "W", 0, 100, digits=0,
               description="RAPL power of the DRAM"),
    MetricView("power_psys_w", "power psys", "W", 0, 1000, digits=0,
               description="RAPL platform power"),
    MetricView("mem_total_bytes", "mem total", "", 0, _B, is_bytes=True,
               description="memory of the NUMA nodes"),
    MetricView("mem_used_bytes", "mem used+cache", "", 0, _B, is_bytes=True,
               description="memory in use, page cache included (node meminfo MemUsed)"),
    MetricView("mem_free_bytes", "mem free", "", 0, _B, is_bytes=True,
               description="free memory of the NUMA nodes (MemFree)"),
    MetricView("mem_anon_bytes", "mem anon", "", 0, _B, is_bytes=True,
               description="anonymous memory (AnonPages)"),
    MetricView("mem_file_bytes", "page cache", "", 0, _B, is_bytes=True,
               description="page cache (FilePages)"),
    MetricView("numa_hit_per_s", "NUMA hit", "pages/s", 1, 1e7, log=True, digits=0,
               description="allocations on the intended node"),
    MetricView("numa_miss_per_s", "NUMA miss", "pages/s", 1, 1e7, log=True, digits=0,
               description="allocations here meant for another node"),
    MetricView("numa_foreign_per_s", "NUMA foreign", "pages/s", 1, 1e7, log=True, digits=0,
               description="allocations meant here that went elsewhere"),
    MetricView("numa_remote_pct", "NUMA remote", "%", 0, 100, warn=20,
               description="pages allocated here for processes running elsewhere"),
)

# The usual ones: the picker offers them first, then the user's metrics, then the rest.
USUAL = DEFAULTS[:11]

# Short names the views use for quantities whose catalogue name is long, and old spellings.
ALIASES: dict[str, tuple[str, ...]] = {
    "util": ("util_pct", "util"),
    "power_w": ("power_pkg_w", "power_w"),
    "mem_used": ("mem_used_bytes", "mem_used"),
    "mem_total": ("mem_total_bytes", "mem_total"),
}


def resolve(values: dict[str, Any], key: str) -> str | None:
    """The name under which a frame holds quantity ``key`` (None if it has none)."""
    for cand in ALIASES.get(key, (key,)):
        if cand in values:
            return cand
    return None


_CATALOGUE: Any = None     # set by use_catalogue(): the built-ins plus the user's metrics


def use_catalogue(catalogue: Any) -> None:
    """Make the views use this catalogue (``snumap top --metrics FILE``: the user's metrics
    get their unit, scale, thresholds and description); None goes back to the built-ins."""
    global _CATALOGUE
    _CATALOGUE = catalogue
    view_for.cache_clear()


def _catalogue() -> Any:
    if _CATALOGUE is not None:
        return _CATALOGUE
    try:
        from snumap_tui.model.metrics import default_catalogue
    except ImportError:    # pragma: no cover - the model is part of the package
        return None
    return default_catalogue()


def user_metric_names(values: dict[str, Any]) -> list[str]:
    """The metrics of a frame that come from the user's TOML file, in the file's order."""
    cat = _catalogue()
    if cat is None:
        return []
    return [m.name for m in cat if getattr(m, "user", False) and m.name in values]


@lru_cache(maxsize=256)
def view_for(key: str) -> MetricView:
    """The view of metric ``key``: the default, with scale/thresholds from the catalogue
    (cached: the views ask for it per row and per frame)."""
    name = ALIASES.get(key, (key,))[0]
    default = next((m for m in DEFAULTS if m.key == name), None)
    base = default or MetricView(name, name.replace("_", " "), "", digits=2)
    cat = _catalogue()
    if cat is None or name not in cat:
        return base
    spec = cat[name]
    if default is None and getattr(spec, "user", False):
        base = replace(base, label=name)     # a user's metric: its own name
    changes: dict[str, Any] = {"lo": spec.vmin, "hi": spec.vmax, "log": spec.scale == "log",
                               "description": spec.description}
    warn = [t for t in spec.thresholds if t.level == "warn"]
    if warn:
        changes["warn"] = warn[0].limit
        changes["warn_low"] = warn[0].op == "<"
    if spec.unit == "B":
        changes["is_bytes"] = True
    elif base.unit == "" and not base.is_bytes and spec.unit not in ("IPC", "MPKI"):
        changes["unit"] = spec.unit
    return replace(base, **changes)


def heatmap_metrics(values: dict[str, Any], pu_ids: Any = None) -> list[MetricView]:
    """The metrics a heatmap can cycle through for this frame: the usual ones first, then every
    other metric of the frame that has a value on some PU (``pu_ids``: their object ids)."""
    import numpy as np

    def has_pu_values(name: str) -> bool:
        arr = values.get(name)
        if arr is None:
            return False
        if pu_ids is None:
            return True
        return bool(np.isfinite(np.asarray(arr)[pu_ids]).any())

    out = [view_for(m.key) for m in USUAL if has_pu_values(m.key)]
    # The user's own metrics next: whoever wrote a metrics file wants to see them first.
    out += [view_for(n) for n in user_metric_names(values)
            if n not in {m.key for m in out} and has_pu_values(n)]
    known = {m.key for m in out}
    out += [view_for(n) for n in values if n not in known and n not in
            {m.key for m in USUAL} and has_pu_values(n)]
    return out or [view_for("util_pct")]


def fmt_bytes(n: float | None) -> str:
    """1.5G, 512M, n/a: compact binary units for memory columns."""
    if n is None or math.isnan(n):
        return "n/a"
    for unit, scale in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale:
            v = n / scale
            return f"{v:.0f}{unit}" if v >= 100 else f"{v:.1f}{unit}"
    return f"{n:.0f}B"
