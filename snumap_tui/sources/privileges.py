"""Which capabilities this process has (capabilities(7); proc(5) ``CapEff:`` in /proc/self/status).

Tracing with eBPF needs CAP_BPF + CAP_PERFMON (Linux >= 5.8) or CAP_SYS_ADMIN; opening
tracepoints with perf_event_open system-wide needs CAP_PERFMON (or CAP_SYS_ADMIN) unless
kernel.perf_event_paranoid allows it. Root has them all.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

CAPS = {"CAP_SYS_ADMIN": 21, "CAP_PERFMON": 38, "CAP_BPF": 39}


def parse_capeff(status_text: str) -> int | None:
    """The effective capability mask from /proc/PID/status text, or None."""
    for line in status_text.splitlines():
        if line.startswith("CapEff:"):
            return int(line.split(":", 1)[1].strip(), 16)
    return None


def effective_caps(proc: Path = Path("/proc")) -> int:
    try:
        mask = parse_capeff((proc / "self" / "status").read_text())
    except OSError:
        mask = None
    return mask or 0


def has_caps(names: Iterable[str], alternative: str | None = None,
             mask: int | None = None) -> str | None:
    """None if all NAMES (or ALTERNATIVE) are effective, else the missing ones, joined."""
    eff = effective_caps() if mask is None else mask
    if alternative and eff >> CAPS[alternative] & 1:
        return None
    missing = [n for n in names if not eff >> CAPS[n] & 1]
    return "/".join(missing) or None
