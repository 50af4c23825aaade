"""Processes and threads from /proc: where each thread last ran, its state and CPU time; per
process its affinity, user, command line, cgroup and batch job; on request its memory per NUMA
node (numa_maps) and per-thread counters (perf_event_open on its threads).

Formats (Documentation/filesystems/proc.rst; proc(5)):
- ``/proc/PID/task/TID/stat``: ``tid (comm) state ppid ...``; comm may hold spaces and
  parentheses, so fields are counted from the *last* ')'. Field 14/15 utime/stime (ticks),
  19 nice, 22 starttime, 39 processor (the PU it last ran on).
- ``/proc/PID/status``: ``Uid:`` (real first), ``Cpus_allowed_list:`` (since 2.6.26).
- ``/proc/PID/numa_maps`` (numa(7)): ``N<node>=<pages>`` per mapping, pages of that mapping's
  ``kernelpagesize_kB``; reading it walks the page tables, so it is only done when asked.
Processes come and go between listing and reading: a vanished one is skipped, not an error.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from snumap_tui.sources._io import Reader, is_live, parse_cpulist, read_text, reason_of
from snumap_tui.sources.base import SourceStatus
from snumap_tui.sources.jobs import detect_job, main_cgroup, parse_cgroup

_GONE = (FileNotFoundError, ProcessLookupError, NotADirectoryError)


def parse_stat(text: str) -> dict[str, Any]:
    """One /proc/PID[/task/TID]/stat line -> the fields snumap uses."""
    lp = text.index("(")
    rp = text.rindex(")")
    rest = text[rp + 2:].split()
    # rest[0] is field 3 (state): field N is rest[N - 3]
    return {"tid": int(text[:lp]), "comm": text[lp + 1:rp], "state": rest[0],
            "ppid": int(rest[1]), "utime": int(rest[11]), "stime": int(rest[12]),
            "nice": int(rest[16]), "num_threads": int(rest[17]), "starttime": int(rest[19]),
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
                node, _, pages = word[1:].partition("=")
                if node.isdigit():
                    counts.append((int(node), int(pages)))
            elif word.startswith("kernelpagesize_kB="):
                scale = max(1, int(word.split("=", 1)[1]) // base_page_kb)
        for node, pages in counts:
            out[node] = out.get(node, 0) + pages * scale
    return out


def parse_cmdline(raw: str) -> str:
    return raw.replace("\0", " ").strip()


class TasksSource:
    """Threads (parallel arrays) and processes (dict by pid) from ``<root>/proc``."""

    name = "tasks"

    def __init__(self, root: Path = Path("/"), reader: Reader = read_text) -> None:
        self.root = Path(root)
        self.proc = self.root / "proc"
        self._reader = reader
        self._cache: dict[tuple[int, int], dict[str, Any]] = {}
        self.numa_pids: set[int] = set()
        self.counter_pids: set[int] = set()
        self._counters: Any = None
        self._users: dict[int, str] = {}
        self.base_page_kb = (os.sysconf("SC_PAGE_SIZE") // 1024) if is_live(self.root) else 4

    # ---- requests ----
    def want_numa(self, pid: int, on: bool = True) -> None:
        """Read /proc/PID/numa_maps for this process at every sweep (costly: page walk)."""
        (self.numa_pids.add if on else self.numa_pids.discard)(pid)

    def want_counters(self, pid: int, on: bool = True) -> None:
        """Open per-thread perf counters on this process (this machine only)."""
        from snumap_tui.sources.perf import ThreadCounters

        if self._counters is None:
            self._counters = ThreadCounters(self.root)
        if on:
            self.counter_pids.add(pid)
            self._counters.watch(pid)
        else:
            self.counter_pids.discard(pid)
            self._counters.unwatch(pid)

    # ---- helpers ----
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

    def _static(self, pid: int, starttime: int, uid: int) -> dict[str, Any]:
        """What does not change in a process's life (cached by pid and start time)."""
        key = (pid, starttime)
        info = self._cache.get(key)
        if info is None:
            d = self.proc / str(pid)
            try:
                cmdline = parse_cmdline(self._reader(d / "cmdline"))
            except OSError:
                cmdline = ""
            try:
                groups = parse_cgroup(self._reader(d / "cgroup"))
            except OSError:
                groups = {}
            info = {"cmdline": cmdline or None, "user": self._user(uid),
                    "cgroup": main_cgroup(groups), "job": detect_job(groups)}
            self._cache[key] = info
        return info

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

    def read(self) -> dict[str, Any]:
        cols: dict[str, list[Any]] = {k: [] for k in ("pid", "tid", "ppid", "uid", "comm",
                                                       "state", "last_cpu", "utime", "stime",
                                                       "nice")}
        processes: dict[int, dict[str, Any]] = {}
        live_keys: set[tuple[int, int]] = set()
        try:
            pids = [int(n) for n in os.listdir(self.proc) if n.isdigit()]
        except OSError:
            return {"threads": cols, "processes": processes}
        for pid in sorted(pids):
            d = self.proc / str(pid)
            try:
                st = parse_status(self._reader(d / "status"))
                lead = parse_stat(self._reader(d / "stat"))
                tids = sorted(int(t) for t in os.listdir(d / "task") if t.isdigit())
            except _GONE:
                continue
            except (OSError, ValueError):
                continue
            uid = st.get("uid", -1)
            live_keys.add((pid, lead["starttime"]))
            proc = dict(self._static(pid, lead["starttime"], uid))
            proc["affinity"] = st.get("affinity", [])
            proc["nthreads"] = len(tids)
            if pid in self.numa_pids:
                try:
                    proc["numa_pages"] = parse_numa_maps(self._reader(d / "numa_maps"),
                                                         self.base_page_kb)
                except OSError as exc:
                    proc["numa_pages"] = None
                    proc["numa_error"] = reason_of(exc)
            if pid in self.counter_pids and self._counters is not None:
                proc["counters"] = self._counters.read(pid)
            processes[pid] = proc
            for tid in tids:
                try:
                    t = parse_stat(self._reader(d / "task" / str(tid) / "stat"))
                except (OSError, ValueError):
                    continue
                cols["pid"].append(pid)
                cols["tid"].append(tid)
                cols["ppid"].append(lead["ppid"])
                cols["uid"].append(uid)
                cols["comm"].append(t["comm"])
                cols["state"].append(t["state"])
                cols["last_cpu"].append(t["last_cpu"])
                cols["utime"].append(t["utime"])
                cols["stime"].append(t["stime"])
                cols["nice"].append(t["nice"])
        # Forget processes that ended, so the cache does not grow with every pid ever seen.
        for key in [k for k in self._cache if k not in live_keys]:
            del self._cache[key]
        threads: dict[str, Any] = {k: np.array(v, dtype=np.int64)
                                   for k, v in cols.items() if k not in ("comm", "state")}
        threads["comm"] = cols["comm"]
        threads["state"] = cols["state"]
        return {"threads": threads, "processes": processes}

    def close(self) -> None:
        if self._counters is not None:
            self._counters.close()
            self._counters = None
