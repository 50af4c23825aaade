"""Hardware and software counters per PU (and per thread on request) via perf_event_open.

Per PU there are two groups (perf_event_open(2), "Event groups"): the hardware events
(cycles, instructions, cache-references, cache-misses, branch-misses, stalled cycles) and
the software events (context-switches, cpu-migrations, page-faults). A group is read in one
read() with PERF_FORMAT_GROUP | TOTAL_TIME_ENABLED | TOTAL_TIME_RUNNING, so the ratio of its
members is exact even when the kernel multiplexes it (running < enabled: derive() scales and
flags). An event the PMU lacks (ENOENT) or that does not fit in the group with the others
(EINVAL from the kernel's group validation) is left out on its own, not the whole group.

Counting everything on a PU needs CAP_PERFMON or kernel.perf_event_paranoid <= 0. A virtual
machine usually has no hardware PMU at all: then the hardware events are reported unavailable
("no hardware PMU (virtual machine)") and are absent from the readings, never zeros, while the
software events still count. perf counts only the running machine, so on ``--fsroot`` this
source is unavailable.
"""

from __future__ import annotations

import errno
import os
import resource
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from snumap_tui.native import perf_event as pe
from snumap_tui.native import perf_pmu as pmus
from snumap_tui.native import perf_spec
from snumap_tui.sources._io import Reader, is_live, read_optional, read_text
from snumap_tui.sources.base import SourceStatus
from snumap_tui.sources.freq import online_cpus

HW_EVENTS = ("cycles", "instructions", "cache-references", "cache-misses", "branch-misses",
             "stalled-cycles-frontend", "stalled-cycles-backend")
SW_EVENTS = ("context-switches", "cpu-migrations", "page-faults")
# The per-thread counters of `top`'s selected process add task-clock: each thread's on-CPU
# time, the base of its GHz and of its share of the process (analysis/live_threads.py).
THREAD_SW_EVENTS = ("task-clock", *SW_EVENTS)
# Core PMU names in sysfs: x86 ("cpu"; "cpu_core"/"cpu_atom" on hybrid), Arm, s390, RISC-V.
CORE_PMU_PREFIXES = ("cpu", "armv8_", "armv7_", "arm_cortex", "cpum_cf", "riscv_pmu")
# A PU's groups time their samples on CLOCK_MONOTONIC, the clock of every other reading: a
# member that samples the group (sources/perf_sampling.py) must have its leader's clock.
SAMPLE_CLOCK = time.CLOCK_MONOTONIC
NOT_THIS_MACHINE = "not this machine (--fsroot): perf counts only the running machine"


def core_pmus(root: Path) -> list[str]:
    """The CPU's own PMUs under /sys/bus/event_source/devices (empty on most VMs)."""
    d = root / pmus.EVENT_SOURCE
    try:
        names = [e.name for e in d.iterdir()]
    except OSError:
        return []
    return sorted(n for n in names if n == "cpu" or n.startswith(CORE_PMU_PREFIXES[1:])
                  or n in ("cpu_core", "cpu_atom"))


def is_virtual_machine(root: Path, reader: Reader = read_text) -> bool:
    """The CPUID hypervisor bit (x86 ``flags ... hypervisor``) or /sys/hypervisor/type."""
    text = read_optional(reader, root / "proc" / "cpuinfo") or ""
    for line in text.splitlines():
        if line.startswith("flags"):
            if " hypervisor" in line:
                return True
            break
    t = read_optional(reader, root / "sys" / "hypervisor" / "type")
    return bool(t and t.strip())


def no_pmu_reason(root: Path, reader: Reader = read_text) -> tuple[str, str]:
    if is_virtual_machine(root, reader):
        return ("no hardware PMU (virtual machine)",
                ("enable the virtual PMU in the hypervisor (KVM: -cpu host,pmu=on; libvirt: "
                "<pmu state='on'/>; cloud: a bare-metal or PMU-enabled instance type)"))
    return ("no hardware PMU driver for this CPU",
            "use a kernel with this CPU's perf driver (CONFIG_PERF_EVENTS, the arch PMU)")


