"""The one exception type users see.

Anything that is the user's input or the machine's state (a missing library, a wrong file, no
permission) is raised as SnumapError with a one-line message; `snumap_tui.cli.main` prints it as
``snumap: <message>`` on stderr and exits with ``exit_code`` (2 unless said otherwise). Bugs are
the only thing allowed to produce a traceback.
"""

from __future__ import annotations


class SnumapError(Exception):
    """A user-facing, one-line error."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code
