"""perf_event_open(2) through ctypes: the attr structure, the syscall, group reads, ioctls.
(PMUs described in sysfs: native/perf_pmu.py.)

Why ctypes and not a C extension: one syscall per PU at open time and one read() per group per
sweep; nothing here is hot enough to need compiled code, and ctypes keeps the wheel pure Python.

Layout and constants come from include/uapi/linux/perf_event.h and the perf_event_open(2) man
page. The syscall number differs per architecture, so it comes from a table keyed by
``platform.machine()``, never one constant. ``PerfOpenError`` carries the errno together with
a reason and a fix a user can act on (``explain_errno``), which is what ``snumap probe`` and the
sources show when a counter cannot be opened.

Nothing is loaded or opened at import time.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
from collections.abc import Sequence
from pathlib import Path

# The sysfs side of perf (PMU types, event encodings, cpumasks) is native/perf_pmu.py;
# parse_cpulist stays importable from here for the code that reads cpulists with perf fds.
from snumap_tui.native.libc import libc
from snumap_tui.native.perf_pmu import parse_cpulist  # noqa: F401  (re-exported)

# ---- syscall numbers (arch/*/include/uapi/asm/unistd*.h, the generic table for newer arches) --
SYSCALL_NUMBERS: dict[str, int] = {
    "x86_64": 298, "amd64": 298,
    "i386": 336, "i486": 336, "i586": 336, "i686": 336, "x86": 336,
    "aarch64": 241, "arm64": 241,
    "riscv64": 241, "loongarch64": 241,
    "armv7l": 364, "armv6l": 364, "armv8l": 364, "arm": 364,
    "ppc64": 319, "ppc64le": 319, "ppc": 319,
    "s390x": 331, "s390": 331,
    "mips64": 5296, "mips": 4333,
    "sparc64": 327,
}

# ---- perf_type_id ----
PERF_TYPE_HARDWARE = 0
PERF_TYPE_SOFTWARE = 1
PERF_TYPE_TRACEPOINT = 2
PERF_TYPE_HW_CACHE = 3
PERF_TYPE_RAW = 4
PERF_TYPE_BREAKPOINT = 5

# ---- perf_hw_id ----
PERF_COUNT_HW_CPU_CYCLES = 0
PERF_COUNT_HW_INSTRUCTIONS = 1
PERF_COUNT_HW_CACHE_REFERENCES = 2
PERF_COUNT_HW_CACHE_MISSES = 3
PERF_COUNT_HW_BRANCH_INSTRUCTIONS = 4
PERF_COUNT_HW_BRANCH_MISSES = 5
PERF_COUNT_HW_BUS_CYCLES = 6
PERF_COUNT_HW_STALLED_CYCLES_FRONTEND = 7
PERF_COUNT_HW_STALLED_CYCLES_BACKEND = 8
PERF_COUNT_HW_REF_CPU_CYCLES = 9

# ---- perf_sw_ids ----
PERF_COUNT_SW_CPU_CLOCK = 0
PERF_COUNT_SW_TASK_CLOCK = 1
PERF_COUNT_SW_PAGE_FAULTS = 2
PERF_COUNT_SW_CONTEXT_SWITCHES = 3
PERF_COUNT_SW_CPU_MIGRATIONS = 4
PERF_COUNT_SW_PAGE_FAULTS_MIN = 5
PERF_COUNT_SW_PAGE_FAULTS_MAJ = 6
PERF_COUNT_SW_ALIGNMENT_FAULTS = 7
PERF_COUNT_SW_EMULATION_FAULTS = 8
PERF_COUNT_SW_DUMMY = 9
PERF_COUNT_SW_BPF_OUTPUT = 10
PERF_COUNT_SW_CGROUP_SWITCHES = 11

# ---- perf_event_read_format ----
PERF_FORMAT_TOTAL_TIME_ENABLED = 1 << 0
PERF_FORMAT_TOTAL_TIME_RUNNING = 1 << 1
PERF_FORMAT_ID = 1 << 2
PERF_FORMAT_GROUP = 1 << 3
PERF_FORMAT_LOST = 1 << 4

# ---- perf_event_sample_format ----
PERF_SAMPLE_IP = 1 << 0
PERF_SAMPLE_TID = 1 << 1
PERF_SAMPLE_TIME = 1 << 2
PERF_SAMPLE_ADDR = 1 << 3
PERF_SAMPLE_READ = 1 << 4
PERF_SAMPLE_CALLCHAIN = 1 << 5
PERF_SAMPLE_ID = 1 << 6
PERF_SAMPLE_CPU = 1 << 7
PERF_SAMPLE_PERIOD = 1 << 8
PERF_SAMPLE_STREAM_ID = 1 << 9
PERF_SAMPLE_RAW = 1 << 10

# ---- perf_event_open flags ----
PERF_FLAG_FD_NO_GROUP = 1 << 0
PERF_FLAG_FD_OUTPUT = 1 << 1
PERF_FLAG_PID_CGROUP = 1 << 2
PERF_FLAG_FD_CLOEXEC = 1 << 3

# ---- perf_event_type (records in the mmap ring) ----
PERF_RECORD_MMAP = 1
PERF_RECORD_LOST = 2
PERF_RECORD_COMM = 3
PERF_RECORD_EXIT = 4
PERF_RECORD_THROTTLE = 5
PERF_RECORD_UNTHROTTLE = 6
PERF_RECORD_FORK = 7
PERF_RECORD_READ = 8
PERF_RECORD_SAMPLE = 9
PERF_RECORD_SWITCH = 14
PERF_RECORD_SWITCH_CPU_WIDE = 15

# struct perf_event_mmap_page: data_head/data_tail/data_offset/data_size offsets (bytes).
MMAP_PAGE_DATA_HEAD = 1024
MMAP_PAGE_DATA_TAIL = 1032
MMAP_PAGE_DATA_OFFSET = 1040
MMAP_PAGE_DATA_SIZE = 1048

PERF_IOC_FLAG_GROUP = 1

# Event names as perf(1) spells them -> (type, config). "Generic" events the kernel maps onto
# the PMU's own codes; which ones a PMU implements is only known by trying to open them.
HARDWARE_EVENTS: dict[str, int] = {
    "cycles": PERF_COUNT_HW_CPU_CYCLES,
    "instructions": PERF_COUNT_HW_INSTRUCTIONS,
    "cache-references": PERF_COUNT_HW_CACHE_REFERENCES,
    "cache-misses": PERF_COUNT_HW_CACHE_MISSES,
    "branch-instructions": PERF_COUNT_HW_BRANCH_INSTRUCTIONS,
    "branch-misses": PERF_COUNT_HW_BRANCH_MISSES,
    "bus-cycles": PERF_COUNT_HW_BUS_CYCLES,
    "stalled-cycles-frontend": PERF_COUNT_HW_STALLED_CYCLES_FRONTEND,
    "stalled-cycles-backend": PERF_COUNT_HW_STALLED_CYCLES_BACKEND,
    "ref-cycles": PERF_COUNT_HW_REF_CPU_CYCLES,
}
SOFTWARE_EVENTS: dict[str, int] = {
    "cpu-clock": PERF_COUNT_SW_CPU_CLOCK,
    "task-clock": PERF_COUNT_SW_TASK_CLOCK,
    "page-faults": PERF_COUNT_SW_PAGE_FAULTS,
    "context-switches": PERF_COUNT_SW_CONTEXT_SWITCHES,
    "cpu-migrations": PERF_COUNT_SW_CPU_MIGRATIONS,
    "minor-faults": PERF_COUNT_SW_PAGE_FAULTS_MIN,
    "major-faults": PERF_COUNT_SW_PAGE_FAULTS_MAJ,
    "alignment-faults": PERF_COUNT_SW_ALIGNMENT_FAULTS,
    "emulation-faults": PERF_COUNT_SW_EMULATION_FAULTS,
    "dummy": PERF_COUNT_SW_DUMMY,
    "cgroup-switches": PERF_COUNT_SW_CGROUP_SWITCHES,
}


def event_by_name(name: str) -> tuple[int, int]:
    """(type, config) of a generic hardware or software event named as perf(1) names it."""
    if name in HARDWARE_EVENTS:
        return PERF_TYPE_HARDWARE, HARDWARE_EVENTS[name]
    if name in SOFTWARE_EVENTS:
        return PERF_TYPE_SOFTWARE, SOFTWARE_EVENTS[name]
    raise KeyError(f"unknown perf event {name!r}")


# ---- struct perf_event_attr (PERF_ATTR_SIZE_VER8 = 136 bytes) ----
class _SampleUnion(ctypes.Union):
    _fields_ = [("sample_period", ctypes.c_uint64), ("sample_freq", ctypes.c_uint64)]


class _WakeupUnion(ctypes.Union):
    _fields_ = [("wakeup_events", ctypes.c_uint32), ("wakeup_watermark", ctypes.c_uint32)]


class _Config1Union(ctypes.Union):
    _fields_ = [("bp_addr", ctypes.c_uint64), ("kprobe_func", ctypes.c_uint64),
                ("uprobe_path", ctypes.c_uint64), ("config1", ctypes.c_uint64)]


class _Config2Union(ctypes.Union):
    _fields_ = [("bp_len", ctypes.c_uint64), ("kprobe_addr", ctypes.c_uint64),
                ("probe_offset", ctypes.c_uint64), ("config2", ctypes.c_uint64)]


# The single u64 of flag bits, in the header's order (bit 0 first).
ATTR_FLAG_BITS: tuple[tuple[str, int], ...] = (
    ("disabled", 1), ("inherit", 1), ("pinned", 1), ("exclusive", 1),
    ("exclude_user", 1), ("exclude_kernel", 1), ("exclude_hv", 1), ("exclude_idle", 1),
    ("mmap", 1), ("comm", 1), ("freq", 1), ("inherit_stat", 1), ("enable_on_exec", 1),
    ("task", 1), ("watermark", 1), ("precise_ip", 2), ("mmap_data", 1), ("sample_id_all", 1),
    ("exclude_host", 1), ("exclude_guest", 1), ("exclude_callchain_kernel", 1),
    ("exclude_callchain_user", 1), ("mmap2", 1), ("comm_exec", 1), ("use_clockid", 1),
    ("context_switch", 1), ("write_backward", 1), ("namespaces", 1), ("ksymbol", 1),
    ("bpf_event", 1), ("aux_output", 1), ("cgroup", 1), ("text_poke", 1), ("build_id", 1),
    ("inherit_thread", 1), ("remove_on_exec", 1), ("sigtrap", 1), ("__reserved_1", 26),
)


class PerfEventAttr(ctypes.Structure):
    """struct perf_event_attr; the unions are anonymous so ``attr.sample_period`` works."""

    _anonymous_ = ("_u_sample", "_u_wakeup", "_u_config1", "_u_config2")
    _fields_ = [
        ("type", ctypes.c_uint32),
        ("size", ctypes.c_uint32),
        ("config", ctypes.c_uint64),
        ("_u_sample", _SampleUnion),
        ("sample_type", ctypes.c_uint64),
        ("read_format", ctypes.c_uint64),
        *[(name, ctypes.c_uint64, bits) for name, bits in ATTR_FLAG_BITS],
        ("_u_wakeup", _WakeupUnion),
        ("bp_type", ctypes.c_uint32),
        ("_u_config1", _Config1Union),
        ("_u_config2", _Config2Union),
        ("branch_sample_type", ctypes.c_uint64),
        ("sample_regs_user", ctypes.c_uint64),
        ("sample_stack_user", ctypes.c_uint32),
        ("clockid", ctypes.c_int32),
        ("sample_regs_intr", ctypes.c_uint64),
        ("aux_watermark", ctypes.c_uint32),
        ("sample_max_stack", ctypes.c_uint16),
        ("__reserved_2", ctypes.c_uint16),
        ("aux_sample_size", ctypes.c_uint32),
        ("__reserved_3", ctypes.c_uint32),
        ("sig_data", ctypes.c_uint64),
        ("config3", ctypes.c_uint64),
    ]


PERF_ATTR_SIZE = ctypes.sizeof(PerfEventAttr)  # 136 (VER8); older kernels accept a prefix
PERF_ATTR_SIZE_VER5 = 112  # without sig_data/config3: accepted by kernels since 4.1


def make_attr(type_: int, config: int, *, read_format: int = 0, disabled: bool = False,
              inherit: bool = False, exclude_user: bool = False,
              exclude_kernel: bool = False, exclude_hv: bool = False,
              sample_period: int = 0, sample_type: int = 0, wakeup_events: int = 0,
              config1: int = 0, config2: int = 0, clockid: int | None = None
              ) -> PerfEventAttr:
    """An attr for counting (or sampling, with ``sample_period``) one event; ``clockid``: the
    clock of its samples' times (a group's members must all have the leader's)."""
    attr = PerfEventAttr()
    attr.type = type_
    # VER5 is what every kernel from 4.1 understands; the later fields are not used here.
    attr.size = PERF_ATTR_SIZE_VER5
    attr.config = config
    attr.read_format = read_format
    attr.disabled = int(disabled)
    attr.inherit = int(inherit)
    attr.exclude_user = int(exclude_user)
    attr.exclude_kernel = int(exclude_kernel)
    attr.exclude_hv = int(exclude_hv)
    attr.sample_period = sample_period
    attr.sample_type = sample_type
    attr.wakeup_events = wakeup_events
    attr.config1 = config1
    attr.config2 = config2
    if clockid is not None:
        attr.use_clockid = 1
        attr.clockid = clockid
    return attr


