"""CPU frequency per PU: cpufreq, else APERF/MPERF from the msr PMU.

cpufreq (Documentation/admin-guide/pm/cpufreq.rst): ``cpuN/cpufreq/scaling_cur_freq`` in kHz,
instantaneous (the driver's last estimate), and ``cpuinfo_max_freq``. Virtual machines
usually have no cpufreq driver at all.

The msr PMU (arch/x86/events/msr.c) exposes ``aperf`` and ``mperf`` as free-running
counters: GHz = base GHz * d(aperf)/d(mperf), averaged over the interval, which is what a
monitor wants. MPERF ticks at the base (TSC) rate, not at ``cpuinfo_max_freq`` (the maximum
*turbo* frequency with intel_pstate and amd-pstate: scaling by it inflates GHz by 30-60 %).
So the base comes from cpufreq's ``base_frequency`` (intel_pstate.rst, "base_frequency") when
the driver has it, and the msr PMU's ``tsc`` counter is opened next to aperf/mperf so derive()
measures the TSC rate over the same interval; ``max_khz`` is only a flagged last resort.
A VM's msr PMU often offers only ``tsc``. The last resort, cycles/time from the hardware PMU,
is computed by derive() from the perf source.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from snumap_tui.errors import SnumapError
from snumap_tui.native import perf_event as pe
from snumap_tui.native import perf_pmu as pmus
from snumap_tui.sources._io import (
    READ_FLAGS,
    Reader,
    count_of,
    is_live,
    parse_cpulist,
    read_optional,
    read_text,
)
from snumap_tui.sources.base import SourceStatus
from snumap_tui.sources.confine import allows_fast, open_checked, top_of

CPU_DIR = "sys/devices/system/cpu"


def online_cpus(root: Path, reader: Reader = read_text) -> list[int]:
    """Online PUs from ``cpu/online`` (cputopology.rst), else the cpuN directories."""
    path = root / CPU_DIR / "online"
    text = read_optional(reader, path)
    if text and text.strip():
        try:
            return parse_cpulist(text)
        except ValueError as exc:
            raise SnumapError(f"{path}: not a cpulist ({exc})") from None
    try:
        return sorted(int(e.name[3:]) for e in (root / CPU_DIR).iterdir()
                      if e.name.startswith("cpu") and e.name[3:].isdigit())
    except OSError:
        return []


class FreqSource:
    """``cur_khz`` (cpufreq) and/or cumulative ``aperf``/``mperf`` (msr PMU) per online PU."""

    name = "freq"

    def __init__(self, root: Path = Path("/"), reader: Reader = read_text,
                 counter_opener: Callable[[int, int, int], Callable[[], int]] | None = None,
                 max_age_s: float = 0.9, budget: int = 128,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.root = Path(root)
        self._reader = reader
        self._opener = counter_opener or (pe.Counter if is_live(self.root) else None)
        self.cpus = online_cpus(self.root, reader)
        self._cpufreq = [c for c in self.cpus
                         if (self.root / CPU_DIR / f"cpu{c}/cpufreq/scaling_cur_freq").exists()]
        self._cur_paths = [str(self.root / CPU_DIR / f"cpu{c}/cpufreq/scaling_cur_freq")
                           for c in self.cpus]
        self._max_khz = np.full(len(self.cpus), np.nan)
        self._base_khz = np.full(len(self.cpus), np.nan)
        # scaling_cur_freq: last value and when it was read, per PU (see _read_cur_khz)
        self.max_age_s, self.budget, self._clock = max_age_s, max(1, budget), clock
        self._cur = np.full(len(self.cpus), np.nan)
        self._cur_at = np.full(len(self.cpus), -np.inf)
        self._cur_fds: dict[int, int] = {}
        for i, c in enumerate(self.cpus):
            self._max_khz[i] = _khz(read_optional(
                reader, self.root / CPU_DIR / f"cpu{c}/cpufreq/cpuinfo_max_freq"), self._max_khz[i])
            self._base_khz[i] = _khz(read_optional(
                reader, self.root / CPU_DIR / f"cpu{c}/cpufreq/base_frequency"), self._base_khz[i])
        # Per PU: (aperf, mperf, tsc or None) readers.
        self._msr: list[tuple[Callable[[], int], Callable[[], int],
                              Callable[[], int] | None]] = []
        self._status: SourceStatus | None = None

    def _open_msr(self) -> str | None:
        """Open aperf+mperf on every PU; None on success, else why not."""
        if pmus.pmu_type("msr", self.root) is None:
            return "no msr PMU"
        a = pmus.pmu_event("msr", "aperf", self.root)
        m = pmus.pmu_event("msr", "mperf", self.root)
        if a is None or m is None:
            d = self.root / pmus.EVENT_SOURCE / "msr" / "events"
            have = sorted(p.name for p in d.iterdir()) if d.is_dir() else []
            return f"the msr PMU has no aperf/mperf (only {', '.join(have) or 'nothing'})"
        if self._opener is None:
            return "not this machine (--fsroot): perf counts only the running machine"
        tsc = pmus.pmu_event("msr", "tsc", self.root)
        for c in self.cpus:
            try:
                self._msr.append(self._open_pu(c, a[1]["config"], m[1]["config"],
                                               tsc[1]["config"] if tsc else None, a[0]))
            except OSError as exc:
                self.close()
                return f"aperf/mperf: {exc}"
        return None

    def _open_pu(self, cpu: int, aperf: int, mperf: int, tsc: int | None, typ: int
                 ) -> tuple[Callable[[], int], Callable[[], int], Callable[[], int] | None]:
        """aperf, mperf and (when the PMU has it) tsc on one PU, one after the other: if a
        later one fails, the ones already open are closed before the error goes up."""
        opened: list[Callable[[], int]] = []
        try:
            for cfg in (aperf, mperf):
                opened.append(self._opener(typ, cfg, cpu))  # type: ignore[misc]
            t = None
            if tsc is not None:
                try:
                    t = self._opener(typ, tsc, cpu)  # type: ignore[misc]
                except OSError:
                    t = None     # no measured base: derive() falls back to base_khz/max_khz
        except OSError:
            for r in opened:
                _close(r)
            raise
        return opened[0], opened[1], t

    def status(self) -> SourceStatus:
        if self._status is not None:
            return self._status
        msr_why = self._open_msr()
        detail: dict[str, Any] = {"cpufreq_cpus": len(self._cpufreq),
                                  "aperf_mperf": msr_why is None}
        if self._cpufreq or msr_why is None:
            self._status = SourceStatus(self.name, True,
                                        None if self._cpufreq else "APERF/MPERF only",
                                        None, detail)
        else:
            self._status = SourceStatus(
                self.name, False, f"no cpufreq driver (/{CPU_DIR}/cpu*/cpufreq missing) and "
                f"{msr_why}", "on bare metal load a cpufreq driver (intel_pstate, amd-pstate, "
                "acpi-cpufreq); with a hardware PMU, GHz comes from cycles/time", detail)
        return self._status

    def read(self) -> dict[str, Any]:
        st = self.status()
        if not st.available:
            return {}
        n = len(self.cpus)
        out: dict[str, Any] = {"cpus": np.array(self.cpus, dtype=np.int64),
                               "max_khz": self._max_khz.copy()}
        if not np.isnan(self._base_khz).all():
            out["base_khz"] = self._base_khz.copy()
        if self._cpufreq:
            out["cur_khz"] = self._read_cur_khz()
        if self._msr:
            aperf = np.full(n, np.nan)
            mperf = np.full(n, np.nan)
            tsc = np.full(n, np.nan)
            for i, (ra, rm, rt) in enumerate(self._msr):
                try:
                    aperf[i] = ra()
                    mperf[i] = rm()
                    if rt is not None:
                        tsc[i] = rt()
                except OSError:
                    pass
            out["aperf"] = aperf
            out["mperf"] = mperf
            if any(rt is not None for _, _, rt in self._msr):
                out["tsc"] = tsc
        return out

    def _read_cur_khz(self) -> np.ndarray:
        """scaling_cur_freq per PU, at most every ``max_age_s`` per PU and at most
        ``budget`` files per sweep (the stalest first; never-read PUs always), the others
        reused. The value is the driver's last instantaneous estimate, so re-reading it ten
        times a second adds cost, not information; one small file per PU is this source's
        whole cost (1.6 ms per sweep at 384 PUs, 6.4 ms at 1024 when read every time)."""
        now = self._clock()
        age = now - self._cur_at
        due = np.flatnonzero(age >= self.max_age_s)
        if due.size > self.budget:
            never = due[np.isinf(age[due])]
            rest = due[~np.isinf(age[due])]
            keep = max(0, self.budget - never.size)
            rest = rest[np.argsort(self._cur_at[rest], kind="stable")[:keep]]
            due = np.concatenate([never, rest])
        cur = self._cur
        if not allows_fast(self._reader):
            for i in due.tolist():
                t = read_optional(self._reader, Path(self._cur_paths[i]))
                cur[i] = _khz(t, np.nan)
        else:
            # Each file stays open and is re-read with pread at offset 0, which makes sysfs
            # produce the value anew: one syscall per PU instead of open+read+close.
            paths, fds = self._cur_paths, self._cur_fds
            for i in due.tolist():
                fd = fds.get(i)
                try:
                    if fd is None:
                        fd = fds[i] = open_checked(paths[i], top_of(self._reader),
                                                   READ_FLAGS)
                    cur[i] = _khz(os.pread(fd, 32, 0).decode("ascii", "replace"), np.nan)
                except (OSError, ValueError):
                    cur[i] = np.nan       # could not be read: not available, never 0
                    if fd is not None:    # e.g. ENODEV after the PU went offline: reopen later
                        os.close(fds.pop(i))
        self._cur_at[due] = now
        return cur.copy()

    def close(self) -> None:
        for fd in self._cur_fds.values():
            os.close(fd)
        self._cur_fds.clear()
        for readers in self._msr:
            for r in readers:
                if r is not None:
                    _close(r)
        self._msr = []
        self._status = None



def _khz(text: str | None, default: float) -> float:
    """A cpufreq file's kHz (ASCII digits); ``default`` for anything else: a crafted tree's
    "nan", "-5" or "1e999" is not a frequency."""
    n = count_of(text, 12) if text else None
    return float(n) if n is not None else default


def _close(reader: Callable[[], int]) -> None:
    """Close a counter reader (pe.Counter has close(); an injected test reader may not)."""
    close = getattr(reader, "close", None)
    if close is not None:
        close()
