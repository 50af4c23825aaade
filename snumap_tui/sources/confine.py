"""Reads of a ``--fsroot`` tree stay inside it.

A gathered tree may come from another user. When snumap opens it (topology/build.py,
``check_links_inside``) a symbolic link that leads out is refused; this reader checks every
later read again, so a link put in place while ``top --fsroot`` runs is not followed either:
the file is opened (O_NONBLOCK, so a FIFO does not block), the path the kernel actually
opened is read back from /proc/self/fd and must lie inside the tree, and only then is the
file read, through that same descriptor and never past ``MAX_BYTES``. A file outside reads as "permission denied" -- the
sources say it is unavailable -- and no message quotes what it holds.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from snumap_tui.sources._io import Reader


def inside(real: str, top: str) -> bool:
    return real == top or real.startswith(top.rstrip(os.sep) + os.sep)


MAX_BYTES = 64 << 20       # far above any /sys or /proc file; a tree's file is not read past it


def confined_reader(root: Path | str) -> Reader:
    """read_text for the files under ``root`` that really are in it: one open, one readlink
    of the descriptor, the reads (at most ``MAX_BYTES``), decoded as read_text does."""
    top = os.path.realpath(root)

    def read(path: Path) -> str:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            if not inside(os.readlink(f"/proc/self/fd/{fd}"), top):
                raise PermissionError(errno.EACCES, "a symbolic link out of the --fsroot tree",
                                      str(path))
            chunks, total = [], 0
            while chunk := os.read(fd, 65536):
                chunks.append(chunk)
                total += len(chunk)
                if total > MAX_BYTES:
                    raise OSError(errno.EFBIG, "larger than any kernel file", str(path))
            return b"".join(chunks).decode("ascii", "replace")
        except BlockingIOError:     # a FIFO with no writer: nothing to read
            return ""
        finally:
            os.close(fd)
    return read
