"""`snumap record --pid`: attach to running processes and what they fork, and bad input as one
line with exit 2."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from snumap_tui.errors import SnumapError
from snumap_tui.recording.attach import check_pid, parse_pids

PY = sys.executable
SNUMAP = [PY, "-m", "snumap_tui.cli"]

# Waits for SIGUSR1 (the recorder is attached by then), then runs a thread and forks a child
# that allocates 64 MiB; prints the child's pid.
TARGET = """
import mmap, os, signal, threading, time
go = threading.Event()
signal.signal(signal.SIGUSR1, lambda *a: go.set())
print("ready", flush=True)
go.wait(60)
def spin(s):
    t = time.monotonic()
    while time.monotonic() - t < s:
        pass
th = threading.Thread(target=spin, args=(0.3,))
th.start()
pid = os.fork()
if pid == 0:
    m = mmap.mmap(-1, 64 << 20)
    for i in range(0, 64 << 20, 4096):
        m[i] = 1
    spin(0.4)
    os._exit(0)
print(pid, flush=True)
spin(0.3)
os.waitpid(pid, 0)
th.join()
"""


def test_pid_records_a_running_process_its_threads_and_the_children_it_forks(
        tmp_path: Path) -> None:
    target = subprocess.Popen([PY, "-c", TARGET], stdout=subprocess.PIPE, text=True)
    try:
        assert target.stdout is not None
        assert target.stdout.readline().strip() == "ready"
        out = tmp_path / "p.rec"
        rec = subprocess.Popen([*SNUMAP, "record", "-o", str(out), "--interval", "50ms",
                                "--pid", str(target.pid)], stderr=subprocess.PIPE, text=True)
        assert rec.stderr is not None
        err: list[str] = []
        for line in rec.stderr:
            err.append(line)
            if "tracing with" in line:
                break
        threading.Thread(target=lambda: err.extend(rec.stderr), daemon=True).start()
        time.sleep(1.0)                 # the region planning and the first sample
        os.kill(target.pid, signal.SIGUSR1)
        child = int(target.stdout.readline())
        target.wait(60)
        # It ends by itself once the process is gone.
        assert rec.wait(60) == 0, "".join(err)
    finally:
        if target.poll() is None:
            target.kill()
    r = json.loads(subprocess.run([*SNUMAP, "report", "--json", str(out)], check=True,
                                  capture_output=True, text=True).stdout)
    pids = {p["pid"] for p in r["processes"]}
    assert {target.pid, child} <= pids
    assert sum(1 for t in r["tasks"] if t["pid"] == target.pid) >= 2     # main + thread
    procs = {p["pid"]: p for p in r["processes"]}
    assert procs[child]["memory"]["nodes"]["0"] >= 64 << 20
    assert any(m.startswith(f"attached: pid {target.pid}") for m in _markers(out))


def _markers(path: Path) -> list[str]:
    from snumap_tui import store

    with store.open(path) as rec:
        return [t for _, t in rec.markers]


def _free_pid() -> int:
    pid = 4_000_000
    while Path(f"/proc/{pid}").exists():
        pid += 1
    return pid


@pytest.mark.parametrize(("args", "says"), [
    (["--pid", "abc"], "'abc' is not a process id"),
    (["--pid", "0"], "'0' is not a process id"),
    (["--pid", str(_free_pid())], "no such process"),
    (["--pid", "1", "--", "true"], "not both"),
    (["--pid", "1", "--system-wide"], "one or the other"),
])
def test_bad_pid_is_one_line_exit_2(tmp_path: Path, args: list[str], says: str) -> None:
    r = subprocess.run([*SNUMAP, "record", "-o", str(tmp_path / "x.rec"), *args],
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 2
    assert says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "x.rec").exists()


def test_a_thread_id_names_its_process() -> None:
    ev = threading.Event()
    t = threading.Thread(target=ev.wait, daemon=True)
    t.start()
    try:
        with pytest.raises(SnumapError, match=f"a thread of process {os.getpid()}"):
            check_pid(t.native_id)
    finally:
        ev.set()


def test_another_users_process_needs_a_capability() -> None:
    # pid 1 is root's; as an unprivileged uid without capabilities that is refused ...
    with pytest.raises(SnumapError, match="belongs to uid 0.*CAP_SYS_PTRACE"):
        check_pid(1, euid=65534, caps=0)
    # ... and allowed with CAP_SYS_PTRACE or CAP_PERFMON, or to root.
    assert check_pid(1, euid=65534, caps=1 << 19)["pid"] == 1
    assert check_pid(1, euid=65534, caps=1 << 38)["pid"] == 1
    assert check_pid(1, euid=0, caps=0)["uid"] == 0
    assert parse_pids("5, 7,5") == [5, 7]


@pytest.mark.skipif(os.geteuid() != 0, reason="drops to nobody: needs root")
def test_another_users_process_from_the_cli_as_nobody(tmp_path: Path) -> None:
    try:
        probe = subprocess.run([PY, "-c", "import snumap_tui"], user=65534, group=65534,
                               extra_groups=[], capture_output=True, check=False)
    except PermissionError:
        probe = None
    if probe is None or probe.returncode != 0:
        pytest.skip("this Python or the package is not readable by nobody")
    os.chmod(tmp_path, 0o777)
    r = subprocess.run([*SNUMAP, "record", "-o", str(tmp_path / "x.rec"), "--pid", "1"],
                       capture_output=True, text=True, timeout=60, check=False, user=65534,
                       group=65534, extra_groups=[])
    assert r.returncode == 2 and "belongs to uid 0" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


OMP = r"""
#include <omp.h>
#include <stdio.h>
#include <unistd.h>
int main(void) {
    double s = 0;
    printf("ready\n");
    fflush(stdout);
    for (int r = 0; r < 3000; r++) {
        #pragma omp parallel for num_threads(2) reduction(+:s)
        for (long k = 0; k < 20000; k++) s += k * 1e-9;
        usleep(10000);
    }
    printf("%f\n", s);
    return 0;
}
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="uprobes need root")
def test_regions_are_planned_for_an_attached_openmp_program(tmp_path: Path) -> None:
    import shutil

    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    src = tmp_path / "omp.c"
    src.write_text(OMP)
    prog = tmp_path / "omp"
    if subprocess.run(["gcc", "-g", "-O1", "-fopenmp", str(src), "-o", str(prog)],
                      capture_output=True, check=False).returncode:
        pytest.skip("gcc cannot build an OpenMP program here")
    target = subprocess.Popen([str(prog)], stdout=subprocess.PIPE, text=True)
    try:
        assert target.stdout is not None and target.stdout.readline().strip() == "ready"
        out = tmp_path / "omp.rec"
        r = subprocess.run([*SNUMAP, "record", "-o", str(out), "--duration", "2s", "--pid",
                            str(target.pid)], capture_output=True, text=True, timeout=120,
                           check=False)
        assert r.returncode == 0, r.stderr
        assert "OpenMP region bodies" in r.stderr
    finally:
        target.kill()
        target.wait()
    rep = json.loads(subprocess.run([*SNUMAP, "report", "--json", str(out)], check=True,
                                    capture_output=True, text=True).stdout)
    regs = {g["name"]: g for g in rep["regions"]}
    body = next(g for n, g in regs.items() if n.startswith("main._omp_fn."))
    assert body["count"] >= 10 and body["threads"]
    assert "memory" in body and "energy_j" in body


def test_a_process_named_in_bytes_that_are_not_utf8_does_not_stop_the_tree_scan(
        tmp_path: Path) -> None:
    """A comm is any bytes (prctl PR_SET_NAME): the scan of /proc for the traced tree's
    children (record --pid, every tracer's seed) read it as UTF-8 text and raised."""
    from snumap_tui.trace.tasks import tree_of

    for pid, ppid, comm in ((10, 1, b"init"), (11, 10, b"\xff\xfebad)name"), (12, 11, b"k")):
        d = tmp_path / str(pid)
        d.mkdir()
        (d / "stat").write_bytes(b"%d (%s) S %d 1 1 0" % (pid, comm, ppid))
    assert sorted(tree_of([10], tmp_path)) == [10, 11, 12]
