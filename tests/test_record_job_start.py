"""`record --job JOBID` from outside the job (ssh to a node): a job with no process on this
node is refused in a few seconds, before any file is written, instead of a recording that
never starts (or, with --duration, an empty file without a word); a job whose first process
comes a moment after the recorder is recorded; and the backend it picks for a job is not
presented as the user's choice."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from snumap_tui import store
from snumap_tui.recording.job import START_WAIT_S

PY = sys.executable


def _env() -> dict[str, str]:
    """This test's environment, in no batch job."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PBS_"))}


def _jobid() -> str:
    return str(700000 + os.getpid() % 100000)


def _record(out: Path, jobid: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "snumap_tui.cli", "record", "--job", jobid, "-o",
                           str(out), *extra], capture_output=True, text=True, env=_env(),
                          check=False, timeout=60)


def _job_member(jobid: str, secs: float, delay_s: float = 0.0) -> subprocess.Popen:
    """A process of Slurm job JOBID as proctrack/linuxproc sees one (SLURM_JOB_ID in its
    environment) for SECS s, which becomes one after DELAY_S (a shell without the variable
    until then)."""
    script = (f'sleep {delay_s}; SLURM_JOB_ID={jobid} exec "$0" '
              f'-c "import time; time.sleep({secs})"')
    return subprocess.Popen(["sh", "-c", script, PY], env=_env())


def test_a_job_with_no_process_here_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "x.rec"
    t0 = time.monotonic()
    p = _record(out, _jobid(), "--duration", "30")
    took = time.monotonic() - t0
    assert p.returncode == 2, p.stderr
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("snumap: job ") and "no process on this node" in last, p.stderr
    assert "Traceback" not in p.stderr
    assert START_WAIT_S <= took < START_WAIT_S + 15
    assert not out.exists()


def _record_member(tmp_path: Path, delay_s: float) -> tuple[subprocess.CompletedProcess, str]:
    """A member of a new job that joins the job DELAY_S after the recorder starts (0: there
    before it), one second of it recorded: (the recorder's result, the job id)."""
    jobid = _jobid()
    member = _job_member(jobid, 20, delay_s=delay_s)
    try:
        if not delay_s:
            time.sleep(0.3)
        out = tmp_path / "x.rec"
        p = _record(out, jobid, "--duration", "1")
    finally:
        member.kill()
        member.wait()
    assert p.returncode == 0, p.stderr
    with store.open(out) as rec:
        assert rec.header["job"] == {"system": "slurm", "id": jobid}
        assert member.pid in {t.pid for t in rec.tasks.values()}
    return p, jobid


def test_a_job_found_at_start_is_recorded_without_a_backend_lecture(tmp_path: Path) -> None:
    p = _record_member(tmp_path, 0)[0]
    # auto picks perf for a job: not the user's --backend, so no "--backend perf: ..." note
    assert "--backend" not in p.stderr, p.stderr


def test_a_job_whose_first_process_comes_a_moment_later_is_recorded(tmp_path: Path) -> None:
    """(Within START_WAIT_S: while the recorder looks, or once it follows the job.)"""
    p = _record_member(tmp_path, 3.0)[0]
    assert "no process on this node" not in p.stderr


def test_processes_found_after_the_last_poll_are_recorded() -> None:
    """The job's last step ends the job and the recorder with it: what the scan thread found
    after the main loop's last poll is still written when the watch finishes."""
    from snumap_tui.recording.job import JobWatch
    from snumap_tui.sources.jobprocs import JobProc

    class Writer:
        tid_max = 1 << 22

        def __init__(self) -> None:
            self.infos: list[tuple[str, dict]] = []

        def add_info(self, _t: int, kind: str, value: dict) -> None:
            self.infos.append((kind, value))

    watch = JobWatch("slurm", "42", "n2", "0")
    watch._found = [JobProc(4242, "mpi_app", "2", "n2", 1, "PMI_RANK")]
    w = Writer()
    watch.finish(w)
    rows = [r for kind, v in w.infos if kind == "job processes" for r in v["rows"]]
    assert rows == [[4242, "mpi_app", "2", "n2", 1, "PMI_RANK"]]
    assert 4242 in watch.procs
