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
    label: str                # short header, <= 6 chars
    unit: str                 # "%", "GHz", "W", ...
    lo: float = 0.0
    hi: float = 100.0
    log: bool = False
    warn: float | None = None   # threshold that marks a problem
    warn_low: bool = False      # the problem is *below* warn (low IPC) rather than above
    digits: int = 1
    description: str = ""

    def fmt(self, v: float | None, width: int = 5) -> str:
        """Fixed width, right aligned; 'n/a' for a value that could not be measured."""
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "n/a".rjust(width)
        if self.unit == "%":
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


# Keys are the catalogue's names (snumap_tui.model.metrics); these are the views' short
# headers and number formats. Scale and thresholds come from the catalogue when it has them.
DEFAULTS: tuple[MetricView, ...] = (
    MetricView("util_pct", "CPU", "%", 0, 100, description="busy time of the PUs (non-idle)"),
    MetricView("ipc", "IPC", "", 0, 4, digits=2, warn=0.5, warn_low=True,
               description="instructions per cycle (sum of instructions / sum of cycles)"),
    MetricView("ghz", "GHz", "GHz", 0, 5, digits=2, description="clock frequency"),
    MetricView("mpki", "MPKI", "", 0.1, 100, log=True, warn=10,
               description="cache misses per 1000 instructions"),
    MetricView("cache_miss_pct", "Miss", "%", 0, 100, warn=50,
               description="cache misses / cache references"),
    MetricView("power_pkg_w", "Watt", "W", 0, 400, digits=0,
               description="RAPL power of the package"),
    MetricView("mem_used_pct", "Mem", "%", 0, 100, warn=90,
               description="memory used on the NUMA node"),
    MetricView("numa_miss_pct", "NUMAm", "%", 0, 100, warn=5,
               description="allocations that missed their intended NUMA node"),
    MetricView("system_pct", "Sys", "%", 0, 100, description="time in the kernel"),
    MetricView("steal_pct", "Steal", "%", 0, 100, warn=5, description="time stolen by the "
               "hypervisor"),
    MetricView("ctxsw_per_s", "Ctxsw", "/s", 1, 1e6, log=True, digits=0,
               description="context switches per second"),
)

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
    base = default or MetricView(name, name.split("_")[0][:6], "", digits=2)
    cat = _catalogue()
    if cat is None or name not in cat:
        return base
    spec = cat[name]
    if default is None and getattr(spec, "user", False):
        base = replace(base, label=name[:6])     # a user's metric: its own name as header
    changes: dict[str, Any] = {"lo": spec.vmin, "hi": spec.vmax, "log": spec.scale == "log",
                               "description": spec.description}
    warn = [t for t in spec.thresholds if t.level == "warn"]
    if warn:
        changes["warn"] = warn[0].limit
        changes["warn_low"] = warn[0].op == "<"
    if base.unit == "" and spec.unit not in ("IPC", "MPKI", "B"):
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

    out = [view_for(m.key) for m in DEFAULTS if has_pu_values(m.key)]
    # The user's own metrics next: whoever wrote a metrics file wants to see them first.
    out += [view_for(n) for n in user_metric_names(values)
            if n not in {m.key for m in out} and has_pu_values(n)]
    known = {m.key for m in out}
    out += [view_for(n) for n in values if n not in known and n not in
            {m.key for m in DEFAULTS} and has_pu_values(n)]
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