def raise_fd_limit(needed: int) -> None:
    """One fd per event per PU: lift the soft RLIMIT_NOFILE towards the hard one if needed."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = needed + 256
    if soft != resource.RLIM_INFINITY and soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(want, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
        except (ValueError, OSError):
            pass


class Group:
    """One perf group (leader first); members that could not be opened are left out."""

    def __init__(self, events: Sequence[str], pid: int, cpu: int,
                 root: Path = Path("/"), sample_ns: int = 0) -> None:
        self.events: list[str] = []
        self.fds: list[int] = []
        # With SAMPLE_NS (a PU's group): one more member, a cpu-clock that has the kernel
        # write the whole group's counts into its ring every SAMPLE_NS (sources/
        # perf_sampling.py). It is opened with the group, which starts only once it is
        # complete: a clock added to a group already counting never ticked (Linux 6.18).
        self.sampler = -1
        sample_ns = sample_ns if pid == -1 else 0
        self.errors: dict[str, pe.PerfOpenError] = {}
        specs: list[tuple[str, perf_spec.EventSpec]] = []
        for ev in events:
            try:
                specs.append((ev, event_spec(ev, root)))
            except perf_spec.EventSpecError as exc:
                self.errors[ev] = pe.PerfOpenError(errno.EINVAL, str(exc), None, ev)
        # A clock (cpu-clock, task-clock: hrtimer events) never leads a group: counting a
        # whole PU, the members of a group it leads read 0 (seen on Linux 6.18: page faults
        # under a task-clock leader stayed 0 while 16 K pages were touched).
        specs.sort(key=lambda es: es[1].type == perf_spec.PERF_TYPE_SOFTWARE
                   and es[1].config in (0, 1))
        for ev, spec in specs:
            attr = pe.make_attr(spec.type, spec.config, read_format=pe.GROUP_READ_FORMAT,
                                config1=spec.config1, config2=spec.config2,
                                exclude_user=spec.exclude_user,
                                exclude_kernel=spec.exclude_kernel, exclude_hv=spec.exclude_hv,
                                clockid=SAMPLE_CLOCK if pid == -1 else None,
                                disabled=bool(sample_ns) and not self.fds)
            leader = self.fds[0] if self.fds else -1
            try:
                fd = pe.perf_event_open(attr, pid, cpu, leader, event=ev)
            except pe.PerfOpenError as exc:
                if leader >= 0 and exc.errno == errno.EINVAL:
                    exc = pe.PerfOpenError(exc.errno or 0, "no free hardware counter for it in "
                                           "the group (the PMU has fewer counters)", None, ev)
                self.errors[ev] = exc
                continue
            self.fds.append(fd)
            self.events.append(ev)
        if sample_ns and self.fds:
            self._add_sampler(cpu, sample_ns)

    def _add_sampler(self, cpu: int, sample_ns: int) -> None:
        attr = pe.make_attr(pe.PERF_TYPE_SOFTWARE, pe.PERF_COUNT_SW_CPU_CLOCK,
                            read_format=pe.GROUP_READ_FORMAT, sample_period=sample_ns,
                            sample_type=pe.PERF_SAMPLE_TIME | pe.PERF_SAMPLE_READ,
                            clockid=SAMPLE_CLOCK)
        try:
            self.sampler = pe.perf_event_open(attr, -1, cpu, self.fds[0], event="cpu-clock")
        except pe.PerfOpenError:
            self.sampler = -1       # counted as without it: read at every sample instead
        try:
            pe.enable(self.fds[0])
        except OSError:
            self.close()

    @property
    def members(self) -> int:
        """The group's members as the kernel reads them (the sampling clock last)."""
        return len(self.fds) + (self.sampler >= 0)

    def read(self) -> tuple[list[int], int | None, int | None]:
        vals, te, tr = pe.read_counter(self.fds[0], pe.GROUP_READ_FORMAT, self.members)
        return vals[:len(self.fds)], te, tr

    def close(self) -> None:
        if self.sampler >= 0:
            os.close(self.sampler)
            self.sampler = -1
        for fd in reversed(self.fds):
            os.close(fd)
        self.fds = []


def event_spec(ev: str, root: Path = Path("/")) -> perf_spec.EventSpec:
    """The perf_event_attr fields of an event as perf(1) names it (native/perf_spec.py)."""
    return perf_spec.parse_event(ev, root)


def needs_pmu(ev: str, root: Path = Path("/")) -> bool:
    """True unless ev is a software event (an unparsable name counts as needing the PMU: its
    own error says why)."""
    try:
        return event_spec(ev, root).needs_pmu
    except perf_spec.EventSpecError:
        return True


