"""Region probes on the eBPF path: bpf/regions.bpf.o (CO-RE, loaded through libbpf) attached
as uprobe_multi links, filtered to the traced tree in the kernel, hits read from the mapped
BPF ring buffer in numpy batches.

uprobe_multi (BPF_LINK_CREATE with BPF_TRACE_UPROBE_MULTI, Linux >= 6.6) attaches one program
to many offsets of one file with one cookie each, and detaches them after one RCU grace
period: perf-event uprobes (one per probe, libbpf's classic attach and the perf PMU path)
each wait for their own on close, ~80 ms apiece here, seconds for an MPI library's entry
points. libbpf 1.1 (Debian 12) has no call for it, so the link is created with the bpf(2)
syscall directly (include/uapi/linux/bpf.h, ``link_create.uprobe_multi``). Where the kernel
refuses it, ``available`` says why and the perf path (trace/uprobes.py) is used instead.

With ``hold_exec`` the object also stops a tracked process that execs a program it does not
know (by inode: ``know``) before the program's first instruction, and reports it (``held``);
trace/regions.py probes the program and its libraries, then ``resume`` lets it run. So the
first parallel region of a program a shell or a launcher starts is seen, which the exec event,
decoded a tenth of a second later, came too late for.

Probes with ``agg`` (critical sections) write a thread's first ``AGG_EXACT`` calls of each
``AGG_NS`` exactly (an entry and a return record, both under the return probe's tag, ``ret``
saying which); past them the kernel sums them per thread and region and writes a summary
(``SUM_RECORD``) to a second ring every ``AGG_CALLS`` calls or ``AGG_NS`` after the first; ``drain`` keeps those in ``sums`` and ``leftover_sums`` reads what
the kernel still held at the end. Measured on scalep's million critical sections
(docs/benchmarks.md "regions"): one record a call was ~2 M records/s at 8 threads, more than
the drain empties, and 92 % of them were lost.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import signal
import struct
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from snumap_tui.native.libc import libc
from snumap_tui.trace.region_catalog import SUM_DTYPE
from snumap_tui.trace.uprobes import HIT, Probe, close_all

BPF_LINK_CREATE = 28
BPF_TRACE_UPROBE_MULTI = 48
BPF_F_UPROBE_MULTI_RETURN = 1
BPF_SYSCALL = {"x86_64": 321, "aarch64": 280}
RING_BYTES = 1 << 22
SUM_RING_BYTES = 1 << 18        # bpf/regions.bpf.c `sums`: ~4,600 summaries
AGG_CALLS = 4096                # a summary every this many calls of a thread...
AGG_NS = 100_000_000            # ... or this long after the first of them
AGG_EXACT = 64                  # calls of a thread written exactly in each AGG_NS window
AGG_BIT = 4                     # cookie bit of an aggregated probe (SNUMAP_AGG_BIT)
LOST_TAGS = 4096                # tags whose losses are counted apart (SNUMAP_LOST_TAGS)
NEEDS_LINKS = 2                  # `known` value (SNUMAP_NEEDS_LINKS)
MAX_SCOPED = 64                 # processes probed one by one; past them, on the files (widen)

EXEC_TAG = 0xFFFFFFFF           # a held exec, not a hit (bpf/regions.bpf.c SNUMAP_EXEC_TAG)
BUDGET_TAG = 0xFFFFFFFE         # a probe past its budget (SNUMAP_BUDGET_TAG; arg: its tag)
BURST_NS = 200_000_000          # the most credit a thread keeps (snumap_burst_ns)
HIT_RECORD = np.dtype([("t_ns", "<u8"), ("arg", "<u8"), ("pid", "<u4"), ("tid", "<u4"),
                       ("tag", "<u4"), ("ret", "<u4")])     # struct snumap_region_hit
SUM_RECORD = SUM_DTYPE                                      # struct snumap_region_sum
AGG_RECORD = np.dtype([("t_entry", "<u8"), ("t_first", "<u8"), ("t_last", "<u8"),
                       ("sum_ns", "<u8"), ("win_start", "<u8"), ("pid", "<u4"),
                       ("count", "<u4"), ("win_exact", "<u4"), ("pad", "<u4")])  # snumap_agg
WALL_RECORD = np.dtype([("inside", "<i8"), ("open_ns", "<u8"), ("wall_ns", "<u8")])


def cookie(p: Probe) -> int:
    """The attach cookie of P (bpf/regions.bpf.c): tag << 3 | capture, or for a probe summed
    in the kernel its region id << 32 | tag << 3 | AGG_BIT."""
    if p.agg is not None:
        return (p.agg << 32) | (p.tag << 3) | AGG_BIT
    return (p.tag << 3) | ({0: 1, 2: 3}.get(p.arg, 0) if p.arg is not None else 0)


def object_path() -> Path:
    from snumap_tui.trace.bpf_layout import bpf_dir

    return bpf_dir() / "regions.bpf.o"


def _cpu_sum(per_cpu: Any, key: int) -> int:
    """A per-CPU u64 array map's value at KEY, summed over the CPUs (0 when absent)."""
    v = per_cpu.lookup(struct.pack("<I", key))
    return int(np.frombuffer(v, dtype="<u8").sum()) if v else 0


