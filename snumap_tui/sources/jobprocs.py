"""The processes of one batch job on this node, their job step and their MPI rank.

A process belongs to job J when its cgroup says so (sources/jobs.py knows Slurm's cgroup v1
``/slurm/uid_U/job_J/step_S/...`` and v2 ``/system.slice/slurmstepd.scope/job_J/step_S/...``
layouts and PBS's) or, where Slurm tracks processes without cgroups (proctrack/linuxproc,
pgid), when its environment (proc(5): /proc/PID/environ, NUL-separated ``KEY=VALUE``) carries
``SLURM_JOB_ID=J`` (``PBS_JOBID=J`` under PBS/Torque).

Several slurmd may share one host (``--enable-multiple-slurmd``, test clusters): a job's tasks
carry ``SLURMD_NODENAME``, so a recorder started by srun on node N keeps only N's processes.

The MPI rank comes from the environment the launcher gave each rank: ``PMI_RANK`` (MPICH,
Intel MPI, Slurm's PMI2), ``OMPI_COMM_WORLD_RANK`` (Open MPI), else ``SLURM_PROCID`` (the task
number of a plain srun step). Reading another user's environ needs root or the same uid
(ptrace access mode read): what cannot be read is "no rank", never a guess.
"""

from __future__ import annotations

import os
import re
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from snumap_tui.sources._io import count_of, decode_name, read_name_text
from snumap_tui.sources.jobs import detect_job, parse_cgroup

RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID")
RECHECK_S = 2.0
_STEP = re.compile(r"/step_([^/]+)")


def parse_environ(data: bytes) -> dict[str, str]:
    """/proc/PID/environ -> {KEY: VALUE} (undecodable bytes as ``\\xNN``)."""
    out: dict[str, str] = {}
    for item in data.split(b"\0"):
        if b"=" in item:
            k, v = item.split(b"=", 1)
            out[decode_name(k)] = decode_name(v)
    return out


def rank_of(env: dict[str, str]) -> tuple[int, str] | None:
    """(rank, the variable it came from), the first of RANK_VARS that holds an integer."""
    for var in RANK_VARS:
        n = count_of(env.get(var, ""), 9)
        if n is not None:
            return n, var
    return None


def job_of(groups: dict[str, str], env: dict[str, str]) -> str | None:
    """"slurm:J" / "pbs:J" from the cgroup, else from the environment."""
    found = detect_job(groups)
    if found and not found.startswith("systemd:"):
        return found
    mine = current_job(env)
    return f"{mine[0]}:{mine[1]}" if mine else None


def step_of(groups: dict[str, str], env: dict[str, str]) -> str:
    """The job step: ``step_S`` of the cgroup path, else ``SLURM_STEP_ID``, else "batch" (the
    batch script and what it starts outside srun carry no step id)."""
    for path in groups.values():
        m = _STEP.search(path)
        if m:
            return m.group(1)
    return env.get("SLURM_STEP_ID") or "batch"


def same_job(found: str | None, system: str, jobid: str) -> bool:
    """Whether FOUND ("slurm:1234", "pbs:1234.server") is job JOBID of SYSTEM (a PBS id
    matches with or without its ".server" suffix)."""
    if not found:
        return False
    sysname, _, jid = found.partition(":")
    if sysname != system:
        return False
    return jid == jobid or jid.split(".")[0] == jobid.split(".")[0]


def current_job(env: dict[str, str] | None = None) -> tuple[str, str] | None:
    """(system, job id) of the job this process runs in, from its environment."""
    env = dict(os.environ) if env is None else env
    if env.get("SLURM_JOB_ID"):
        return "slurm", env["SLURM_JOB_ID"]
    if env.get("PBS_JOBID"):
        return "pbs", env["PBS_JOBID"]
    return None


def node_name(env: dict[str, str] | None = None) -> str:
    """This node's name as the batch system knows it (``SLURMD_NODENAME``), else the short
    host name: the two agree on real clusters; on one host running several slurmd only the
    first tells the nodes apart."""
    env = dict(os.environ) if env is None else env
    return env.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def count_comm(name: str, proc: Path = Path("/proc")) -> int:
    """How many processes are called NAME (several slurmd: a test cluster on one host)."""
    n = 0
    for p in proc.iterdir():
        if p.name.isdigit():
            try:
                n += read_name_text(p / "comm").strip() == name
            except OSError:
                continue
    return n


@dataclass(frozen=True)
class JobProc:
    pid: int
    comm: str
    step: str
    node: str | None          # SLURMD_NODENAME of the process, when it has one
    rank: int | None
    rank_var: str | None


