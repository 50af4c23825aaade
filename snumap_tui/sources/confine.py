"""Reads of a ``--fsroot`` tree stay inside it.

A gathered tree may come from another user. When snumap opens it (topology/build.py,
``check_links_inside``) a symbolic link that leads out is refused; this reader checks every
later read again, so a link put in place while ``top --fsroot`` runs is not followed either:
the file is opened (O_NONBLOCK, so a FIFO does not block), the path the kernel actually
opened is read back from /proc/self/fd and must lie inside the tree, and only then is the
file read, through that same descriptor, as every source reads (a regular file, never past
_io.MAX_FILE_BYTES). A file outside reads as "permission denied" -- the sources say it is
unavailable -- and no message quotes what it holds.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from snumap_tui.sources._io import Reader, read_bytes, read_text


def inside(real: str, top: str) -> bool:
    return real == top or real.startswith(top.rstrip(os.sep) + os.sep)


def confined_reader(root: Path | str) -> Reader:
    """read_text for the files under ``root`` that really are in it: one open, one readlink
    of the descriptor, then read as every source reads (_io.read_bytes: a regular file, of
    a bounded size), decoded as read_text does."""
    top = os.path.realpath(root)

    def opener(path: Path | str, flags: int) -> int:
        return open_checked(path, top, flags)

    def read(path: Path) -> str:
        return read_bytes(path, opener=opener).decode("ascii", "replace")
    read.confined_to = top        # type: ignore[attr-defined]
    return read


def open_checked(path: Path | str, top: str | None, flags: int = os.O_RDONLY | os.O_CLOEXEC
                 ) -> int:
    """os.open, and with ``top`` the opened file checked inside it (else PermissionError)."""
    fd = os.open(path, flags)
    if top is not None:
        try:
            ok = inside(os.readlink(f"/proc/self/fd/{fd}"), top)
        except OSError:
            ok = False
        if not ok:
            os.close(fd)
            raise PermissionError(errno.EACCES, "a symbolic link out of the --fsroot tree",
                                  str(path))
    return fd


def allows_fast(reader: Reader) -> bool:
    """A source may use its own os.open fast path (never with a test's reader): on the live
    / freely, on a confined tree through ``open_checked(path, top_of(reader))``."""
    return reader is read_text or top_of(reader) is not None


def top_of(reader: Reader) -> str | None:
    return getattr(reader, "confined_to", None)
