"""NVIDIA GPUs through NVML (the ``nvidia-ml-py`` package, extra ``gpu``): utilisation, memory,
power and energy per GPU, with the PCI bus id that places it on the topology.

NVML (libnvidia-ml.so.1) comes with the driver; ``nvidia-ml-py`` is NVIDIA's own binding to
it (module ``pynvml``), so no hand-written ctypes is needed. Per device:
``nvmlDeviceGetUtilizationRates`` (percent of the last sample period a kernel ran, and of
memory-controller activity), ``nvmlDeviceGetMemoryInfo`` (bytes), ``nvmlDeviceGetPowerUsage``
(mW, instantaneous) and ``nvmlDeviceGetTotalEnergyConsumption`` (mJ since the driver loaded,
Volta and newer: cumulative, so power over an interval comes from it when present).

Unavailable, with the reason, when the binding is not installed, when NVML finds no driver
(every machine without an NVIDIA GPU, this one included), when it lists no GPU, and on any
root other than this machine's (NVML reads the running machine only). ``nvml=`` injects a
module with pynvml's API (tests use a recorded one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from snumap_tui.extras import install_extra
from snumap_tui.sources._io import Reader, is_live, read_text
from snumap_tui.sources.base import SourceStatus
from snumap_tui.sources.iodev import normal_busid

FIX = f"{install_extra('gpu')} (nvidia-ml-py) on a node with the NVIDIA driver"


def _text(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


class GpuSource:
    """Per GPU: util_pct, mem_util_pct, mem_used, mem_total (bytes), power_w, energy_mj."""

    name = "gpu"

    def __init__(self, root: Path = Path("/"), reader: Reader = read_text,
                 nvml: Any = None) -> None:
        self.root = Path(root)
        self._nvml = nvml
        self._injected = nvml is not None
        self._handles: list[Any] = []
        self._busids: list[str] = []
        self._names: list[str] = []
        self._status: SourceStatus | None = None
        self._inited = False

    def status(self) -> SourceStatus:
        if self._status is None:
            self._status = self._open()
        return self._status

    def _open(self) -> SourceStatus:
        if not self._injected and not is_live(self.root):
            return SourceStatus(self.name, False, "not this machine (--fsroot): NVML reads "
                                "the running machine's GPUs only", None)
        if self._nvml is None:
            # No driver, no NVML: and the binding costs 3 MB of the recorder's RSS to import
            # only for nvmlInit to say so.
            if not (self.root / "proc/driver/nvidia").exists():
                return SourceStatus(self.name, False, "NVML: no NVIDIA driver loaded "
                                    "(no /proc/driver/nvidia)", FIX)
            try:
                import pynvml  # the nvidia-ml-py package
            except ImportError:
                return SourceStatus(self.name, False, "nvidia-ml-py is not installed", FIX)
            self._nvml = pynvml
        nv = self._nvml
        try:
            nv.nvmlInit()
        except nv.NVMLError as exc:
            return SourceStatus(self.name, False, f"NVML: {exc} (no NVIDIA driver here)",
                                FIX, {"nvml_error": getattr(exc, "value", None)})
        self._inited = True
        try:
            n = int(nv.nvmlDeviceGetCount())
            for i in range(n):
                h = nv.nvmlDeviceGetHandleByIndex(i)
                self._handles.append(h)
                self._busids.append(normal_busid(_text(nv.nvmlDeviceGetPciInfo(h).busId)))
                self._names.append(f"nvml{i}")
        except nv.NVMLError as exc:
            return SourceStatus(self.name, False, f"NVML: {exc}", None)
        if not self._handles:
            return SourceStatus(self.name, False, "NVML lists no GPU", None)
        return SourceStatus(self.name, True, None, None,
                            {"gpus": list(self._names), "busids": list(self._busids)})

    def read(self) -> dict[str, Any]:
        if not self.status().available:
            return {}
        nv = self._nvml
        n = len(self._handles)
        f = {k: np.full(n, np.nan) for k in ("util_pct", "mem_util_pct", "mem_used",
                                            "mem_total", "power_w", "energy_mj")}
        for i, h in enumerate(self._handles):
            # Each query on its own: a GPU without energy counters still reports the rest.
            try:
                u = nv.nvmlDeviceGetUtilizationRates(h)
                f["util_pct"][i], f["mem_util_pct"][i] = float(u.gpu), float(u.memory)
            except nv.NVMLError:
                pass
            try:
                m = nv.nvmlDeviceGetMemoryInfo(h)
                f["mem_used"][i], f["mem_total"][i] = float(m.used), float(m.total)
            except nv.NVMLError:
                pass
            try:
                f["power_w"][i] = float(nv.nvmlDeviceGetPowerUsage(h)) / 1000.0
            except nv.NVMLError:
                pass
            try:
                f["energy_mj"][i] = float(nv.nvmlDeviceGetTotalEnergyConsumption(h))
            except nv.NVMLError:
                pass
        return {"names": list(self._names), "busid": list(self._busids), **f}

    def close(self) -> None:
        if self._inited and self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError:
                pass
        self._inited = False
        self._handles, self._busids, self._names = [], [], []
        self._status = None