class JobScanner:
    """Finds the processes of job JOBID on node NODE in /proc, reading each pid once."""

    def __init__(self, system: str, jobid: str, *, node: str | None = None,
                 exclude_steps: tuple[str, ...] = (), proc: Path = Path("/proc")) -> None:
        self.system, self.jobid, self.node = system, jobid, node
        self.exclude_steps = exclude_steps
        self.proc = proc
        self._seen: dict[int, JobProc | None] = {}
        self._young: dict[int, float] = {}       # pid -> when first seen, while re-checked
        self._pending: set[int] = set()          # job's cgroup, not exec'd yet: look again
        self._comms: dict[int, bytes | None] = {}  # young pids: their comm when last classified
        self._own = {os.getpid(), os.getppid()}
        # A host with one slurmd: the job's step daemons ("slurmstepd: [J.S]") are this node's,
        # and following them follows every task they fork from its first event.
        self.stepd_prefix = f"slurmstepd: [{jobid}.".encode() \
            if system == "slurm" and count_comm("slurmd", proc) == 1 else None
        self.stepds: list[int] = []              # step daemons found by the last scan

    def classify(self, pid: int, comm: bytes | None = None) -> JobProc | None:
        """The process as the job's (None: not the job's, or gone). COMM: its comm file's
        bytes when the caller has just read them."""
        base = self.proc / str(pid)
        try:
            groups = parse_cgroup(read_name_text(base / "cgroup"))
        except OSError:
            return None
        try:
            env = parse_environ((base / "environ").read_bytes())
        except OSError:
            env = {}
        if not same_job(job_of(groups, env), self.system, self.jobid):
            return None
        node = env.get("SLURMD_NODENAME")
        if self.node and node and node != self.node:
            return None
        step = step_of(groups, env)
        if step in self.exclude_steps:
            return None
        if comm is not None:
            name = decode_name(comm).strip()
        else:
            try:
                name = read_name_text(base / "comm").strip()
            except OSError:
                name = "?"
        r = rank_of(env)
        if r and r[1] == "SLURM_PROCID" and step in ("batch", "extern"):
            r = None        # the batch script is task 0 of no MPI job
        return JobProc(pid, name, step, node, r[0] if r else None, r[1] if r else None)

    def scan(self, recheck: bool = False) -> tuple[list[JobProc], list[int]]:
        """(job processes not seen before, job pids alive now). With RECHECK, every process
        not yet of the job is classified again (while a recorder looks for a job's first
        process: a shell may exec into the job's program with the job's environment later
        than RECHECK_S after it was first seen)."""
        new: list[JobProc] = []
        alive: list[int] = []
        self.stepds = []
        try:
            pids = [int(p) for p in os.listdir(self.proc) if p.isdigit()]   # names: no Paths
        except OSError:
            return new, alive
        live = set(pids)
        for pid in list(self._seen):
            if pid not in live:
                del self._seen[pid]
                self._young.pop(pid, None)
                self._pending.discard(pid)
                self._comms.pop(pid, None)
        now = time.monotonic()
        for pid, born in list(self._young.items()):
            if now - born >= RECHECK_S:
                del self._young[pid]   # a pending one is classified once more, as it is
                if pid not in self._pending:
                    self._comms.pop(pid, None)
        for pid in pids:
            if pid in self._own:
                continue
            # A process is classified once, except in its first RECHECK_S: a task slurmstepd
            # forked is slurmstepd (name, environment, cgroup) until its exec, which a read
            # may straddle.
            first = pid not in self._seen
            again = not first and self._seen[pid] is None and (
                recheck or pid in self._young or pid in self._pending)
            if first or again:
                # What makes a process the job's (its environment, its cgroup, its name)
                # changes at its exec, which changes its comm: a young process is read again
                # only when its comm did (one small read a scan, not three). Read before
                # classifying: an exec between the two is seen at the next scan.
                comm = self._comm(pid)
                if again and not recheck and pid in self._young and comm is not None \
                        and comm == self._comms.get(pid):
                    again = False
                else:
                    self._comms[pid] = comm
            if first or again:
                if first and self._is_stepd(pid):
                    self.stepds.append(pid)
                jp = self.classify(pid, comm)
                if pid not in self._seen:
                    self._young[pid] = now
                if jp is not None and jp.comm == "slurmstepd" and pid in self._young \
                        and pid not in self.stepds:
                    # In the job's cgroup but not yet exec'd: slurmstepd's environment has no
                    # rank and no node yet. Classified again at the next scan.
                    self._pending.add(pid)
                    jp = None
                else:
                    self._pending.discard(pid)
                self._seen[pid] = jp
                if jp is not None:
                    self._young.pop(pid, None)
                    self._comms.pop(pid, None)
                    new.append(jp)
            if self._seen[pid] is not None:
                alive.append(pid)
        return new, alive

    def _comm(self, pid: int) -> bytes | None:
        try:
            fd = os.open(f"{self.proc}/{pid}/comm", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            return os.read(fd, 64)
        except OSError:
            return None
        finally:
            os.close(fd)

    def _is_stepd(self, pid: int) -> bool:
        if self.stepd_prefix is None:
            return False
        try:
            cmd = (self.proc / str(pid) / "cmdline").read_bytes()
        except OSError:
            return False
        if not cmd.startswith(self.stepd_prefix):
            return False
        step = decode_name(cmd[len(self.stepd_prefix):].split(b"]", 1)[0])
        return step not in self.exclude_steps       # not the recorder's own step

    def steps_alive(self) -> set[str]:
        return {jp.step for jp in self._seen.values() if jp is not None}
