"""What every source shares for I/O: a replaceable file reader and the kernel's list formats.

Why a ``reader`` hook: tests run as root, where ``chmod 000`` does not stop a read, so a test
that wants to see what an unprivileged user sees (``energy_uj`` being root-only since 5.10)
passes a reader that raises ``PermissionError``; everything else reads through ``read_text``.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path

from snumap_tui.native.perf_pmu import parse_cpulist

Reader = Callable[[Path], str]

__all__ = [
    "MAX_FILE_BYTES",
    "READ_FLAGS",
    "Reader",
    "c_string",
    "decode_name",
    "is_live",
    "parse_cpulist",
    "parse_cpumask",
    "read_bytes",
    "read_name_text",
    "read_optional",
    "read_text",
    "reason_of",
    "user_hz",
]


# How every source opens a kernel file: a FIFO planted in an --fsroot tree must not block the
# reader (O_NONBLOCK: no writer reads as empty, a silent one as EAGAIN).
READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
# The most one file may hold: /proc/PID/numa_maps of a process at the kernel's map count
# limit is ~7 MB; a /dev/zero (or a 10 GB file) in a tree is refused at this, not read on.
MAX_FILE_BYTES = 32 << 20


def read_bytes(path: Path | str, limit: int = MAX_FILE_BYTES,
               opener: Callable[[Path | str, int], int] = os.open) -> bytes:
    """A kernel file read whole: a regular file (sysfs and procfs files are) of at most
    ``limit`` bytes; OSError otherwise (the source then says it could not read it). OPENER
    opens it (an --fsroot tree's checks where it is confined: sources/confine.py)."""
    fd = opener(path, READ_FLAGS)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        chunks = []
        n = 0
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
            n += len(chunk)
            if n > limit:
                raise OSError(errno.EFBIG, f"larger than {limit >> 20} MiB", str(path))
    finally:
        os.close(fd)
    return b"".join(chunks)


def read_text(path: Path) -> str:
    return read_bytes(path).decode("ascii", "replace")


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


def count_of(s: str, digits: int = 20) -> int | None:
    """A count written by the kernel (ASCII digits, no sign, at most ``digits`` of them, below
    2**64) as an int; None for anything else. ``str.isdigit`` alone lets '²' through, which
    ``int`` refuses, and a crafted file or environment may hold it."""
    s = s.strip()
    if not s.isascii() or not s.isdigit() or len(s) > digits:
        return None
    n = int(s)
    return n if n < 1 << 64 else None


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
