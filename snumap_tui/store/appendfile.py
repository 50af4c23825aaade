"""The file end of a recording's Writer: whole chunks written or none, and the syncs that
bound what a power loss can take (store/writer.py has the why of both)."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path
from typing import Any

from snumap_tui.errors import SnumapError
from snumap_tui.store import chunks as C


class AppendFile:
    """Mixin of Writer: ``_fd`` open for appending at ``_offset``; ``_io`` the lock of the
    file's state; ``_gen`` counts writes, ``_unsynced`` says one is not synced yet."""

    path: Path
    sync_interval: float
    _fd: int
    _offset: int
    _gen: int
    _unsynced: bool
    _last_sync: float
    _io: Any
    _failed: SnumapError | None

    def _write(self, blob: bytes, kind: int | None) -> None:
        """All of ``blob`` or nothing: after a failed write the file is cut back to the end of
        the last complete chunk, so what is on disk stays a clean recording."""
        view = memoryview(blob)
        done = 0
        try:
            while done < len(view):
                done += os.write(self._fd, view[done:])
        except OSError as e:
            try:
                os.ftruncate(self._fd, self._offset)
            except OSError:
                pass  # the reader skips a truncated tail anyway
            what = C.KIND_NAMES.get(kind, "file header") if kind else "file header"
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                msg = (f"disk full while writing {self.path} ({what} chunk): recording stopped; "
                       f"the {self._offset} bytes already written stay readable")
            else:
                msg = f"cannot write {self.path}: {e.strerror}; recording stopped"
            self._failed = SnumapError(msg)
            raise self._failed from None
        self._offset += len(blob)
        self._unsynced = True
        self._gen += 1

    def _sync_due(self) -> bool:
        return self._unsynced and time.monotonic() - self._last_sync >= self.sync_interval

    def _sync_unlocked(self, gen: int) -> None:
        """The flusher thread's fdatasync, outside the lock: on a busy disk it took 100s of ms,
        and the main thread, blocked on the lock to add its next batch, stopped emptying the
        kernel's event buffers (a switch storm then lost up to half its events). Writes made
        meanwhile stay due for the next sync."""
        began = time.monotonic()
        try:
            os.fdatasync(self._fd)
        except OSError as e:
            if e.errno not in (errno.EINVAL, errno.EROFS):   # pipes and odd filesystems
                self._failed = SnumapError(f"cannot sync {self.path}: {e.strerror}")
                return
        with self._io:          # not the Writer's lock (see _autoflush)
            self._last_sync = began
            if self._gen == gen:
                self._unsynced = False

    def _sync(self) -> None:
        try:
            os.fdatasync(self._fd)
        except OSError as e:
            if e.errno not in (errno.EINVAL, errno.EROFS):  # pipes and odd filesystems
                self._failed = SnumapError(f"cannot sync {self.path}: {e.strerror}")
                raise self._failed from None
        self._last_sync = time.monotonic()
        self._unsynced = False
