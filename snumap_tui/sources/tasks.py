"""Processes and threads from /proc: where each thread last ran, its state and CPU time; per
process its affinity, user, command line, cgroup and batch job; on request its memory per NUMA
node (numa_maps) and per-thread counters (perf_event_open on its threads).

Formats (Documentation/filesystems/proc.rst; proc(5)):
- ``/proc/PID/task/TID/stat``: ``tid (comm) state ppid ...``; comm may hold spaces and
  parentheses, so fields are counted from the *last* ')'. Field 9 flags (PF_KTHREAD),
  14/15 utime/stime (ticks; in /proc/PID/stat the sum over all the process's threads), 19 nice,
  20 num_threads, 22 starttime, 24 rss (resident pages), 39 processor (the PU it last ran on).
- ``/proc/PID/status``: ``Uid:`` (real first), ``Cpus_allowed_list:`` (since 2.6.26).
- ``/proc/PID/numa_maps`` (numa(7)): ``N<node>=<pages>`` per mapping, pages of that mapping's
  ``kernelpagesize_kB``; reading it walks the page tables, so it is only done when asked.
Processes come and go between listing and reading: a vanished one is skipped, not an error.
"""

from __future__ import annotations

import errno
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from snumap_tui.sources._io import (
    MAX_FILE_BYTES,
    READ_FLAGS,
    Reader,
    decode_name,
    is_live,
    parse_cpulist,
    read_text,
    reason_of,
    user_hz,
)
from snumap_tui.sources.base import SourceStatus
from snumap_tui.sources.confine import allows_fast, open_checked, top_of
from snumap_tui.sources.jobs import detect_job, main_cgroup, parse_cgroup

_GONE = (FileNotFoundError, ProcessLookupError, NotADirectoryError)
# A stat line is under 400 bytes (52 numbers and a 64-byte comm at most): one read of this
# many bytes that comes back short is the whole line.
_LINE_BYTES = 4096
PF_KTHREAD = 0x00200000   # include/linux/sched.h: the task is a kernel thread (stat field 9)


def parse_stat(text: str) -> dict[str, Any]:
    """One /proc/PID[/task/TID]/stat line -> the fields snumap uses."""
    lp = text.index("(")
    rp = text.rindex(")")
    rest = text[rp + 2:].split()
    # rest[0] is field 3 (state): field N is rest[N - 3]. Every field snumap keeps fits an
    # int64 on any kernel (a crafted --fsroot tree's may not: unreadable, like a bad line).
    out = _stat_fields(text, lp, rp, rest)
    if any(isinstance(v, int) and not -(1 << 63) <= v < (1 << 63) for v in out.values()):
        raise ValueError("a stat field out of range")
    return out


def _stat_fields(text: str, lp: int, rp: int, rest: list[str]) -> dict[str, Any]:
    return {"tid": int(text[:lp]), "comm": text[lp + 1:rp], "state": rest[0],
            "ppid": int(rest[1]), "flags": int(rest[6]), "utime": int(rest[11]), "stime": int(rest[12]),
            "nice": int(rest[16]), "num_threads": int(rest[17]), "starttime": int(rest[19]),
            "rss_pages": int(rest[21]) if len(rest) > 21 else -1,
            "last_cpu": int(rest[36]) if len(rest) > 36 else -1}


def parse_status(text: str) -> dict[str, Any]:
    """/proc/PID/status -> uid (real), affinity (OS indexes), tgid, ppid, threads."""
    out: dict[str, Any] = {}
    for line in text.splitlines():
        key, _, val = line.partition(":")
        if key == "Uid":
            out["uid"] = int(val.split()[0])
        elif key == "Cpus_allowed_list":
            out["affinity"] = parse_cpulist(val)
        elif key == "Tgid":
            out["tgid"] = int(val)
        elif key == "PPid":
            out["ppid"] = int(val)
        elif key == "Threads":
            out["threads"] = int(val)
    return out


