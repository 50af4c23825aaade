"""A throw-away local Slurm cluster for tests: munge, slurmctld and several slurmd on this machine.

Debian's slurm-wlm is built with multiple-slurmd support (``slurmd -N NAME``), so every node is
one more slurmd with its own NodeName and Port on the same host; jobs see ``SLURMD_NODENAME``
as their node. Everything lives in a temporary directory (config, munge key and socket, state,
logs, spool), ports are picked free, nothing under /etc or /run is touched, and ``stop()`` ends
exactly the daemons this helper started (by their pids). Use::

    with SlurmCluster(tmp_path, nodes=2) as cl:      # skips the test if Slurm cannot start
        out = cl.run(["sbatch", "--parsable", "-N2", "job.sh"])
        cl.wait_job(jobid)

``SlurmCluster.unavailable()`` says why Slurm cannot run here (None when it can); ``start()``
raises ``SlurmUnavailable`` with the daemons' own log lines when they do not come up.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from snumap_tui.sources.jobprocs import parse_environ

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "scontrol")


class SlurmUnavailable(RuntimeError):
    """Slurm cannot start on this machine (the message says why)."""


def free_ports(n: int) -> list[int]:
    """N distinct free TCP ports on loopback (bound together, then released)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def processes(comm: bytes | None) -> Iterator[tuple[int, dict[str, str]]]:
    """(pid, environment) of this host's processes named COMM (any name: None; those that
    end meanwhile or cannot be read left out)."""
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            if comm is not None and (p / "comm").read_bytes().strip() != comm:
                continue
            env = parse_environ((p / "environ").read_bytes())
        except OSError:
            continue
        yield int(p.name), env


