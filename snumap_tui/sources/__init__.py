"""Sources: one module per kernel interface, each on a root path (``/`` or ``--fsroot``).

``all_sources(root)`` is the registry the sampler and ``snumap probe`` use. Modules are
imported inside it so that importing ``snumap_tui.sources.base`` stays cheap.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from snumap_tui.sources._io import Reader
    from snumap_tui.sources.base import Source

SOURCE_NAMES = ("procstat", "perf", "freq", "rapl", "numa", "tasks", "net", "ib", "disk", "gpu")
# The I/O sources (NICs, InfiniBand ports, block devices, GPUs): sources/io_sources.py.
IO_SOURCE_NAMES = ("net", "ib", "disk", "gpu")


def all_sources(root: Path | str = Path("/"), topology: Any = None,
                reader: Reader | None = None, names: tuple[str, ...] = SOURCE_NAMES
                ) -> list[Source]:
    """Every source of the brief constructed on ``root`` (none opened yet: construction is
    cheap; perf counters open on the first ``status()`` or ``read()``). On a tree that is
    not this machine's / (``--fsroot``) every read stays inside it (sources/confine.py).
    ``topology`` is
    accepted for sources that will want it (none does yet: they find PUs in sysfs)."""
    from snumap_tui.sources._io import is_live, read_text
    from snumap_tui.sources.confine import confined_reader
    from snumap_tui.sources.freq import FreqSource
    from snumap_tui.sources.io_sources import IO_SOURCES
    from snumap_tui.sources.numa import NumaSource
    from snumap_tui.sources.perf import PerfSource
    from snumap_tui.sources.procstat import ProcStatSource
    from snumap_tui.sources.rapl import RaplSource
    from snumap_tui.sources.tasks import TasksSource

    root = Path(root)
    r = reader or (read_text if is_live(root) else confined_reader(root))
    ctors: dict[str, Any] = {"procstat": ProcStatSource, "perf": PerfSource, "freq": FreqSource,
                             "rapl": RaplSource, "numa": NumaSource, "tasks": TasksSource,
                             **IO_SOURCES}
    return [ctors[n](root, reader=r) for n in names]
