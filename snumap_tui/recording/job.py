"""`snumap record --job [JOBID]`: record the processes of a batch job on this node.

Started once per node of a running job (``srun --overlap --jobid J --ntasks-per-node=1 snumap
record --job -o job-%j-%N.rec``), each recorder traces its node's processes of the job: those
there at the start, and every process the job starts later (a new step's tasks are forked by
slurmd, not by a traced process, so the job is rescanned every ``SCAN_S`` and the tracer told
to follow what is new). Started as a step of the job (srun, as above), the recording lasts
until the job ends: Slurm then stops the job's remaining steps with SIGTERM, and the recorder
closes its file (a job's nodes are often idle between two steps, so "no process left" is no
sign of the end there). Started from outside the job (ssh to the node, ``--job JOBID``), it
ends once the job has had no process on the node for ``STEP_GAP_S``. ``--duration`` and
SIGINT end it in both cases. From outside, a job with no process on the node (a wrong id, a
job that runs elsewhere or has ended) is refused after ``START_WAIT_S`` of looking, before any
file is written: nothing would ever start such a recording, or end it.

What it adds to the recording (docs/format.md): header keys ``job``, ``node``, ``boot_id``,
``pid_max`` and ``clock_start``; info chunks ``job processes`` (pid, step, rank) as processes
appear, and ``clock end`` at the end.
"""

from __future__ import annotations

import argparse
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

from snumap_tui.errors import SnumapError
from snumap_tui.sources.clocksync import clock_reading
from snumap_tui.sources.jobprocs import JobProc, JobScanner, current_job, node_name

SCAN_S = 0.05
#: How long a user-space tree filter (perf) holds events back for the rescan: a rank that
#: lives 0.15 s and is found 0.3 s late (a loaded node) still has its run time from its start
FOLLOW_LAG_S = 0.5
STEP_GAP_S = 3.0
START_WAIT_S = 5.0          # from outside the job: how long to look for its first process
START_SCAN_S = 0.2


def add_job_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--job", nargs="?", const="", default=None, metavar="JOBID",
                        help="record the processes of batch job JOBID on this node (default "
                             "$SLURM_JOB_ID, or $PBS_JOBID) until the job ends; %%j and %%N in "
                             "-o become the job id and this node's name")


