"""Wall clock vs CLOCK_MONOTONIC on this node: what aligns recordings made on several nodes.

Events are stamped with CLOCK_MONOTONIC (docs/format.md), which starts at boot on every node;
only the wall clock (CLOCK_REALTIME, kept in step across a cluster by NTP or PTP) is shared.
The offset ``wall - monotonic`` is measured by reading monotonic, wall, monotonic and keeping
the tightest of a few tries: the offset is exact to within half that read window. Measured at
the start and at the end of a recording, it also shows how far the two clocks drifted apart
(an NTP slew) while it ran.

How far this node's wall clock may be from true time is the kernel's own estimate, from
adjtimex(2) (``struct timex``: ``maxerror`` and ``esterror`` in microseconds, ``TIME_ERROR``
(5) as the return value when the clock is not synchronised). Two nodes' wall clocks may differ
by up to the sum of their ``maxerror``s; that is the alignment error a merge keeps.
"""

from __future__ import annotations

import ctypes
import time
from typing import Any

from snumap_tui.native.libc import libc

TIME_ERROR = 5
# struct timex (LP64): modes u32 (+4 padding), offset, freq, maxerror, esterror (long each),
# status int, ... and reserved space; the kernel's struct is 208 bytes, we pass more.
_TIMEX_SIZE = 512
_OFF_MAXERROR, _OFF_ESTERROR, _OFF_STATUS = 24, 32, 40
STA_UNSYNC = 0x0040


def measure_offset(tries: int = 7) -> tuple[int, int, int]:
    """(wall - monotonic in ns, its uncertainty in ns, the monotonic time of the reading)."""
    best: tuple[int, int, int] | None = None
    for _ in range(max(1, tries)):
        m1 = time.monotonic_ns()
        w = time.time_ns()
        m2 = time.monotonic_ns()
        half = (m2 - m1 + 1) // 2
        mid = m1 + (m2 - m1) // 2
        if best is None or half < best[1]:
            best = (w - mid, half, mid)
    assert best is not None
    return best


def ntp_state() -> dict[str, Any]:
    """adjtimex(2) read-only: {"synced": bool, "maxerror_ns", "esterror_ns"}, or
    {"synced": None, "reason"} where the call is not available."""
    try:
        buf = ctypes.create_string_buffer(_TIMEX_SIZE)   # modes = 0: read only
        state = libc().adjtimex(buf)
    except (OSError, AttributeError) as exc:
        return {"synced": None, "reason": f"adjtimex unavailable: {exc}"}
    if state < 0:
        return {"synced": None, "reason": f"adjtimex failed (errno {ctypes.get_errno()})"}
    raw = buf.raw
    maxerr = int.from_bytes(raw[_OFF_MAXERROR:_OFF_MAXERROR + 8], "little", signed=True)
    esterr = int.from_bytes(raw[_OFF_ESTERROR:_OFF_ESTERROR + 8], "little", signed=True)
    status = int.from_bytes(raw[_OFF_STATUS:_OFF_STATUS + 4], "little", signed=True)
    synced = state != TIME_ERROR and not status & STA_UNSYNC
    return {"synced": synced, "maxerror_ns": maxerr * 1000, "esterror_ns": esterr * 1000}


def clock_reading() -> dict[str, Any]:
    """One reading for a recording: the offset, its read uncertainty and the NTP state."""
    off, unc, t = measure_offset()
    return {"t_monotonic_ns": t, "wall_minus_monotonic_ns": off, "uncertainty_ns": unc,
            "ntp": ntp_state()}


def wall_error_ns(reading: dict[str, Any] | None) -> int | None:
    """How far this node's wall clock may be off: NTP's maxerror when synchronised (None when
    the clock is not synchronised or unknown), plus the read uncertainty."""
    if not reading:
        return None
    ntp = reading.get("ntp") or {}
    if not ntp.get("synced"):
        return None
    return int(ntp.get("maxerror_ns", 0)) + int(reading.get("uncertainty_ns", 0))
