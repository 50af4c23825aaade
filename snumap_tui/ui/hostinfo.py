"""The facts of the header line: host, kernel, CPU model, uptime, load.

Read from the same root the sources use, so ``--fsroot`` shows the other machine's kernel and
CPU (and no uptime/load when the gathered tree lacks them), and from the topology's hwloc infos
as a fallback (``--topology FILE.xml`` carries HostName, OSRelease, CPUModel). Parsing is pure;
``read_host`` is the only I/O. Headless: no textual, no rich.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from snumap_tui.topology.model import Topology


@dataclass(frozen=True)
class HostInfo:
    host: str
    kernel: str
    cpu_model: str
    uptime_s: float | None = None
    load: tuple[float, float, float] | None = None


def parse_uptime(text: str) -> float | None:
    """/proc/uptime: "seconds-up seconds-idle" (proc(5))."""
    try:
        return float(text.split()[0])
    except (IndexError, ValueError):
        return None


def parse_loadavg(text: str) -> tuple[float, float, float] | None:
    """/proc/loadavg: "0.52 0.40 0.33 1/123 4567": the 1, 5 and 15 minute averages (proc(5))."""
    try:
        a, b, c = (float(x) for x in text.split()[:3])
    except ValueError:
        return None
    return a, b, c


def parse_cpu_model(cpuinfo: str) -> str | None:
    """The first 'model name' (x86) or 'Processor'/'cpu model' (ARM, MIPS) of /proc/cpuinfo."""
    for line in cpuinfo.splitlines():
        key, _, val = line.partition(":")
        if key.strip() in ("model name", "Processor", "cpu model") and val.strip():
            return " ".join(val.split())
    return None


def format_uptime(s: float | None) -> str:
    if s is None:
        return "n/a"
    d, rest = divmod(int(s), 86400)
    h, rest = divmod(rest, 3600)
    m = rest // 60
    return f"{d}d {h:02d}:{m:02d}" if d else f"{h:02d}:{m:02d}"


def _read(p: Path) -> str | None:
    try:
        return p.read_text(errors="replace")
    except OSError:
        return None


class HostReader:
    """Static facts read once (cpuinfo is ~1 KB per PU), uptime and load on every call."""

    def __init__(self, root: Path, topo: Topology | None = None) -> None:
        self.root = root
        self.static = read_host(root, topo)

    def __call__(self) -> HostInfo:
        up = _read(self.root / "proc/uptime")
        la = _read(self.root / "proc/loadavg")
        return HostInfo(self.static.host, self.static.kernel, self.static.cpu_model,
                        parse_uptime(up) if up else None, parse_loadavg(la) if la else None)


def read_host(root: Path, topo: Topology | None = None) -> HostInfo:
    """Host facts from ``root`` (``/`` live), filled in from the topology's infos."""
    meta = dict(topo.meta) if topo is not None else {}
    live = root == Path("/")
    host = meta.get("HostName") or (os.uname().nodename if live else "")
    host = (_read(root / "proc/sys/kernel/hostname") or "").strip() or host or "?"
    kernel = (_read(root / "proc/sys/kernel/osrelease") or "").strip() or meta.get(
        "OSRelease") or (os.uname().release if live else "?")
    model = parse_cpu_model(_read(root / "proc/cpuinfo") or "")
    if model is None and topo is not None:
        for p in topo.by_type("Package"):
            model = p.info("CPUModel")
            if model:
                break
    up = _read(root / "proc/uptime")
    la = _read(root / "proc/loadavg")
    return HostInfo(host=host, kernel=kernel, cpu_model=model or "unknown CPU",
                    uptime_s=parse_uptime(up) if up else None,
                    load=parse_loadavg(la) if la else None)