def _event_status(ev: str, errors: list[pe.PerfOpenError], opened: int, total: int,
                  hw_missing: tuple[str, str] | None) -> SourceStatus:
    name = f"perf:{ev}"
    if opened:
        caveat = None if opened == total else f"open on {opened} of {total} PUs"
        return SourceStatus(name, True, caveat, None, {"cpus": opened})
    if errors and isinstance(errors[0].reason, str) and errors[0].reason.startswith(
            ("event ", "unknown event", "an event")):
        return SourceStatus(name, False, errors[0].reason, None)
    if needs_pmu(ev) and hw_missing:
        return SourceStatus(name, False, hw_missing[0], hw_missing[1])
    if errors:
        e = errors[0]
        return SourceStatus(name, False, f"{e.reason} ({errno.errorcode.get(e.errno or 0)})",
                            e.fix, {"errno": e.errno})
    return SourceStatus(name, False, "not tried", None)


class PerfSource:
    """Per-PU groups of hardware and software counters (raw, cumulative, unscaled)."""

    name = "perf"

    def __init__(self, root: Path = Path("/"), reader: Reader = read_text,
                 hw_events: Sequence[str] = HW_EVENTS, sw_events: Sequence[str] = SW_EVENTS
                 ) -> None:
        self.root = Path(root)
        self._reader = reader
        self.hw_events = tuple(hw_events)
        self.sw_events = tuple(sw_events)
        self.live = is_live(self.root)
        self._groups: dict[int, list[Group]] = {}
        self._opened = False
        self._errors: dict[str, list[pe.PerfOpenError]] = {}
        self._online: str | None = None
        self._resynced = -1e18          # monotonic time of the last look at the online PUs
        self.events: list[str] = []
        self.sample_ns = 0              # sample_every()
        self.generation = 0             # how many times the groups were opened
        # when read() read each PU's groups (its rows), CLOCK_MONOTONIC ns
        self.read_ns = np.zeros(0, dtype=np.int64)

    # ---- opening ----
    def _open(self) -> None:
        if self._opened or not self.live:
            return
        self._opened = True
        self.generation += 1
        cpus = online_cpus(self.root, self._reader)
        # each group's sampling clock too, when the kernel samples them
        raise_fd_limit(len(cpus) * (len(self.hw_events) + len(self.sw_events)
                                    + (2 if self.sample_ns else 0)))
        self._online = read_optional(self._reader, self.root / "sys/devices/system/cpu/online")
        self._resynced = time.monotonic()
        hw_ok = True
        for cpu in cpus:
            groups = []
            # A PU without a hardware PMU fails every hardware event the same way: stop after
            # the first PU instead of paying n_events syscalls on each of 1024 PUs.
            for events in ((self.hw_events if hw_ok else ()), self.sw_events):
                if not events:
                    continue
                g = Group(events, -1, cpu, self.root, self.sample_ns)
                for ev, exc in g.errors.items():
                    self._errors.setdefault(ev, []).append(exc)
                if g.fds:
                    groups.append(g)
                elif events is self.hw_events:
                    hw_ok = False
            self._groups[cpu] = groups
        seen = {ev for gs in self._groups.values() for g in gs for ev in g.events}
        self.events = [ev for ev in (*self.hw_events, *self.sw_events) if ev in seen]

    def sample_every(self, ns: int) -> list[tuple[int, Group]]:
        """Have the kernel read each PU's groups every NS into a ring (0: no longer), the
        groups opened again for it; the (PU, group) pairs that do."""
        if ns != self.sample_ns:
            self.sample_ns = int(ns)
            if self._opened:
                self.close()
        self._open()
        return [(cpu, g) for cpu, gs in sorted(self._groups.items()) for g in gs
                if g.sampler >= 0]

    def layout(self) -> tuple[list[int], list[str]]:
        """The PUs (rows) and events (columns) of read()'s matrices."""
        self._open()
        return sorted(self._groups), list(self.events)

    RESYNC_S = 1.0      # how often the online PUs are read (a sysfs read per ms at 1 ms)

    def _resync(self) -> None:
        """CPU hotplug: reopen everything when the set of online PUs changed (looked at
        every RESYNC_S: a PU that went meanwhile fails its group's read, which is skipped)."""
        now = time.monotonic()
        if now - self._resynced < self.RESYNC_S:
            return
        self._resynced = now
        text = read_optional(self._reader, self.root / "sys/devices/system/cpu/online")
        if text != self._online:
            self.close()
            self._open()

    # ---- Source ----
    def statuses(self) -> list[SourceStatus]:
        """One status per event ("perf:cycles", ...), for `snumap probe`."""
        if not self.live:
            return [SourceStatus(f"perf:{ev}", False, NOT_THIS_MACHINE, None)
                    for ev in (*self.hw_events, *self.sw_events)]
        self._open()
        total = len(self._groups)
        hw_missing = None if core_pmus(self.root) else no_pmu_reason(self.root, self._reader)
        out = []
        for ev in (*self.hw_events, *self.sw_events):
            opened = sum(1 for gs in self._groups.values() for g in gs if ev in g.events)
            out.append(_event_status(ev, self._errors.get(ev, []), opened, total, hw_missing))
        return out

    def status(self) -> SourceStatus:
        if not self.live:
            return SourceStatus(self.name, False, NOT_THIS_MACHINE, None)
        per_event = self.statuses()
        ok = [s.name[5:] for s in per_event if s.available]
        missing = [s for s in per_event if not s.available]
        detail = {"events": ok, "missing": {s.name[5:]: s.reason for s in missing},
                  "cpus": len(self._groups)}
        if not ok:
            first = missing[0]
            return SourceStatus(self.name, False, first.reason, first.fix, detail)
        hw_ok = [e for e in ok if e in self.hw_events]
        if not hw_ok:
            if core_pmus(self.root):
                reason, fix = "hardware events could not be opened", None
            else:
                reason, fix = no_pmu_reason(self.root, self._reader)
            return SourceStatus(self.name, True, f"{reason}: software events only", fix, detail)
        return SourceStatus(self.name, True, None, None, detail)

    def read(self) -> dict[str, Any]:
        if not self.live:
            return {}
        self._open()
        self._resync()
        cpus = sorted(self._groups)
        k = len(self.events)
        col = {ev: j for j, ev in enumerate(self.events)}
        value = np.full((len(cpus), k), np.nan)
        enabled = np.full((len(cpus), k), np.nan)
        running = np.full((len(cpus), k), np.nan)
        stamps = np.zeros(len(cpus), dtype=np.int64)
        clock = time.monotonic_ns
        for i, cpu in enumerate(cpus):
            stamps[i] = clock()
            for g in self._groups[cpu]:
                try:
                    vals, te, tr = g.read()
                except OSError:
                    continue
                for ev, v in zip(g.events, vals):
                    j = col[ev]
                    value[i, j] = v
                    enabled[i, j] = np.nan if te is None else te
                    running[i, j] = np.nan if tr is None else tr
        self.read_ns = stamps
        return {"cpus": np.array(cpus, dtype=np.int64), "events": list(self.events),
                "value": value, "enabled": enabled, "running": running}

    def close(self) -> None:
        for gs in self._groups.values():
            for g in gs:
                g.close()
        self._groups = {}
        self._errors = {}
        self._opened = False