def _link_create_multi(prog_fd: int, path: bytes, offsets: list[int], cookies: list[int],
                       ret: bool, pid: int = 0) -> int:
    """A uprobe_multi link of PROG_FD on OFFSETS of PATH, in process PID only (0: every
    process mapping PATH); its fd. OSError when refused (ESRCH: PID is gone)."""
    n = len(offsets)
    c_path = ctypes.create_string_buffer(path)
    c_offs = (ctypes.c_uint64 * n)(*offsets)
    c_cook = (ctypes.c_uint64 * n)(*cookies)
    attr = ctypes.create_string_buffer(64)
    struct.pack_into("<IIII", attr, 0, prog_fd, 0, BPF_TRACE_UPROBE_MULTI, 0)
    struct.pack_into("<QQQQIII", attr, 16, ctypes.addressof(c_path), ctypes.addressof(c_offs),
                     0, ctypes.addressof(c_cook), n, BPF_F_UPROBE_MULTI_RETURN if ret else 0, pid)
    try:
        return bpf_syscall(BPF_LINK_CREATE, attr, 64)
    except OSError as e:
        raise OSError(e.errno, f"uprobe_multi link on {path.decode(errors='replace')}: "
                               f"{e.strerror}") from None


def bpf_syscall(cmd: int, attr: Any, size: int) -> int:
    """bpf(2) command CMD on ATTR (a ctypes buffer of SIZE bytes): its result (a new fd for
    most commands), or OSError with the errno."""
    nr = BPF_SYSCALL.get(platform.machine())
    if nr is None:
        raise OSError(38, f"no bpf syscall number known for {platform.machine()}")
    r = libc().syscall(ctypes.c_long(nr), ctypes.c_long(cmd), attr, ctypes.c_uint(size))
    if r < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(r)


