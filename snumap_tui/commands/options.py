"""Option values that several subcommands parse: durations ("100ms", "2s") and sizes ("8M")."""

from __future__ import annotations

import re
from typing import Any

from snumap_tui.errors import SnumapError

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0,
          "h": 3600.0}


def parse_duration(text: str, *, positive: bool = True) -> float:
    """Seconds from "100ms", "2s", "1.5" (seconds), "1m", "250us". Without ``positive``, 0 is
    let through for a range check that says more (``check_interval``)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zµ]*)\s*", text or "")
    if not m or (m.group(2) and m.group(2) not in _UNITS):
        raise SnumapError(f"bad duration {text!r} (examples: 100ms, 2s, 1.5, 1m)")
    value = float(m.group(1)) * _UNITS.get(m.group(2) or "s", 1.0)
    if positive and value <= 0:
        raise SnumapError("duration must be positive")
    return value


def option_value(option: str, text: str, parse: Any) -> Any:
    """``parse(text)``, its error naming the option the user gave (``--interval 0: interval
    0s is out of range ...``, as ``snumap top`` says it): a bare "must be positive" does not
    say which of several durations on the command line was wrong."""
    try:
        return parse(text)
    except SnumapError as exc:
        raise SnumapError(f"{option} {text}: {exc}") from None


_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20,
               "g": 1 << 30, "gib": 1 << 30}


def parse_size(text: str, most: int = 1 << 40) -> int:
    """Bytes from "8M", "512k", "1GiB", "65536"; at most ``most``."""
    m = re.fullmatch(r"\s*(\d{1,30}(?:\.\d{0,30})?)\s*([a-zA-Z]*)\s*", text or "")
    if not m or m.group(2).lower() not in _SIZE_UNITS:
        raise SnumapError(f"bad size {text!r} (examples: 8M, 512k, 1G)")
    value = float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()]
    if value > most:
        raise SnumapError(f"size {text!r} is above {most >> 20} MiB")
    if value < 4096:
        raise SnumapError(f"size {text!r} is below one page")
    return int(value)