# ---- ioctl request numbers (_IO/_IOR/_IOW of 'perf_event.h'; direction bits differ by arch) --
def _ioc(direction: str, nr: int, size: int, machine: str | None = None) -> int:
    m = machine or platform.machine()
    if m.startswith(("ppc", "mips", "sparc")):
        bits = {"none": 1, "read": 2, "write": 4}
        size_bits, dir_shift = 13, 29
    else:
        bits = {"none": 0, "read": 2, "write": 1}
        size_bits, dir_shift = 14, 30
    assert size < (1 << size_bits)
    return (bits[direction] << dir_shift) | (size << 16) | (ord("$") << 8) | nr


def ioctl_numbers(machine: str | None = None) -> dict[str, int]:
    """PERF_EVENT_IOC_* for an architecture (default: this one)."""
    return {
        "ENABLE": _ioc("none", 0, 0, machine),
        "DISABLE": _ioc("none", 1, 0, machine),
        "REFRESH": _ioc("none", 2, 0, machine),
        "RESET": _ioc("none", 3, 0, machine),
        "PERIOD": _ioc("write", 4, 8, machine),
        "SET_OUTPUT": _ioc("none", 5, 0, machine),
        "SET_FILTER": _ioc("write", 6, 8, machine),
        "ID": _ioc("read", 7, 8, machine),
        "SET_BPF": _ioc("write", 8, 4, machine),
        "PAUSE_OUTPUT": _ioc("write", 9, 4, machine),
    }


