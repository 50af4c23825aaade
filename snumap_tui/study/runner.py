"""Running a study's configurations: each run is one `snumap record` of the command (a child
process of this interpreter), with the configuration applied -- OMP_NUM_THREADS, the
placement's CPUs as the command's affinity (``record --cpus``) and OMP_PLACES/OMP_PROC_BIND,
the input substituted, the launcher's rank count, the CPU frequency set.

Each run also runs the command once untraced (study/untraced.py), with the same environment
and CPUs, before the recording in odd repeats and after it in even ones, so neither always
comes first: the program's time without the observer, for its perturbation.

The recorder gets PR_SET_PDEATHSIG=SIGTERM: if `snumap scale` is killed, its recorder ends
the recording cleanly and the command with it, and the run is redone on resume.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from snumap_tui.selfcmd import snumap_argv
from snumap_tui.study.configs import Config, cpulist, placement, substitute
from snumap_tui.study.files import open_log
from snumap_tui.study.manifest import RunPlan, Study, _now, flocked
from snumap_tui.textsafe import safe_text
from snumap_tui.threadpools import user_environ

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except OSError:
        pass


@dataclass(frozen=True)
class Launch:
    """What the runs are executed with -- the command, the record options and each
    configuration's CPUs, OpenMP variables and input -- fixed when the study is planned, in
    memory. Never read back from the study directory afterwards: the manifest is rewritten
    after each run (and by a Slurm array's tasks), and what it holds then is only shown."""

    command: tuple[str, ...]
    record_args: tuple[str, ...]
    configs: dict[str, dict[str, Any]]          # by configuration key

    @classmethod
    def of(cls, manifest: dict[str, Any]) -> Launch:
        """From a manifest checked once (study/schema.py): a new study's, or the trusted one
        a Slurm task opens."""
        return cls(tuple(manifest["command"]), tuple(manifest.get("record_args") or ()),
                   {c["key"]: dict(c) for c in manifest["configurations"]})

    def run(self, plan: RunPlan) -> RunPlan | None:
        """PLAN with the configuration planned here (None: not one of this launch's)."""
        conf = self.configs.get(plan.config.key)
        return None if conf is None else RunPlan(Config.from_dict(conf), plan.repeat)


OMP_KEYS = ("OMP_PLACES", "OMP_PROC_BIND")


def run_env(cfg: Config, cpus: tuple[int, ...], omp: dict[str, str],
            base: dict[str, str] | None = None) -> dict[str, str]:
    env = user_environ(base)      # the user's pools, not snumap's own (threadpools.py)
    env["OMP_NUM_THREADS"] = str(cfg.threads)
    for k in OMP_KEYS:
        env.pop(k, None)
    if cfg.ranks is None or cfg.ranks == 1:
        env.update({k: str(v) for k, v in omp.items() if k in OMP_KEYS})
    return env


def record_argv(study: Study, launch: Launch, run: RunPlan, cpus: tuple[int, ...]
                ) -> list[str]:
    cmd = substitute(list(launch.command), run.config)
    argv = snumap_argv("record", "-o", str(study.run_file(run.id, "rec")),
                       *launch.record_args)
    if cpus:
        argv += ["--cpus", cpulist(cpus)]
    return [*argv, "--", *cmd]


def execute(study: Study, launch: Launch, run: RunPlan, topo: Any, say: Callable[[str], None],
            stop: dict[str, int] | None = None) -> dict[str, Any]:
    """Record RUN (holding its lock) as LAUNCH plans it; its state file says how it went.
    Returns the state."""
    cfg = run.config
    conf = launch.configs.get(cfg.key, {})
    cpus = tuple(conf.get("cpus") or ())
    omp = conf.get("omp_env") or {}
    if cfg.places != "none" and topo is not None:
        # on this node's topology (a Slurm task's node may not be the submitting host)
        p = placement(topo, cfg.places, min(cfg.threads * (cfg.ranks or 1), len(topo.pus)))
        cpus, omp = p.cpus, (p.env() if (cfg.ranks or 1) == 1 else {})
    rec = study.run_file(run.id, "rec")
    log = study.run_file(run.id, "log")
    with flocked(study.run_file(run.id, "lock"), f"run {run.id}"):
        try:
            os.unlink(rec)              # a killed run's partial recording: this run is redone
        except FileNotFoundError:
            pass
        argv = record_argv(study, launch, run, cpus)
        state: dict[str, Any] = {
            "id": run.id, "config": cfg.key, "repeat": run.repeat, "status": "running",
            "host": socket.gethostname(), "pid": os.getpid(), "start": _now(),
            "cpuset": cpulist(cpus) if cpus else None, "command": argv[argv.index("--") + 1:],
            "recording": f"runs/{rec.name}", "log": f"runs/{log.name}",
            "slurm": _slurm_ids()}
        study.write_run(run.id, state)
        env = run_env(cfg, cpus, omp)
        untraced_first = run.repeat % 2 == 1
        if untraced_first:
            _untraced(study, run, state, cpus, env, stop, "before")
        t0 = time.monotonic()
        fd = open_log(log)              # the program's own output
        try:
            proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                    stdout=fd, stderr=fd,
                                    # scale runs no threads of its own
                                    preexec_fn=_die_with_parent)  # noqa: PLW1509
        finally:
            os.close(fd)
        state["recorder_pid"] = proc.pid
        study.write_run(run.id, state)
        try:
            rc = _wait(proc, stop)
        except BaseException:
            _end(proc)
            state.update(status="interrupted", end=_now(), wall_s=time.monotonic() - t0)
            study.write_run(run.id, state)
            raise
        state.update(end=_now(), wall_s=round(time.monotonic() - t0, 6), recorder_status=rc)
        if rc < 0:
            state.update(status="interrupted", why=f"recorder killed by signal {-rc}")
        else:
            _finish(state, rec, rc, log)
        if not untraced_first and state["status"] != "interrupted":
            _untraced(study, run, state, cpus, env, stop, "after")
        study.write_run(run.id, state)
    return state


