"""`snumap top --job` on a real local two-node Slurm (tests/slurm_cluster.py, task/affinity so
srun --cpu-bind binds): an MPI job (MPICH over PMI2) of 4 ranks, 2 per node.

Checked: the batch JSON shows every rank on its node and on the PU its binding gives it; a job
with two ranks bound to one PU gives the oversubscription finding, and running the finding's
own fix gives none; Ctrl-C and scancel leave no sampler on either node; a sampler killed
mid-stream is one line and the other node keeps streaming. Skips only where Slurm cannot run.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from slurm_cluster import SlurmCluster, SlurmUnavailable, processes

SPIN = r"""
#include <mpi.h>
#include <stdlib.h>
#include <time.h>
int main(int c, char **v) { int r; volatile double x = 0; MPI_Init(&c, &v);
  MPI_Comm_rank(MPI_COMM_WORLD, &r); time_t t0 = time(0); int secs = c > 1 ? atoi(v[1]) : 120;
  while (time(0) - t0 < secs) for (int i = 0; i < 100000; i++) x += i;
  MPI_Finalize(); return 0; }
"""
TOP = [sys.executable, "-m", "snumap_tui.cli", "top"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SlurmCluster, Path]]:
    why = SlurmCluster.unavailable()
    if why is None and shutil.which("mpicc") is None:
        why = "mpicc not installed (apt install mpich libmpich-dev)"
    if why:
        pytest.skip(why)
    w = tmp_path_factory.mktemp("topjob")
    (w / "spin.c").write_text(SPIN)
    subprocess.run(["mpicc", "-O1", "-o", str(w / "spin"), str(w / "spin.c")], check=True,
                   timeout=60)
    cl = SlurmCluster(w / "cl", nodes=2, task_plugin="affinity")
    try:
        cl.start()
    except SlurmUnavailable as exc:
        pytest.skip(f"Slurm cannot start here: {str(exc).splitlines()[0]}")
    try:
        yield cl, w
    finally:
        cl.stop()


def submit(cl: SlurmCluster, w: Path, step: str) -> str:
    """A job whose script runs STEP (an srun line); returns its id once it runs."""
    script = w / f"job{time.monotonic_ns()}.sh"
    script.write_text(f"#!/bin/sh\n{step}\n")
    script.chmod(0o755)
    jid = cl.run(["sbatch", "--parsable", "-N2", "-n4", "-o", str(w / "out-%j"),
                  str(script)]).stdout.strip().split(";")[0]
    for _ in range(300):
        if cl.job_state(jid) == "RUNNING":
            break
        time.sleep(0.1)
    return jid


def spin_step(w: Path, bind: str, secs: int = 120) -> str:
    return f"srun --mpi=pmi2 -n4 --cpu-bind={bind} {w / 'spin'}" + (
        f" {secs}" if secs != 120 else "")


def wait_ranks(cl: SlurmCluster, jid: str, n: int = 4, timeout: float = 30.0) -> dict[int, int]:
    """rank -> pid of the job's spinning ranks, once all N run (from their environment)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        # this cluster's job JID (another cluster's jobs have the same ids)
        found = {int(env["PMI_RANK"]): pid for pid, env in processes(b"spin")
                 if env.get("SLURM_JOB_ID") == jid and "PMI_RANK" in env
                 and env.get("SLURM_CONF") == cl.conf}
        if len(found) == n:
            return found
        time.sleep(0.2)
    raise AssertionError(f"the job's ranks did not all start: {cl.logs()}")


def samplers(jid: str) -> list[tuple[int, str]]:
    """(pid, node) of every `top --stream` sampler of job JID on this host (both nodes)."""
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().split(b"\0")
            if b"--stream" not in cmd or f"--job={jid}".encode() not in cmd \
                    or cmd[0].endswith(b"srun"):          # the login node's srun itself
                continue
            env = (p / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        node = next((e.split(b"=", 1)[1].decode() for e in env
                     if e.startswith(b"SLURMD_NODENAME=")), "?")
        out.append((int(p.name), node))
    return out


def none_left(jid: str, timeout: float = 15.0) -> list[tuple[int, str]]:
    end = time.monotonic() + timeout
    while time.monotonic() < end and samplers(jid):
        time.sleep(0.2)
    return samplers(jid)


def top_json(cl: SlurmCluster, jid: str, count: int = 3, *more: str) -> list[dict]:
    r = cl.run([*TOP, "--job", jid, "--batch", "--json", "--count", str(count), *more],
               timeout=120)
    return [json.loads(x) for x in r.stdout.splitlines()]


def cancel(cl: SlurmCluster, jid: str) -> None:
    cl.run(["scancel", jid], check=False)
    cl.wait_job(jid, timeout=60)


def test_mpi_ranks_on_their_pus(cluster: tuple[SlurmCluster, Path]) -> None:
    cl, w = cluster
    jid = submit(cl, w, spin_step(w, "map_cpu:0,1"))
    try:
        pids = wait_ranks(cl, jid)
        snaps = top_json(cl, jid, 3, "--node-frames")
        last = snaps[-1]
        for n in last["nodes"]:          # each node's frame as top --batch --json prints one
            f = n["frame"]
            assert f["objects"]["Machine:0"]["util_pct"] >= 0
            assert {t["pid"] for t in f["tasks"]} == {r["pid"] for r in n["ranks"]}
        assert [n["node"] for n in last["nodes"]] == ["n1", "n2"]
        assert all(n["status"] == "live" and n["frames"] >= 2 for n in last["nodes"]), last
        placed = {}
        for n in last["nodes"]:
            for r in n["ranks"]:
                if r["comm"] == "spin":
                    placed[r["rank"]] = (n["node"], r["pid"], r["affinity"],
                                         {t["pu"] for t in r["threads"]})
        assert sorted(placed) == [0, 1, 2, 3], placed
        assert {r: placed[r][0] for r in placed} == {0: "n1", 1: "n1", 2: "n2", 3: "n2"}
        for rank, (_node, pid, aff, pus) in placed.items():
            assert pid == pids[rank]
            truth = sorted(os.sched_getaffinity(pid))       # what the kernel says
            assert truth == [rank % 2]                      # map_cpu:0,1 per node
            assert aff == str(rank % 2)
            assert pus == {rank % 2}, (rank, pus)
        assert last["findings"] == [] or all(f["kind"] != "oversubscribed"
                                             for f in last["findings"]), last["findings"]
    finally:
        cancel(cl, jid)
    assert none_left(jid) == []


def test_oversubscribed_job_and_its_fix(cluster: tuple[SlurmCluster, Path]) -> None:
    cl, w = cluster
    jid = submit(cl, w, spin_step(w, "map_cpu:0,0"))
    try:
        wait_ranks(cl, jid)
        snaps = top_json(cl, jid, count=4)
        over = [f for f in snaps[-1]["findings"] if f["kind"] == "oversubscribed"]
        print(json.dumps(over, indent=1))
        assert {f["node"] for f in over} == {"n1", "n2"}, snaps[-1]["findings"]
        for f in over:
            assert f["pu"] == 0 and f["idle_pus"] == [1] and f["threads"] == 2
            assert f["confidence"].startswith("high")
        fix = over[0]["fix"]
        assert fix.startswith("srun --cpu-bind=cores ") and "map_cpu" not in fix
        assert fix.endswith(str(w / "spin"))
    finally:
        cancel(cl, jid)
    jid = submit(cl, w, fix)          # the finding's own command line
    try:
        pids = wait_ranks(cl, jid)
        # --cpu-bind=cores gives each rank a core of its own; which of the node's two it
        # gives first is Slurm's choice (it differs from run to run under load). A rank seen
        # in its first milliseconds can still have another affinity (a clean-clone CI run
        # read all four on PU 0 85 ms after slurmd logged the masks 0x1,0x2 and cancelled
        # the job then): the placement is what they settle on within a few seconds.
        end = time.monotonic() + 10.0
        while True:
            aff = {r: sorted(os.sched_getaffinity(p)) for r, p in pids.items()}
            placed = all(sorted(aff[r] for r in pair) == [[0], [1]]
                         for pair in ((0, 1), (2, 3)))
            if placed or time.monotonic() > end:
                break
            time.sleep(0.2)
        assert placed, aff
        snaps = top_json(cl, jid, count=4)
        assert not [f for f in snaps[-1]["findings"] if f["kind"] == "oversubscribed"], \
            snaps[-1]["findings"]
    finally:
        cancel(cl, jid)


def _start_top(cl: SlurmCluster, jid: str) -> subprocess.Popen[str]:
    # A test run started in the background (`cmd &` in a script, nohup) ignores SIGINT; a
    # child inherits an ignored signal, and a Python started with SIGINT ignored keeps
    # ignoring it: these tests' Ctrl-C never came. While top starts, this process catches
    # SIGINT (as pytest in a terminal does), so top starts with it at its default.
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        p = subprocess.Popen([*TOP, "--job", jid, "--batch", "--json"], env=cl.env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    finally:
        signal.signal(signal.SIGINT, old)
    assert p.stdout is not None
    first = json.loads(p.stdout.readline())
    assert all(n["status"] == "live" for n in first["nodes"]), first
    assert {n for _, n in samplers(jid)} == {"n1", "n2"}
    return p


def test_ctrl_c_and_scancel_leave_no_sampler(cluster: tuple[SlurmCluster, Path]) -> None:
    cl, w = cluster
    jid = submit(cl, w, spin_step(w, "map_cpu:0,1"))
    try:
        wait_ranks(cl, jid)
        top = _start_top(cl, jid)
        top.send_signal(signal.SIGINT)
        _, err = top.communicate(timeout=30)
        assert top.returncode == 0, err
        assert none_left(jid) == []
        assert cl.job_state(jid) == "RUNNING"          # the job itself goes on
        top = _start_top(cl, jid)
        cl.run(["scancel", jid])
        out, err = top.communicate(timeout=60)
        assert top.returncode == 0, err
        last = json.loads(out.splitlines()[-1])
        assert all(n["status"] in ("ended", "lost") for n in last["nodes"]), last
        assert none_left(jid) == []
    finally:
        with contextlib.suppress(Exception):
            cancel(cl, jid)


@contextlib.contextmanager
def top_on_a_job(cl: SlurmCluster, w: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """A running 4-rank job and `top --job --batch --json` on it (its first line read);
    killed and cancelled afterwards, whatever happened."""
    jid = submit(cl, w, spin_step(w, "map_cpu:0,1"))
    top = None
    try:
        wait_ranks(cl, jid)
        top = _start_top(cl, jid)
        yield jid, top
    finally:
        if top is not None and top.poll() is None:
            top.kill()
        with contextlib.suppress(Exception):
            cancel(cl, jid)


def test_sampler_killed_mid_stream(cluster: tuple[SlurmCluster, Path]) -> None:
    cl, w = cluster
    with top_on_a_job(cl, w) as (jid, top):
        assert top.stdout is not None
        victim = next(pid for pid, node in samplers(jid) if node == "n2")
        os.kill(victim, signal.SIGKILL)
        snaps = []
        for _ in range(5):
            snaps.append(json.loads(top.stdout.readline()))
        n1, n2 = snaps[-1]["nodes"]
        assert n2["status"] == "lost" and n1["status"] == "live"
        assert n1["frames"] > snaps[0]["nodes"][0]["frames"]    # n1 goes on
        top.send_signal(signal.SIGINT)
        _, err = top.communicate(timeout=30)
        lines = [x for x in err.splitlines() if "n2" in x or "task 1" in x]
        assert len(lines) == 1, err
        assert none_left(jid) == []


def test_report_of_a_recorded_oversubscribed_job(cluster: tuple[SlurmCluster, Path]) -> None:
    """The same finding in `report` of the job's merged recording (record --job per node)."""
    cl, w = cluster
    snumap = str(Path(sys.executable).with_name("snumap"))
    jid = submit(cl, w, "sleep 3; " + spin_step(w, "map_cpu:0,0", secs=4))
    rec = subprocess.Popen(
        ["srun", "--overlap", f"--jobid={jid}", "-N2", "--ntasks-per-node=1", snumap,
         "record", "--job", "-o", f"{w}/rec-%j-%N.rec"], env=cl.env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert cl.wait_job(jid, timeout=90) == "COMPLETED"
    out, _ = rec.communicate(timeout=60)
    files = sorted(w.glob(f"rec-{jid}-*.rec"))
    assert len(files) == 2, out
    merged = w / f"job-{jid}.rec"
    cl.run([snumap, "merge", *map(str, files), "-o", str(merged)], timeout=120)
    rep = json.loads(cl.run([snumap, "report", "--json", str(merged)], timeout=120).stdout)
    over = [f for f in rep["job"]["findings"] if f["kind"] == "oversubscribed"]
    print(json.dumps(rep["job"]["findings"], indent=1))
    assert {f["node"] for f in over} == {"n1", "n2"}
    assert all(f["pu"] == 0 and f["idle_pus"] == [1] for f in over)
    text = cl.run([snumap, "report", str(merged)], timeout=120).stdout
    assert "srun --cpu-bind=cores" in text


def test_srun_killed_leaves_no_sampler(cluster: tuple[SlurmCluster, Path]) -> None:
    """srun itself dies (SIGKILL): the step daemons close the samplers' stdin, they end."""
    cl, w = cluster
    with top_on_a_job(cl, w) as (jid, top):
        srun = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()
                and _ppid(p) == top.pid and _comm(p) == b"srun"]
        assert len(srun) == 1
        os.kill(srun[0], signal.SIGKILL)
        out, err = top.communicate(timeout=60)
        # top prints one last snapshot once srun's output ends; CI once saw none (rc and
        # stderr unknown): say them if it happens again
        assert out.splitlines(), f"no snapshot after srun's end: exit {top.returncode}: {err}"
        last = json.loads(out.splitlines()[-1])
        assert all(n["status"] in ("ended", "lost") for n in last["nodes"]), last
        assert none_left(jid, timeout=30) == []
        assert cl.job_state(jid) == "RUNNING"


def _comm(p: Path) -> bytes:
    try:
        return (p / "comm").read_bytes().strip()
    except OSError:
        return b""


def _ppid(p: Path) -> int:
    try:
        return int((p / "stat").read_bytes().rsplit(b")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def test_live_view_in_a_terminal(cluster: tuple[SlurmCluster, Path]) -> None:
    """The TUI itself on a pseudo-terminal: the job view, Enter opens n1's top view, q comes
    back, q quits; exit 0 and no sampler left."""
    import pty
    import select

    cl, w = cluster
    jid = submit(cl, w, spin_step(w, "map_cpu:0,1"))
    try:
        wait_ranks(cl, jid)
        pid, fd = pty.fork()
        if pid == 0:                                     # the child: top --job on the pty
            os.environ.update(cl.env)
            os.environ["TERM"] = "xterm-256color"
            os.environ["COLUMNS"], os.environ["LINES"] = "120", "40"
            os.execv(sys.executable, [*TOP, "--job", jid])
        screen = b""

        def read_for(seconds: float) -> None:
            nonlocal screen
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                r, _, _ = select.select([fd], [], [], 0.2)
                if r:
                    try:
                        screen += os.read(fd, 65536)
                    except OSError:
                        return

        read_for(8)
        assert b"n1" in screen and b"n2" in screen, screen[-2000:]
        assert {n for _, n in samplers(jid)} == {"n1", "n2"}
        screen = b""
        os.write(fd, b"\r")                              # n1's full top view
        read_for(6)
        assert b"via srun" in screen, screen[-2000:]
        os.write(fd, b"q")                               # back to the job view
        read_for(3)
        os.write(fd, b"q")                               # quit
        read_for(3)
        _, status = os.waitpid(pid, 0)
        os.close(fd)
        assert os.waitstatus_to_exitcode(status) == 0
        assert none_left(jid) == []
    finally:
        with contextlib.suppress(Exception):
            cancel(cl, jid)
