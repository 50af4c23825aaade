"""What region probes cost the traced program: an OpenMP program at about 1,000 and 100,000
parallel regions a second, and an MPI ping-pong, each run untraced, recorded with
``--regions none`` and recorded with ``--regions auto``, in one run; the programs time their
own loop (startup and snumap's attach/detach excluded). The cost per probed call is the time
regions added divided by the probe hits the recording holds.

Needs root (uprobes), gcc with -fopenmp, mpicc/mpirun. Writes the "regions" section of
docs/benchmarks.md.

    .venv/bin/python bench/regions_overhead.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import table, write_section

# CPU seconds of the whole process (every thread), for the programs below.
CPU_C = r"""
#include <sys/resource.h>
static double cpu(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return r.ru_utime.tv_sec + r.ru_stime.tv_sec + (r.ru_utime.tv_usec + r.ru_stime.tv_usec) * 1e-6;
}
"""
OMP = r"""
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    long n = atol(argv[1]), work = atol(argv[2]);
    double t0 = omp_get_wtime(), c0 = cpu();
    for (long i = 0; i < n; i++) {
        #pragma omp parallel num_threads(2)
        { volatile double x = 0; for (long k = 0; k < work; k++) x += k; }
    }
    printf("%.6f %.6f\n", omp_get_wtime() - t0, cpu() - c0);
    return 0;
}
"""
CALLS = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static volatile long sink;
__attribute__((noinline)) void probed(long i) { sink += i; }
int main(int argc, char **argv) {
    long n = atol(argv[1]);
    struct timespec a, b, c, d;
    clock_gettime(CLOCK_MONOTONIC, &a);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c);
    for (long i = 0; i < n; i++) probed(i);
    clock_gettime(CLOCK_MONOTONIC, &b);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &d);
    printf("%.6f %.6f\n", (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9,
           (d.tv_sec - c.tv_sec) + (d.tv_nsec - c.tv_nsec) * 1e-9);
    return 0;
}
"""
PINGPONG = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    int rank, n = atoi(argv[1]);
    char buf[8] = {0};
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime(), c0 = cpu();
    for (int i = 0; i < n; i++) {
        if (rank == 0) {
            MPI_Send(buf, 8, MPI_CHAR, 1, 0, MPI_COMM_WORLD);
            MPI_Recv(buf, 8, MPI_CHAR, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(buf, 8, MPI_CHAR, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, 8, MPI_CHAR, 0, 0, MPI_COMM_WORLD);
        }
    }
    if (rank == 0) printf("%.6f %.6f\n", MPI_Wtime() - t0, cpu() - c0);
    MPI_Finalize();
    return 0;
}
"""
SNUMAP = [sys.executable, "-m", "snumap_tui.cli"]


def build(tmp: Path) -> tuple[Path, Path]:
    (tmp / "calls.c").write_text(CALLS)
    # The same function twice: starting with a load (the kernel single-steps it) and, built
    # with -O0 -fcf-protection, with endbr64; push (probed after endbr64: emulated).
    subprocess.run(["gcc", "-O1", "-fcf-protection=none", str(tmp / "calls.c"), "-o",
                    str(tmp / "calls")], check=True)
    subprocess.run(["gcc", "-O0", "-fcf-protection=full", str(tmp / "calls.c"), "-o",
                    str(tmp / "calls_push")], check=True)
    (tmp / "omp.c").write_text(CPU_C + OMP)
    (tmp / "pp.c").write_text(CPU_C + PINGPONG)
    subprocess.run(["gcc", "-O1", "-fopenmp", str(tmp / "omp.c"), "-o", str(tmp / "omp")],
                   check=True)
    subprocess.run(["mpicc", "-O1", str(tmp / "pp.c"), "-o", str(tmp / "pp")], check=True)
    return tmp / "omp", tmp / "pp"


ENV = {**os.environ, "OMP_WAIT_POLICY": "passive"}


def run(cmd: list[str], tmp: Path, regions: str | None, extra: tuple[str, ...] = ()
        ) -> tuple[float, float, int]:
    """(the program's own wall seconds, CPU seconds, probe hits recorded)."""
    if regions is None:
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=ENV).stdout
        return float(out.split()[0]), float(out.split()[1]), 0
    rec = tmp / "b.rec"
    r = subprocess.run([*SNUMAP, "record", "--force", "-o", str(rec), "--regions", regions,
                        *extra, "--", *cmd], check=True, capture_output=True, text=True, env=ENV)
    from snumap_tui.store import open as open_rec

    with open_rec(rec) as f:
        hits = len(f.regions())
    return float(r.stdout.split()[0]), float(r.stdout.split()[1]), hits


def calibrate(omp: Path, rate: float, seconds: float) -> tuple[int, int, float]:
    """(regions, work per region, the untraced rate got) for about RATE regions a second."""
    n = int(rate * seconds)
    work = 1000
    got = 0.0
    for _ in range(6):
        t = min(float(subprocess.run([str(omp), str(n), str(work)], check=True, env=ENV,
                                     capture_output=True, text=True).stdout.split()[0])
                for _ in range(3))
        got = n / t
        if abs(got - rate) < 0.1 * rate:
            break
        if got < rate and work <= 1:
            break                       # the runtime's own cost per region is the limit
        work = max(1, int(work * got / rate))
    return n, work, got


def pct(c: float, base: float) -> str:
    """The slowdown of CPU time C over BASE; none for a loop of a few ms (meaningless)."""
    return f" ({100 * (c / base - 1):+.1f} %)" if base >= 0.05 else ""


