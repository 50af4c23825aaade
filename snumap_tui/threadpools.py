"""snumap's own numeric thread pools: one thread, whatever the node.

numpy's OpenBLAS starts one thread per PU when it loads (and spins them after each call),
libgomp and MKL size theirs the same way: a monitor left on a 384-PU login node, or a
recorder beside a job that fills every PU, must not. Those libraries read their variables
once, when they load, so ``pin()`` runs before anything imports numpy (first thing in
``snumap_tui.cli``).

The variables are the user's, though: ``OMP_NUM_THREADS=64 snumap record -- ./app`` asks for
64 threads in ``app``. ``user_environ()`` is the environment as the user gave it, for every
program snumap starts on the user's behalf (record's command, scale's recorders and untraced
runs, an sbatch submission).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

#: What sizes a numeric library's pool: OpenBLAS (both spellings), OpenMP (libgomp, libomp:
#: a library numpy loads may link either), MKL, BLIS, Accelerate, numexpr.
PINNED = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
          "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")

_original: dict[str, str | None] | None = None


def pin() -> None:
    """Set every PINNED variable to 1 in this process, remembering the user's values (once:
    a second call keeps the first one's)."""
    global _original
    if _original is not None:
        return
    _original = {k: os.environ.get(k) for k in PINNED}
    for k in PINNED:
        os.environ[k] = "1"


def user_environ(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """BASE (default: this process's environment) with the PINNED variables as the user had
    them before ``pin()``: unset where they were unset."""
    env = dict(os.environ if base is None else base)
    for k, v in (_original or {}).items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env