class ThreadCounters:
    """Counters that follow threads across PUs (pid=tid, cpu=-1), for the processes asked for.

    Each thread gets its own groups (hardware, software); a process's reading is the sum over
    its threads, each scaled for multiplexing first (perf_event_open(2), "reading results":
    value * time_enabled / time_running, per event fd). Threads are discovered again at every
    read: new ones get counters, and the counters of threads that ended are read one last time
    (their final counts stay in the process's total, so it never goes backwards) and closed, so
    a process that starts and ends threads does not pile up file descriptors.

    Needs ptrace-level access to the process (same user, or CAP_PERFMON) and
    perf_event_paranoid <= 2 for user-space counts.
    """

    def __init__(self, root: Path = Path("/"), hw_events: Sequence[str] = HW_EVENTS,
                 sw_events: Sequence[str] = SW_EVENTS) -> None:
        self.root = Path(root)
        self.hw_events = tuple(hw_events)
        self.sw_events = tuple(sw_events)
        self._groups: dict[int, dict[int, list[Group]]] = {}   # pid -> tid -> groups
        self._ended: dict[int, dict[str, float]] = {}          # pid -> event -> final counts
        self.errors: dict[int, str] = {}

    def open_fds(self, pid: int | None = None) -> int:
        """File descriptors held (for one process, or all): what the leak test counts."""
        pids = [pid] if pid is not None else list(self._groups)
        return sum(len(g.fds) for p in pids for gs in self._groups.get(p, {}).values()
                   for g in gs)

    def watch(self, pid: int) -> None:
        """Open counters on every current thread of ``pid``; close those of ended threads."""
        if not is_live(self.root):
            self.errors[pid] = NOT_THIS_MACHINE
            return
        per_tid = self._groups.setdefault(pid, {})
        self._ended.setdefault(pid, {})
        try:
            tids = {int(t) for t in os.listdir(self.root / "proc" / str(pid) / "task")}
        except OSError as exc:
            self.errors[pid] = f"{exc.strerror}: pid {pid}"
            for tid in list(per_tid):        # the process is gone: nothing more to count
                self._retire(pid, tid)
            return
        for tid in [t for t in per_tid if t not in tids]:
            self._retire(pid, tid)
        for tid in sorted(tids - per_tid.keys()):
            groups = []
            for events in (self.hw_events, self.sw_events):
                g = Group(events, tid, -1, self.root)
                if g.fds:
                    groups.append(g)
                elif g.errors and events is self.sw_events:
                    self.errors[pid] = str(next(iter(g.errors.values())))
            per_tid[tid] = groups

    def _retire(self, pid: int, tid: int) -> None:
        """A thread that ended: its last counts go to the process's total, its fds closed."""
        ended = self._ended.setdefault(pid, {})
        for g in self._groups[pid].pop(tid, []):
            for ev, v in _scaled(g).items():
                ended[ev] = ended.get(ev, 0.0) + v
            g.close()

    def read(self, pid: int) -> dict[str, Any] | None:
        """{"events": [...], "value": float64[k] (cumulative, scaled per thread, summed over
        the process's threads, ended ones included), "multiplexed": bool[k], "threads": n,
        "tids": int64[n] and "per_thread": float64[n, k] (each live thread's own cumulative
        counts, NaN for an event its groups could not count)} for one watched process; None
        when it is not watched."""
        if pid not in self._groups:
            return None
        self.watch(pid)
        per_tid = self._groups.get(pid, {})
        total = dict(self._ended.get(pid, {}))
        mux: set[str] = set()
        each: dict[int, dict[str, float]] = {}
        for tid, gs in per_tid.items():
            mine = each.setdefault(tid, {})
            for g in gs:
                mine.update(_scaled(g, mux))
            for ev, v in mine.items():
                total[ev] = total.get(ev, 0.0) + v
        events = [ev for ev in (*self.hw_events, *self.sw_events) if ev in total]
        tids = sorted(each)
        return {"events": events,
                "value": np.array([total[ev] for ev in events], dtype=np.float64),
                "multiplexed": np.array([ev in mux for ev in events], dtype=bool),
                "threads": len(per_tid),
                "tids": np.array(tids, dtype=np.int64),
                "per_thread": np.array([[each[t].get(ev, np.nan) for ev in events]
                                        for t in tids], dtype=np.float64
                                       ).reshape(len(tids), len(events))}

    def unwatch(self, pid: int) -> None:
        for gs in self._groups.pop(pid, {}).values():
            for g in gs:
                g.close()
        self._ended.pop(pid, None)
        self.errors.pop(pid, None)

    def close(self) -> None:
        for pid in list(self._groups):
            self.unwatch(pid)


def _scaled(g: Group, mux: set[str] | None = None) -> dict[str, float]:
    """One group's counts scaled by enabled/running ({} when it cannot be read or never ran);
    events that were multiplexed are added to ``mux``."""
    try:
        vals, te, tr = g.read()
    except OSError:
        return {}
    out = {}
    for ev, v in zip(g.events, vals):
        if te == 0 and tr == 0:
            # A thread's counter is enabled only while the thread runs: one that has not run
            # since it was opened (a sleeping thread) counted nothing, exactly.
            out[ev] = 0.0
            continue
        x, multiplexed = pe.scale(v, te, tr)
        if x is None:
            continue
        out[ev] = x
        if multiplexed and mux is not None:
            mux.add(ev)
    return out