def _untraced(study: Study, run: RunPlan, state: dict[str, Any], cpus: tuple[int, ...],
              env: dict[str, str], stop: dict[str, int] | None, order: str) -> None:
    """The run's untraced twin into STATE's ``untraced`` (interrupted: the run is)."""
    from snumap_tui.study.untraced import run_untraced

    try:
        u = run_untraced(state["command"], env, cpus, study.run_file(run.id, "untraced.log"),
                         stop)
    except KeyboardInterrupt:
        state.update(status="interrupted", end=_now(), why="stopped in its untraced run")
        study.write_run(run.id, state)
        raise
    state["untraced"] = {**u, "order": order}


def _finish(state: dict[str, Any], rec: Any, rc: int, log: Any) -> None:
    """The run's status from its recording: the command's exit status (its 'command exit'
    marker) and measurements; a recorder that failed before the command ran is a failed run
    whose reason is the log's last line."""
    from snumap_tui.study.measure import measure

    exit_status = None
    try:
        m = measure(rec)
        from snumap_tui import store

        with store.open(rec) as r:
            for _t, text in r.markers:
                if text.startswith("command exit: status "):
                    exit_status = int(text.rsplit(" ", 1)[1])
    except Exception as exc:  # noqa: BLE001 - no usable recording: the run failed, say why
        state.update(status="failed", exit_status=None, why=_last_line(log) or str(exc)[:200])
        return
    state["exit_status"] = exit_status if exit_status is not None else rc
    state["measurements"] = m
    state["cpus_recorded"] = m.get("cpus")
    if state["exit_status"] == 0:
        state["status"] = "ok"
    else:
        state.update(status="failed", why=f"exit status {state['exit_status']}")


def _last_line(log: Any) -> str:
    """The log's last line (from its last 64 kB; a regular file only)."""
    try:
        fd = os.open(log, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return ""
        tail = os.pread(fd, 1 << 16, max(0, st.st_size - (1 << 16)))
    except OSError:
        return ""
    finally:
        os.close(fd)
    lines = [ln for ln in tail.decode(errors="replace").splitlines() if ln.strip()]
    return lines[-1][:200] if lines else ""


def _wait(proc: subprocess.Popen[bytes], stop: dict[str, int] | None) -> int:
    while True:
        try:
            return proc.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            if stop and stop.get("sig"):
                raise KeyboardInterrupt from None


def _end(proc: subprocess.Popen[bytes]) -> None:
    """The recorder of an interrupted run: asked to stop (it ends the command), then made to."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def perturbation_warning(state: dict[str, Any]) -> str | None:
    """A run's warning when the recorder slowed its program beyond PERTURBED, else None."""
    from snumap_tui.study.aggregate import PERTURBED, untraced_time

    u = untraced_time(state)
    rec = ((state.get("measurements") or {}).get("program") or {}).get("time_s")
    if u is None or not isinstance(rec, (int, float)) or rec / u - 1 <= PERTURBED:
        return None
    return (f"warning: the recorder slowed the program by {100 * (rec / u - 1):.1f} % "
            f"(recorded {rec:.4f} s, untraced {u:.4f} s; over {100 * PERTURBED:.0f} %: "
            "scale report takes the program's speedup from its untraced runs)")


def _slurm_ids() -> dict[str, str] | None:
    keys = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURMD_NODENAME")
    got = {k: os.environ[k] for k in keys if k in os.environ}
    return got or None


def run_pending(study: Study, launch: Launch, topo: Any, say: Callable[[str], None], *,
                retry_failed: bool = False, freq: Any = None) -> dict[str, int]:
    """Record every pending run of LAUNCH's configurations, interleaved across
    configurations; SIGTERM and Ctrl-C stop after the current run is marked interrupted;
    frequencies are restored whatever happens. Runs of configurations only the study
    directory names (asked for by an earlier `snumap scale`) are left pending and counted
    (``other``): what runs is what this command planned."""
    todo = study.pending(retry_failed)
    pending = [r for r in (launch.run(p) for p in todo) if r is not None]
    counts = {"ok": 0, "failed": 0, "interrupted": 0, "other": len(todo) - len(pending),
              "skipped": len(study.plan()) - len(todo)}
    stop = {"sig": 0}

    def on_term(signum: int, _frame: Any) -> None:
        stop["sig"] = signum

    old = signal.signal(signal.SIGTERM, on_term)
    try:
        for i, run in enumerate(pending, 1):
            if freq is not None and run.config.freq is not None:
                freq.set(run.config.freq)
            say(f"run {i}/{len(pending)}: {run.id}")
            st = execute(study, launch, run, topo, say, stop)
            counts[st["status"]] = counts.get(st["status"], 0) + 1
            if st["status"] != "ok":
                say(f"  {run.id}: {st['status']}: {safe_text(st.get('why', ''))}".rstrip(": "))
            else:
                warn = perturbation_warning(st)
                if warn:
                    say(f"  {run.id}: {warn}")
            study.save()
            if stop["sig"]:
                raise KeyboardInterrupt
    finally:
        signal.signal(signal.SIGTERM, old)
        if freq is not None:
            freq.restore()
        study.save()
    return counts
