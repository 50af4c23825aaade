"""Counters per run interval for real, on this machine (software events go through exactly the
hardware events' path: opened per CPU, read by sched.bpf.c at every switch): an OpenMP program
whose one thread spins and other touches fresh pages, recorded with ``snumap record --events``
as a user would and checked through ``snumap report --json``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from snumap_tui.analysis.attribution import scaled
from snumap_tui.analysis.cumulative import Cumulative
from snumap_tui.store import open as open_recording
from snumap_tui.trace.libbpf import LibbpfTracer
from tests.test_trace_backends import assert_ran, steal_ns, stolen_since

SNUMAP = [sys.executable, "-m", "snumap_tui.cli"]
PAGES = 16384                  # 64 MiB of fresh pages: one minor fault each
SPIN_MS = 200                  # of the spinning thread's CPU time

pytestmark = pytest.mark.skipif(not LibbpfTracer.status().available,
                                reason="the libbpf backend cannot run here (root, BTF)")

SRC = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
static volatile double sink;
static long cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}
static void marker(const char *line) {
    const char *p = getenv("SNUMAP_MARKERS");
    if (!p) return;
    int fd = open(p, O_WRONLY);
    if (fd >= 0) { if (write(fd, line, strlen(line)) < 0) {} close(fd); }
}
int main(void) {
    long busy = 0, faulter = 0, busy_ns = 0;
    marker("begin compute\n");
    /* snumap stamps a marker when its reader gets the line: on a busy machine that can be
     * late; the work starts after a pause (and the PU counters' window below ends in one) */
    usleep(%(pause)d);
    #pragma omp parallel num_threads(2)
    {
        long tid = syscall(SYS_gettid);
        if (omp_get_thread_num() == 0) {
            /* CPU time, not wall time: the machine may be shared */
            while (cpu_ns() < %(spin)dL * 1000000L) sink += 1.0;
            busy = tid;
            busy_ns = cpu_ns();
        } else {
            char *m = mmap(NULL, %(pages)dL * 4096, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            for (long i = 0; i < %(pages)dL; i++) m[i * 4096] = 1;
            faulter = tid;
        }
    }
    marker("end compute\n");
    usleep(%(pause)d);
    printf("busy %%ld\nfaulter %%ld\nbusy_ns %%ld\n", busy, faulter, busy_ns);
    return 0;
}
"""

PINGPONG = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>
static int ab[2], ba[2];
static void pin0(void) { cpu_set_t s; CPU_ZERO(&s); CPU_SET(0, &s);
                         sched_setaffinity(0, sizeof s, &s); }
