"""A user's own metrics, from TOML: ``~/.config/snumap/metrics.toml`` and ``--metrics FILE``.

Dynamic lstopo let users describe a counter per object type (``OBJ``), as an expression over
hardware counters (``CTR``) with a colour scale (``LOGSCALE``, ``MIN``, ``MAX``). This is the
same idea as a TOML table per metric::

    # perf events the formulas use beyond the built-in ones (the perf source opens them)
    events = ["LLC-load-misses"]

    [metric.llc_load_mpki]
    object = "L3Cache"                  # OBJ: object type(s) it is shown on (default: all)
    formula = "1000 * llc_load_misses / instructions"   # CTR (a list = fallbacks in order)
    unit = "MPKI"
    description = "LLC load misses per 1000 instructions"
    rule = "sum"                        # counters summed at the object (or "mean" over PUs)
    logscale = true                     # LOGSCALE
    min = 0.1                           # MIN
    max = 100                           # MAX
    warn_above = 10                     # thresholds: warn_/crit_ + above/below

The file is untrusted text: formulas go through ``expr.parse`` (no eval), names must be known
counters, and every mistake is one ``SnumapError`` line naming the file and the metric.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 (pyproject depends on tomli there)
    import tomli as tomllib

from snumap_tui.errors import SnumapError
from snumap_tui.model.metrics import (
    COUNTERS,
    Catalogue,
    Metric,
    Threshold,
    make_metric,
    perf_counter_name,
)

# hwloc 2.x type names, and the short spellings lstopo and users write.
OBJECT_TYPES = ("Machine", "Package", "Die", "Group", "NUMANode", "MemCache", "L5Cache",
                "L4Cache", "L3Cache", "L2Cache", "L1Cache", "L3iCache", "L2iCache", "L1iCache",
                "Core", "PU")
_ALIASES = {t.lower(): t for t in OBJECT_TYPES} | {
    "socket": "Package", "pack": "Package", "numa": "NUMANode", "node": "NUMANode",
    "l1": "L1Cache", "l2": "L2Cache", "l3": "L3Cache", "l4": "L4Cache", "l5": "L5Cache",
    "l1d": "L1Cache", "l1i": "L1iCache", "cpu": "PU", "thread": "PU", "machine": "Machine"}

# A metrics file is a few kB; these bound what a wrong or hostile one costs (a 50 MB file took
# over a minute and gigabytes to parse): refused with one line, before parsing.
MAX_FILE_BYTES = 1 << 20
MAX_METRICS = 1000
MAX_FALLBACKS = 16
MAX_NAME = 64
_NAME = re.compile(f"[A-Za-z_][A-Za-z0-9_]{{0,{MAX_NAME - 1}}}")

_KEYS = {"object", "obj", "formula", "ctr", "expr", "unit", "description", "rule", "logscale",
         "scale", "min", "max", "warn_above", "warn_below", "crit_above", "crit_below",
         "group"}


def config_path() -> Path:
    """Where the user's own metrics file lives ($XDG_CONFIG_HOME/snumap/metrics.toml)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "snumap" / "metrics.toml"


def _object_types(where: str, value: Any) -> frozenset[str] | None:
    if value is None:
        return None
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise SnumapError(f"{where}: 'object' must be a type name or a list of them")
    out = set()
    for it in items:
        t = _ALIASES.get(str(it).strip().lower())
        if t is None:
            raise SnumapError(f"{where}: unknown object type {it!r} "
                              f"(one of {', '.join(OBJECT_TYPES)})")
        out.add(t)
    return frozenset(out)


