"""Uprobes and uretprobes through perf_event_open(2) and the ``uprobe`` PMU.

The PMU's type is in /sys/bus/event_source/devices/uprobe/type; ``config1`` points at the
file's path, ``config2`` is the probe's file offset, and the bit named by ``format/retprobe``
(``config:0``) makes it a uretprobe (perf_event_open(2), "kprobe_func, uprobe_path ...").
A probe on a file is placed on its inode: every process that maps the file, now or later
(after an exec, a dlopen), hits it, so probes are opened once per (file, offset), system-wide
(pid -1, one event per CPU), before the traced command runs; the hits of processes outside
the traced tree are dropped in user space (``keep``).

Every probe of a CPU writes into that CPU's one ring (PERF_EVENT_IOC_SET_OUTPUT). Samples
carry IDENTIFIER | TID | TIME (CLOCK_MONOTONIC) | REGS_USER with two argument registers (the
outlined function that ``GOMP_parallel`` and ``__kmpc_fork_call`` are given), so every record
of a ring has one fixed layout and is decoded with numpy, not record by record.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from snumap_tui.native import perf_event as pe
from snumap_tui.native.perf_ring import PerfRing, gather, split_records_walk
from snumap_tui.sources.base import SourceStatus
from snumap_tui.sources.freq import online_cpus

PMU_DIR = Path("/sys/bus/event_source/devices/uprobe")
PERF_SAMPLE_REGS_USER = 1 << 12
PERF_SAMPLE_IDENTIFIER = 1 << 16
CLOCK_MONOTONIC = 1

# The registers holding the first three integer arguments (the psABIs), as numbered by
# arch/*/include/uapi/asm/perf_regs.h.
ARG_REGS = {
    "x86_64": (5, 4, 3),        # PERF_REG_X86_DI, SI, DX
    "aarch64": (0, 1, 2),       # PERF_REG_ARM64_X0, X1, X2
}
CAPTURED_ARGS = (0, 2)          # GOMP_parallel's fn is arg 0, __kmpc_fork_call's microtask arg 2


def _arg_regs(machine: str | None = None) -> tuple[int, ...] | None:
    return ARG_REGS.get(machine or platform.machine())


def regs_mask(machine: str | None = None) -> int:
    regs = _arg_regs(machine)
    if regs is None:
        return 0
    return sum(1 << regs[a] for a in CAPTURED_ARGS)


def arg_columns(machine: str | None = None) -> dict[int, int]:
    """Argument number -> index in the sample's register array (the kernel writes registers in
    increasing bit order of the mask)."""
    regs = _arg_regs(machine)
    if regs is None:
        return {}
    bits = sorted(regs[a] for a in CAPTURED_ARGS)
    return {a: bits.index(regs[a]) for a in CAPTURED_ARGS}


SAMPLE_TYPE = PERF_SAMPLE_IDENTIFIER | pe.PERF_SAMPLE_TID | pe.PERF_SAMPLE_TIME | \
    PERF_SAMPLE_REGS_USER
# header(8) | id u64 | pid u32, tid u32 | time u64 | abi u64 | regs[2] u64
RECORD = np.dtype({"names": ["type", "size", "id", "pid", "tid", "t_ns", "abi", "r0", "r1"],
                   "formats": ["<u4", "<u2", "<u8", "<i4", "<i4", "<u8", "<u8", "<u8", "<u8"],
                   "offsets": [0, 6, 8, 16, 20, 24, 32, 40, 48], "itemsize": 56})
# What both probe paths hand over (this one and trace/region_bpf.py): a hit of probe TAG by
# thread TID of process PID, on return when RET, with the captured argument ARG (or 0).
HIT = np.dtype([("t_ns", "<u8"), ("pid", "<i4"), ("tid", "<i4"), ("tag", "<u4"), ("ret", "u1"),
                ("arg", "<u8")])
LOST = np.dtype({"names": ["type", "size", "id", "lost"], "formats": ["<u4", "<u2", "<u8", "<u8"],
                 "offsets": [0, 6, 8, 16], "itemsize": 24})


def pmu_type(root: Path = PMU_DIR) -> int | None:
    try:
        return int((root / "type").read_text())
    except (OSError, ValueError):
        return None


def retprobe_bit(root: Path = PMU_DIR) -> int:
    """The config bit of ``format/retprobe`` (``config:0`` on every kernel so far)."""
    try:
        text = (root / "format/retprobe").read_text().strip()
        return int(text.split(":")[1].split("-")[0])
    except (OSError, ValueError, IndexError):
        return 0


def status() -> SourceStatus:
    if pmu_type() is None:
        return SourceStatus("uprobes", False, "this kernel has no uprobe PMU "
                            f"({PMU_DIR} is missing: CONFIG_UPROBE_EVENTS)", None)
    if _arg_regs() is None:
        return SourceStatus("uprobes", False, f"no argument registers known for "
                            f"{platform.machine()}", None)
    if os.geteuid() != 0:
        from snumap_tui.sources.privileges import has_caps

        if has_caps(["CAP_PERFMON"], alternative="CAP_SYS_ADMIN") is not None:
            return SourceStatus("uprobes", False, "uprobes need CAP_PERFMON (or root)",
                                "run snumap record as root")
    return SourceStatus("uprobes", True)


@dataclass(frozen=True)
class Probe:
    """One probe point: FILE at OFFSET, on entry or on return; ``tag`` is the caller's."""

    path: str
    offset: int
    ret: bool
    tag: int
    arg: int | None = None      # the argument to capture (0 or 2), if any
    group: str = ""             # probes detached together (``detach``): "body" for region bodies
    agg: int | None = None      # summed in the kernel as this region id (the eBPF path only)
    spend_ns: int = 0           # budget: a thread's credit one hit spends (the eBPF path only)