static void *other(void *arg) {
    char c;
    pin0();
    printf("b %ld\n", (long)syscall(SYS_gettid));
    fflush(stdout);
    for (int i = 0; i < 300; i++) { if (read(ab[0], &c, 1) != 1 || write(ba[1], &c, 1) != 1) break; }
    return arg;
}
int main(void) {
    pthread_t t;
    char c = 'x';
    if (pipe(ab) || pipe(ba)) return 1;
    pin0();
    printf("a %ld\n", (long)syscall(SYS_gettid));
    fflush(stdout);
    pthread_create(&t, NULL, other, NULL);
    for (int i = 0; i < 300; i++) { if (write(ab[1], &c, 1) != 1 || read(ba[0], &c, 1) != 1) break; }
    pthread_join(t, NULL);
    return 0;
}
"""


def _compile(src: str, out: Path, *flags: str) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    c = out.with_suffix(".c")
    c.write_text(src)
    r = subprocess.run(["gcc", "-g", "-O1", *flags, str(c), "-o", str(out)],
                       capture_output=True, text=True, check=False)
    if r.returncode:
        pytest.skip(f"gcc cannot build the test program: {r.stderr[-200:]}")
    return out


def _record(tmp: Path, prog: Path, *extra: str) -> tuple[Path, str, dict[str, int]]:
    rec = tmp / f"{prog.name}.rec"
    # Passive waiting: a thread done with its body sleeps at the barrier (its run interval
    # ends there) instead of spinning in the interval that holds the body's last counts.
    env = dict(os.environ, OMP_WAIT_POLICY="passive")
    s0 = steal_ns()
    r = subprocess.run([*SNUMAP, "record", "-o", str(rec), "--backend", "libbpf", *extra,
                        "--", str(prog)], capture_output=True, text=True, timeout=120,
                       check=False, cwd=tmp, env=env)
    assert r.returncode == 0, r.stderr
    tids = {k: int(v) for k, v in (line.split() for line in r.stdout.split("\n") if line)}
    tids["stolen_ns"] = stolen_since(s0)     # the hypervisor's, while it ran: see steal_ns
    return rec, r.stderr, tids


def test_busy_and_faulting_threads_regions_and_phase(tmp_path: Path) -> None:
    src = SRC % {"spin": SPIN_MS, "pages": PAGES, "pause": 200_000}
    prog = _compile(src, tmp_path / "omp_attr", "-fopenmp")
    rec, err, tids = _record(tmp_path, prog, "--events", "task-clock,page-faults,cycles")
    assert "cycles not supported here: no hardware PMU" in err or "cycles" not in err
    rep = json.loads(subprocess.run([*SNUMAP, "report", "--json", str(rec)],
                                    capture_output=True, text=True, check=True).stdout)
    c = rep["counters"]
    assert c["available"] and c["events"][:2] == ["task-clock", "page-faults"]
    th = {r["tid"]: r for r in c["threads"]}
    busy, faulter = th[tids["busy"]], th[tids["faulter"]]
    # The spinning thread's task-clock is its spin; the faulting thread's faults its pages.
    assert busy["events"]["task-clock"] >= SPIN_MS * 1e6 * 0.95
    assert faulter["events"]["page-faults"] >= PAGES
    assert busy["events"]["page-faults"] < PAGES / 4
    assert faulter["events"]["task-clock"] < busy["events"]["task-clock"]
    # task-clock of a run interval is its time on the PU: the thread's on-CPU time, and what
    # the kernel counted as its CPU time (read by the thread after its spin; a few
    # intervals follow until it exits).
    assert busy["events"]["task-clock"] == pytest.approx(busy["on_cpu_s"] * 1e9, rel=0.01)
    # task-clock runs on while the host has the vCPU; the thread's own CPU time does not
    assert_ran(busy["events"]["task-clock"], tids["busy_ns"], tids["stolen_ns"], rel=0.02)
    # The region (both threads' bodies) and the phase hold both: within 1 %, as an interval
    # cut by a region boundary is shared by time (docs/attribution.md).
    (region,) = [r for r in c["regions"] if r["name"].startswith("main._omp_fn.")]
    assert region["events"]["page-faults"] >= PAGES * 0.99
    assert region["events"]["task-clock"] >= SPIN_MS * 1e6 * 0.95
    (phase,) = [p for p in c["phases"] if p["name"] == "compute"]
    assert phase["events"]["page-faults"] >= PAGES * 0.99
    assert phase["events"]["task-clock"] >= SPIN_MS * 1e6 * 0.95
    assert busy["ipc"] is None and "cycles" in busy["na"]["ipc"]
    text = subprocess.run([*SNUMAP, "report", str(rec)], capture_output=True, text=True,
                          check=True).stdout
    assert "Counters per thread, region and phase" in text and "per region" in text


def test_sum_over_threads_is_the_per_pu_total(tmp_path: Path) -> None:
    """System-wide, every interval on a PU is some task's: their page faults over the time
    between the first and the last sample equal what the per-PU counter of the perf source
    counted. (Only the intervals a sample time cuts are split by time: the program faults
    well inside the window, so those are other tasks' short ones.)"""
    src = SRC % {"spin": 100, "pages": 4 * PAGES, "pause": 300_000}
    prog = _compile(src, tmp_path / "omp_sum", "-fopenmp")
    rec, _, _ = _record(tmp_path, prog, "--system-wide", "--regions", "none",
                        "--events", "page-faults")
    with open_recording(rec) as r:
        s = scaled(r.thread_counters())
        samples = [x for x in r.samples() if "value" in (x.readings.get("perf") or {})]
    first, last = samples[0].readings["perf"], samples[-1].readings["perf"]
    col = list(first["events"]).index("page-faults")
    t0, t1 = samples[0].t_ns, samples[-1].t_ns
    assert t1 - t0 > 0.1e9
    total_pu = total_iv = 0.0
    for k, cpu in enumerate(np.asarray(first["cpus"]).tolist()):
        m = s.cpu == cpu
        cum = Cumulative(s.start[m], s.end[m], s.values[m])
        (a,), _ = cum.at(np.array([t0]))
        (b,), _ = cum.at(np.array([t1]))
        total_iv += float(b[0] - a[0])
        total_pu += float(last["value"][k][col]) - float(first["value"][k][col])
    assert total_pu >= 4 * PAGES
    assert total_iv == pytest.approx(total_pu, rel=0.01)


def test_two_threads_alternating_on_one_pu_get_disjoint_intervals(tmp_path: Path) -> None:
    prog = _compile(PINGPONG, tmp_path / "pingpong", "-pthread")
    rec, _, tids = _record(tmp_path, prog, "--events", "context-switches,task-clock",
                           "--regions", "none")
    with open_recording(rec) as r:
        rows = r.thread_counters().rows
    mine = rows[np.isin(rows["tid"], [tids["a"], tids["b"]]) & (rows["cpu"] == 0)]
    assert (mine["tid"] == tids["a"]).sum() >= 100 and (mine["tid"] == tids["b"]).sum() >= 100
    on0 = rows[rows["cpu"] == 0]
    on0 = on0[np.argsort(on0["t_start"], kind="stable")]
    assert bool(np.all(on0["t_start"][1:] >= on0["t_end"][:-1]))
    # each switch out is one context switch of the thread switched out
    for t in (tids["a"], tids["b"]):
        m = mine["tid"] == t
        assert int(mine["value"][m][:, 0].sum()) == pytest.approx(int(m.sum()), rel=0.05)


def test_the_program_with_the_most_counters_loads() -> None:
    """The verifier accepts the counter read with all 8 slots used (software events here, so
    it loads on a machine without a PMU), and the records come out 8 wide."""
    import time

    from snumap_tui.trace.counters import MAX_COUNTERS, parse_events

    names = ["task-clock", "page-faults", "context-switches", "cpu-migrations",
             "minor-faults", "major-faults", "cpu-clock", "alignment-faults"]
    assert len(names) == MAX_COUNTERS
    t = LibbpfTracer()
    t.counter_specs = parse_events(names)
    t.start(None)
    try:
        time.sleep(0.2)
        batch = t.read()
    finally:
        t.stop()
    assert t.counter_dropped == []
    assert batch.counters is not None and len(batch.counters)
    assert batch.counters["value"].shape[1] == MAX_COUNTERS