def placement_cost(libs: list[str]) -> str:
    """CPU time to place a probe (trace/probe_point.py) on every function of LIBS, as a
    recording does for the runtimes' entry points and the programs' bodies at start-up."""
    from snumap_tui.trace.elfsyms import load_elf, which

    parts = []
    for lib in libs:
        path = which(lib) or lib
        if not os.path.exists(path):
            continue
        elf = load_elf(path)
        names = list(elf.by_name)
        c0 = time.process_time()
        moved = sum(elf.probe_offset(n) != elf.offset_of(n) for n in names)
        dt = time.process_time() - c0
        parts.append(f"{os.path.basename(path)}: {len(names):,} functions in {dt * 1e3:.0f} ms "
                     f"({dt / max(len(names), 1) * 1e6:.0f} us each; {moved:,} probes moved)")
    return "; ".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("regions_overhead: uprobes need root")
    load0 = os.getloadavg()[0]
    placed = placement_cost(["/lib/x86_64-linux-gnu/libgomp.so.1",
                             "/lib/x86_64-linux-gnu/libmpich.so.12"])
    print("probe placement:", placed, flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="snumap-bench-regions-") as d:
        tmp = Path(d)
        omp, pp = build(tmp)
        calls, push = tmp / "calls", tmp / "calls_push"
        cases = [("--probe on a function starting with a load, 200,000 calls",
                  [str(calls), "200000"], 200_000),
                 ("--probe on a function starting endbr64; push, 200,000 calls",
                  [str(push), "200000"], 200_000)]
        for rate in (1_000, 100_000):
            n, work, got = calibrate(omp, rate, 2.0)
            cases.append((f"OpenMP, {got:,.0f} regions/s ({n:,} regions, 2 threads)",
                          [str(omp), str(n), str(work)], n))
        cases.append(("MPI ping-pong, 2 ranks (20,000 round trips)",
                      ["mpirun", "-np", "2", str(pp), "20000"], 20_000))
        for label, cmd, units in cases:
            res: dict[str, list[tuple[float, float]]] = {"untraced": [], "none": [], "auto": []}
            hits = []
            for _ in range(args.repeat):
                for mode in ("untraced", "none", "auto"):
                    probe = ("--probe", f"{cmd[0]}:probed") if cmd[0] in (str(calls), str(push)) \
                        and mode == "auto" else ()
                    w, c, h = run(cmd, tmp, None if mode == "untraced" else mode, probe)
                    res[mode].append((w, c))
                    if mode == "auto":
                        hits.append(h)
            # The best run of each: on a shared machine noise only ever adds time.
            best = {m: (min(x[0] for x in v), min(x[1] for x in v)) for m, v in res.items()}
            (bw, bc), (nw, nc), (aw, ac) = best["untraced"], best["none"], best["auto"]
            hit = statistics.median(hits)
            per_call = (ac - nc) / hit * 1e9 if hit else float("nan")
            rows.append([label, f"{bw:.3f} / {bc:.3f}", f"{nw:.3f} / {nc:.3f}{pct(nc, bc)}",
                         f"{aw:.3f} / {ac:.3f}{pct(ac, bc)}",
                         f"{hit / units:.0f}", f"{per_call:,.0f}"])
            print(rows[-1], flush=True)
    load1 = os.getloadavg()[0]
    body = table(["program", "untraced: wall / CPU s", "recorded, --regions none",
                  "recorded, --regions auto", "probe hits per region / round trip",
                  "CPU ns per probe hit"], rows)
    body += (f"\nBest of {args.repeat} runs each, the three modes interleaved; times are the "
             "programs' own loops (wall, and CPU of all the program's threads from "
             "getrusage: uprobe handling runs in the hitting thread and is charged to it, and "
             "is the cost; the slowdown in % is of CPU time). OpenMP runs with "
             "OMP_WAIT_POLICY=passive, so waiting threads sleep and CPU time is work plus "
             f"overhead. Load average {load0:.1f} at the start, {load1:.1f} at the "
             "end. Probes: eBPF uprobe_multi (bpf/regions.bpf.c), filtered to the traced "
             "tree in the kernel; a parallel region costs six hits (GOMP_parallel entry and "
             "return, each thread's body entry and return) until the bodies pass 10,000 hits "
             "a second, when they are detached (then two), a ping-pong round trip eight "
             "(MPI_Send and MPI_Recv entry and return on both ranks). A probe on an "
             "instruction the kernel single-steps costs ~14 us here; on one it emulates "
             "(push, call, jmp, jcc) ~0.3 us, so each probe sits on the first emulated "
             "instruction of its function's straight-line entry when nothing before it "
             "touches the stack (trace/probe_point.py): GCC's outlined bodies and libgomp's "
             "barrier, critical and single entry points start with loads, and their probes "
             "now sit on their first conditional jump. The function 'starting with a load' "
             "has no emulated instruction before its return, so its probe stays single-"
             "stepped. At the highest region rate the runtime's own cost per region (waking "
             "the sleeping worker through a futex, ~25 us here) dominates and is perturbed "
             "by the probes' timing: the traced runs come out faster, so that row measures "
             "nothing but the probes' hit count. Placing the probes (a process's first use "
             f"of capstone included): {placed}.\n")
    write_section("regions_overhead", "Region probes: slowdown of OpenMP and MPI programs", body)


if __name__ == "__main__":
    main()