class UprobeSet:
    """Probes opened on every online CPU, one ring per CPU; ``add`` may be called while the
    traced program runs (a library found after an exec). Hits of every process arrive: the
    caller keeps the traced tree's."""

    kind = "perf"

    def __init__(self, ring_pages: int = 512) -> None:
        t = pmu_type()
        if t is None:
            raise OSError(errno.ENOENT, "no uprobe PMU in this kernel")
        self.type = t
        self.ret_bit = retprobe_bit()
        self.cpus = online_cpus(Path("/")) or list(range(os.cpu_count() or 1))
        self.ring_pages = ring_pages
        self.leader: dict[int, int] = {}
        self.rings: dict[int, PerfRing] = {}
        self.fds: list[int] = []
        self.tag_of_id: dict[int, int] = {}
        self.arg_of_tag: dict[int, int] = {}
        self.ret_tags: set[int] = set()
        self.by_group: dict[str, list[int]] = {}
        self.lost = 0
        self._paths: list[ctypes.Array[ctypes.c_char]] = []   # kept alive for the kernel

    def add_many(self, probes: list[Probe]) -> list[tuple[Probe, str]]:
        failed = []
        for p in probes:
            try:
                self.add(p)
            except OSError as e:
                failed.append((p, str(e)))
        return failed

    def add(self, probe: Probe) -> None:
        """Open PROBE on every CPU; OSError (PerfOpenError) when the kernel refuses it."""
        path = ctypes.create_string_buffer(os.fsencode(probe.path))
        self._paths.append(path)
        opened: list[int] = []
        try:
            for cpu in self.cpus:
                attr = pe.make_attr(self.type, (1 << self.ret_bit) if probe.ret else 0,
                                    sample_period=1, sample_type=SAMPLE_TYPE,
                                    config1=ctypes.addressof(path), config2=probe.offset)
                attr.sample_regs_user = regs_mask()
                attr.use_clockid = 1
                attr.clockid = CLOCK_MONOTONIC
                fd = pe.perf_event_open(attr, pid=-1, cpu=cpu,
                                        event=f"uprobe {probe.path}+{probe.offset:#x}")
                opened.append(fd)
                if cpu in self.leader:
                    pe.ioctl(fd, pe.PERF_EVENT_IOC_SET_OUTPUT, self.leader[cpu])
                else:
                    self.rings[cpu] = PerfRing(fd, self.ring_pages)
                    self.leader[cpu] = fd
                buf = ctypes.c_uint64()
                pe.ioctl(fd, pe.PERF_EVENT_IOC_ID, ctypes.addressof(buf))
                self.tag_of_id[int(buf.value)] = probe.tag
        except BaseException:
            for fd in opened:
                if fd in self.leader.values():
                    cpu = next(c for c, f in self.leader.items() if f == fd)
                    self.rings.pop(cpu).close()
                    del self.leader[cpu]
                os.close(fd)
            raise
        self.fds += opened
        self.by_group.setdefault(probe.group, []).extend(opened)
        if probe.arg is not None:
            self.arg_of_tag[probe.tag] = probe.arg
        if probe.ret:
            self.ret_tags.add(probe.tag)
        for fd in opened:
            pe.ioctl(fd, pe.PERF_EVENT_IOC_ENABLE)

    def detach(self, group: str) -> None:
        """Close the events of GROUP's probes (ring leaders stay: other probes write there)."""
        leaders = set(self.leader.values())
        fds = [fd for fd in self.by_group.pop(group, []) if fd not in leaders]
        for fd in fds:
            try:
                pe.ioctl(fd, pe.PERF_EVENT_IOC_DISABLE)
            except OSError:
                pass
        self.fds = [fd for fd in self.fds if fd not in fds]
        close_all(fds)

    def drain(self) -> dict[int, bytes]:
        out = {}
        for cpu, ring in self.rings.items():
            b = ring.read()
            if b:
                out[cpu] = b
        return out

    def decode(self, raw: dict[int, bytes] | None) -> np.ndarray:
        """The HIT rows of a drain, in time order; PERF_RECORD_LOST counts go to ``lost``."""
        parts = []
        for buf in (raw or {}).values():
            parts.append(self._decode_ring(buf))
        if not parts:
            return np.zeros(0, HIT)
        rec = np.concatenate(parts)
        if len(rec) > 1:
            rec = rec[np.argsort(rec["t_ns"], kind="stable")]
        out = np.zeros(len(rec), HIT)
        out["t_ns"], out["pid"], out["tid"] = rec["t_ns"], rec["pid"], rec["tid"]
        tag = rec["id"].astype(np.int64)
        out["tag"] = tag
        if self.ret_tags:
            out["ret"] = np.isin(tag, np.fromiter(self.ret_tags, np.int64, len(self.ret_tags)))
        cols = arg_columns()
        for t, a in self.arg_of_tag.items():
            m = tag == t
            if m.any() and a in cols:
                out["arg"][m] = rec["r0" if cols[a] == 0 else "r1"][m]
        return out

    def _decode_ring(self, buf: bytes) -> np.ndarray:
        n = len(buf)
        size = RECORD.itemsize
        if n % size == 0 and n:
            head = np.ndarray((n // size,), dtype=RECORD, buffer=buf)
            if bool(np.all((head["type"] == pe.PERF_RECORD_SAMPLE) & (head["size"] == size))):
                return self._tagged(head.copy())
        types, offs, sizes = split_records_walk(buf)
        for o in offs[types == pe.PERF_RECORD_LOST].tolist():
            self.lost += int(np.frombuffer(buf, LOST, 1, o)["lost"][0])
        ok = (types == pe.PERF_RECORD_SAMPLE) & (sizes == size)
        return self._tagged(gather(buf, offs[ok], RECORD).copy())

    def _tagged(self, rec: np.ndarray) -> np.ndarray:
        if not len(rec):
            return rec
        ids = np.fromiter(self.tag_of_id.keys(), np.uint64, len(self.tag_of_id))
        tags = np.fromiter(self.tag_of_id.values(), np.uint64, len(self.tag_of_id))
        o = np.argsort(ids)
        ids, tags = ids[o], tags[o]
        pos = np.clip(np.searchsorted(ids, rec["id"]), 0, len(ids) - 1)
        known = ids[pos] == rec["id"]
        rec = rec[known]
        rec["id"] = tags[pos[known]]
        return rec

    def close(self) -> None:
        for fd in self.fds:
            try:
                pe.ioctl(fd, pe.PERF_EVENT_IOC_DISABLE)
            except OSError:
                pass
        for ring in self.rings.values():
            ring.close()
        close_all(self.fds)
        self.fds, self.rings, self.leader = [], {}, {}


def close_all(fds: list[int]) -> None:
    """Close FDS at once: each uprobe event's close waits for an RCU grace period (~80 ms
    measured here), so 40 probes on 2 CPUs closed one by one took 4 s; closed from parallel
    threads, their grace periods overlap."""
    from concurrent.futures import ThreadPoolExecutor

    def close(fd: int) -> None:
        try:
            os.close(fd)
        except OSError:
            pass

    if len(fds) < 4:
        for fd in fds:
            close(fd)
        return
    with ThreadPoolExecutor(max_workers=min(64, len(fds)),
                            thread_name_prefix="snumap-uprobe-close") as pool:
        list(pool.map(close, fds))

