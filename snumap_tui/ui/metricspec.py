"""How the views show a metric: label, unit, number format and the 0..1 colour position.

Why a UI-side table: the model's catalogue (``snumap_tui.model.metrics``) owns each metric's
scale, thresholds and description, and how a value maps onto the scale (``Metric.normalize``,
``Metric.level``); the views additionally need a short readable label, a unit to print and a
fixed-width formatter. So the table below holds only those, and a ``MetricView`` carries the
catalogue's ``Metric`` for everything else: one copy of the scale and the thresholds, one copy
of the logic that applies them. Headless: no textual, no rich (batch mode uses it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, NamedTuple

from snumap_tui.model.metrics import Catalogue, Metric, default_catalogue


@dataclass(frozen=True)
class MetricView:
    """A metric as the views show it. Scale, thresholds and description are the model's
    (``metric``); label, unit, digits and bytes-ness are the UI's."""

    key: str                  # name in Frame.values
    label: str                # readable name without its unit: "power pkg", "NUMA miss"
    unit: str                 # "%", "GHz", "W", ... ("" for ratios and for bytes)
    digits: int = 1
    is_bytes: bool = False    # memory: shown as 2.9GiB, never as 3042338.0k
    # The catalogue's metric (a bare one, 0..100 linear and no threshold, for a frame value
    # the catalogue does not know).
    metric: Metric = field(default_factory=lambda: _bare("?"), compare=False, repr=False)
    # norm() of values already seen: a heatmap asks for the same PU value once per line of a
    # tall cell, and the model's normalize is numpy (microseconds per scalar).
    _norms: dict[float, float] = field(default_factory=dict, compare=False, repr=False)

    # ---- the model's scale and thresholds, under the names the views read --------------
    @property
    def lo(self) -> float:
        return self.metric.vmin

    @property
    def hi(self) -> float:
        return self.metric.vmax

    @property
    def log(self) -> bool:
        return self.metric.scale == "log"

    @property
    def warn(self) -> float | None:
        return self.metric.warn

    @property
    def description(self) -> str:
        return self.metric.description

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
        """Position on the colour scale, 0..1 (``Metric.normalize``); None for n/a."""
        if v is None or math.isnan(v):
            return None
        cache = self._norms
        got = cache.get(v)
        if got is None:
            if len(cache) >= 4096:         # live values rarely repeat across frames
                cache.clear()
            got = cache[v] = float(self.metric.normalize(v))
        return got

    def is_problem(self, v: float | None) -> bool:
        """Whether ``v`` crosses one of the metric's thresholds (``Metric.level``)."""
        if v is None or not self.metric.thresholds or math.isnan(v):
            return False
        return self.metric.level(v) is not None


def _bare(name: str) -> Metric:
    """A metric the catalogue does not define (a frame value without a formula): the default
    0..100 linear scale, nothing flagged."""
    return Metric(name=name, unit="", description="", exprs=())


class Look(NamedTuple):
    """The UI's part of a metric: what a user reads and how its numbers are printed."""

    key: str
    label: str
    unit: str
    digits: int = 1
    is_bytes: bool = False


# Keys are the catalogue's names (snumap_tui.model.metrics); these are the names a user reads
# in the metric picker, the history line and the heatmap legend (unique, never cut, the unit
# apart so no line says "GHz GHz") and the number formats. Scales, thresholds and
# descriptions are the catalogue's.
DEFAULTS: tuple[Look, ...] = (
    Look("util_pct", "CPU", "%"),
    Look("ipc", "IPC", "", digits=2),
    Look("ghz", "clock", "GHz", digits=2),
    Look("mpki", "cache MPKI", ""),
    Look("cache_miss_pct", "cache miss", "%"),
    Look("power_pkg_w", "power pkg", "W", digits=0),
    Look("mem_used_pct", "mem used+cache", "%"),
    Look("numa_miss_pct", "NUMA miss", "%"),
    Look("system_pct", "system", "%"),
    Look("steal_pct", "steal", "%"),
    Look("ctxsw_per_s", "ctx switches", "/s", digits=0),
    Look("user_pct", "user", "%"),
    Look("iowait_pct", "iowait", "%"),
    Look("branch_miss_pct", "branch miss", "%"),
    Look("branch_mpki", "branch MPKI", ""),
    Look("frontend_stall_pct", "frontend stall", "%"),
    Look("backend_stall_pct", "backend stall", "%"),
    Look("gips", "instructions", "G/s", digits=2),
    Look("migrations_per_s", "migrations", "/s", digits=0),
    Look("faults_per_s", "page faults", "/s", digits=0),
    Look("power_core_w", "power cores", "W", digits=0),
    Look("power_uncore_w", "power uncore", "W", digits=0),
    Look("power_dram_w", "power dram", "W", digits=0),
    Look("power_psys_w", "power psys", "W", digits=0),
    Look("mem_total_bytes", "mem total", "", is_bytes=True),
    Look("mem_used_bytes", "mem used", "", is_bytes=True),
    Look("mem_free_bytes", "mem free", "", is_bytes=True),
    Look("mem_anon_bytes", "mem anon", "", is_bytes=True),
    Look("mem_file_bytes", "page cache", "", is_bytes=True),
    Look("numa_hit_per_s", "NUMA hit", "pages/s", digits=0),
    Look("numa_miss_per_s", "NUMA miss", "pages/s", digits=0),
    Look("numa_foreign_per_s", "NUMA foreign", "pages/s", digits=0),
    Look("numa_remote_pct", "NUMA remote", "%"),
    # I/O where it attaches (model/iometrics.py): bytes per second shown as 12.0MiB.
    Look("net_rx_bytes_per_s", "NIC rx/s", "", is_bytes=True),
    Look("net_tx_bytes_per_s", "NIC tx/s", "", is_bytes=True),
    Look("net_packets_per_s", "NIC packets", "/s", digits=0),
    Look("ib_rx_bytes_per_s", "IB rx/s", "", is_bytes=True),
    Look("ib_tx_bytes_per_s", "IB tx/s", "", is_bytes=True),
    Look("disk_read_bytes_per_s", "disk read/s", "", is_bytes=True),
    Look("disk_write_bytes_per_s", "disk write/s", "", is_bytes=True),
    Look("disk_util_pct", "disk busy", "%"),
    Look("gpu_util_pct", "GPU", "%"),
    Look("gpu_mem_used_bytes", "GPU mem", "", is_bytes=True),
    Look("gpu_power_w", "GPU power", "W", digits=0),
)
_LOOKS = {look.key: look for look in DEFAULTS}

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