_IOC = ioctl_numbers()
PERF_EVENT_IOC_ENABLE = _IOC["ENABLE"]
PERF_EVENT_IOC_DISABLE = _IOC["DISABLE"]
PERF_EVENT_IOC_REFRESH = _IOC["REFRESH"]
PERF_EVENT_IOC_RESET = _IOC["RESET"]
PERF_EVENT_IOC_PERIOD = _IOC["PERIOD"]
PERF_EVENT_IOC_SET_OUTPUT = _IOC["SET_OUTPUT"]
PERF_EVENT_IOC_SET_FILTER = _IOC["SET_FILTER"]
PERF_EVENT_IOC_ID = _IOC["ID"]
PERF_EVENT_IOC_SET_BPF = _IOC["SET_BPF"]
PERF_EVENT_IOC_PAUSE_OUTPUT = _IOC["PAUSE_OUTPUT"]


# ---- errors ----
class PerfOpenError(OSError):
    """perf_event_open failed: ``errno`` plus a ``reason`` and a ``fix`` for a human."""

    def __init__(self, err: int, reason: str, fix: str | None, event: str = "") -> None:
        super().__init__(err, reason)
        self.reason = reason
        self.fix = fix
        self.event = event

    def __str__(self) -> str:
        name = errno.errorcode.get(self.errno or 0, str(self.errno))
        return f"{self.event + ': ' if self.event else ''}{self.reason} ({name})"


