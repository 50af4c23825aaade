"""The file `snumap record` writes: checked before anything starts, put under its name only
once the recording has really started, locked while it is written.

The recording is written from the start under a temporary name beside OUT (snumap_tui.safeout:
mkstemp in the same directory, so the rename is atomic and a planted name or link is never
opened), flock'ed, and renamed to OUT when the recording starts -- when the command has
exec'd, or the system-wide loop runs. From then on the Writer keeps appending to the same
file under OUT, so a crash or a SIGKILL keeps what was recorded under the name the user gave
(docs/format.md, crash safety). A command that cannot start, a tracer that fails, Ctrl-C or
SIGTERM before that leave the old recording as it was and remove the temporary file. The
lock lasts until the Writer closes the file: a second `record -o OUT --force` meanwhile is
refused instead of replacing a recording in progress.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from snumap_tui.errors import SnumapError
from snumap_tui.safeout import SafeOutput


class OutputFile:
    """Where the Writer writes (``fd``, ``path``) and where the recording ends up (``out``)."""

    def __init__(self, out: Path, force: bool, mode: int | None = None,
                 inputs: Sequence[str | Path] = ()) -> None:
        """Make sure OUT can be written before any tracer starts (not an existing file
        without FORCE, not a directory, not a recording in progress), and create the
        temporary file the Writer will write, since only the kernel knows (root may create
        nothing in /proc, on a read-only mount...)."""
        if not os.access(out.parent if str(out.parent) else ".", os.W_OK | os.X_OK) \
                and out.parent.is_dir():
            raise SnumapError(f"cannot write {out}: {out.parent or '.'} is not writable")
        self.out = out
        self.recording = False
        self.sink = SafeOutput(out, force=force, mode=mode, lock=True, inputs=inputs)
        self.path = self.sink.tmp

    def writer_fd(self) -> int:
        """A descriptor of the file for the Writer (it closes it; the lock lasts until the
        last one is closed)."""
        return os.dup(self.sink.fd)

    def start(self, writer: Any = None) -> None:
        """The recording has started: put it under its name (the open Writer keeps writing
        to the same file) and keep it from now on, whatever happens."""
        if not self.recording:
            self.sink.commit()
            if writer is not None:
                writer.path = self.out        # its messages name the file the user knows
        self.recording = True

    def discard(self, say: Any) -> None:
        """The recording never started: remove the temporary file (left behind it would only
        be clutter; the name the user gave was never taken)."""
        if self.recording:
            return
        try:
            self.sink.discard()
        except OSError as e:
            say(f"cannot remove {self.path}: {e.strerror or e}")
