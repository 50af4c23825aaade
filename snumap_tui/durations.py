"""Durations as people type them, for every option and prompt that takes one (`record
--interval/--duration`, `top --interval`, `exporter --interval`, `replay --at` and its "go to
time" prompt): "100ms", "2s", "1.5" (seconds), "1m", "250us", "2h", "1d", or on a clock
"1:02.5" (minutes:seconds) and "1:00:00" (hours:minutes:seconds).

Only digits and a unit: no sign, exponent, nan or inf, and nothing past ``MAX_S`` (a year), so
no option can be given a time that is negative, not a number, or absurd. Headless (no
textual, no numpy): the CLI and the views share it.
"""

from __future__ import annotations

import re

from snumap_tui.errors import SnumapError

UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0,
         "h": 3600.0, "d": 86400.0}
MAX_S = 366 * 86400.0
EXAMPLES = "examples: 100ms, 2s, 1.5, 1m, 1:30"
_NUMBER = r"(\d+(?:\.\d*)?|\.\d+)"
_WITH_UNIT = re.compile(_NUMBER + r"\s*([a-zµ]*)")
_CLOCK = re.compile(r"(?:(\d+):)?(\d+):" + _NUMBER)


def parse_duration(text: str, *, positive: bool = True, max_s: float = MAX_S) -> float:
    """Seconds from TEXT (the forms above). SnumapError when it is not one, above MAX_S,
    or 0 unless not POSITIVE (0 let through for a range check that says more, as
    ``check_interval`` does)."""
    s = (text or "").strip().lower()
    unit = _WITH_UNIT.fullmatch(s)
    clock = _CLOCK.fullmatch(s)
    if unit and (not unit.group(2) or unit.group(2) in UNITS):
        value = float(unit.group(1)) * UNITS[unit.group(2) or "s"]
    elif clock:
        hours, minutes, secs = clock.groups()
        value = int(hours or 0) * 3600.0 + int(minutes) * 60.0 + float(secs)
    else:
        raise SnumapError(f"bad duration {text!r} ({EXAMPLES})")
    if value > max_s:
        raise SnumapError(f"duration {text!r} is longer than {max_s / 86400:g} days")
    if positive and value <= 0:
        raise SnumapError("duration must be positive")
    return value