def read_paranoid(root: Path = Path("/")) -> int | None:
    """kernel.perf_event_paranoid (Documentation/admin-guide/sysctl/kernel.rst), or None."""
    try:
        return int((root / "proc/sys/kernel/perf_event_paranoid").read_text().strip())
    except (OSError, ValueError):
        return None


def explain_errno(err: int, type_: int, *, cpu: int = -1, pid: int = -1,
                  paranoid: int | None = None, privileged: bool | None = None
                  ) -> tuple[str, str | None]:
    """Why perf_event_open failed with ``err`` and what to do, per perf_event_open(2) ERRORS."""
    hw = type_ in (PERF_TYPE_HARDWARE, PERF_TYPE_HW_CACHE, PERF_TYPE_RAW)
    if err in (errno.EACCES, errno.EPERM):
        if paranoid is None:
            paranoid = read_paranoid()
        who = "system-wide (per-CPU)" if pid == -1 else "per-process"
        reason = (f"{who} counters need CAP_PERFMON or a lower kernel.perf_event_paranoid"
                  f" (now {paranoid if paranoid is not None else 'unknown'})")
        fix = ("run as root, grant CAP_PERFMON (setcap cap_perfmon+ep), or "
               f"sysctl kernel.perf_event_paranoid={0 if pid == -1 else 1}")
        if privileged:
            reason = "denied although privileged (a seccomp filter or an LSM policy?)"
            fix = "check the container's seccomp profile / SELinux/AppArmor policy"
        return reason, fix
    if err == errno.ENOENT:
        if hw:
            return ("this PMU does not implement the event", None)
        return ("the kernel does not know this event", "a newer kernel may have it")
    if err == errno.EOPNOTSUPP:
        return ("the PMU cannot do this (no sampling interrupt / no hardware PMU)", None)
    if err == errno.ENODEV:
        if cpu >= 0:
            return (f"CPU {cpu} is not present or offline", "bring it online")
        return ("the PMU is not present on this machine", None)
    if err == errno.EINVAL:
        return ("invalid attributes for this kernel or PMU (event not supported)", None)
    if err == errno.EMFILE:
        return ("too many open files (one file descriptor per event and PU)",
                "raise the limit: ulimit -n 65536")
    if err == errno.EBUSY:
        return ("another user holds the PMU exclusively", "stop the other profiler")
    if err == errno.E2BIG:
        return ("the kernel is older than the attr layout", None)
    if err == errno.ESRCH:
        return ("the process or thread does not exist (it exited)", None)
    if err == errno.ENOSYS:
        return ("the kernel was built without perf events (CONFIG_PERF_EVENTS)", None)
    return (os.strerror(err), None)