class SlurmCluster:
    def __init__(self, workdir: Path, nodes: int = 2, cpus: int = 2,
                 proctrack: str = "linuxproc", task_plugin: str = "none") -> None:
        self.dir = Path(workdir)
        self.proctrack = proctrack
        self.task_plugin = task_plugin   # "affinity": srun --cpu-bind binds the tasks
        self.nodes = [f"n{i + 1}" for i in range(nodes)]
        self.cpus = cpus
        self.host = socket.gethostname().split(".")[0]
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        tag = f"{os.getpid()}{self.dir.name[-6:]}".replace("-", "")
        self.name = f"snu{tag}"[:30].lower()
        self.env: dict[str, str] = {}

    # ---- availability -----------------------------------------------------------------------

    @staticmethod
    def unavailable() -> str | None:
        missing = [d for d in DAEMONS if shutil.which(d) is None]
        if missing:
            return f"not installed: {', '.join(missing)} (apt install slurm-wlm munge)"
        if os.geteuid() != 0:
            return "slurmd must run as root to launch jobs as their users"
        return None

    # ---- lifecycle --------------------------------------------------------------------------

    def __enter__(self) -> SlurmCluster:  # noqa: PYI034 - py3.10 has no typing.Self
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float = 40.0) -> None:
        why = self.unavailable()
        if why:
            raise SlurmUnavailable(why)
        d = self.dir
        for sub in ("state", "spool", "munge", "log"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(d / "munge", 0o700)
        for n in self.nodes:
            (d / "spool" / n).mkdir(exist_ok=True)
        ports = free_ports(1 + len(self.nodes))
        self.ctld_port, self.node_ports = ports[0], ports[1:]
        key = d / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        self.munge_socket = d / "munge" / "munge.sock"
        conf = d / "slurm.conf"
        conf.write_text(self.config())
        # proctrack/cgroup: Slurm's own cgroup tree (v1 or v2, whatever this machine mounts)
        (d / "cgroup.conf").write_text("CgroupAutomount=no\nConstrainCores=no\n"
                                       "ConstrainRAMSpace=no\n")
        self.env = {**os.environ, "SLURM_CONF": str(conf)}
        for k in [k for k in self.env if k.startswith(("SLURM_", "SBATCH_", "SRUN_"))]:
            if k != "SLURM_CONF":
                del self.env[k]
        try:
            self._spawn("munged", ["munged", "-F", "--force", f"--socket={self.munge_socket}",
                                   f"--key-file={key}", f"--pid-file={d / 'munge' / 'pid'}",
                                   f"--log-file={d / 'log' / 'munged.log'}",
                                   f"--seed-file={d / 'munge' / 'seed'}"])
            self._wait(lambda: self.munge_socket.exists(), timeout, "munged")
            self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(conf)])
            self._wait(lambda: self.run(["scontrol", "ping"], check=False).returncode == 0
                       and "UP" in self.run(["scontrol", "ping"], check=False).stdout,
                       timeout, "slurmctld")
            for n in self.nodes:
                self._spawn(f"slurmd-{n}", ["slurmd", "-D", "-N", n, "-f", str(conf)])
            self._wait(self._nodes_idle, timeout, "slurmd")
        except BaseException:
            self.stop()
            raise

    def config(self) -> str:
        d = self.dir
        lines = [
            f"ClusterName={self.name}",
            f"SlurmctldHost={self.host}(127.0.0.1)",
            f"SlurmctldPort={self.ctld_port}",
            f"SlurmdPort={self.node_ports[0]}",
            "SlurmUser=root", "SlurmdUser=root",
            "AuthType=auth/munge", "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={d / 'state'}",
            f"SlurmdSpoolDir={d / 'spool'}/%n",
            f"SlurmctldPidFile={d / 'slurmctld.pid'}",
            f"SlurmdPidFile={d / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={d / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={d / 'log' / 'slurmd-%n.log'}",
            f"ProctrackType=proctrack/{self.proctrack}", f"TaskPlugin=task/{self.task_plugin}",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU",
            "SchedulerType=sched/builtin", "MpiDefault=none",
            "JobCompType=jobcomp/none", "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none", "ReturnToService=2",
            "SlurmdParameters=config_overrides", "KillWait=30", "MinJobAge=60",
            "SlurmdTimeout=60", "SlurmctldTimeout=60", "InactiveLimit=0",
            "PrologFlags=Contain",
        ]
        for n, port in zip(self.nodes, self.node_ports):
            lines.append(f"NodeName={n} NodeHostname={self.host} NodeAddr=127.0.0.1 "
                         f"Port={port} CPUs={self.cpus} State=UNKNOWN")
        lines.append(f"PartitionName=test Nodes={','.join(self.nodes)} Default=YES "
                     "MaxTime=INFINITE State=UP OverSubscribe=YES")
        return "\n".join(lines) + "\n"

    def stop(self) -> None:
        """End what this cluster started: its jobs (scancel, then the step daemons that still
        carry this cluster's SLURM_CONF, e.g. an extern step), the daemons (SIGTERM, then
        SIGKILL; slurmd first), and the cgroups proctrack/cgroup made for its nodes."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            self.run(["scancel", "--full", "--partition=test"], check=False, timeout=20)
            end = time.monotonic() + 10
            while self._stepds() and time.monotonic() < end:
                time.sleep(0.2)
        for pid in self._stepds():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        self._stop_daemons()
        # a step daemon killed leaves its tasks running (an MPI rank spinning for minutes,
        # with the job ids and ranks the next cluster's jobs will have): they carry this
        # cluster's SLURM_CONF in their environment, as every process its jobs started
        for pid in self.strays():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        self._remove_cgroups()

    @property
    def conf(self) -> str:
        return str(self.dir / "slurm.conf")

    def strays(self) -> list[int]:
        """Processes of this cluster's jobs (its SLURM_CONF in their environment) other than
        this test process."""
        return [pid for pid, env in processes(None)
                if env.get("SLURM_CONF") == self.conf and pid != os.getpid()]

    def _stepds(self) -> list[int]:
        """slurmstepd processes of this cluster (slurmd passes its environment on to them)."""
        return [pid for pid, env in processes(b"slurmstepd") if env.get("SLURM_CONF") == self.conf]

    def _remove_cgroups(self) -> None:
        if self.proctrack != "cgroup":
            return
        for n in self.nodes:
            for top in Path("/sys/fs/cgroup").glob(f"*/slurm_{n}"):
                for d in sorted((x for x in top.rglob("*") if x.is_dir()),
                                key=lambda x: -len(x.parts)):
                    with contextlib.suppress(OSError):
                        d.rmdir()
                with contextlib.suppress(OSError):
                    top.rmdir()

    def _stop_daemons(self) -> None:
        order = sorted(self.procs, key=lambda k: (k == "munged", k == "slurmctld"))
        for name in order:
            p = self.procs[name]
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for name in order:
            p = self.procs[name]
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
        self.procs.clear()

    # ---- using it ---------------------------------------------------------------------------

    def run(self, argv: list[str], *, check: bool = True, timeout: float = 60.0,
            **kw: Any) -> subprocess.CompletedProcess[str]:
        """A Slurm client command against this cluster (SLURM_CONF set)."""
        env = {**self.env, **kw.pop("env", {})}
        r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout,
                           check=False, **kw)
        if check and r.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({r.returncode}): "
                               f"{r.stderr.strip() or r.stdout.strip()}")
        return r

    def job_state(self, jobid: str) -> str:
        r = self.run(["scontrol", "show", "job", jobid, "-o"], check=False)
        for field in r.stdout.split():
            if field.startswith("JobState="):
                return field.split("=", 1)[1]
        return "UNKNOWN"

    def wait_job(self, jobid: str, timeout: float = 90.0, states: tuple[str, ...] = (
            "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")) -> str:
        end = time.monotonic() + timeout
        st = "UNKNOWN"
        while time.monotonic() < end:
            st = self.job_state(jobid)
            if st in states:
                return st
            time.sleep(0.3)
        raise TimeoutError(f"job {jobid} still {st} after {timeout:.0f} s\n{self.logs()}")

    def logs(self, tail: int = 15) -> str:
        out = []
        for f in sorted((self.dir / "log").glob("*.log")):
            lines = f.read_text(errors="replace").splitlines()[-tail:]
            out.append(f"--- {f.name}\n" + "\n".join(lines))
        return "\n".join(out)

    # ---- internals --------------------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.dir / "log" / f"{name}.out", "wb")  # noqa: SIM115 - kept by Popen
        self.procs[name] = subprocess.Popen(argv, env=self.env, stdout=log,
                                            stderr=subprocess.STDOUT,
                                            start_new_session=True)
        log.close()

    def _nodes_idle(self) -> bool:
        r = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], check=False)
        states = dict(line.split() for line in r.stdout.splitlines() if len(line.split()) == 2)
        return all(states.get(n, "").startswith(("idle", "mix", "alloc")) for n in self.nodes)

    def _wait(self, ok: Any, timeout: float, what: str) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise SlurmUnavailable(f"{name} exited with {p.returncode}:\n{self.logs()}")
            if ok():
                return
            time.sleep(0.2)
        raise SlurmUnavailable(f"{what} did not come up in {timeout:.0f} s:\n{self.logs()}")


# ---- a recorded MPI job (the test's and scripts/job_demo.py's) --------------------------------

APP = r"""
#include <mpi.h>
#include <stdio.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
                          return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char **argv) {
    int r, n; volatile double x = 0;
    MPI_Init(&argc, &argv); MPI_Comm_rank(MPI_COMM_WORLD, &r); MPI_Comm_size(MPI_COMM_WORLD, &n);
    double t0 = now();
    while (now() - t0 < 0.15 * (r + 1)) for (int i = 0; i < 100000; i++) x += i;
    MPI_Barrier(MPI_COMM_WORLD);
    printf("rank %d of %d done\n", r, n);
    MPI_Finalize(); return 0;
}
"""

JOB = """#!/bin/sh
# wait (bounded) until the recorders run, then the MPI step on both nodes
i=0; while [ ! -e {go} ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
srun --mpi=pmi2 -n{ranks} {app}
"""


def readme_line(prefix: str = "srun --overlap --jobid") -> str:
    """The line of README.md starting with PREFIX (default: the one that records every node
    of a running job)."""
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    lines = [ln.strip() for ln in text.splitlines()
             if ln.strip().startswith(prefix)]
    if not lines:
        raise RuntimeError(f"README.md lost its `{prefix} ...` line")
    return lines[0].split("#")[0].strip()


def cgroup_unavailable() -> str | None:
    """Why proctrack/cgroup cannot run here (None when it can): Slurm 22.05's cgroup/v1 needs
    the v1 freezer hierarchy; its cgroup/v2 asks systemd (over D-Bus) for a scope."""
    if Path("/sys/fs/cgroup/freezer").is_dir():
        return None
    if Path("/sys/fs/cgroup/cgroup.controllers").exists():
        if not Path("/run/systemd/system").is_dir():
            return "cgroup v2 without systemd: Slurm's cgroup/v2 needs systemd for its scope"
        return None
    return "no cgroup v1 freezer hierarchy and no cgroup v2 mounted"


def run_recorded_job(workdir: Path, snumap: Path, *, ranks: int = 4,
                     proctrack: str = "linuxproc") -> tuple[list[Path], str]:
    """On a fresh two-node cluster (Slurm finding the job's processes with PROCTRACK, linuxproc or
    cgroup): an MPI job (MPICH over Slurm's PMI2) of RANKS ranks, each
    spinning ``0.15 * (rank + 1)`` s, recorded on both nodes with the README's line while it
    runs. Returns the two recordings and the recorders' output. Raises SlurmUnavailable where
    Slurm (or mpicc) cannot run here."""
    app = _mpi_app(workdir)
    go = workdir / "go"
    job = workdir / "job.sh"
    job.write_text(JOB.format(go=go, app=app, ranks=ranks))
    job.chmod(0o755)
    cl = SlurmCluster(workdir / "cluster", nodes=2, proctrack=proctrack)
    cl.start()
    try:
        jobid = cl.run(["sbatch", "--parsable", "-N2", f"-n{ranks}", "-o",
                        str(workdir / "out-%j"), str(job)]).stdout.strip().split(";")[0]
        for _ in range(300):
            if cl.job_state(jobid) == "RUNNING":
                break
            time.sleep(0.1)
        line = readme_line().replace("JOBID", jobid).replace("snumap ", f"{snumap} ", 1)
        line = line.replace("-o job-", f"-o {workdir}/job-")
        rec = subprocess.Popen(["sh", "-c", line], env=cl.env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
        for _ in range(600):     # a recorder writes its file's header once its tracer runs
            if sum(f.stat().st_size > 0 for f in workdir.glob("job-*.rec")) == 2 \
                    or rec.poll() is not None:
                break
            time.sleep(0.1)
        time.sleep(0.5)                  # both tracers attached
        go.touch()
        state = cl.wait_job(jobid, timeout=90)
        out, _ = rec.communicate(timeout=60)
        out += (workdir / f"out-{jobid}").read_text()
        if state != "COMPLETED":
            raise RuntimeError(f"job {jobid} ended {state}:\n{out}\n{cl.logs()}")
    finally:
        cl.stop()
    return sorted(workdir.glob(f"job-{jobid}-*.rec")), out


BATCH = """#!/bin/sh
{record}
sleep 5
srun --mpi=pmi2 -n{ranks} {app}
srun --mpi=pmi2 -n2 -N2 {app}
"""


def run_batch_form(workdir: Path, snumap: Path, *, ranks: int = 4) -> tuple[list[Path], str]:
    """The README's batch-script form: recorders started by the script itself, then two MPI
    steps; the recorders end with the job."""
    app = _mpi_app(workdir)
    record = readme_line("srun --overlap -n").split("#")[0].strip()
    record = record.replace("snumap ", f"{snumap} ", 1).replace("-o job-", f"-o {workdir}/job-")
    job = workdir / "batch.sh"
    job.write_text(BATCH.format(record=record, ranks=ranks, app=app))
    job.chmod(0o755)
    cl = SlurmCluster(workdir / "cluster", nodes=2)
    cl.start()
    try:
        jobid = cl.run(["sbatch", "--parsable", "-N2", f"-n{ranks}", "-o",
                        str(workdir / "out-%j"), str(job)]).stdout.strip().split(";")[0]
        state = cl.wait_job(jobid, timeout=120)
        out = (workdir / f"out-{jobid}").read_text()
        if state != "COMPLETED":
            raise RuntimeError(f"job {jobid} ended {state}:\n{out}\n{cl.logs()}")
    finally:
        cl.stop()
    return sorted(workdir.glob(f"job-{jobid}-*.rec")), out


def _mpi_app(workdir: Path) -> Path:
    if shutil.which("mpicc") is None:
        raise SlurmUnavailable("mpicc not installed (apt install mpich libmpich-dev)")
    app = workdir / "mpi_app"
    (workdir / "app.c").write_text(APP)
    subprocess.run(["mpicc", "-O1", "-o", str(app), str(workdir / "app.c")], check=True,
                   timeout=60)
    return app
