"""The command line that runs this very snumap: this interpreter and this package, whatever
the working directory holds.

`python -m snumap_tui.cli` puts the working directory first on sys.path, so a child started
from inside a checkout (or from a directory anyone could write) would import that directory's
``snumap_tui`` instead of the parent's installed one. `scale`'s recorders, its Slurm tasks and
`top --job`'s node samplers all start through here (issue 30 item 13).
"""

from __future__ import annotations

import sys
from pathlib import Path

BOOT = ("import sys; d = sys.argv.pop(1); "
        "sys.path[:] = [p for p in sys.path if p not in ('', '.')]; sys.path.insert(0, d); "
        "import snumap_tui; sys.path.remove(d); sys.argv[0] = 'snumap'; "
        "from snumap_tui.cli import main; sys.exit(main())")


def snumap_argv(*args: str, python: str | None = None) -> list[str]:
    """``[python, -c, BOOT, HOME, *ARGS]``: HOME is the directory holding this process's own
    ``snumap_tui`` package; PYTHON defaults to this interpreter."""
    import snumap_tui

    home = str(Path(snumap_tui.__file__).resolve().parent.parent)
    return [python or sys.executable, "-c", BOOT, home, *args]
