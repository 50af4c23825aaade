"""The I/O sources by name, for the registry (``snumap_tui.sources.all_sources``)."""

from __future__ import annotations

from typing import Any

from snumap_tui.sources.diskstats import DiskstatsSource
from snumap_tui.sources.infiniband import InfinibandSource
from snumap_tui.sources.netdev import NetSource
from snumap_tui.sources.nvml import GpuSource

IO_SOURCES: dict[str, Any] = {"net": NetSource, "ib": InfinibandSource,
                              "disk": DiskstatsSource, "gpu": GpuSource}
