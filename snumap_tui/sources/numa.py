"""NUMA nodes: memory per node, allocation counters, and the distance matrix.

Formats (Documentation/ABI/stable/sysfs-devices-node, admin-guide/numastat.rst):
- ``node/nodeN/meminfo``: ``Node N MemTotal:  16384 kB`` (HugePages_* lines have no unit:
  they count pages of the default huge page size, ``Hugepagesize`` in /proc/meminfo).
- ``node/nodeN/numastat``: ``numa_hit 1234`` ... in pages, cumulative.
- ``node/nodeN/distance``: one row of the SLIT matrix, in the order of the online nodes.
Memory-only nodes (CXL, HBM in flat mode, NVDIMM) have meminfo and no CPUs; they are included.
"""

from __future__ import annotations

import errno
import math
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from snumap_tui.sources._io import READ_FLAGS, Reader, count_of, read_optional, read_text, reason_of
from snumap_tui.sources.base import SourceStatus
from snumap_tui.sources.confine import allows_fast, open_checked, top_of

NODE_DIR = "sys/devices/system/node"
# meminfo key -> readings field (bytes)
MEMINFO_FIELDS = {"MemTotal": "mem_total", "MemFree": "mem_free", "MemUsed": "mem_used",
                  "FilePages": "file_pages", "AnonPages": "anon_pages", "Shmem": "shmem"}
NUMASTAT_FIELDS = ("numa_hit", "numa_miss", "numa_foreign", "interleave_hit", "local_node",
                   "other_node")
_NODE_RE = re.compile(r"node(\d+)$")
_USED = list(MEMINFO_FIELDS.values()).index("mem_used")
_HUGE = len(MEMINFO_FIELDS)            # hugepages_total, hugepages_free, then numastat


# ``Node 0 MemTotal:        7432396 kB``: one match per line (drivers/base/node.c
# node_read_meminfo); the kB is absent on the HugePages_* lines.
# A node's meminfo prefixes each line with ``Node N``; /proc/meminfo (Documentation/
# filesystems/proc.rst, "meminfo": ``MemTotal:  280840 kB``) has the same lines without it.
_MEMINFO_LINE = re.compile(r"^(?:Node\s+\d+\s+)?(\S+):\s+(\d+)(\s+kB)?", re.MULTILINE)


def parse_node_meminfo(text: str) -> dict[str, int]:
    """``Node 0 MemTotal: 16384 kB`` lines -> {"MemTotal": bytes, "HugePages_Total": count}.
    One regex over the whole file: this runs per node every sweep. /proc/meminfo's lines give
    the same keys for what both have (no FilePages: /proc/meminfo splits it differently)."""
    return {k: int(v) * 1024 if kb else int(v) for k, v, kb in _MEMINFO_LINE.findall(text)}


def parse_numastat(text: str) -> dict[str, int]:
    """``numa_hit 1234`` lines (one key and one number each) -> {key: pages}."""
    tok = text.split()
    out: dict[str, int] = {}
    if len(tok) % 2 == 0:
        for key, val in zip(tok[::2], tok[1::2]):
            n = count_of(val)
            if n is None:
                break
            out[key] = n
        else:
            return out
        out = {}
    for line in text.splitlines():     # a line that does not fit: skip it, keep the rest
        key, _, val = line.partition(" ")
        n = count_of(val)
        if n is not None:
            out[key] = n
    return out


def parse_distance(text: str) -> list[int] | None:
    """One row of the SLIT matrix; None when a field is not a distance (0-255)."""
    row = []
    for x in text.split():
        d = count_of(x, 3)
        if d is None or d > 255:
            return None
        row.append(d)
    return row


