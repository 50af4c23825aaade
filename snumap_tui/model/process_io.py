"""The selected process's I/O: the devices it has open and whether its threads are near them.

One call for the live view's details pane (``LiveFeed.process_io``): the device files from
/proc/PID/fd (``sources.devfiles``), the PUs its threads last ran on from the latest tasks
reading, and the locality verdict (``model.iolocality``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from snumap_tui.model.iolocality import DeviceUse, LocalityFinding, io_locality
from snumap_tui.sources.devfiles import open_devices

if TYPE_CHECKING:
    from snumap_tui.topology.model import Topology


def thread_pus(tasks: dict[str, Any] | None, pid: int) -> set[int]:
    """The PUs (OS indexes) a process's threads last ran on, from a tasks reading."""
    if not tasks or "threads" not in tasks:
        return set()
    th = tasks["threads"]
    pids = np.asarray(th.get("pid", ()))
    cpus = np.asarray(th.get("last_cpu", ()))
    if pids.size == 0 or cpus.size != pids.size:
        return set()
    return {int(c) for c in cpus[pids == pid] if int(c) >= 0}


def process_io(topo: Topology, root: Path, pid: int, tasks: dict[str, Any] | None
               ) -> tuple[list[DeviceUse], list[LocalityFinding]]:
    """The devices ``pid`` has open, where they sit against its threads, and the findings."""
    devices = open_devices(root, pid)
    if not devices:
        return [], []
    return io_locality(topo, devices, thread_pus(tasks, pid))
