"""The file `snumap record` writes: checked before anything starts, replaced only once the
recording has really started.

With ``--force`` over an existing recording, the new one is written under a temporary name
beside it (same directory, so the rename is atomic) and renamed over the old one when the
recording starts -- when the command has exec'd, or the system-wide loop runs. A command that
cannot start, a tracer that fails, or Ctrl-C before that leaves the old recording as it was.
After the rename a crash keeps what was recorded under the name the user gave, as before.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from snumap_tui.errors import SnumapError


class OutputFile:
    """Where the Writer writes (``path``) and where the recording ends up (``target``)."""

    def __init__(self, out: Path, force: bool) -> None:
        """Make sure OUT can be written before any tracer starts: not an existing file without
        FORCE, not a directory, in a writable directory -- and then create the file the Writer
        will open, since only the kernel knows (root may create nothing in /proc, on a
        read-only mount...)."""
        if out.is_dir():
            raise SnumapError(f"{out} is a directory")
        if out.exists() and not force:
            raise SnumapError(f"{out} already exists (use --force to overwrite it)")
        parent = out.parent if str(out.parent) else Path(".")
        if not parent.is_dir():
            raise SnumapError(f"cannot write {out}: {parent} is not a directory")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise SnumapError(f"cannot write {out}: {parent} is not writable")
        self.out = out
        self.recording = False
        self.target = out.resolve() if out.is_symlink() else out
        existed = out.exists()
        # A regular file that exists is replaced by a rename; anything else (a new name, or
        # /dev/null, a FIFO) is written in place.
        self.replacing = existed and stat.S_ISREG(os.stat(out).st_mode)
        self.path = (self.target.parent / f".{self.target.name}.snumap-{os.getpid()}.partial"
                     if self.replacing else out)
        self.created = not existed or self.replacing
        flags = os.O_WRONLY | os.O_CLOEXEC | os.O_CREAT | (os.O_EXCL if self.created else 0)
        try:
            os.close(os.open(self.path, flags, 0o644))
        except FileExistsError:
            raise SnumapError(f"{out} already exists (use --force to overwrite it)") from None
        except OSError as e:
            raise SnumapError(f"cannot create {out}: {e.strerror or e}") from None

    def start(self, writer: Any = None) -> None:
        """The recording has started: put it under its name (the open Writer keeps writing
        to the same file) and keep it from now on, whatever happens."""
        if self.replacing and not self.recording:
            try:
                os.replace(self.path, self.target)
            except OSError as e:
                raise SnumapError(f"cannot replace {self.out}: {e.strerror or e}") from None
            if writer is not None:
                writer.path = self.out        # its messages name the file the user knows
        self.recording = True

    def discard(self, say: Any) -> None:
        """The recording never started: remove the file this run created (a temporary one, or
        a new name that left behind would make the corrected rerun fail with "already
        exists"). A file that was there before is left alone."""
        if self.recording or not self.created:
            return
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        except OSError as e:
            say(f"cannot remove {self.path}: {e.strerror or e}")
