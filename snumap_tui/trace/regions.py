"""Regions found by uprobes: OpenMP parallel regions, barriers and criticals, MPI calls, and any
function named with ``--probe FILE:SYMBOL``, recorded without recompiling the program.

Planning happens before the traced command runs: the command's ELF executables (``CMD`` and
any argument that is one, such as the program ``mpirun`` starts) and every library they need
are read; the files that export an OpenMP or MPI runtime's entry points get a uprobe and a
uretprobe on each, the executables a pair on each outlined parallel-region body
(``main._omp_fn.0``). Probes sit on the files' inodes, so the ranks that mpirun execs later
hit them from their first call. When the command's tree execs a program that was not planned
(``sh -c './a; ./b'``), the eBPF path stops it at the exec, before its first instruction,
until that program and its libraries are read and probed (``_release_held``); the perf path
can only read them once the exec is decoded (``follow``), and calls before that are not seen.
Under ``--system-wide -- CMD`` every process's hits are kept, and CMD's tree (``family``)
is followed all the same.

Hits come from every process mapping the files; those outside the traced tree are dropped
here (the tree is learnt from the scheduling tracer's fork and exec events). A span opener's
argument (the outlined function GOMP_parallel is given) is resolved to its symbol and
file:line through the process's /proc/PID/maps.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from snumap_tui.errors import SnumapError
from snumap_tui.trace import elfsyms as E
from snumap_tui.trace import region_catalog as C
from snumap_tui.trace.events import EXEC, FORK, EventBatch
from snumap_tui.trace.probe_budget import (
    ENTRY_NS,
    RETURN_NS,
    STEPPED_NS,
    BudgetMixin,
    _emulated,
    group_of,
)
from snumap_tui.trace.probe_point import missing_note
from snumap_tui.trace.probe_scope import ScopeMixin
from snumap_tui.trace.region_rows import RowsMixin, Site

PENDING_NS = 2_000_000_000      # how long hits of a not-yet-known process wait for the tree
MAX_MAPS = 4096                 # processes whose maps are kept to name their regions
RESCAN_BUDGET_S = 0.05          # of the recorder's main loop, per rescan
# Libraries worth reading when found in a process's maps: OpenMP and MPI runtimes by name
# (GNU, LLVM, Intel, MPICH, Open MPI, Intel MPI, MVAPICH).
RUNTIME_NAME = re.compile(r"^lib(g?omp|iomp5|mpi|mpich|pmpi|mpi_\w+|open-(pal|rte))[.\d_-]")
MODES = ("auto", "omp", "mpi", "none")


@dataclass
class Plan:
    """The probes to open and what was found, for the user and the recording's header."""

    probes: list[tuple[str, int, bool, Site]] = field(default_factory=list)
    found: list[str] = field(default_factory=list)        # "libgomp.so.1: 8 entry points"
    problems: list[str] = field(default_factory=list)     # what could not be probed, and why
    files: set[str] = field(default_factory=set)


def _runtime_or(binary: str) -> Callable[[str], bool]:
    real = os.path.realpath(binary)
    return lambda f: f == real or bool(RUNTIME_NAME.search(os.path.basename(f)))


def _closure(binary: str) -> list[str]:
    """BINARY and the libraries it needs that are named like a runtime."""
    return E.library_closure(binary, keep=_runtime_or(binary))


def _may_have_regions(program: str) -> bool:
    """Whether a program exec'd while recording is worth reading (its symbol tables: ~0.1 s
    for a small one, seconds for a compiler, while its process waits): it needs a library
    named like a runtime, or none at all (static: the runtime may be inside). A runtime it
    dlopens is found by the rescans."""
    return len(_closure(program)) > 1 or not E.needed_of(program)[0]


def parse_probe(spec: str) -> tuple[str, str]:
    """``FILE:SYMBOL`` -> (file, symbol); SnumapError when malformed or the file is gone."""
    path, sep, sym = spec.rpartition(":")
    if not sep or not path or not sym:
        raise SnumapError(f"--probe {spec}: expected FILE:SYMBOL (e.g. ./solver:assemble)")
    if not os.path.exists(path):
        found = E.which(path)
        if found is None:
            raise SnumapError(f"--probe {spec}: {path}: no such file")
        path = found
    return os.path.realpath(path), sym


