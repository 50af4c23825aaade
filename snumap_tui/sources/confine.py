"""Reads of a ``--fsroot`` tree stay inside it.

A gathered tree may come from another user. When snumap opens it (topology/build.py,
``check_links_inside``) a symbolic link that leads out is refused; this reader checks every
later read again, so a link put in place while ``top --fsroot`` runs is not followed either:
the file is opened (O_NONBLOCK, so a FIFO does not block), the path the kernel actually
opened is read back from /proc/self/fd and must lie inside the tree, and only then is the
file read, through that same open file. A file outside reads as "permission denied" -- the
sources say it is unavailable -- and no message quotes what it holds.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from snumap_tui.sources._io import Reader, read_text


def inside(real: str, top: str) -> bool:
    return real == top or real.startswith(top.rstrip(os.sep) + os.sep)


def confined_reader(root: Path | str, inner: Reader = read_text) -> Reader:
    """``inner`` (read_text) for the files under ``root`` that really are in it."""
    top = os.path.realpath(root)

    def read(path: Path) -> str:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            real = os.readlink(f"/proc/self/fd/{fd}")
            if not inside(real, top):
                raise PermissionError(errno.EACCES, "a symbolic link out of the --fsroot tree",
                                      str(path))
            try:
                return inner(Path(f"/proc/self/fd/{fd}"))
            except OSError as e:      # named by the path the source asked for
                raise OSError(e.errno, e.strerror, str(path)) from None
        finally:
            os.close(fd)
    return read