class BpfUprobes:
    """The loaded program, its links and ring; the same interface as ``UprobeSet``."""

    kind = "ebpf"

    def __init__(self, roots: list[int] | None, *, system_wide: bool | None = None,
                 hold_exec: bool = False, scoped: bool = False) -> None:
        """ROOTS seed the tracked tree (None: none); hits are kept from that tree only unless
        SYSTEM_WIDE (default: when ROOTS is None); HOLD_EXEC stops the tree's execs of
        unknown programs until ``resume``. SCOPED (with HOLD_EXEC, ROOTS and not SYSTEM_WIDE):
        the probes are set in the tree's processes only, one link per process, file,
        direction and group (``add_process``), so no other process on the node takes their
        trap; past MAX_SCOPED processes they go on the files (``widen``)."""
        from snumap_tui.native import libbpf
        from snumap_tui.trace.bpf_ring import WAKE_FRACTION, BpfRingReader

        self.obj: Any = libbpf.BpfObject.open(object_path())
        self.links: list[int] = []
        self.by_group: dict[str, list[int]] = defaultdict(list)
        self.lost = 0
        self.held: list[tuple[int, int, int, int]] = []     # (pid, inode, dev, t_ns) stopped
        self.sums: list[np.ndarray] = []        # summaries drained, not taken yet
        self.over: list[tuple[int, int]] = []   # (tag, t_ns): probes past their budget
        self._closing: list[threading.Thread] = []  # links being closed (detach)
        self._exec_link: Any = None
        self._guard: Any = None             # lets the held processes go if the recorder dies
        wide = roots is None if system_wide is None else system_wide
        # (path, ret, group, offsets, cookies) of every probe set added: what a process
        # joining the tree gets its own links for.
        self.specs: list[tuple[str, bool, str, list[int], list[int]]] = []
        self.scoped: set[int] | None = set() if scoped and hold_exec and roots and not wide \
            else None
        self.widened = 0                # tree size when the probes went on the files
        self.pid_links: dict[int, list[int]] = defaultdict(list)   # scoped: links per pid
        try:
            self.obj.set_global("snumap_system_wide", struct.pack("<I", int(wide)))
            self.obj.set_global("snumap_hold_exec", struct.pack("<I", int(hold_exec)))
            self.obj.set_global("snumap_scoped", struct.pack("<I", int(self.scoped is not None)))
            self.obj.program("region_exec").set_autoload(hold_exec)
            for name in ("region_entry", "region_return"):
                self.obj.program(name).set_expected_attach_type(BPF_TRACE_UPROBE_MULTI)
            self.obj.set_global("snumap_agg_calls", struct.pack("<I", AGG_CALLS))
            self.obj.set_global("snumap_agg_ns", struct.pack("<Q", AGG_NS))
            self.obj.set_global("snumap_agg_exact", struct.pack("<I", AGG_EXACT))
            self.obj.set_global("snumap_burst_ns", struct.pack("<Q", BURST_NS))
            # The record crossing every eighth of a ring wakes the drain's epoll (wait_fds)
            self.obj.set_global("snumap_wake_bytes",
                                struct.pack("<Q", RING_BYTES // WAKE_FRACTION))
            self.obj.set_global("snumap_sum_wake_bytes",
                                struct.pack("<Q", SUM_RING_BYTES // WAKE_FRACTION))
            self.obj.map("hits").set_max_entries(RING_BYTES)
            self.obj.map("sums").set_max_entries(SUM_RING_BYTES)
            self.obj.load()
            self.obj.program("region_fork").attach()
            if hold_exec:
                from snumap_tui.trace.hold_guard import HoldGuard

                self._guard = HoldGuard(roots or [])    # before the first hold
                self._exec_link = self.obj.program("region_exec").attach()
            tracked = self.obj.map("tracked")
            for pid in roots or []:
                tracked.update_u32(pid, 1)
                if self.scoped is not None:
                    self.scoped.add(pid)
            self.ring = BpfRingReader(self.obj.map("hits").fd, RING_BYTES, HIT_RECORD)
            self.sum_ring = BpfRingReader(self.obj.map("sums").fd, SUM_RING_BYTES, SUM_RECORD)
            self._entry = self.obj.program("region_entry").fd
            self._return = self.obj.program("region_return").fd
        except BaseException:
            if self._guard is not None:
                self._guard.close()
            self.obj.close()
            raise

    def add_many(self, probes: list[Probe]) -> list[tuple[Probe, str]]:
        """Attach PROBES (one link per file, direction and group, and per process when
        scoped); the ones refused, with why."""
        groups: dict[tuple[str, bool, str], list[Probe]] = defaultdict(list)
        for p in probes:
            groups[(p.path, p.ret, p.group)].append(p)
        failed = []
        budget = self.obj.map("budget")
        for p in probes:
            if p.spend_ns and p.tag < LOST_TAGS:
                budget.update(struct.pack("<I", p.tag), struct.pack("<Q", p.spend_ns))
        for (path, ret, group), ps in groups.items():
            spec = (path, ret, group, [p.offset for p in ps], [cookie(p) for p in ps])
            whys = [self._link(spec, pid)
                    for pid in (sorted(self.scoped) if self.scoped is not None else [0])]
            if whys and all(whys):
                failed += [(p, whys[0]) for p in ps]
                continue
            self.specs.append(spec)
        if self.scoped is not None:
            self._mark_linked(self.scoped)
        return failed

    def _link(self, spec: tuple[str, bool, str, list[int], list[int]], pid: int) -> str:
        """One link of SPEC in process PID (0: on the file); why not, or "" (also when PID
        is gone: nothing to probe)."""
        path, ret, group, offsets, cookies = spec
        try:
            fd = _link_create_multi(self._return if ret else self._entry, os.fsencode(path),
                                    offsets, cookies, ret, pid)
        except OSError as e:
            return "" if pid and e.errno == errno.ESRCH else str(e)
        self.links.append(fd)
        self.by_group[group].append(fd)
        if pid:
            self.pid_links[pid].append(fd)
        return ""

    def _mark_linked(self, pids: set[int]) -> None:
        linked = self.obj.map("linked")
        for pid in pids:
            linked.update_u32(pid, 1)

    def add_process(self, pid: int) -> bool:
        """Set every probe in PID, a process that joined the tree (held at its exec, or seen
        forked); past MAX_SCOPED processes the probes go on the files instead. True when
        something was done."""
        if self.scoped is None or pid in self.scoped:
            return False
        self.scoped.add(pid)
        if len(self.scoped) > MAX_SCOPED:
            self._prune()
        if len(self.scoped) > MAX_SCOPED:
            self.widen()
            return True
        for spec in self.specs:
            self._link(spec, pid)
        self._mark_linked({pid})
        return True

    def _prune(self) -> None:
        """Forget the scoped processes that have exited; their links go (in the background:
        each close waits a grace period)."""
        assert self.scoped is not None
        gone = {pid for pid in self.scoped if not os.path.exists(f"/proc/{pid}")}
        fds = [fd for pid in gone for fd in self.pid_links.pop(pid, [])]
        self.scoped -= gone
        linked = self.obj.map("linked")
        for pid in gone:
            linked.delete(struct.pack("<I", pid))
        dead = set(fds)
        self.links = [fd for fd in self.links if fd not in dead]
        for group in self.by_group:
            self.by_group[group] = [fd for fd in self.by_group[group] if fd not in dead]
        self._close_later(fds)

    def _close_later(self, fds: list[int]) -> None:
        if fds:
            t = threading.Thread(target=close_all, args=(fds,), name="snumap-detach",
                                 daemon=True)
            t.start()
            self._closing.append(t)

    def widen(self) -> None:
        """Probes on the files from now on (every process mapping them takes the trap, the
        program keeps the tree's hits): the per-process links go, in the background."""
        if self.scoped is None:
            return
        self.widened = len(self.scoped)
        self.scoped = None
        old, self.links, self.by_group = self.links, [], defaultdict(list)
        self.pid_links.clear()
        for spec in self.specs:
            self._link(spec, 0)
        self._close_later(old)

    def detach(self, group: str, wait: bool = True) -> None:
        """Detach every probe of GROUP (their links; one grace period for all). Without WAIT
        in a thread of its own: a link's close removes its breakpoints at once, then waits for
        a grace period (~0.5 s measured on a busy 2-PU VM), and an entry and a return probe on
        one function keep its breakpoint until both are gone, so they are closed together."""
        fds = self.by_group.pop(group, [])
        self.specs = [s for s in self.specs if s[2] != group]
        for pid, pfds in self.pid_links.items():
            self.pid_links[pid] = [fd for fd in pfds if fd not in fds]
        self.links = [fd for fd in self.links if fd not in fds]
        if wait:
            close_all(fds)
            return
        for fd in fds:
            t = threading.Thread(target=os.close, args=(fd,), name="snumap-detach",
                                 daemon=True)
            t.start()
            self._closing.append(t)

    @property
    def holds(self) -> bool:
        return self._exec_link is not None

    def know(self, keys: list[tuple[int, int]], links: bool = False) -> None:
        """Programs (inode, device) whose execs need no hold any more: probed already; with
        LINKS (scoped) a process without its links that execs one is still held."""
        known = self.obj.map("known")
        value = struct.pack("<I", NEEDS_LINKS if links and self.scoped is not None else 1)
        for ino, dev in keys:
            known.update(struct.pack("<QQ", ino, dev), value)

    def resume(self, pid: int, ino: int, dev: int, probe: bool = True) -> None:
        """Let a held process run (its program is known from now on), its probes set first
        when scoped and PROBE (not: a program without a runtime, or the recording is
        ending)."""
        if probe:
            self.add_process(pid)
        self.know([(ino, dev)], links=probe)
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        if self._guard is not None:
            self._guard.resumed(pid)

    def take_over(self, raw: Any) -> Any:
        """RAW without its budget records, whose (tag, t_ns) go to ``over``."""
        if raw is None:
            return raw
        past = raw["tag"] == BUDGET_TAG
        if not past.any():
            return raw
        self.over += [(int(r["arg"]), int(r["t_ns"])) for r in raw[past]]
        return raw[~past]

    def hits_by_tag(self, n: int) -> dict[int, int]:
        """The traced tree's hits per probe tag (of the first N tags), from the kernel's
        counts (every hit, summed or written, detached or not since)."""
        return self._per_tag("counts", n)

    def hits_of(self, tag: int) -> int:
        """``hits_by_tag`` of TAG alone (one map lookup: what the budget's detach says,
        without reading every tag below it)."""
        return _cpu_sum(self.obj.map("counts"), tag) if 0 <= tag < LOST_TAGS else 0

    def take_execs(self, raw: np.ndarray) -> np.ndarray:
        """RAW without its held execs, which go to ``held``."""
        execs = raw["tag"] == EXEC_TAG
        if not execs.any():
            return raw
        got = [(int(r["pid"]), int(r["arg"]), int(r["ret"]), int(r["t_ns"]))
               for r in raw[execs]]
        if self._guard is not None:
            for pid, *_ in got:
                self._guard.held(pid)
        self.held += got
        return raw[~execs]

    def wait_fds(self) -> list[int]:
        """Both rings' descriptors: readable (edge-triggered) when the kernel woke them, at
        every eighth of a ring written, and at once for a held exec or a probe past its
        budget (bpf/regions.bpf.c ``wake_at``)."""
        return [self.obj.map("hits").fd, self.obj.map("sums").fd]

    def drain_sums(self) -> None:
        sums = self.sum_ring.read()
        if len(sums):
            self.sums.append(sums)

    def drain(self) -> Any:
        self.drain_sums()
        recs = self.ring.read()
        return recs if len(recs) else None

    def take_sums(self) -> np.ndarray:
        """The summaries drained since the last call (SUM_DTYPE)."""
        got, self.sums = self.sums, []
        return np.concatenate(got) if got else np.zeros(0, SUM_DTYPE)

    def lost_by_tag(self, n: int) -> dict[int, int]:
        """Records lost per probe tag (of the first N tags; those past LOST_TAGS count only in
        ``lost``)."""
        return self._per_tag("lost", n, first=1)

    def _per_tag(self, name: str, n: int, first: int = 0) -> dict[int, int]:
        """Per-CPU array NAME summed per tag, the first N tags (tag t at key FIRST + t),
        the tags with a count only."""
        m = self.obj.map(name)
        out = {}
        for tag in range(min(n, LOST_TAGS)):
            got = _cpu_sum(m, first + tag)
            if got:
                out[tag] = got
        return out

    def leftover_sums(self) -> np.ndarray:
        """What the kernel summed and has not written yet (the calls since each thread's last
        summary), as summaries, and per region one summary of no call carrying its final
        union over threads (exact calls and summed): read at the end, after the last
        drain."""
        walls = {int.from_bytes(k, "little"): int(np.frombuffer(v, WALL_RECORD)[0]["wall_ns"])
                 for k, v in self.obj.map("walls").items()}
        now = time.monotonic_ns()
        rows = [(now, now, 0, wall, 0, 0, rid, 0) for rid, wall in walls.items()]
        for k, v in self.obj.map("aggs").items():
            tid, rid = struct.unpack("<II", k)
            a = np.frombuffer(v, AGG_RECORD)[0]
            if a["count"]:
                rows.append((a["t_first"], a["t_last"], a["sum_ns"], walls.get(rid, 0),
                             a["pid"], tid, rid, a["count"]))
        return np.array(rows, dtype=SUM_DTYPE)

    def decode(self, raw: Any) -> np.ndarray:
        """The HIT rows of RAW; held execs go to ``held``."""
        lost = self.obj.map("lost").lookup(struct.pack("<I", 0))
        if lost:
            per = np.frombuffer(lost, dtype="<u8")
            self.lost = int(per.sum())
        if raw is None or not len(raw):
            return np.zeros(0, HIT)
        raw = self.take_execs(self.take_over(raw))
        out = np.zeros(len(raw), HIT)
        for f in ("t_ns", "pid", "tid", "tag", "ret", "arg"):
            out[f] = raw[f]
        if len(out) > 1:
            out = out[np.argsort(out["t_ns"], kind="stable")]
        return out

    def release_all(self, raws: Any = ()) -> None:
        """Stop holding, then let every process still held run: those in RAWS (drained, not
        decoded), in ``held`` and in what the ring still holds."""
        if self._exec_link is not None:
            self._exec_link.destroy()       # no new hold from here on
            self._exec_link = None
        for raw in [*raws, self.drain()]:
            self.decode(raw)
        held, self.held = self.held, []
        for pid, ino, dev, _t in held:
            self.resume(pid, ino, dev, probe=False)
        if self._guard is not None:
            self._guard.close()             # none held any more, none to come
            self._guard = None

    def close(self) -> None:
        self.release_all()
        self.ring.close()
        self.sum_ring.close()
        close_all(self.links)
        self.links = []
        for t in self._closing:
            t.join()
        self.obj.close()
