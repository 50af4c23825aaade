"""A node's streaming sampler: ``snumap top --stream --job J`` (started by srun on every node of
the job, never by hand), writing the wire format (jobview/wire.py) to stdout.

It drives the model's Sampler without its process list (the job's processes are all it needs)
and sources/jobprocs.py's JobScanner for the job's processes on this node. Per interval it
writes one ``F`` record (wire.pack_frame): every metric the Sampler derived that is not all
n/a, per topology object, the job's threads (pid, tid, rank, last PU, CPU %, affinity), the
job's processes (rank, RSS, memory per NUMA node from sources/procmem.py) and the GPUs.

It ends when its stdin closes (srun forwards the login node's stdin to every task with
``--input=all``; when srun ends, for whatever reason, the step daemon closes it), on SIGTERM
or SIGINT (Slurm at the job's end, scancel), when stdout is gone (EPIPE), or after ``count``
frames. So nothing stays behind on a node when the view on the login node stops or dies.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from snumap_tui.jobview import wire
from snumap_tui.model.frame import Frame
from snumap_tui.sources.jobprocs import JobScanner, node_name
from snumap_tui.sources.tasks import parse_stat
from snumap_tui.topology.model import Topology
from snumap_tui.topology.render import format_cpulist

TICKS = os.sysconf("SC_CLK_TCK")
#: Processes whose command line is sent: the line that started the ranks (a fix rewrites it).
LAUNCHERS = frozenset({"srun", "mpirun", "mpiexec", "mpiexec.hydra"})


def launch_line(pid: int, proc: str = "/proc") -> str:
    """The command line of a launcher of the job (srun ...), at most 1,000 characters."""
    import shlex

    try:
        with open(f"{proc}/{pid}/cmdline", "rb") as f:
            raw = f.read(4096)
    except OSError:
        return ""
    return shlex.join(a.decode("utf-8", "replace") for a in raw.split(b"\0") if a)[:1000]


def read_threads(pid: int, proc: str = "/proc") -> list[dict[str, Any]]:
    """The threads of PID: tid, comm, CPU ticks (utime + stime), last PU (empty if gone)."""
    out: list[dict[str, Any]] = []
    try:
        tids = os.listdir(f"{proc}/{pid}/task")
    except OSError:
        return out
    for t in tids:
        try:
            with open(f"{proc}/{pid}/task/{t}/stat", "rb") as f:
                st = parse_stat(f.read().decode("utf-8", "replace"))
        except (OSError, ValueError):
            continue
        out.append({"tid": st["tid"], "comm": st["comm"], "ticks": st["utime"] + st["stime"],
                    "pu": st["last_cpu"], "state": st["state"]})
    return out


def affinity_of(tid: int) -> list[int]:
    try:
        return sorted(os.sched_getaffinity(tid))
    except OSError:
        return []


class NodeStream:
    """Samples this node and encodes its records (``write`` sends them)."""

    def __init__(self, topo: Topology, jobid: str, interval_s: float, *,
                 node: str | None = None, system: str = "slurm",
                 root: Path = Path("/"), sampler: Any = None,
                 clock: Any = time.monotonic) -> None:
        from snumap_tui.model.sampler import Sampler
        from snumap_tui.sources.procmem import ProcessMemory

        self.topo = topo
        self.jobid = jobid
        self.node = node or node_name()
        self.interval_s = interval_s
        self.sampler = sampler if sampler is not None else Sampler(topo, root, interval_s,
                                                                   tasks=False)
        own_step = os.environ.get("SLURM_STEP_ID")
        self.scanner = JobScanner(system, jobid, node=self.node,
                                  exclude_steps=(own_step,) if own_step else ())
        self.memory = ProcessMemory(root)
        self.seq = 0
        self.encoder = wire.Encoder()
        self._ticks: dict[int, tuple[int, float]] = {}     # tid -> (ticks, when)
        self._procs: dict[int, Any] = {}                   # pid -> JobProc
        self._launch: dict[int, str] = {}                  # launcher pid -> its command line
        self.clock = clock
        self.bytes_out = 0

    def topology_record(self) -> bytes:
        import socket

        facts = {"host": socket.gethostname(), "kernel": os.uname().release,
                 "cpu_model": next((o.info("CPUModel") for o in self.topo
                                    if o.type == "Package" and o.info("CPUModel")), "")}
        head = {"node": self.node, "job": self.jobid, "interval_s": self.interval_s,
                "pid": os.getpid(), "step": os.environ.get("SLURM_STEP_ID"),
                # srun --cpu-bind=none: this step may run on the job's PUs of this node
                "alloc": format_cpulist(sorted(os.sched_getaffinity(0))),
                "topology": self.topo.to_dict(), **facts,
                "sources": {k: s.to_dict() for k, s in self.sampler.statuses().items()}}
        return self._emit("T", head, {})

    def _emit(self, kind: str, head: dict[str, Any], arrays: dict[str, np.ndarray]) -> bytes:
        data = self.encoder.frame(self.seq, head, arrays) if kind == "F" else \
            wire.encode(kind, self.seq, head, arrays)
        self.seq += 1
        self.bytes_out += len(data)
        return data

    def start(self) -> None:
        self.sampler.sweep()
        self.scan()

    def scan(self) -> list[int]:
        new, alive = self.scanner.scan()
        for jp in new:
            self._procs[jp.pid] = jp
        live = set(alive)
        for pid in [p for p in self._procs if p not in live]:
            del self._procs[pid]
            self._launch.pop(pid, None)
        self.memory.watch(live)
        return alive

    def frame_record(self) -> bytes | None:
        frame = self.sampler.frame()
        if frame is None:
            return None
        self.scan()
        return self._emit("F", *self.frame_payload(frame))

    def frame_payload(self, frame: Frame) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        metrics = {name: arr for name, arr in frame.values.items() if np.isfinite(arr).any()}
        now = self.clock()
        threads: list[tuple[int, int, int, int, float, str]] = []
        seen: dict[int, tuple[int, float]] = {}
        procs: list[dict[str, Any]] = []
        launch: str | None = None
        for pid, jp in sorted(self._procs.items()):
            rank = -1 if jp.rank is None else jp.rank
            for t in read_threads(pid):
                prev = self._ticks.get(t["tid"])
                seen[t["tid"]] = (t["ticks"], now)
                pct = float("nan")
                if prev is not None and now > prev[1]:
                    pct = 100.0 * (t["ticks"] - prev[0]) / TICKS / (now - prev[1])
                threads.append((pid, t["tid"], rank, t["pu"], pct,
                                format_cpulist(affinity_of(t["tid"]))))
            procs.append({"pid": pid, "rank": jp.rank, "comm": jp.comm, "step": jp.step})
            if jp.comm in LAUNCHERS and launch is None:
                if pid not in self._launch:         # read once: it does not change
                    self._launch[pid] = launch_line(pid)
                launch = self._launch[pid] or None
        self._ticks = seen
        mem: dict[int, dict[int, int]] = {}
        for pid, n, b, _exact in self.memory.read():
            mem.setdefault(pid, {})[n] = b
        for p in procs:
            m = mem.get(p["pid"], {})
            p["rss"] = m.get(-1)
            p["numa"] = {n: b for n, b in m.items() if n >= 0}
        gpus = [{"name": r.name, "numa": r.numa, "util": r.util_pct, "mem": r.mem_used,
                 "mem_total": r.mem_total, "busid": r.busid} for r in frame.io if r.kind == "gpu"]
        extra = {**({"gpus": gpus} if gpus else {}), **({"launch": launch} if launch else {})}
        return wire.pack_frame(frame.t_ns, frame.wall_ns, frame.dt_s, metrics, threads, procs,
                               extra)

    def end_record(self, why: str) -> bytes:
        return self._emit("E", {"node": self.node, "why": why}, {})

    def close(self) -> None:
        self.sampler.close()


def _stdin_closed(stop: threading.Event, why: list[str]) -> None:
    """Sets STOP when stdin reaches its end (srun ended or the login node closed it)."""
    fd = sys.stdin.fileno() if sys.stdin is not None else -1
    if fd < 0:
        return
    while not stop.is_set():
        try:
            r, _, _ = select.select([fd], [], [], 1.0)
            if r and not os.read(fd, 4096):
                break
        except OSError:
            break
    why.append("the view on the login node ended")
    stop.set()


def run(topo: Topology, jobid: str, interval_s: float, count: int | None = None,
        out: BinaryIO | None = None, watch_stdin: bool = True) -> int:
    """Stream this node until stopped (module docstring); 0 on an orderly end."""
    stream = out if out is not None else sys.stdout.buffer
    stop = threading.Event()
    why: list[str] = []                     # the first reason to stop is said in the E record

    def on_signal(signum: int, _frame: Any) -> None:
        why.append(f"{signal.Signals(signum).name} (the job ended or was cancelled)"
                   if signum == signal.SIGTERM else signal.Signals(signum).name)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    if watch_stdin:
        threading.Thread(target=_stdin_closed, args=(stop, why), daemon=True,
                         name="stdin-watch").start()
    node = NodeStream(topo, jobid, interval_s)
    try:
        stream.write(node.topology_record())
        stream.flush()
        node.start()
        sent = 0
        next_t = time.monotonic()
        while not stop.is_set() and (count is None or sent < count):
            next_t += interval_s
            if stop.wait(max(0.0, next_t - time.monotonic())):
                break
            if time.monotonic() - next_t > interval_s:
                next_t = time.monotonic()           # late: skip ticks, do not catch up
            data = node.frame_record()
            if data is None:
                continue
            stream.write(data)
            stream.flush()
            sent += 1
        with contextlib.suppress(OSError, ValueError):
            stream.write(node.end_record(why[0] if why else f"{sent} frames sent"))
            stream.flush()
    except (BrokenPipeError, ConnectionResetError):
        pass                                    # nobody reads: nothing to say either
    finally:
        node.close()
    return 0
