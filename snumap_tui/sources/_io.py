"""What every source shares for I/O: a replaceable file reader and the kernel's list formats.

Why a ``reader`` hook: tests run as root, where ``chmod 000`` does not stop a read, so a test
that wants to see what an unprivileged user sees (``energy_uj`` being root-only since 5.10)
passes a reader that raises ``PermissionError``; everything else reads through ``read_text``.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

from snumap_tui.native.perf_pmu import parse_cpulist

Reader = Callable[[Path], str]

__all__ = [
    "Reader",
    "c_string",
    "decode_name",
    "is_live",
    "parse_cpulist",
    "parse_cpumask",
    "read_name_text",
    "read_optional",
    "read_text",
    "reason_of",
    "user_hz",
]


def read_text(path: Path) -> str:
    with open(path, encoding="ascii", errors="replace") as f:
        return f.read()


def decode_name(raw: bytes) -> str:
    """Text the kernel keeps as bytes and anyone can set (a comm, by prctl(PR_SET_NAME); an
    argv; a cgroup or file name): UTF-8, each other byte as ``\\xNN``. One other user's odd
    name must never stop a reading, and the result has no lone surrogates, so it can be
    stored, printed and exported like any string."""
    return raw.decode("utf-8", "backslashreplace")


def c_string(raw: bytes) -> str:
    """A NUL-padded name from a kernel record (``char comm[16]``), decoded as above."""
    return decode_name(raw.split(b"\0", 1)[0])


def read_name_text(path: Path) -> str:
    """A /proc file that holds such names (comm, stat, status, cgroup), decoded as above."""
    with open(path, "rb") as f:
        return decode_name(f.read())


def read_optional(reader: Reader, path: Path) -> str | None:
    """A file that may legitimately be missing (an optional kernel feature): None if absent."""
    try:
        return reader(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def user_hz() -> int:
    """USER_HZ, the unit of /proc's tick counts (/proc/stat, utime/stime of /proc/PID/stat):
    sysconf(_SC_CLK_TCK) (proc(5)). A kernel ABI constant, 100 on every mainstream arch, but
    read, not assumed; every reading that holds ticks carries it as ``hz``."""
    try:
        return int(os.sysconf("SC_CLK_TCK"))
    except (AttributeError, ValueError, OSError):
        return 100


def parse_cpumask(text: str) -> list[int]:
    """The kernel's cpumask format ("00000000,000000ff": 32-bit hex words, high first)."""
    value = int(text.strip().replace(",", "") or "0", 16)
    out = []
    i = 0
    while value:
        if value & 1:
            out.append(i)
        value >>= 1
        i += 1
    return out


def is_live(root: Path) -> bool:
    """True when ``root`` is this machine's own / (perf_event_open counts this machine only)."""
    try:
        return Path(root).resolve() == Path("/")
    except OSError:
        return False


def reason_of(exc: OSError) -> str:
    """A one-line reason for a failed read: 'permission denied (EACCES): <path>'."""
    name = errno.errorcode.get(exc.errno or 0, "")
    what = (exc.strerror or str(exc)).lower()
    return f"{what} ({name}): {exc.filename}" if exc.filename else f"{what} ({name})"