def _number(where: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SnumapError(f"{where}: {key!r} must be a number, not {value!r}")
    return float(value)


def _metric(where: str, name: str, spec: Any, known: frozenset[str]) -> Metric:
    if not isinstance(spec, Mapping):
        raise SnumapError(f"{where}: must be a table ([metric.{name}])")
    bad = sorted(set(spec) - _KEYS)
    if bad:
        raise SnumapError(f"{where}: unknown key {bad[0]!r} (known: {', '.join(sorted(_KEYS))})")
    formulas = spec.get("formula", spec.get("ctr", spec.get("expr")))
    if formulas is None:
        raise SnumapError(f"{where}: needs a 'formula' (the CTR expression)")
    if isinstance(formulas, list) and not all(isinstance(f, str) for f in formulas):
        raise SnumapError(f"{where}: 'formula' must be a string or a list of strings")
    if isinstance(formulas, list) and len(formulas) > MAX_FALLBACKS:
        raise SnumapError(f"{where}: {len(formulas)} fallback formulas (at most {MAX_FALLBACKS})")
    scale = "log" if spec.get("logscale") is True else str(spec.get("scale", "linear"))
    if scale not in ("linear", "log"):
        raise SnumapError(f"{where}: 'scale' must be 'linear' or 'log', not {scale!r}")
    vmin = _number(where, "min", spec.get("min", 0.0))
    vmax = _number(where, "max", spec.get("max", 100.0))
    if vmax <= vmin or (scale == "log" and vmin <= 0):
        raise SnumapError(f"{where}: needs min < max (and min > 0 on a log scale), "
                          f"got min={vmin:g} max={vmax:g}")
    thresholds = []
    for key in ("warn_above", "warn_below", "crit_above", "crit_below"):
        if key in spec:
            level, side = key.split("_")
            thresholds.append(Threshold(">" if side == "above" else "<",
                                        _number(where, key, spec[key]), level))
    try:
        return make_metric(
            name, formulas, known=known, unit=str(spec.get("unit", "")),
            description=str(spec.get("description", name)), rule=str(spec.get("rule", "sum")),
            scale=scale, vmin=vmin, vmax=vmax, thresholds=tuple(thresholds),
            objects=_object_types(where, spec.get("object", spec.get("obj"))),
            group=str(spec.get("group", "user")), user=True)
    except SnumapError as exc:
        raise SnumapError(f"{where}: {exc}") from None


MAX_NESTING = 16


def _nesting(text: str) -> int:
    """An upper bound of how deep ``[`` and ``{`` nest in TOML text (brackets in strings and
    comments count too, and table headers as one level: a bound, not a parser)."""
    deepest = depth = 0
    for ch in text:
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth = max(depth - 1, 0)
    return deepest


def parse_metrics(text: str, source: str = "metrics.toml") -> tuple[list[Metric], list[str]]:
    """Metrics and extra perf events from the text of a metrics file (``source`` names it in
    errors)."""
    if len(text) > MAX_FILE_BYTES:
        raise SnumapError(f"{source}: {len(text)} characters; a metrics file may hold at most "
                          f"{MAX_FILE_BYTES} (1 MiB)")
    # tomllib recurses per nested array or inline table: 1,200 levels ended in a
    # RecursionError. What a metrics file holds nests 3 deep; more is refused before parsing.
    depth = _nesting(text)
    if depth > MAX_NESTING:
        raise SnumapError(f"{source}: arrays or tables nested {depth} deep (at most "
                          f"{MAX_NESTING})")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SnumapError(f"{source}: not valid TOML: {exc}") from None
    except RecursionError:
        raise SnumapError(f"{source}: arrays or tables nested too deeply") from None
    unknown_top = sorted(set(data) - {"events", "metric"})
    if unknown_top:
        raise SnumapError(f"{source}: unknown top-level key {unknown_top[0]!r} "
                          f"(expected 'events' and [metric.NAME] tables)")
    events = data.get("events", [])
    if not isinstance(events, list) or not all(isinstance(e, str) and e for e in events):
        raise SnumapError(f"{source}: 'events' must be a list of perf event names")
    from snumap_tui.native.perf_spec import EventSpecError, check_syntax

    for e in events:
        try:
            check_syntax(e)
        except EventSpecError as exc:
            raise SnumapError(f"{source}: {exc}") from None
    known = frozenset(COUNTERS) | {perf_counter_name(e) for e in events}
    tables = data.get("metric", {})
    if not isinstance(tables, Mapping):
        raise SnumapError(f"{source}: 'metric' must be tables: [metric.NAME]")
    if len(tables) > MAX_METRICS:
        raise SnumapError(f"{source}: {len(tables)} metrics (at most {MAX_METRICS})")
    metrics = []
    for name, spec in tables.items():
        # ASCII only: a name becomes part of Prometheus rule names ([a-zA-Z_:][a-zA-Z0-9_:]*),
        # where str.isalnum's "é" or "٣" would make the rules file invalid.
        if not _NAME.fullmatch(name):
            raise SnumapError(f"{source}: metric name {name!r} may only hold letters, digits "
                              f"and '_' (ASCII, not starting with a digit, at most "
                              f"{MAX_NAME} characters)")
        metrics.append(_metric(f"{source}: metric {name!r}", name, spec, known))
    return metrics, list(events)


def load_metrics_file(path: Path) -> tuple[list[Metric], list[str]]:
    try:
        # O_NONBLOCK and a regular file only: a FIFO would block, /dev/zero never end.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise SnumapError(f"metrics file {path}: not a regular file")
            if st.st_size > MAX_FILE_BYTES:
                raise SnumapError(f"metrics file {path}: {st.st_size} bytes; it may hold at "
                                  f"most {MAX_FILE_BYTES} (1 MiB)")
            body = f.read(MAX_FILE_BYTES + 1)
        text = body.decode("utf-8")
    except FileNotFoundError:
        raise SnumapError(f"metrics file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SnumapError(f"cannot read metrics file {path}: "
                          f"{getattr(exc, 'strerror', None) or exc}") from None
    return parse_metrics(text, str(path))


def load_catalogue(files: Iterable[Path | str] = (), user_config: bool = True) -> Catalogue:
    """The built-in catalogue, then the user's config file (if it exists), then each
    ``--metrics FILE`` (which must exist); later definitions replace earlier ones."""
    cat = Catalogue.default()
    paths: list[Path] = []
    if user_config and config_path().is_file():
        paths.append(config_path())
    paths.extend(Path(f) for f in files)
    extra: set[str] = set()
    for p in paths:
        metrics, events = load_metrics_file(p)
        cat.extend(metrics)
        extra.update(events)
    cat.extra_counters = frozenset(extra)
    return cat