# ---- the syscall ----


def syscall_number(machine: str | None = None) -> int:
    m = machine or platform.machine()
    try:
        return SYSCALL_NUMBERS[m]
    except KeyError:
        raise PerfOpenError(errno.ENOSYS, f"no perf_event_open syscall number known for {m}",
                            None) from None


def perf_event_open(attr: PerfEventAttr, pid: int = -1, cpu: int = -1, group_fd: int = -1,
                    flags: int = PERF_FLAG_FD_CLOEXEC, *, event: str = "") -> int:
    """Open one event; return its fd. Raises PerfOpenError with a reason and a fix.

    ``pid=-1, cpu=N`` counts everything on PU N; ``pid=P, cpu=-1`` follows thread P.
    """
    fd = libc().syscall(ctypes.c_long(syscall_number()), ctypes.byref(attr), ctypes.c_int(pid),
                      ctypes.c_int(cpu), ctypes.c_int(group_fd), ctypes.c_ulong(flags))
    if fd < 0:
        err = ctypes.get_errno()
        reason, fix = explain_errno(err, attr.type, cpu=cpu, pid=pid,
                                    privileged=os.geteuid() == 0)
        raise PerfOpenError(err, reason, fix, event)
    return int(fd)


def ioctl(fd: int, request: int, arg: int = 0) -> int:
    """ioctl on a perf fd (ENABLE/DISABLE/RESET with PERF_IOC_FLAG_GROUP act on the group)."""
    rc = libc().ioctl(ctypes.c_int(fd), ctypes.c_ulong(request), ctypes.c_ulong(arg))
    if rc < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(rc)


def enable(fd: int, group: bool = True) -> None:
    ioctl(fd, PERF_EVENT_IOC_ENABLE, PERF_IOC_FLAG_GROUP if group else 0)


def disable(fd: int, group: bool = True) -> None:
    ioctl(fd, PERF_EVENT_IOC_DISABLE, PERF_IOC_FLAG_GROUP if group else 0)


def reset(fd: int, group: bool = True) -> None:
    ioctl(fd, PERF_EVENT_IOC_RESET, PERF_IOC_FLAG_GROUP if group else 0)


