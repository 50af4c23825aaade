"""srun as the transport of `top --job`: one sampler per node of the job, frames over stdout.

``srun --overlap --jobid J --nodes=N --ntasks=N --ntasks-per-node=1 --label --input=all
PYTHON -c BOOT HOME top --stream --job J`` (selfcmd.py) runs this very snumap (the login node's
interpreter path; the same installation is on every node of a cluster) as one more step of
the user's job: Slurm's authentication, cgroups and accounting, no port, no daemon, no ssh.
``--label`` prefixes every line with the task number (= the node's index, one task a node);
``--input=all`` gives every sampler the login node's stdin, which this end closes to stop
them all, and which the step daemon closes when srun dies; ``--kill-on-bad-exit=0`` keeps the
others going when one sampler dies.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from typing import IO, Any

from snumap_tui.errors import SnumapError
from snumap_tui.heap import LongLived
from snumap_tui.jobview.aggregate import ENDED, LOST, JobAggregator
from snumap_tui.selfcmd import snumap_argv

_LABEL = re.compile(rb"^\s*(\d+): ?")
_TASK = re.compile(r"\btask (\d+): (.+)$")
#: srun's warning where the cluster binds nothing (task/none): --cpu-bind=none is moot there.
QUIET = "lacks support for cpu binding"


def parse_job(text: str) -> dict[str, str]:
    """``scontrol show job -o J`` -> its KEY=VALUE fields."""
    out: dict[str, str] = {}
    for word in text.split():
        k, eq, v = word.partition("=")
        if eq and k not in out:
            out[k] = v
    return out


def job_info(jobid: str, env: dict[str, str] | None = None,
             run: Callable[..., Any] = subprocess.run) -> tuple[list[str], dict[str, str]]:
    """The job's node names (in Slurm's order) and its fields; SnumapError when the job is
    not running or Slurm cannot be asked."""
    if not re.fullmatch(r"\d+", jobid):
        raise SnumapError(f"--job {jobid}: a Slurm job id is a number (squeue --me lists yours)")
    try:
        r = run(["scontrol", "show", "job", "-o", jobid], capture_output=True, text=True,
                timeout=30, env=env, check=False)
    except FileNotFoundError:
        raise SnumapError("--job needs Slurm's scontrol and srun on this node's PATH") from None
    except subprocess.TimeoutExpired:
        raise SnumapError("scontrol did not answer in 30 s: is slurmctld up?") from None
    if r.returncode != 0:
        msg = (r.stderr or r.stdout).strip().splitlines()
        raise SnumapError(f"--job {jobid}: {msg[-1] if msg else 'scontrol failed'}")
    fields = parse_job(r.stdout)
    state = fields.get("JobState", "?")
    if state != "RUNNING":
        raise SnumapError(f"job {jobid} is {state}, not RUNNING: top --job shows a running "
                          "job (snumap record --job and merge keep one for later)")
    hosts = run(["scontrol", "show", "hostnames", fields.get("NodeList", "")],
                capture_output=True, text=True, timeout=30, env=env, check=False)
    names = hosts.stdout.split()
    if not names:
        raise SnumapError(f"job {jobid}: Slurm lists no node for it")
    return names, fields


def srun_argv(jobid: str, nodes: int, interval_s: float, python: str = sys.executable,
              extra: Sequence[str] = ()) -> list[str]:
    """The srun line that starts one streaming sampler on each of the job's NODES nodes."""
    return ["srun", "--overlap", f"--jobid={jobid}", f"--nodes={nodes}", f"--ntasks={nodes}",
            "--ntasks-per-node=1", "--label", "--input=all", "--kill-on-bad-exit=0",
            "--cpu-bind=none", "--job-name=snumap-top",
            *snumap_argv("top", "--stream", f"--job={jobid}", f"--interval={interval_s:g}s",
                         *extra, python=python)]


class SrunStreams:
    """Runs the srun line and feeds its lines into an aggregator (two reader threads)."""

    def __init__(self, argv: list[str], agg: JobAggregator, env: dict[str, str] | None = None,
                 on_message: Callable[[str], None] | None = None) -> None:
        self.argv = argv
        self.agg = agg
        self.env = env
        self.on_message = on_message or (lambda s: None)
        self.proc: subprocess.Popen[bytes] | None = None
        self.messages: list[str] = []
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.done = threading.Event()
        self._err_done = threading.Event()
        self._heap = LongLived()     # settled once every node reported; released by stop

    def start(self) -> None:
        try:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, env=self.env,
                                         start_new_session=True)
        except FileNotFoundError:
            raise SnumapError("--job needs Slurm's srun on this node's PATH") from None
        self._threads = [threading.Thread(target=target, args=(stream,), daemon=True,
                                          name="srun-io")
                         for target, stream in ((self._read_out, self.proc.stdout),
                                                (self._read_err, self.proc.stderr))]
        for t in self._threads:
            t.start()

    def _read_out(self, stream: IO[bytes]) -> None:
        for line in stream:
            self.take(line)
        self._srun_ended()

    def take(self, line: bytes) -> None:
        """One line of srun's stdout (``N: `` and node N's line) into the aggregator."""
        m = _LABEL.match(line)
        if m is None:
            return
        with self._lock:
            self.agg.feed(int(m.group(1)), line[m.end():])
            if not self._heap.settled and self.agg.all_reported():
                # Every node's topology and first frame are in: what is alive now (the
                # topologies, the aggregator, the view's widgets) lives until the end; at
                # 1,000 nodes each full collection walked it all again, ~10 % of the
                # aggregator's CPU (bench/job_view.py).
                self._heap.settle()

    def _read_err(self, stream: IO[bytes]) -> None:
        try:
            self._err_lines(stream)
        finally:
            self._err_done.set()

    def _err_lines(self, stream: IO[bytes]) -> None:
        for raw in stream:
            line = raw.decode("utf-8", "replace").rstrip()
            m = _LABEL.match(raw)
            task = int(m.group(1)) if m else None
            if m:
                line = line[m.end():].strip() if len(line) >= m.end() else line
            line = line[:300]
            if not line or QUIET in line:
                continue
            t = _TASK.search(line)
            if t and task is None:
                task = int(t.group(1))
                with self._lock:
                    self.agg.end(task, t.group(2), LOST)
                continue
            self.messages.append(line if task is None else f"task {task}: {line}")
            self.on_message(self.messages[-1])

    def _srun_ended(self) -> None:
        code = None
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = self.proc.wait(timeout=5)
        self._err_done.wait(timeout=2)       # srun's last words first
        why = "srun ended" + (f" (exit {code}" + (f": {self.messages[-1][:160]}"
                                                   if code and self.messages else "") + ")"
                              if code else "")
        with self._lock:
            self.agg.end_all(why, ENDED)
        self.done.set()

    def locked(self) -> threading.Lock:
        return self._lock

    def stop(self, timeout: float = 5.0) -> None:
        """End every sampler: close their stdin (each exits at its end), then srun's orderly
        stop (SIGINT twice: srun cancels the step), then SIGKILL."""
        p = self.proc
        if p is None:
            return
        if p.stdin is not None:
            with contextlib.suppress(OSError):
                p.stdin.close()
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            for _ in range(2):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGINT)
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=timeout)
        for t in self._threads:
            t.join(timeout=2)
        self._heap.release()         # the view is over: what it kept may be collected again
