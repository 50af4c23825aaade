"""The facts of the header line: host, kernel, CPU model, uptime, load.

Read from the same root the sources use, so ``--fsroot`` shows the other machine's kernel and
CPU (and no uptime/load when the gathered tree lacks them), and from the topology's hwloc infos
as a fallback (``--topology FILE.xml`` carries HostName, OSRelease, CPUModel). The CPU model is
sources.cpuinfo's parser (record's header says the same name). Parsing is pure;
``read_host`` is the only I/O. Headless: no textual, no rich.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from snumap_tui.sources.cpuinfo import parse_cpu_model
from snumap_tui.textsafe import safe_text
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


def format_uptime(s: float | None) -> str:
    """"3d 4h", "5h 07m", "16m": units on every number (a bare "00:16" reads as a time)."""
    if s is None:
        return "n/a"
    d, rest = divmod(int(s), 86400)
    h, rest = divmod(rest, 3600)
    m = rest // 60
    if d:
        return f"{d}d {h}h"
    return f"{h}h {m:02d}m" if h else f"{m}m"


def source_marks(sources: Mapping[str, Any]) -> list[tuple[str, bool, str]]:
    """(name, live, why not) per source, with the hardware counters as their own item "PMU":
    on a VM the perf source is live (software events) while IPC, GHz and MPKI cannot be
    measured, and a green "perf" alone would say the opposite."""
    out: list[tuple[str, bool, str]] = []
    for name, st in sources.items():
        out.append((name, bool(st.available), st.reason or ""))
        if name == "perf" and st.available:
            missing = (st.detail or {}).get("missing") or {}
            hw = [missing[e] for e in ("cycles", "instructions") if e in missing]
            if hw:
                out.append(("PMU", False, f"hardware counters unavailable: {hw[0]}"))
            else:
                out.append(("PMU", True, ""))
    return out


def _read(p: Path) -> str | None:
    try:
        return p.read_text(errors="replace")
    except OSError:
        return None


#: How often the header's load and uptime are read: the kernel recomputes the load averages
#: every 5 s (LOAD_FREQ), and the header shows uptime to the minute.
HOST_REFRESH_S = 5.0


class HostReader:
    """Static facts read once (cpuinfo is ~1 KB per PU), uptime and load at most every
    HOST_REFRESH_S (the same HostInfo in between: the header then has nothing to redo)."""

    def __init__(self, root: Path, topo: Topology | None = None, *, local: bool = True,
                 name: str = "?", refresh_s: float = HOST_REFRESH_S) -> None:
        self.root = root
        self.local = local
        self.static = read_host(root, topo, local=local, name=name)
        self.refresh_s = refresh_s
        self._last: tuple[float, HostInfo] | None = None

    def __call__(self) -> HostInfo:
        if not self.local:
            return self.static
        now = time.monotonic()
        if self._last is not None and now - self._last[0] < self.refresh_s:
            return self._last[1]
        up = _read(self.root / "proc/uptime")
        la = _read(self.root / "proc/loadavg")
        info = HostInfo(self.static.host, self.static.kernel, self.static.cpu_model,
                        parse_uptime(up) if up else None, parse_loadavg(la) if la else None)
        self._last = (now, info)
        return info


def read_host(root: Path, topo: Topology | None = None, *, local: bool = True,
              name: str = "?") -> HostInfo:
    """Host facts from ``root`` (``/`` live), filled in from the topology's infos.

    ``local=False`` (``--topology FILE``, ``--synthetic``): nothing is read from this machine,
    the facts come from the topology's infos only (``name``, the file's, when it has no
    HostName). With ``--fsroot`` the gathered tree's
    hostname, osrelease and cpuinfo are used, never this machine's: hwloc's HostName and
    OSRelease infos of a tree loaded here are this machine's uname, so they are ignored and a
    tree without them is named after its directory."""
    meta = dict(topo.meta) if topo is not None else {}
    live = local and root == Path("/")
    if not local:
        host = meta.get("HostName") or name
        kernel = meta.get("OSRelease") or "kernel n/a"
        model = None
    else:
        host = (_read(root / "proc/sys/kernel/hostname") or "").strip() or (
            os.uname().nodename if live else root.resolve().name or "?")
        kernel = (_read(root / "proc/sys/kernel/osrelease") or "").strip() or (
            os.uname().release if live else "kernel n/a")
        model = parse_cpu_model(_read(root / "proc/cpuinfo") or "")
    if model is None and topo is not None:
        for p in topo.by_type("Package"):
            model = p.info("CPUModel")
            if model:
                break
    up = _read(root / "proc/uptime") if local else None
    la = _read(root / "proc/loadavg") if local else None
    # The tree's, the file's or the machine's strings: escaped once for every view.
    return HostInfo(host=safe_text(host), kernel=safe_text(kernel),
                    cpu_model=safe_text(model or "unknown CPU"),
                    uptime_s=parse_uptime(up) if up else None,
                    load=parse_loadavg(la) if la else None)
