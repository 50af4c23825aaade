"""Option values that several subcommands parse: durations ("100ms", "2s": the one parser,
snumap_tui/durations.py), sampling intervals (a duration in the sampler's range) and sizes
("8M")."""

from __future__ import annotations

import re
from typing import Any

from snumap_tui.durations import parse_duration
from snumap_tui.errors import SnumapError

__all__ = ["interval_option", "option_value", "parse_duration", "parse_size"]


def option_value(option: str, text: str, parse: Any) -> Any:
    """``parse(text)``, its error naming the option the user gave (``--interval 0: interval
    0s is out of range ...``, as ``snumap top`` says it): a bare "must be positive" does not
    say which of several durations on the command line was wrong."""
    try:
        return parse(text)
    except SnumapError as exc:
        raise SnumapError(f"{option} {text}: {exc}") from None


def interval_option(text: str, minimum: float | None = None,
                    option: str = "--interval") -> float:
    """A sampling interval option (top, record, exporter): a duration in the sampler's
    range (from MINIMUM seconds where given: record goes down to 1 ms), its error naming the
    option."""
    from snumap_tui.model.sampler import MIN_INTERVAL_S, check_interval

    low = MIN_INTERVAL_S if minimum is None else minimum
    return float(option_value(option, text,
                              lambda t: check_interval(parse_duration(t, positive=False), low)))


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


def add_mode_argument(parser: Any) -> None:
    """``--mode OCTAL`` for every command that writes a file (snumap_tui.safeout)."""
    from snumap_tui.safeout import parse_mode

    parser.add_argument("--mode", type=_argparse_type(parse_mode), default=None,
                        metavar="OCTAL", help="permissions of what is written (default 0600 "
                        "as root, as perf does for perf.data; else 0666 minus the umask)")


def _argparse_type(parse: Any) -> Any:
    """A SnumapError parser as an argparse type: its line is argparse's usage error."""
    import argparse

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except SnumapError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return convert