def expand_output(pattern: str, jobid: str, node: str) -> str:
    """``%j`` -> job id, ``%N`` -> node name, ``%%`` -> ``%`` (as in sbatch's --output)."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "%" and i + 1 < len(pattern) and pattern[i + 1] in "jN%":
            out.append({"j": jobid, "N": node, "%": "%"}[pattern[i + 1]])
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def job_backend(backend: str) -> str:
    """``auto`` means perf first for a job: a new step's tasks are forked by slurmd, outside
    the traced tree, and are followed from the next rescan on; perf filters in user space, after
    that rescan, so it keeps their first events, where bcc's filter in the kernel has dropped
    them already. An explicit backend is kept (bcc loses a new step's first ~0.1 s)."""
    if backend != "auto":
        return backend
    from snumap_tui.trace.perf import PerfTracer

    return "perf" if PerfTracer.status().available else "auto"


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


class JobWatch:
    """The job side of one ``record --job`` run (hooked into commands/record.py)."""

    def __init__(self, system: str, jobid: str, node: str, own_step: str | None) -> None:
        self.system, self.jobid, self.node = system, jobid, node
        excluded = (own_step,) if own_step else ()
        self.scanner = JobScanner(system, jobid, node=node, exclude_steps=excluded)
        self.procs: dict[int, JobProc] = {}
        self._gone_at: float | None = None
        # The scans run on their own thread: a task living a fraction of a second must be
        # seen even when the record loop is slow (a loaded node, a big decode).
        self._lock = threading.Lock()
        self._found: list[JobProc] = []
        self._stepds: list[int] = []
        self._alive: list[int] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.own_step = own_step
        self.cannot_follow = False
        self.follow_lag_ns = int(FOLLOW_LAG_S * 1e9)

    @classmethod
    def from_args(cls, args: argparse.Namespace, say: Any = None,
                  wait_s: float = START_WAIT_S) -> JobWatch | None:
        """None without ``--job``; else the watch, ``args.output`` expanded. Refuses (one line)
        outside a job, with a command, or (from outside the job) when the job has no process
        on this node within WAIT_S."""
        if getattr(args, "job", None) is None:
            return None
        cmd = [c for c in (args.cmd or []) if c != "--"]
        if cmd:
            raise SnumapError("--job records the processes a job already runs and takes no "
                              "command; to record a step, start the recorder beside it: "
                              "srun --overlap --ntasks-per-node=1 snumap record --job "
                              "-o job-%j-%N.rec &  then  srun ./app")
        env = dict(os.environ)
        mine = current_job(env)
        if args.job:
            system = mine[0] if mine else ("pbs" if "." in args.job else "slurm")
            jobid = args.job
        elif mine:
            system, jobid = mine
        else:
            raise SnumapError("--job without JOBID needs to run inside a job ($SLURM_JOB_ID or "
                              "$PBS_JOBID is not set): give the job id, or start it with srun "
                              "--overlap --jobid JOBID")
        own = env.get("SLURM_STEP_ID") if mine and mine[1] == jobid else None
        node = node_name(env)
        args.output = expand_output(args.output, jobid, node)
        args.backend = job_backend(getattr(args, "backend", "auto"))
        watch = cls(system, jobid, node, own)
        new, _alive = watch.scanner.scan()
        watch._learn(new)
        if own is None and not watch.roots():
            watch._await_first(wait_s, say)
        return watch

    # ---- hooks ------------------------------------------------------------------------------

    def roots(self) -> list[int]:
        return sorted({*self.procs, *self.scanner.stepds})

    def header(self) -> dict[str, Any]:
        return {"job": {"system": self.system, "id": self.jobid}, "node": self.node,
                "host": self.node, "hostname": socket.gethostname(),
                "boot_id": _read("/proc/sys/kernel/random/boot_id"),
                "pid_max": int(_read("/proc/sys/kernel/pid_max") or 4194304),
                "clock_start": clock_reading()}

    def start(self, writer: Any) -> None:
        self._write_procs(writer, list(self.procs.values()))
        self._alive = sorted(self.procs)
        self._thread = threading.Thread(target=self._scan_loop, name="snumap-job-scan",
                                        daemon=True)
        self._thread.start()

    def _scan_loop(self) -> None:
        while not self._stop.wait(SCAN_S):
            try:
                new, alive = self.scanner.scan()
            except OSError:
                continue
            with self._lock:
                self._found += new
                self._stepds += self.scanner.stepds
                self._alive = alive

    def poll(self, writer: Any, tracer: Any, say: Any) -> bool:
        """Follow and record what the scans found since the last call. True when the job is
        over on this node."""
        now = time.monotonic()
        with self._lock:
            new, self._found = self._found, []
            stepds, self._stepds = self._stepds, []
            alive = list(self._alive)
        if stepds:
            tracer.follow(stepds)     # the tasks they fork, from their fork on
        if new:
            self._learn(new)
            if not tracer.follow([p.pid for p in new]) and not self.cannot_follow:
                self.cannot_follow = True
                say(f"the {tracer.name} backend cannot follow processes the job starts later; "
                    "use --backend bcc, perf or proc")
            self._write_procs(writer, new)
        if self.own_step is not None:
            return False      # a step of the job: Slurm stops it (SIGTERM) when the job ends
        # Started from outside the job (ssh to the node): end once none of the job's
        # processes has been left here for STEP_GAP_S (a script's next step starts sooner).
        if alive or not self.procs:
            self._gone_at = None
            return False
        if self._gone_at is None:
            self._gone_at = now
        return now - self._gone_at >= STEP_GAP_S

    def finish(self, writer: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        # What the last scans found after the last poll: a rank of the job's last step is
        # often found just before the job ends (and the recorder with it), never polled.
        with self._lock:
            new, self._found = self._found, []
        if new:
            self._learn(new)
            self._write_procs(writer, new)
        reading = clock_reading()
        # tid_max: the merge qualifies this node's task ids with a base this far apart
        # (pid_max, 4 M on most nodes, would spread a job's ids over a sparse range)
        writer.add_info(reading["t_monotonic_ns"], "clock end",
                        {"clock": reading, "tid_max": int(writer.tid_max)})

    # ---- internals --------------------------------------------------------------------------

    def _await_first(self, wait_s: float, say: Any) -> None:
        """From outside the job: look for its first process here for up to WAIT_S (a job just
        started may not have forked it yet), else refuse. A step of the job never waits: it
        is the job, on a node of the job, whose next step may come much later."""
        if say is not None:
            say(f"no process of job {self.jobid} on {self.node} yet; looking for {wait_s:g} s")
        end = time.monotonic() + wait_s
        while not self.roots() and time.monotonic() < end:
            time.sleep(START_SCAN_S)
            new, _alive = self.scanner.scan(recheck=True)
            self._learn(new)
        if not self.roots():
            where = f"squeue -j {self.jobid} -o %N" if self.system == "slurm" \
                else f"qstat -n {self.jobid}"
            raise SnumapError(f"job {self.jobid} has no process on this node ({self.node}): "
                              f"check the job id and where it runs ({where})")

    def _learn(self, new: list[JobProc]) -> None:
        for p in new:
            self.procs[p.pid] = p

    def _write_procs(self, writer: Any, procs: list[JobProc]) -> None:
        if not procs:
            return
        rows = [[p.pid, p.comm, p.step, p.node or self.node,
                 -1 if p.rank is None else p.rank, p.rank_var or ""] for p in procs]
        writer.add_info(time.monotonic_ns(), "job processes", {
            "columns": ["pid", "comm", "step", "node", "rank", "rank_var"], "rows": rows})