def parse_hugepagesize(meminfo_text: str) -> int | None:
    """Default huge page size in bytes from /proc/meminfo (``Hugepagesize: 2048 kB``)."""
    for line in meminfo_text.splitlines():
        if line.startswith("Hugepagesize:"):
            parts = line.split()
            kb = count_of(parts[1], 12) if len(parts) > 1 else None
            return kb * 1024 if kb else None
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
        # No node directories (a kernel without CONFIG_NUMA, or a gathered tree without
        # them): the machine is one node, node 0 (as hwloc shows it), whose memory is
        # /proc/meminfo's. Known memory is not "no memory"; NUMA counters stay unknown.
        self.whole_machine = not self.nodes and bool(text) and "MemTotal:" in (text or "")
        if self.whole_machine:
            self.nodes = [(0, self.root / "proc")]
        self._distance: list[list[int]] | None = None
        self._fds: dict[Path, int] = {}

    def distances(self) -> list[list[int]] | None:
        """The SLIT matrix, rows in ``nodes`` order (read once: it does not change)."""
        if self._distance is None and self.nodes:
            rows = []
            for _, d in self.nodes:
                text = read_optional(self._reader, d / "distance")
                row = parse_distance(text) if text is not None else None
                if row is None:
                    return None
                rows.append(row)
            self._distance = rows
        return self._distance

    def status(self) -> SourceStatus:
        if self.whole_machine:
            return SourceStatus(self.name, True,
                                f"one node: the memory of /proc/meminfo (no {NODE_DIR}/node*; "
                                "NUMA counters unavailable)", None, {"nodes": [0]})
        if not self.nodes:
            return SourceStatus(self.name, False,
                                f"no /{NODE_DIR}/node* (kernel without CONFIG_NUMA?)",
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

    def _read(self, path: Path) -> str | None:
        """A node file's text, None if it is not there. With the default reader the file
        stays open and is re-read from offset 0 (pread): a sysfs attribute is generated
        afresh by every read from the start (its seq_file restarts at position 0), and the
        open/close of 16 files per sweep on an 8-node machine was half the source's cost."""
        if not allows_fast(self._reader):
            return read_optional(self._reader, path)
        fd = self._fds.get(path)
        if fd is None:
            try:
                fd = open_checked(path, top_of(self._reader), READ_FLAGS)
            except (FileNotFoundError, NotADirectoryError):
                return None
            self._fds[path] = fd
        try:
            return os.pread(fd, 1 << 16, 0).decode("ascii", "replace")
        except OSError as exc:
            self._fds.pop(path, None)
            os.close(fd)
            if exc.errno in (errno.ENODEV, errno.ENOENT):   # the node went away
                return read_optional(self._reader, path)
            raise

    def read(self) -> dict[str, Any]:
        out: dict[str, Any] = {"nodes": np.array([n for n, _ in self.nodes], dtype=np.int64)}
        fields = (*MEMINFO_FIELDS.values(), "hugepages_total", "hugepages_free",
                  *NUMASTAT_FIELDS)
        nan = math.nan
        rows = []
        for _, d in self.nodes:
            row = [nan] * len(fields)
            text = self._read(d / "meminfo")
            if text is not None:
                mi = parse_node_meminfo(text)
                for j, key in enumerate(MEMINFO_FIELDS):
                    if key in mi:
                        row[j] = mi[key]
                if "MemUsed" not in mi and "MemTotal" in mi and "MemFree" in mi:
                    row[_USED] = mi["MemTotal"] - mi["MemFree"]
                if self.hugepagesize:
                    for j, key in ((_HUGE, "HugePages_Total"), (_HUGE + 1, "HugePages_Free")):
                        if key in mi:
                            row[j] = mi[key] * self.hugepagesize
            text = None if self.whole_machine else self._read(d / "numastat")
            if text is not None:
                ns = parse_numastat(text)
                for j, key in enumerate(NUMASTAT_FIELDS, _HUGE + 2):
                    if key in ns:
                        row[j] = ns[key]
            rows.append(row)
        table = np.array(rows, dtype=np.float64).reshape(len(rows), len(fields))
        out.update(zip(fields, table.T.copy()))
        dist = self.distances()
        if dist is not None:
            out["distance"] = dist
        return out

    def close(self) -> None:
        fds, self._fds = self._fds, {}
        for fd in fds.values():
            os.close(fd)