def parse_numa_maps(text: str, base_page_kb: int = 4) -> dict[int, int]:
    """/proc/PID/numa_maps -> {node: pages}, in base pages (huge page mappings scaled up)."""
    out: dict[int, int] = {}
    for line in text.splitlines():
        scale = 1
        counts: list[tuple[int, int]] = []
        for word in line.split()[2:]:
            if word[0] == "N" and "=" in word:
                node_s, _, pages_s = word[1:].partition("=")
                if node_s.isdigit():
                    counts.append((int(node_s), int(pages_s)))
            elif word.startswith("kernelpagesize_kB="):
                scale = max(1, int(word.split("=", 1)[1]) // base_page_kb)
        for node, pages in counts:
            out[node] = out.get(node, 0) + pages * scale
    return out


def parse_cmdline(raw: str) -> str:
    return raw.replace("\0", " ").strip()


@dataclass
class _Proc:
    """What the source remembers of one process between sweeps (keyed by pid and start time,
    so a recycled pid is a new process)."""

    ticks: int = -1                      # utime + stime of /proc/PID/stat at the last read
    rows: list[tuple[Any, ...]] = field(default_factory=list)   # per thread, _ROW order
    uid: int = -1
    affinity: list[int] = field(default_factory=list)
    static: dict[str, Any] = field(default_factory=dict)
    status_at: float = -math.inf         # when /proc/PID/status was last read
    threads_at: float = -math.inf        # when the task/*/stat files were last read


_COLS = ("pid", "tid", "ppid", "uid", "comm", "state", "last_cpu", "utime", "stime", "nice")
# States of a thread that is (or may be about to be) on a CPU: its process is re-read even if
# its CPU time did not move, so a thread that just went to sleep is not shown running.
_ACTIVE = frozenset("RD")


class TasksSource:
    """Threads (parallel arrays) and processes (dict by pid) from ``<root>/proc``.

    Cost model (what makes ``snumap top`` cheap): every sweep reads one file per process,
    ``/proc/PID/stat``, whose utime + stime cover all the process's threads. Only processes
    whose CPU time moved, that have a running thread, or that are new, get their
    ``task/TID/stat`` files read; the others' thread rows are reused (their CPU time did not
    change, so their deltas are the same). Every ``refresh_s`` seconds all of it is read again,
    and so is ``status`` (user, affinity), which changes rarely. Kernel threads (PF_KTHREAD)
    have no command line, cgroup or memory maps to read.
    """

    name = "tasks"

    def __init__(self, root: Path = Path("/"), reader: Reader = read_text,
                 refresh_s: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.root = Path(root)
        self.proc = self.root / "proc"
        self._proc_s = str(self.proc)
        self._reader = reader
        self._fast = allows_fast(reader)
        self._top = top_of(reader)
        self.refresh_s = refresh_s
        self._clock = clock
        self._procs: dict[tuple[int, int], _Proc] = {}
        self._leads: dict[int, tuple[str, dict[str, Any]]] = {}   # pid -> last stat line
        self.numa_pids: set[int] = set()
        # pid -> (when read, its "numa_pages"/"numa_error" entries): numa_maps is a page walk
        # (~1 ms of kernel and parse time for a Python process), read again every refresh_s.
        self._numa: dict[int, tuple[float, dict[str, Any]]] = {}
        self.counter_pids: set[int] = set()
        self.counter_events: tuple[str, ...] = ()      # beyond the built-in ones (--events)
        self._counters: Any = None
        # Memory per NUMA node of the counted processes, every sweep (sources/procmem.py's
        # ProcessMemory: statm, split by numa_maps when the RSS moved); handed in by the
        # sampler (procmem parses with this module's parse_numa_maps: no import circle).
        self.process_memory: Any = None
        self._users: dict[int, str] = {}
        self.full_every_s = 0.0            # see set_cadence
        # Kernel threads in the list (False: left out, as htop shows them by default; each
        # pid is read once to know it is one, then again every refresh_s in case the pid was
        # reused -- on a 384-PU node they are thousands of per-CPU workers).
        self.kthreads = True
        self._kthread_pids: dict[int, float] = {}     # pid -> when last read
        self.keep_pids: set[int] = set()
        # False: one row per process from /proc/PID/stat alone (the process's CPU time, its
        # main thread's state and last PU, ``nthreads`` from num_threads), never its task/
        # directory: the recorder of a command, whose threads' run time the scheduling
        # events give exactly -- a 384-thread program was 384 files a sample otherwise.
        self.per_thread = True
        self._full_at = -math.inf
        self.base_page_kb = (os.sysconf("SC_PAGE_SIZE") // 1024) if is_live(self.root) else 4
        self.hz = user_hz()      # the unit of utime/stime, carried in every reading

    # ---- requests ----
    def want_numa(self, pid: int, on: bool = True) -> None:
        """Read /proc/PID/numa_maps for this process at the next sweep, then every refresh_s
        (costly: a page walk; where a process's memory lives changes slowly)."""
        (self.numa_pids.add if on else self.numa_pids.discard)(pid)
        self._numa.pop(pid, None)

    def want_counters(self, pid: int, on: bool = True) -> None:
        """Open per-thread perf counters on this process (this machine only): its entry in
        ``processes`` then has ``counters`` (ThreadCounters.read), which derive turns into
        the row's rates. Reached through Sampler.watch_counters / watch_pids(counters=True)."""
        from snumap_tui.sources.perf import (
            HW_EVENTS,
            THREAD_SW_EVENTS,
            ThreadCounters,
            needs_pmu,
        )

        if self._counters is None:
            extra = [e for e in self.counter_events if e not in (*HW_EVENTS, *THREAD_SW_EVENTS)]
            self._counters = ThreadCounters(
                self.root, (*HW_EVENTS, *(e for e in extra if needs_pmu(e, self.root))),
                (*THREAD_SW_EVENTS, *(e for e in extra if not needs_pmu(e, self.root))))
        if on:
            self.counter_pids.add(pid)
            self._counters.watch(pid)
        else:
            self.counter_pids.discard(pid)
            self._counters.unwatch(pid)

    # ---- helpers ----
    def _memory_of(self, pid: int) -> dict[str, Any]:
        """``memory_nodes`` {node: bytes} and ``memory_exact`` (False: the RSS split in the
        last numa_maps walk's proportions) of a counted process, or ``memory_error``."""
        try:
            rows = self.process_memory.read_pid(pid)
        except (OSError, ValueError) as exc:
            return {"memory_error": reason_of(exc) if isinstance(exc, OSError) else str(exc)}
        nodes = {int(n): int(b) for _, n, b, _ in rows if n >= 0}
        return {"memory_nodes": nodes,
                "memory_exact": all(bool(x) for _, n, _, x in rows if n >= 0)}

    def _numa_of(self, pid: int, d: str, now: float, fresh: bool) -> dict[str, Any]:
        """``numa_pages`` (and ``numa_error``) of a watched process, from the last read when
        it is younger than refresh_s and the process is the same one (not a new pid)."""
        got = self._numa.get(pid)
        if got is not None and not fresh and now - got[0] < self.refresh_s:
            return got[1]
        out: dict[str, Any]
        try:
            out = {"numa_pages": parse_numa_maps(self._read(d + "/numa_maps"), self.base_page_kb)}
        except OSError as exc:
            out = {"numa_pages": None, "numa_error": reason_of(exc)}
        self._numa[pid] = (now, out)
        return out

    def _read(self, path: str, line: bool = False) -> str:
        """One procfs file, read to its end. os.open/os.read on a str path is several times
        cheaper than open() or pathlib per file, which matters at one file per process per
        sweep. A short read is not the end: seq_file-backed files (numa_maps, smaps) hand out
        whole records per read, a little under the buffer each time, so only an empty read
        is (reading numa_maps up to the first short read kept its first ~4 KB: half of a
        Python process's pages). ``line``: a file of one record (stat), which the kernel
        hands out whole to a read with room for it: a read that did not fill the buffer
        is all of it (one system call of two, for every process and thread each sweep)."""
        if not self._fast:
            return self._reader(Path(path))
        fd = open_checked(path, self._top, READ_FLAGS)
        try:
            if line:
                first = os.read(fd, _LINE_BYTES)
                if len(first) < _LINE_BYTES:
                    return decode_name(first)
                chunks = [first]
                n = len(first)
            else:
                chunks = []
                n = 0
            while chunk := os.read(fd, 65536):
                chunks.append(chunk)
                n += len(chunk)
                if n > MAX_FILE_BYTES:      # not a procfs file (/dev/zero in a --fsroot)
                    raise OSError(errno.EFBIG, "too large for a procfs file", path)
        finally:
            os.close(fd)
        return decode_name(b"".join(chunks))

    def _user(self, uid: int) -> str:
        name = self._users.get(uid)
        if name is None:
            name = str(uid)
            if is_live(self.root):
                import pwd

                try:
                    name = pwd.getpwuid(uid).pw_name
                except KeyError:
                    pass
            self._users[uid] = name
        return name

    def _static(self, d: str, kthread: bool) -> dict[str, Any]:
        """What does not change in a process's life: command line, cgroup, batch job."""
        cmdline, groups = "", {}
        if not kthread:      # kernel threads: empty cmdline, the root cgroup
            try:
                cmdline = parse_cmdline(self._read(d + "/cmdline"))
            except OSError:
                pass
            try:
                groups = parse_cgroup(self._read(d + "/cgroup"))
            except OSError:
                pass
        return {"cmdline": cmdline or None, "cgroup": main_cgroup(groups),
                "job": detect_job(groups)}

    def _thread_rows(self, d: str, pid: int, lead: dict[str, Any]) -> list[tuple[Any, ...]]:
        """Every thread of one process from task/TID/stat (a single-threaded process: one
        file, no directory listing)."""
        if lead["num_threads"] == 1 and lead["state"] != "Z":
            tids = [pid]        # (a zombie leader may have one live thread of another tid)
        else:
            tids = sorted(int(t) for t in os.listdir(d + "/task") if t.isdigit())
        rows = []
        for tid in tids:
            try:
                t = parse_stat(self._read(f"{d}/task/{tid}/stat", line=True))
            except (OSError, ValueError):
                continue         # the thread ended between listing and reading
            rows.append((tid, t["comm"], t["state"], t["last_cpu"], t["utime"], t["stime"],
                         t["nice"]))
        return rows

    # ---- Source ----
    def status(self) -> SourceStatus:
        try:
            self._reader(self.proc / "self" / "stat") if is_live(self.root) else \
                next(p for p in self.proc.iterdir() if p.name.isdigit())
        except (OSError, StopIteration) as exc:
            why = reason_of(exc) if isinstance(exc, OSError) else f"no processes in {self.proc}"
            return SourceStatus(self.name, False, why, "mount procfs: mount -t proc proc /proc"
                                if is_live(self.root) else None)
        return SourceStatus(self.name, True, None, None, {"path": str(self.proc)})

    def set_cadence(self, full_every_s: float = 0.0, keep: set[int] | None = None) -> None:
        """How often to read every process: every sweep (0, the default: batch mode, the
        recorder, a visible process list), or every ``full_every_s`` seconds with only the
        ``keep`` processes (the one a UI highlights) read in the sweeps between. Those sweeps
        give a *partial* reading: ``"partial"`` holds the pids asked for, and only those
        processes are in it (model/taskrows.py's TaskTimeline keeps the others' last rows).
        Going back to 0 makes the next sweep a full one."""
        self.full_every_s = max(0.0, float(full_every_s))
        if keep is not None:
            self.keep_pids = set(keep)
        if self.full_every_s == 0.0:
            self._full_at = -math.inf

    def read(self) -> dict[str, Any]:
        now = self._clock()
        if self.full_every_s > 0 and now - self._full_at < self.full_every_s:
            return self._read_partial(now)
        cols: dict[str, list[Any]] = {k: [] for k in _COLS}
        processes: dict[int, dict[str, Any]] = {}
        try:
            pids = sorted(int(n) for n in os.listdir(self.proc) if n.isdigit())
        except OSError:
            return {"threads": _arrays(cols), "processes": processes}
        self._full_at = now
        old = self._procs
        old_leads = self._leads
        leads: dict[int, tuple[str, dict[str, Any]]] = {}
        seen: dict[tuple[int, int], _Proc] = {}
        skip = self._kthread_pids if not self.kthreads else {}
        self._kthread_pids = {}
        for pid in pids:
            at = skip.get(pid)
            if at is not None and now - at < self.refresh_s:
                self._kthread_pids[pid] = at      # a kernel thread, read not long ago
                continue
            self._one(pid, now, old, old_leads, leads, seen, cols, processes)
        # Processes that ended are forgotten, so the memory does not grow with every pid seen.
        self._procs = seen
        self._leads = leads
        self._numa = {p: v for p, v in self._numa.items() if p in processes}
        if self._counters is not None:
            for pid in self.counter_pids - processes.keys():
                self._counters.watch(pid)   # it ended: its threads' counters are closed
        return self._folded({"threads": _arrays(cols), "processes": processes, "hz": self.hz})

    def _folded(self, reading: dict[str, Any]) -> dict[str, Any]:
        """Say so in a reading of one row per process (``per_thread`` off)."""
        if not self.per_thread:
            reading["folded"] = True
        return reading

    def _read_partial(self, now: float) -> dict[str, Any]:
        """Only the kept processes (a few files each), remembered as a full sweep would."""
        cols: dict[str, list[Any]] = {k: [] for k in _COLS}
        processes: dict[int, dict[str, Any]] = {}
        keep = sorted(self.keep_pids)
        seen: dict[tuple[int, int], _Proc] = {}
        for pid in keep:
            self._one(pid, now, self._procs, self._leads, self._leads, seen, cols, processes)
        self._procs.update(seen)
        return self._folded({"threads": _arrays(cols), "processes": processes,
                             "partial": keep, "hz": self.hz})

    def _one(self, pid: int, now: float, old: dict[tuple[int, int], _Proc],
             old_leads: dict[int, tuple[str, dict[str, Any]]],
             leads: dict[int, tuple[str, dict[str, Any]]], seen: dict[tuple[int, int], _Proc],
             cols: dict[str, list[Any]], processes: dict[int, dict[str, Any]]) -> None:
        """Read one process into ``cols`` (its threads) and ``processes`` (skipped when it is
        gone by now)."""
        d = f"{self._proc_s}/{pid}"
        try:
            raw = self._read(d + "/stat", line=True)
            last = old_leads.get(pid)
            # A sleeping process's stat line is often byte for byte the last one.
            lead = last[1] if last is not None and last[0] == raw else parse_stat(raw)
        except (OSError, ValueError):
            return           # gone (or not a process any more) since the listing
        leads[pid] = (raw, lead)
        key = (pid, lead["starttime"])
        ent = old.get(key)
        kthread = bool(lead["flags"] & PF_KTHREAD)
        if kthread and not self.kthreads:
            self._kthread_pids[pid] = now     # not read again before refresh_s
            return
        try:
            if ent is None:
                ent = _Proc(static=self._static(d, kthread))
                fresh = True
            else:
                fresh = False
            if now - ent.status_at >= self.refresh_s:
                st = parse_status(self._read(d + "/status"))
                ent.uid = st.get("uid", -1)
                ent.affinity = st.get("affinity", [])
                ent.status_at = now
            ticks = lead["utime"] + lead["stime"]
            if not self.per_thread:
                ent.rows = [(pid, lead["comm"], lead["state"], lead["last_cpu"],
                             lead["utime"], lead["stime"], lead["nice"])]
            elif (ticks != ent.ticks or now - ent.threads_at >= self.refresh_s
                    or any(r[2] in _ACTIVE for r in ent.rows)
                    or len(ent.rows) != lead["num_threads"]):
                ent.rows = self._thread_rows(d, pid, lead)
                ent.ticks = ticks
                ent.threads_at = now
            else:
                # Idle: the main thread's state and last PU are fresh in /proc/PID/stat.
                for i, r in enumerate(ent.rows):
                    if r[0] == pid:
                        ent.rows[i] = (pid, r[1], lead["state"], lead["last_cpu"], *r[4:])
                        break
        except (OSError, ValueError):
            return           # gone (_GONE) or cut short while we read it
        if fresh:
            # Spread the slow refreshes over the cadence (a phase per pid) so that one
            # sweep every refresh_s does not read everything at once.
            ent.status_at = ent.threads_at = now - self.refresh_s * ((pid * 0.618) % 1.0)
        seen[key] = ent
        proc = dict(ent.static)
        proc["user"] = self._user(ent.uid)
        proc["affinity"] = ent.affinity
        proc["nthreads"] = len(ent.rows) if self.per_thread else lead["num_threads"]
        if lead.get("rss_pages", -1) >= 0:
            proc["rss_bytes"] = lead["rss_pages"] * self.base_page_kb * 1024
        if pid in self.numa_pids:
            proc.update(self._numa_of(pid, d, now, fresh))
        if pid in self.counter_pids and self._counters is not None:
            proc["counters"] = self._counters.read(pid)
            why = self._counters.errors.get(pid)
            if why:
                proc["counters_error"] = why
            if self.process_memory is not None:
                proc.update(self._memory_of(pid))
        processes[pid] = proc
        n = len(ent.rows)
        cols["pid"] += [pid] * n
        cols["ppid"] += [lead["ppid"]] * n
        cols["uid"] += [ent.uid] * n
        for tid, comm, state, last_cpu, utime, stime, nice in ent.rows:
            cols["tid"].append(tid)
            cols["comm"].append(comm)
            cols["state"].append(state)
            cols["last_cpu"].append(last_cpu)
            cols["utime"].append(utime)
            cols["stime"].append(stime)
            cols["nice"].append(nice)

    def close(self) -> None:
        if self._counters is not None:
            self._counters.close()
            self._counters = None


def _arrays(cols: dict[str, list[Any]]) -> dict[str, Any]:
    """The threads' columns as the readings contract has them: int64 arrays, comm and state
    as lists of str."""
    try:
        out: dict[str, Any] = {k: np.array(v, dtype=np.int64)
                               for k, v in cols.items() if k not in ("comm", "state")}
    except OverflowError:
        pass
    else:
        out["comm"] = cols["comm"]
        out["state"] = cols["state"]
        return out
    # A crafted --fsroot tree can name a pid or uid past int64: such a thread is dropped.
    n = len(cols["tid"])
    bad = {i for k, v in cols.items() if k not in ("comm", "state")
           for i, x in enumerate(v) if not -(1 << 63) <= x < (1 << 63)}
    keep = [i for i in range(n) if i not in bad]
    out = {}
    for k, v in cols.items():
        vals = [v[i] for i in keep]
        out[k] = vals if k in ("comm", "state") else np.array(vals, dtype=np.int64)
    return out