# ---- reading ----
GROUP_READ_FORMAT = (PERF_FORMAT_GROUP | PERF_FORMAT_TOTAL_TIME_ENABLED
                     | PERF_FORMAT_TOTAL_TIME_RUNNING)


def read_size(read_format: int, nr: int = 1) -> int:
    """Bytes read() returns for this read_format (perf_event_open(2), "Reading results")."""
    extra = (read_format & (PERF_FORMAT_TOTAL_TIME_ENABLED
                           | PERF_FORMAT_TOTAL_TIME_RUNNING)).bit_count()
    per_value = 1 + bool(read_format & PERF_FORMAT_ID) + bool(read_format & PERF_FORMAT_LOST)
    if read_format & PERF_FORMAT_GROUP:
        return 8 * (1 + extra + nr * per_value)
    return 8 * (extra + per_value)


def parse_read(buf: bytes, read_format: int) -> tuple[list[int], int | None, int | None]:
    """Decode a read() of a counter or group: (values, time_enabled, time_running).

    Group layout: nr, [time_enabled], [time_running], {value, [id], [lost]} * nr.
    Single layout: value, [time_enabled], [time_running], [id], [lost].
    """
    words = struct.unpack(f"<{len(buf) // 8}Q" if _LITTLE else f">{len(buf) // 8}Q", buf)
    te = tr = None
    if read_format & PERF_FORMAT_GROUP:
        nr = words[0]
        i = 1
        if read_format & PERF_FORMAT_TOTAL_TIME_ENABLED:
            te = words[i]
            i += 1
        if read_format & PERF_FORMAT_TOTAL_TIME_RUNNING:
            tr = words[i]
            i += 1
        step = 1 + bool(read_format & PERF_FORMAT_ID) + bool(read_format & PERF_FORMAT_LOST)
        values = [words[i + k * step] for k in range(nr)]
        return values, te, tr
    i = 1
    if read_format & PERF_FORMAT_TOTAL_TIME_ENABLED:
        te = words[i]
        i += 1
    if read_format & PERF_FORMAT_TOTAL_TIME_RUNNING:
        tr = words[i]
    return [words[0]], te, tr


_LITTLE = struct.pack("=H", 1) == b"\x01\x00"


def read_counter(fd: int, read_format: int, nr: int = 1) -> tuple[list[int], int | None,
                                                                   int | None]:
    """read() a counter (or a group leader with PERF_FORMAT_GROUP) and decode it."""
    size = read_size(read_format, nr)
    buf = os.read(fd, size)
    if len(buf) < size:   # a group with fewer members than asked: parse_read would overrun
        raise OSError(errno.EIO, f"short read from a perf event ({len(buf)} of {size} bytes)")
    return parse_read(buf, read_format)


def scale(value: int, enabled: int | None, running: int | None) -> tuple[float | None, bool]:
    """Multiplexing correction: value * enabled / running, and whether it was multiplexed.

    A counter that never ran (running == 0) has no estimate: None, never 0.
    """
    if enabled is None or running is None:
        return float(value), False
    if running == 0:
        return None, enabled > 0
    return value * enabled / running, running < enabled


def tracepoint_id(category: str, name: str, tracefs: Sequence[Path] = (
        Path("/sys/kernel/tracing"), Path("/sys/kernel/debug/tracing"))) -> int:
    """The id of a tracepoint (PERF_TYPE_TRACEPOINT config) from tracefs ``events/C/N/id``."""
    for base in tracefs:
        p = base / "events" / category / name / "id"
        try:
            return int(p.read_text().strip())
        except FileNotFoundError:
            continue
    raise FileNotFoundError(errno.ENOENT, "tracefs not mounted or no such tracepoint",
                            f"{category}:{name}")


class Counter:
    """One free-running counter (no group): opened at construction, ``counter()`` reads it.

    Used for PMUs whose events are read one at a time (msr aperf/mperf, power energy-*)."""

    def __init__(self, type_: int, config: int, cpu: int = -1, pid: int = -1,
                 event: str = "") -> None:
        self.fd = perf_event_open(make_attr(type_, config), pid, cpu, event=event)

    def __call__(self) -> int:
        return read_counter(self.fd, 0)[0][0]

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