_CATALOGUE: Catalogue | None = None   # set by use_catalogue(): built-ins + the user's metrics


def use_catalogue(catalogue: Catalogue | None) -> None:
    """Make the views use this catalogue (``snumap top --metrics FILE``: the user's metrics
    get their unit, scale, thresholds and description); None goes back to the built-ins."""
    global _CATALOGUE
    _CATALOGUE = catalogue
    view_for.cache_clear()


def active_catalogue() -> Catalogue:
    """The catalogue the views show: the one given to ``use_catalogue``, else the built-ins."""
    return _CATALOGUE if _CATALOGUE is not None else default_catalogue()


def user_metric_names(values: dict[str, Any]) -> list[str]:
    """The metrics of a frame that come from the user's TOML file, in the file's order."""
    return [m.name for m in active_catalogue() if m.user and m.name in values]


@lru_cache(maxsize=256)
def view_for(key: str) -> MetricView:
    """The view of metric ``key``: the UI's look with the catalogue's metric (cached: the views
    ask for it per row and per frame)."""
    name = ALIASES.get(key, (key,))[0]
    cat = active_catalogue()
    metric = cat[name] if name in cat else _bare(name)
    look = _LOOKS.get(name)
    if look is None:
        # Not in the table: a user's metric keeps its own name, anything else is readable.
        label = name if metric.user else name.replace("_", " ")
        look = Look(name, label, "", digits=2)
    view = MetricView(*look, metric=metric)
    if metric.unit == "B":
        return replace(view, is_bytes=True)
    if not view.unit and not view.is_bytes and metric.unit not in ("", "IPC", "MPKI"):
        return replace(view, unit=metric.unit)     # IPC and MPKI are their own label
    return view


def metric_choices(values: dict[str, Any]) -> list[tuple[MetricView, bool]]:
    """Every metric of the frame, in the picker's order (the usual ones, the user's, the
    rest), each with whether it has a value on any object here (False: n/a everywhere, a
    VM without a PMU or RAPL; the picker marks those and ``m`` skips them)."""
    import numpy as np

    def has_data(name: str) -> bool:
        arr = values.get(name)
        return arr is not None and bool(np.isfinite(np.asarray(arr, dtype=np.float64)).any())

    names = [m.key for m in USUAL if m.key in values]
    names += [n for n in user_metric_names(values) if n not in names]
    names += [n for n in values if n not in names and n not in {m.key for m in USUAL}]
    return [(view_for(n), has_data(n)) for n in names]


def heatmap_metrics(values: dict[str, Any], pu_ids: Any = None) -> list[MetricView]:
    """The metrics a heatmap can cycle through for this frame: the usual ones first, then every
    other metric of the frame that has a value somewhere (on some PU when ``pu_ids``, their
    object ids, are given; else on any object: memory and NUMA miss are a node's, and the
    heatmap shows them there)."""
    import numpy as np

    def has_pu_values(name: str) -> bool:
        arr = values.get(name)
        if arr is None:
            return False
        arr = np.asarray(arr, dtype=np.float64)
        if pu_ids is None:
            # The first object (the machine) holds a value for most metrics: one look at it
            # instead of a pass over every object, for each of some forty metrics a frame.
            if arr.size and math.isfinite(arr.flat[0]):
                return True
            return bool(np.isfinite(arr).any())
        return bool(np.isfinite(arr[pu_ids]).any())

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
