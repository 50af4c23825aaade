"""How to install what is missing, said for the Python that runs snumap.

A bare ``pip install`` is the wrong pip unless snumap's virtualenv is active in the user's
shell (``setup.sh run`` and ``~/.venvs/snumap/bin/snumap`` run snumap without activating it):
every hint names this interpreter's pip instead, ``/path/to/venv/bin/python -m pip install
'snumap[regions]'``. Standard library only: native/ and the sources use it too.
"""

from __future__ import annotations

import shlex
import sys


def pip_install(*requirements: str) -> str:
    """The command that installs REQUIREMENTS into the environment running snumap."""
    python = sys.executable or "python3"
    return " ".join([shlex.quote(python), "-m", "pip", "install",
                     *(shlex.quote(r) for r in requirements)])


def install_extra(extra: str) -> str:
    """The command that adds snumap's optional extra EXTRA (pyproject.toml) here."""
    return pip_install(f"snumap[{extra}]")
