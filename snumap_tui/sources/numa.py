"""NUMA nodes: memory per node, allocation counters, and the distance matrix.

Formats (Documentation/ABI/stable/sysfs-devices-node, admin-guide/numastat.rst):
- ``node/nodeN/meminfo``: ``Node N MemTotal:  16384 kB`` (HugePages_* lines have no unit:
  they count pages of the default huge page size, ``Hugepagesize`` in /proc/meminfo).
- ``node/nodeN/numastat``: ``numa_hit 1234`` ... in pages, cumulative.
- ``node/nodeN/distance``: one row of the SLIT matrix, in the order of the online nodes.
Memory-only nodes (CXL, HBM in flat mode, NVDIMM) have meminfo and no CPUs; they are included.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from snumap_tui.sources._io import Reader, read_optional, read_text, reason_of
from snumap_tui.sources.base import SourceStatus

NODE_DIR = "sys/devices/system/node"
# meminfo key -> readings field (bytes)
MEMINFO_FIELDS = {"MemTotal": "mem_total", "MemFree": "mem_free", "MemUsed": "mem_used",
                  "FilePages": "file_pages", "AnonPages": "anon_pages", "Shmem": "shmem"}
NUMASTAT_FIELDS = ("numa_hit", "numa_miss", "numa_foreign", "interleave_hit", "local_node",
                   "other_node")
_NODE_RE = re.compile(r"node(\d+)$")


def parse_node_meminfo(text: str) -> dict[str, int]:
    """``Node 0 MemTotal: 16384 kB`` lines -> {"MemTotal": bytes, "HugePages_Total": count}."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 4 or parts[0] != "Node":
            continue
        key = parts[2].rstrip(":")
        value = int(parts[3])
        if len(parts) > 4 and parts[4] == "kB":
            value *= 1024
        out[key] = value
    return out


def parse_numastat(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, val = line.partition(" ")
        if val:
            out[key] = int(val)
    return out


def parse_distance(text: str) -> list[int]:
    return [int(x) for x in text.split()]


def parse_hugepagesize(meminfo_text: str) -> int | None:
    """Default huge page size in bytes from /proc/meminfo (``Hugepagesize: 2048 kB``)."""
    for line in meminfo_text.splitlines():
        if line.startswith("Hugepagesize:"):
            return int(line.split()[1]) * 1024
    return None


def node_dirs(root: Path) -> list[tuple[int, Path]]:
    base = root / NODE_DIR
    try:
        entries = list(base.iterdir())
    except OSError:
        return []
    out = []
    for e in entries:
        m = _NODE_RE.match(e.name)
        if m:
            out.append((int(m.group(1)), e))
    return sorted(out)


class NumaSource:
    """Per-node memory (bytes, instantaneous) and numastat counters (pages, cumulative)."""

    name = "numa"

    def __init__(self, root: Path = Path("/"), reader: Reader = read_text) -> None:
        self.root = Path(root)
        self._reader = reader
        self.nodes = node_dirs(self.root)
        text = read_optional(reader, self.root / "proc" / "meminfo")
        self.hugepagesize = parse_hugepagesize(text) if text else None
        self._distance: list[list[int]] | None = None

    def distances(self) -> list[list[int]] | None:
        """The SLIT matrix, rows in ``nodes`` order (read once: it does not change)."""
        if self._distance is None and self.nodes:
            rows = []
            for _, d in self.nodes:
                text = read_optional(self._reader, d / "distance")
                if text is None:
                    return None
                rows.append(parse_distance(text))
            self._distance = rows
        return self._distance

    def status(self) -> SourceStatus:
        if not self.nodes:
            return SourceStatus(self.name, False,
                                f"no {NODE_DIR}/node* (kernel without CONFIG_NUMA?)",
                                "none needed on a one-node machine; memory is in /proc/meminfo",
                                {"path": str(self.root / NODE_DIR)})
        try:
            self._reader(self.nodes[0][1] / "meminfo")
        except OSError as exc:
            return SourceStatus(self.name, False, reason_of(exc), None)
        has_numastat = (self.nodes[0][1] / "numastat").exists()
        return SourceStatus(self.name, True,
                            None if has_numastat else "no numastat (NUMA counters unavailable)",
                            None, {"nodes": [n for n, _ in self.nodes],
                                   "distance": self.distances()})

    def read(self) -> dict[str, Any]:
        m = len(self.nodes)
        out: dict[str, Any] = {"nodes": np.array([n for n, _ in self.nodes], dtype=np.int64)}
        arrays = {f: np.full(m, np.nan) for f in (*MEMINFO_FIELDS.values(), "hugepages_total",
                                                   "hugepages_free", *NUMASTAT_FIELDS)}
        for i, (_, d) in enumerate(self.nodes):
            text = read_optional(self._reader, d / "meminfo")
            if text is not None:
                mi = parse_node_meminfo(text)
                for key, f in MEMINFO_FIELDS.items():
                    if key in mi:
                        arrays[f][i] = mi[key]
                if "MemUsed" not in mi and "MemTotal" in mi and "MemFree" in mi:
                    arrays["mem_used"][i] = mi["MemTotal"] - mi["MemFree"]
                if self.hugepagesize:
                    for key, f in (("HugePages_Total", "hugepages_total"),
                                   ("HugePages_Free", "hugepages_free")):
                        if key in mi:
                            arrays[f][i] = mi[key] * self.hugepagesize
            text = read_optional(self._reader, d / "numastat")
            if text is not None:
                ns = parse_numastat(text)
                for f in NUMASTAT_FIELDS:
                    if f in ns:
                        arrays[f][i] = ns[f]
        out.update(arrays)
        dist = self.distances()
        if dist is not None:
            out["distance"] = dist
        return out

    def close(self) -> None:
        pass