class RegionTracer(BudgetMixin, ScopeMixin, RowsMixin):
    """Uprobes for regions; ``drain``/``decode`` as a scheduling tracer's (record_runtime's
    Drainer runs ``drain`` in its thread)."""

    name = "uprobes"

    def __init__(self, mode: str, user_probes: list[str], names: C.RegionNames,
                 say: Callable[[str], None], backend: str = "auto") -> None:
        if mode not in MODES:
            raise SnumapError(f"--regions {mode}: choose from {', '.join(MODES)}")
        self.mode = mode
        self.names = names
        self.say = say
        self.user = [parse_probe(p) for p in user_probes]
        self.sites: list[Site] = []
        self.static_rid = np.zeros(0, np.int64)
        self.static_op = np.zeros(0, np.uint8)
        self.uprobes: Any = None
        self.tree: set[int] | None = set()         # None: every process (system-wide)
        # The command's tree, whose execs are followed: the tree itself, or under
        # --system-wide -- CMD the command's processes; None: none (system-wide, no command).
        self.family: set[int] | None = self.tree
        self.omp_runtimes: set[str] = set()         # files found to be an OpenMP runtime
        self.holds = 0                  # execs held until their program was probed
        self.held_ns = 0                # their time stopped, all together
        # Held execs are let go from the drain thread (10 ms, not the main loop's 100 ms and
        # its own work): planning and attaching there and in the main thread take turns.
        self._lock = threading.RLock()
        self.pending: list[np.ndarray] = []
        self.stacks: dict[tuple[int, str], list[int]] = {}
        self.maps: dict[int, list[E.Mapping]] = {}
        self.resolved: dict[tuple[int, int], int] = {}
        self.planned: set[str] = set()
        self.found: list[str] = []
        self.problems: list[str] = []
        self.dropped = 0
        self.backend = backend          # auto | ebpf | perf: how the probes are opened
        self._init_scope()
        self.path: str | None = None    # which one did
        self.notes: list[tuple[int, str]] = []      # (t_ns, text) for the recording's markers
        self.lines: list[str] = []      # what was found while recording, to say (main thread)
        self._agg_flags: list[bool] = []      # per tag: summed in the kernel
        self._agg_tag = np.zeros(0, bool)
        self._init_budget()

    # ---- planning ---------------------------------------------------------------------------

    def plan(self, binaries: list[str], closure: bool = True) -> Plan:
        """The probes for these executables and (with CLOSURE) the libraries they need; files
        already planned are skipped."""
        plan = Plan()
        want_omp = self.mode in ("auto", "omp")
        want_mpi = self.mode in ("auto", "mpi")
        files: list[str] = []
        for b in binaries:
            # The libraries of the closure are read only when named like a runtime (their
            # closure is walked through DT_NEEDED all the same): every ELF read is ~50 ms.
            for f in (_closure(b) if closure else [b]):
                if f not in files and f not in self.planned:
                    files.append(f)
        stripped: list[str] = []
        for f in files:
            self.planned.add(f)
            try:
                elf = E.load_elf(f)
            except SnumapError as e:
                plan.problems.append(str(e))
                continue
            rt = C.runtime_of(elf.by_name)
            base = os.path.basename(f)
            if rt is not None and rt[0] == "omp":
                self.omp_runtimes.add(f)
            if rt is not None and ((rt[0] == "omp" and want_omp) or (rt[0] == "mpi" and want_mpi)):
                n, missing = 0, []
                for ep in rt[1]:
                    sym = C.mpi_symbol(elf.by_name, ep.symbol) if ep.kind == "mpi" else \
                        (ep.symbol if ep.symbol in elf.by_name else None)
                    off = elf.probe_offset(sym, ep.arg is not None) if sym else None
                    if off is None:
                        missing.append(ep.symbol)
                        continue
                    self._add(plan, f, off, ep, _emulated(f, off))
                    n += 1
                plan.found.append(f"{base}: {n} {rt[0].upper() if rt[0] == 'mpi' else 'OpenMP'}"
                                  f" entry points")
                optional = {"GOMP_parallel_start", "GOMP_parallel_end",
                            "__kmpc_critical_with_hint", "GOMP_critical_name_start"}
                hard = [m for m in missing if m not in optional]
                if hard:
                    plan.problems.append(f"{base}: no symbol for {', '.join(hard)} "
                                         f"(stripped?): not probed")
            if f in binaries and want_omp:
                bodies = elf.matching(C.OUTLINED)
                for sym in bodies:
                    off = elf.probe_offset(sym)
                    if off is None:
                        continue
                    label = C.region_label(sym, elf.line_of(elf.by_name[sym]))
                    ep = C.EntryPoint(label, "omp", "body")
                    self._add(plan, f, off, ep, _emulated(f, off))
                if bodies:
                    plan.found.append(f"{base}: {len(bodies)} OpenMP region bodies")
                elif elf.stripped:
                    stripped.append(f)
        for f in stripped:
            # Only a program that loads an OpenMP runtime has parallel regions to name: a
            # stripped wrapper (sh, time, env, mpirun) is not worth a word.
            if self.omp_runtimes.intersection(_closure(f)):
                plan.problems.append(f"{os.path.basename(f)} is stripped: its parallel regions "
                                     "are named by address only, and threads' time inside is "
                                     "not seen")
        return plan

    def plan_user(self) -> Plan:
        plan = Plan()
        for path, sym in self.user:
            elf = E.load_elf(path)
            off = elf.probe_offset(sym)
            if off is None:
                hint = " (the file is stripped)" if elf.stripped else ""
                raise SnumapError(f"--probe {path}:{sym}: no function {sym!r} in {path}{hint}")
            self._add(plan, path, off, C.EntryPoint(sym, "user"), _emulated(path, off))
            plan.found.append(f"{os.path.basename(path)}:{sym} (--probe)")
        return plan

    def _add(self, plan: Plan, path: str, off: int, ep: C.EntryPoint, emulated: bool = True
             ) -> None:
        if any(p[0] == path and p[1] == off for p in plan.probes):
            return
        rid = -1 if ep.arg is not None or ep.stack else \
            self.names.intern(ep.symbol, ep.kind, ep.role, ep.wait)
        cost = (ENTRY_NS if emulated else STEPPED_NS) * ep.on_entry + RETURN_NS * ep.on_return
        if ep.on_entry:
            plan.probes.append((path, off, False, Site(ep, False, rid, path, cost, True)))
        if ep.on_return:
            plan.probes.append((path, off, True, Site(ep, True, rid, path, cost,
                                                      not ep.on_entry)))
        plan.files.add(path)

    # ---- probes -----------------------------------------------------------------------------

    def _open_bpf(self, hold_exec: bool) -> Any:
        from snumap_tui.trace.region_bpf import BpfUprobes

        return BpfUprobes(sorted(self.family or ()), system_wide=self.tree is None,
                          hold_exec=hold_exec, scoped=self.scope == "process")

    def _open(self) -> Any:
        """The eBPF path (in-kernel filter, uprobe_multi) where it works, else perf's."""
        from snumap_tui.trace.uprobes import UprobeSet

        if self.backend in ("auto", "ebpf"):
            try:
                return self._open_bpf(hold_exec=False)
            except (OSError, ImportError, KeyError, ValueError) as e:
                if self.backend == "ebpf":
                    raise SnumapError(f"region probes: the eBPF path failed: {e}") from None
                self.say(f"regions: eBPF path not used ({e}); perf uprobes instead")
        return UprobeSet()

    def _open_holding(self) -> None:
        """The eBPF path, opened before the command runs whatever is planned, so that its
        tree's first exec of each program is held until the program is probed. Those planned
        already are held too, for a few milliseconds: long enough to read where the process
        mapped the program, which names its parallel regions even if it is gone by the time
        its hits are decoded. Where it cannot be had, ``attach`` opens a path as before."""
        if self.mode == "none" or not self.family or self.backend not in ("auto", "ebpf"):
            return
        try:
            self.uprobes = self._open_bpf(hold_exec=True)
        except (OSError, ImportError, KeyError, ValueError):
            return
        import elftools.elf.elffile  # noqa: F401  (now, not while the first exec waits)

    def attach(self, plan: Plan) -> None:
        """Open the plan's probes; what the kernel refuses is said, the rest goes on."""
        from snumap_tui.trace.uprobes import Probe

        if not plan.probes:
            return
        if self.uprobes is None:
            self.uprobes = self._open()
        probes = []
        # Summed in the kernel where the eBPF path can (one summary every few thousand calls
        # instead of a record each); the perf path keeps a record a call.
        summed = getattr(self.uprobes, "kind", "") == "ebpf"
        for path, off, ret, site in plan.probes:
            tag = len(self.sites)
            self.sites.append(site)
            agg = site.rid if summed and site.entry.agg and site.rid >= 0 else None
            self._agg_flags.append(agg is not None)
            probes.append(Probe(path, off, ret, tag, site.entry.arg, group_of(site), agg,
                                self.spend_ns(site)))
        failed: dict[str, str] = {}
        for p, why in self.uprobes.add_many(probes):
            failed.setdefault(f"{os.path.basename(p.path)}:{self.sites[p.tag].entry.symbol}",
                              why)
        for what, why in failed.items():
            self.problems.append(f"{what}: probe not attached ({why})")
        self.found += plan.found
        self.problems += plan.problems
        note = missing_note() if plan.probes else None
        if note is not None and note not in self.problems:
            self.problems.append(note)
        self.path = getattr(self.uprobes, "kind", None)
        rid = np.array([s.rid for s in self.sites], dtype=np.int64)
        op = np.array([C.END if s.ret else C.BEGIN for s in self.sites], dtype=np.uint8)
        self.static_rid, self.static_op = rid, op
        self._body_tags = np.array([i for i, s in enumerate(self.sites)
                                    if s.entry.role == "body"], dtype=np.int64)
        self._agg_tag = np.array(self._agg_flags, dtype=bool)

    def start(self, binaries: list[str], roots: list[int] | None,
              command: list[int] | None = None) -> list[str]:
        """Plan and attach before the command runs; the lines that say what was found.
        ROOTS: the traced tree's roots (None: system-wide); COMMAND: the command's pids,
        followed in a system-wide recording too, and whose execs are held (not a job's,
        whose processes its batch system starts and watches)."""
        self.tree = None if roots is None else set(roots)
        self.family = self.tree if roots is not None else \
            (set(command) if command else None)
        if command:
            self._open_holding()
        plan = self.plan(binaries) if self.mode != "none" else Plan()
        user = self.plan_user()
        plan.probes += user.probes
        plan.found += user.found
        self.attach(plan)
        return self.describe()

    def describe(self) -> list[str]:
        what = "; ".join(self.found) if self.found else (
            "none found" if self.mode != "none" else "off")
        scoped = getattr(self.uprobes, "scoped", None) is not None
        via = {"ebpf": " [eBPF uprobe_multi, " + ("set in the traced processes only]" if scoped
                                                  else "filtered in the kernel]"),
               "perf": " [perf uprobes]"}.get(getattr(self.uprobes, "kind", ""), "")
        lines = [f"regions ({self.mode}): {what}{via}"]
        lines += [f"regions: {p}" for p in self.problems]
        return lines

    # ---- the traced tree --------------------------------------------------------------------

    def follow(self, batch: EventBatch) -> None:
        """Learn the tree's processes from a scheduling batch; probe what new programs load."""
        with self._lock:
            self._follow(batch)

    def _follow(self, batch: EventBatch) -> None:
        family = self.family
        if family is None:
            return
        e = batch.events
        k = e["kind"]
        if self.tree is not None:       # the batch is the tree's alone
            family.update(e["pid"][(k == FORK) | (k == EXEC)].tolist())
            family.update(e["pid2"][k == FORK].tolist())
            family.update(t.pid for t in batch.tasks if t.pid > 0)
        else:                           # every process's: the command's children, in order
            forks = np.flatnonzero(k == FORK)
            for parent, child in zip(e["pid"][forks].tolist(), e["pid2"][forks].tolist()):
                if parent in family:
                    family.add(child)
            family.update(t.pid for t in batch.tasks if t.pid > 0 and t.ppid in family)
        family.discard(-1)
        family.discard(-2)
        forks = e[(k == FORK) & (e["pid"] != e["pid2"])]
        linked = getattr(self.uprobes, "scoped", None) or set()
        self._link_processes([c for p, c in zip(forks["pid"].tolist(), forks["pid2"].tolist())
                              if p in linked])
        execs = set(e["pid"][k == EXEC].tolist())
        for pid in sorted(execs & family if self.tree is None else execs):
            # The new program is mapped already (its libraries maybe not yet): enough to name
            # its outlined functions even if the process is gone when its hits are decoded.
            # Gone already, the maps read while it was held at its exec, or at an earlier
            # exec event of the same batch's drains (``env prog``: two execs of one pid, seen
            # in two batches when the scheduling rings are drained as the region ring is,
            # after the process ended), stay.
            maps = E.read_maps(pid)
            if maps or pid not in self.maps:
                self.maps[pid] = maps
            self._probe_new(pid, maps)
        # Maps stay after an exit: its last hits are decoded after the exit is seen.
        while len(self.maps) > MAX_MAPS:
            self.maps.pop(next(iter(self.maps)))

    def rescan(self, limit: int = 64) -> None:
        """Libraries the tree mapped since (dlopen, or loaded after the exec was seen): read
        the tree's /proc/PID/maps and probe the runtimes not planned yet. Called about once a
        second; at most LIMIT processes a call."""
        with self._lock:
            self._rescan(limit)

    def _rescan(self, limit: int) -> None:
        if self.mode == "none" or not self.family:
            return
        deadline = time.monotonic() + RESCAN_BUDGET_S
        for pid in sorted(self.family)[-limit:]:
            if time.monotonic() > deadline:
                break                       # the rest at the next call: never stall the loop
            maps = E.read_maps(pid)
            if not maps:
                continue
            self.maps[pid] = maps
            files = E.mapped_files(maps)
            # The program itself (its outlined bodies) and libraries named like a runtime:
            # reading every mapped library's ELF (libc, libpython...) took the recorder's
            # main loop half a second, long enough to miss a job's rank starting.
            new = [f for i, f in enumerate(files) if f not in self.planned and
                   (i == 0 or RUNTIME_NAME.search(os.path.basename(f)))]
            self.planned.update(f for f in files if f not in new)
            if new:
                self._attach_later(self.plan(new, closure=False), f"mapped later by pid {pid}")
            if self.probed_files.intersection(files):
                self._link_processes([pid])     # a runtime dlopen'd by an unlinked process

    def _probe_new(self, pid: int, maps: list[E.Mapping]) -> None:
        """Probe what the program PID just exec'd (with these MAPS) and its libraries need.
        Only the traced tree's programs come here (``follow``): a system-wide recording sees
        every exec of the machine, and reading each new program's ELF files would stall the
        recorder (a compiler's exec burst)."""
        if self.mode == "none":
            return
        try:
            exe = os.path.realpath(f"/proc/{pid}/exe")
        except OSError:
            return
        if not self._new_program(exe):
            return
        self._attach_later(self.plan([exe, *E.mapped_files(maps)]),
                           f"found after exec of pid {pid}")

    def _may_have(self, exe: str) -> bool:
        return _may_have_regions(exe)

    def _new_program(self, exe: str) -> bool:
        """Whether EXE, just exec'd by the tree, is to be planned (once)."""
        if not exe.startswith("/") or exe in self.planned or not E.is_elf(exe):
            return False
        if not _may_have_regions(exe):
            self.planned.add(exe)
            return False
        return True

    def take_lines(self) -> list[str]:
        """What was found since the last call, to say."""
        with self._lock:
            lines, self.lines = self.lines, []
        return lines

    def _attach_later(self, plan: Plan, how: str) -> None:
        """Attach a plan made while recording and say what it found, and HOW."""
        if plan.probes:
            before = len(self.found)
            self.attach(plan)
            self.lines += [f"regions: {line} ({how})" for line in self.found[before:]]

    def _release_held(self) -> None:
        """Probe the programs the held processes exec'd (and the libraries they need), then
        let the processes run: all of them, whatever goes wrong with the probing."""
        held = getattr(self.uprobes, "held", None)
        if not held:
            return
        self.uprobes.held = []
        try:
            for pid, _ino, _dev, _t in held:
                if self.family is not None:
                    self.family.add(pid)
                # Stopped at its first instruction: the program (and ld.so) are mapped.
                self.maps[pid] = E.read_maps(pid) or self.maps.get(pid, [])
                exe = os.path.realpath(f"/proc/{pid}/exe")
                if self._new_program(exe):
                    self._attach_later(self.plan([exe]), f"pid {pid} held at its exec")
                self._links_for[pid] = self._needs_links(exe)
        finally:
            now = time.monotonic_ns()
            for pid, ino, dev, t_ns in held:
                self.uprobes.resume(pid, ino, dev, probe=self._links_for.pop(pid, True))
                self.holds += 1
                self.held_ns += max(0, now - t_ns)
            self._say_widened()

    def release(self, raws: Any = ()) -> None:
        """Let every held process run, unprobed (the recording is ending or failing)."""
        with self._lock:
            if self.uprobes is not None and getattr(self.uprobes, "holds", False):
                self.uprobes.release_all(raws)

    # ---- decoding ---------------------------------------------------------------------------

    def drain(self) -> Any:
        """The hits the kernel wrote since; the held execs among them are let go here, in
        the drain thread, as soon as their programs are probed."""
        if self.uprobes is None:
            return None
        raw = self.uprobes.drain()
        take_over = getattr(self.uprobes, "take_over", None)
        if take_over is not None and raw is not None:
            raw = take_over(raw)
            if self.uprobes.over:
                with self._lock:
                    self._over_budget()
        if getattr(self.uprobes, "holds", False) and raw is not None:
            raw = self.uprobes.take_execs(raw)
            if self.uprobes.held:
                with self._lock:
                    self._release_held()
        return raw

    def wait_fds(self) -> list[int]:
        """The descriptors whose readiness says the probes' rings want a drain (the eBPF
        path's; none on perf's, which is drained every ``Drainer.DRAIN_S``)."""
        fds = getattr(self.uprobes, "wait_fds", None)
        return list(fds()) if fds is not None else []

    def drain_capped(self) -> bool:
        """Never: each drain reads the region ring whole (Tracer.drain_capped)."""
        return False

    def decode(self, raw: Any) -> np.ndarray:
        """REGION_DTYPE rows of the tree's hits in this drain (and earlier ones held back)."""
        with self._lock:
            return self._decode(raw)

    def _decode(self, raw: Any) -> np.ndarray:
        if self.uprobes is None:
            return np.zeros(0, C.REGION_DTYPE)
        rec = self.uprobes.decode(raw)      # HIT rows (trace/uprobes.py)
        self._release_held()
        if self.pending:
            rec = np.concatenate([*self.pending, rec])
            rec = rec[np.argsort(rec["t_ns"], kind="stable")]
            self.pending = []
        if self.tree is not None and len(rec):
            known = np.isin(rec["pid"], np.fromiter(self.tree, np.int64, len(self.tree)))
            later = rec[~known]
            if len(later):
                young = later["t_ns"] > np.uint64(max(time.monotonic_ns() - PENDING_NS, 0))
                self.pending = [later[young]] if young.any() else []
                self.dropped += int((~young).sum())
            rec = rec[known]
        self.count_rows(rec)
        self._perf_budget(rec)
        self._budget(rec)
        return self._regions(rec)

    def take_sums(self, last: bool = False) -> np.ndarray:
        """The kernel's summaries of aggregated calls drained since the last call (SUM_DTYPE);
        with LAST, also what it summed and had not written yet (the recording's end)."""
        with self._lock:
            up = self.uprobes
            if up is None or not hasattr(up, "take_sums"):
                return np.zeros(0, C.SUM_DTYPE)
            if not last:
                return up.take_sums()
            up.drain_sums()
            return np.concatenate([up.take_sums(), up.leftover_sums()])

    def lost_by_region(self) -> dict[str, int]:
        """Records the kernel could not write, per region name (a span opener's, whose region
        is known only from its record, under its runtime function's name)."""
        by_tag = getattr(self.uprobes, "lost_by_tag", None)
        if by_tag is None:
            return {}
        out: dict[str, int] = {}
        for tag, n in by_tag(len(self.sites)).items():
            site = self.sites[tag]
            name = self.names[site.rid].name if site.rid >= 0 else site.entry.symbol
            out[name] = out.get(name, 0) + n
        return out

    @property
    def lost(self) -> int:
        return int(self.uprobes.lost) if self.uprobes is not None else 0

    def close(self) -> None:
        if self.uprobes is not None:
            self.release()
            self.uprobes.close()
            self.uprobes = None
