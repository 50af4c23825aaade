"""RAPL energy: powercap zones, or the perf ``power`` PMU when energy_uj is root-only.

powercap (Documentation/power/powercap/powercap.rst): ``/sys/class/powercap/intel-rapl:N``
is a package zone (``name`` = ``package-N``, or ``package-N-die-M`` on multi-die parts, or
``psys`` for the platform domain), its subzones ``intel-rapl:N:M`` are ``core``, ``uncore`` or
``dram`` of that package. ``energy_uj`` is a cumulative counter that wraps at
``max_energy_range_uj``; since Linux 5.10 (CVE-2020-8694, "Platypus") it is readable by root
only. AMD Zen CPUs use the same intel-rapl zones (driver rapl since Linux 5.8).

The perf ``power`` PMU (arch/x86/events/rapl.c) exposes the same counters as events
``energy-pkg``, ``energy-cores``, ``energy-gpu``, ``energy-ram``, ``energy-psys``, each with a
``.scale`` (Joules per count, 2^-32) and ``.unit`` file, opened on the one PU per package
listed in its ``cpumask``; it needs CAP_PERFMON or perf_event_paranoid <= 0.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from snumap_tui.native import perf_event as pe
from snumap_tui.native import perf_pmu as pmus
from snumap_tui.sources._io import Reader, is_live, read_optional, read_text, reason_of
from snumap_tui.sources.base import SourceStatus
from snumap_tui.sources.perf import is_virtual_machine

POWERCAP = "sys/class/powercap"
_ZONE_RE = re.compile(r"intel-rapl:(\d+)(?::(\d+))?$")
_PKG_RE = re.compile(r"package-(\d+)(?:-die-(\d+))?$")
# perf power PMU event -> domain kind (the same names powercap uses for its zones)
POWER_EVENTS = {"energy-pkg": "package", "energy-cores": "core", "energy-gpu": "uncore",
                "energy-ram": "dram", "energy-psys": "psys"}
ROOT_ONLY = ("energy_uj is readable by root only (Linux >= 5.10, CVE-2020-8694)")
# Real RAPL counters advance about every millisecond; a virtual machine's power PMU can
# open fine and read 0 for ever (seen on a Firecracker VM).
STILL_WAIT_S = 0.08
STILL = ("opens, but its energy counters did not advance in {ms:.0f} ms: no real RAPL "
         "here, e.g. a virtual machine")
ROOT_FIX = ("run as root, or let users read it: chmod o+r "
            "/sys/class/powercap/intel-rapl:*/energy_uj")


@dataclass(frozen=True)
class Zone:
    zone_id: str           # "intel-rapl:0:1"
    path: Path
    name: str              # the zone's own name: "package-0", "dram", "psys"
    domain: str            # unique domain label: "package-0", "dram-0", "psys"
    obj: tuple[str, int]   # the topology object it maps to: ("Package", 0) / ("Machine", 0)
    max_uj: float


def domain_of(zone_name: str, parent_name: str | None) -> tuple[str, tuple[str, int]]:
    """Map a zone (and its parent's name for a subzone) to a domain label and an object.

    ``package-1`` -> ("package-1", Package 1); ``dram`` under ``package-1`` ->
    ("dram-1", Package 1); ``psys`` -> ("psys", Machine 0); ``package-0-die-1`` -> itself on
    Package 0.
    """
    m = _PKG_RE.match(zone_name)
    if m:
        return zone_name, ("Package", int(m.group(1)))
    if zone_name == "psys":
        return "psys", ("Machine", 0)
    pm = _PKG_RE.match(parent_name or "")
    if pm:
        suffix = pm.group(1) + (f"-die-{pm.group(2)}" if pm.group(2) else "")
        return f"{zone_name}-{suffix}", ("Package", int(pm.group(1)))
    return zone_name, ("Machine", 0)


def discover_zones(root: Path, reader: Reader = read_text) -> list[Zone]:
    """Every intel-rapl zone and subzone under ``<root>/sys/class/powercap``."""
    base = root / POWERCAP
    try:
        names = sorted(e.name for e in base.iterdir() if _ZONE_RE.match(e.name))
    except OSError:
        return []

    def key(n: str) -> tuple[int, int]:
        m = _ZONE_RE.match(n)
        assert m
        return int(m.group(1)), int(m.group(2)) if m.group(2) else -1

    zones = []
    for zid in sorted(names, key=key):
        m = _ZONE_RE.match(zid)
        assert m
        name = (read_optional(reader, base / zid / "name") or zid).strip()
        parent = None
        if m.group(2) is not None:
            parent = (read_optional(reader, base / f"intel-rapl:{m.group(1)}" / "name")
                      or "").strip()
        domain, obj = domain_of(name, parent)
        try:
            max_uj = float(reader(base / zid / "max_energy_range_uj"))
        except (OSError, ValueError):
            max_uj = float("nan")
        zones.append(Zone(zid, base / zid, name, domain, obj, max_uj))
    return zones


# A counter opener for the perf fallback: (type, config, cpu) -> a callable reading the count.
CounterOpener = Callable[[int, int, int], Callable[[], int]]



def _package_of_cpu(root: Path, cpu: int, reader: Reader) -> int:
    text = read_optional(reader, root / f"sys/devices/system/cpu/cpu{cpu}/topology/"
                                        "physical_package_id")
    return int(text) if text else 0


class RaplSource:
    """Cumulative energy per RAPL domain in microjoules (raw; derive() handles the wrap)."""

    name = "rapl"

    def __init__(self, root: Path = Path("/"), reader: Reader = read_text,
                 counter_opener: CounterOpener | None = None) -> None:
        self.root = Path(root)
        self._reader = reader
        # The perf fallback measures this machine only, unless a test injects an opener.
        self._opener = counter_opener or (pe.Counter if is_live(self.root) else None)
        self.zones = discover_zones(self.root, reader)
        self.via: str | None = None
        self._counters: list[tuple[str, tuple[str, int], Callable[[], int], float]] = []
        self._status: SourceStatus | None = None
        self._powercap_status: SourceStatus | None = None
        self._perf_status: SourceStatus | None = None

    # ---- setup ----
    def powercap_status(self) -> SourceStatus:
        """The powercap verdict ("rapl:powercap"): zones there, and energy_uj readable."""
        name = "rapl:powercap"
        if not self.zones:
            return SourceStatus(name, False, "no intel-rapl zones in /sys/class/powercap", None)
        try:
            self._reader(self.zones[0].path / "energy_uj")
        except PermissionError:
            return SourceStatus(name, False, ROOT_ONLY, ROOT_FIX, {"errno": 13})
        except OSError as exc:
            return SourceStatus(name, False, reason_of(exc), None)
        return SourceStatus(name, True, None, None, {"domains": [z.domain for z in self.zones]})

    def verdicts(self, still_check: bool | None = None) -> list[SourceStatus]:
        """Both ways RAPL can be read ("rapl:powercap", "rapl:perf") and then the source's own
        verdict ("rapl"): what ``snumap probe`` prints. The perf power PMU is tried here even
        when powercap works (to say whether it would), and closed again if not in use. On
        this machine (STILL_CHECK, by default when the root is /) the way in use is read
        twice STILL_WAIT_S apart: counters that open but never advance (a virtual machine's
        power PMU) are no RAPL, and said so."""
        st = self._setup()
        if self._perf_status is None:
            self._perf_status = self.open_power_pmu()
            if self.via != "perf":
                self._close_counters()
        assert self._powercap_status is not None
        if still_check is None:
            still_check = is_live(self.root)     # never a gathered tree's static files
        if st.available and still_check and self.still():
            why = STILL.format(ms=STILL_WAIT_S * 1000)
            mark = {"rapl:" + str(self.via), "rapl"}
            self._powercap_status, self._perf_status, st = (
                dataclasses.replace(v, available=False, reason=why, fix=None,
                                    detail={**v.detail, "still": True})
                if v.name in mark else v
                for v in (self._powercap_status, self._perf_status, st))
        return [self._powercap_status, self._perf_status, st]

    def still(self, wait_s: float = STILL_WAIT_S) -> bool:
        """Whether no domain's energy advanced between two reads WAIT_S apart."""
        a = self.read()
        if not a:
            return False
        time.sleep(wait_s)
        b = self.read()
        x, y = np.asarray(a["energy_uj"]), np.asarray(b.get("energy_uj", []))
        if x.shape != y.shape:
            return False
        ok = ~np.isnan(x) & ~np.isnan(y)
        return bool(ok.any()) and not bool((x[ok] != y[ok]).any())

    def _setup(self) -> SourceStatus:
        if self._status is not None:
            return self._status
        pc = self._powercap_status = self.powercap_status()
        if pc.available:
            self.via = "powercap"
            self._status = SourceStatus(self.name, True, None, None, {
                "via": "powercap", "domains": [z.domain for z in self.zones]})
            return self._status
        denied = pc.reason if self.zones else None
        perf_status = self._perf_status = self.open_power_pmu()
        if perf_status.available:
            self.via = "perf"
            self._status = SourceStatus(self.name, True, denied and f"{denied}; using the perf "
                                        "power PMU", None, perf_status.detail)
            return self._status
        if denied:
            self._status = SourceStatus(
                self.name, False, f"{denied}, and the perf power PMU: {perf_status.reason}",
                ROOT_FIX + " (a udev rule makes it stick)",
                {"zones": [z.zone_id for z in self.zones]})
        else:
            self._status = SourceStatus(
                self.name, False,
                "no RAPL: no intel-rapl zones in /sys/class/powercap and no perf power PMU"
                + (" (virtual machine)" if is_virtual_machine(self.root, self._reader) else ""),
                "on bare metal: modprobe intel_rapl_msr (Intel) or use Linux >= 5.8 (AMD)",
                {"path": str(self.root / POWERCAP)})
        return self._status

    def open_power_pmu(self) -> SourceStatus:
        name = "rapl:perf"
        if pmus.pmu_type("power", self.root) is None:
            return SourceStatus(name, False, "no perf power PMU", None)
        if self._opener is None:
            return SourceStatus(name, False, "not this machine (--fsroot): perf counts only "
                                "the running machine", None)
        cpus = pmus.pmu_cpumask("power", self.root) or [0]
        opened: list[tuple[str, tuple[str, int], Callable[[], int], float]] = []
        errors: list[str] = []
        for event, kind in POWER_EVENTS.items():
            spec = pmus.pmu_event("power", event, self.root)
            if spec is None:
                continue
            typ, cfg, scale, _unit = spec
            for cpu in (cpus if kind != "psys" else cpus[:1]):
                pkg = _package_of_cpu(self.root, cpu, self._reader)
                if kind == "psys":
                    domain, obj = "psys", ("Machine", 0)
                elif kind == "package":
                    domain, obj = f"package-{pkg}", ("Package", pkg)
                else:
                    domain, obj = f"{kind}-{pkg}", ("Package", pkg)
                try:
                    opened.append((domain, obj, self._opener(typ, cfg["config"], cpu), scale))
                except OSError as exc:
                    errors.append(f"{event}: {exc}")
        if not opened:
            return SourceStatus(name, False, "; ".join(errors) or "no energy events", None)
        self._counters = opened
        return SourceStatus(name, True, None, None,
                            {"via": "perf", "domains": [d for d, *_ in opened]})

    # ---- Source ----
    def status(self) -> SourceStatus:
        return self._setup()

    def read(self) -> dict[str, Any]:
        st = self._setup()
        if not st.available:
            return {}
        if self.via == "powercap":
            energy = np.full(len(self.zones), np.nan)
            for i, z in enumerate(self.zones):
                try:
                    energy[i] = float(self._reader(z.path / "energy_uj"))
                except (OSError, ValueError):
                    pass  # NaN: unknown this sweep, never 0
            return {"domains": [z.domain for z in self.zones],
                    "objects": [list(z.obj) for z in self.zones],
                    "energy_uj": energy,
                    "max_uj": np.array([z.max_uj for z in self.zones]),
                    "via": "powercap"}
        energy = np.full(len(self._counters), np.nan)
        maxes = np.empty(len(self._counters))
        for i, (_, _, read, scale) in enumerate(self._counters):
            try:
                energy[i] = read() * scale * 1e6
            except OSError:
                pass
            maxes[i] = (2.0 ** 64) * scale * 1e6   # a 64-bit count: the wrap is that far
        return {"domains": [d for d, *_ in self._counters],
                "objects": [list(o) for _, o, _, _ in self._counters],
                "energy_uj": energy, "max_uj": maxes, "via": "perf"}

    def close(self) -> None:
        self._close_counters()
        self._status = self._powercap_status = self._perf_status = None

    def _close_counters(self) -> None:
        for _, _, read, _ in self._counters:
            close = getattr(read, "close", None)
            if close is not None:
                close()
        self._counters = []
