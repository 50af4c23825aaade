"""What `snumap record` costs an OpenMP program at the default interval (100 ms) and at 1 ms:
a 2-thread Jacobi stencil run untraced and recorded, alternating, in one run. The program
times its own loop (snumap's start and stop excluded) and its own CPU time; the recorder's CPU
time is what the recorder and program together used (RUSAGE_CHILDREN) less the program's. The
samples kept per second say whether the interval was held.

Needs gcc with -fopenmp and root (the eBPF tracer). Writes the "record_interval" section of
docs/benchmarks.md.

    .venv/bin/python bench/record_interval.py [--seconds 4] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import table, write_section
from regions_overhead import CPU_C

STENCIL = CPU_C + r"""
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    int n = 1024, iters = atoi(argv[1]);
    double *a = calloc((size_t)n * n, sizeof *a), *b = calloc((size_t)n * n, sizeof *b);
    for (int i = 0; i < n; i++) a[i] = b[i] = 1.0;
    double t0 = omp_get_wtime(), c0 = cpu();
    for (int it = 0; it < iters; it++) {
        #pragma omp parallel for num_threads(2)
        for (int i = 1; i < n - 1; i++)
            for (int j = 1; j < n - 1; j++)
                b[i * n + j] = 0.25 * (a[(i - 1) * n + j] + a[(i + 1) * n + j] + a[i * n + j - 1] + a[i * n + j + 1]);
        double *t = a; a = b; b = t;
    }
    printf("%.6f %.6f %g\n", omp_get_wtime() - t0, cpu() - c0, a[n + 1]);
    return 0;
}
"""


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(cmd: list[str]) -> tuple[float, float, float]:
    """(program wall s, program CPU s, everything's CPU s)."""
    c0 = children_cpu()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.split()
    return float(out[0]), float(out[1]), children_cpu() - c0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    from snumap_tui.store import open as open_recording

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        src = tmp / "stencil.c"
        src.write_text(STENCIL)
        prog = tmp / "stencil"
        subprocess.run(["gcc", "-O2", "-fopenmp", str(src), "-o", str(prog)], check=True)
        t = statistics.median(run([str(prog), "20"])[0] for _ in range(3))
        iters = max(20, int(20 * a.seconds / max(t, 1e-3)))
        snumap = [sys.executable, "-m", "snumap_tui.cli", "record", "--force", "--regions",
                  "none"]
        configs = {"untraced": None, "record, 100 ms (default)": "100ms",
                   "record, 1 ms": "1ms"}
        res: dict[str, list[tuple[float, float, float, float, int]]] = {k: [] for k in configs}
        load0 = os.getloadavg()[0]
        for _ in range(a.repeat):
            for name, interval in configs.items():
                out = tmp / "r.rec"
                cmd = [str(prog), str(iters)] if interval is None else [
                    *snumap, "-o", str(out), "--interval", interval, "--", str(prog), str(iters)]
                wall, pcpu, allcpu = run(cmd)
                rate, size = 0.0, 0
                if interval is not None:
                    with open_recording(out) as rec:
                        ts = rec.sample_times
                        rate = (len(ts) - 1) / ((ts[-1] - ts[0]) / 1e9) if len(ts) > 1 else 0
                    size = out.stat().st_size
                res[name].append((wall, pcpu, allcpu - pcpu, rate, size))
        # The recorder alone (the command sleeps): its CPU per second of recording and the
        # samples it keeps, without a program competing for the PUs.
        alone = []
        for interval in ("100ms", "1ms"):
            c0 = children_cpu()
            out = tmp / "s.rec"
            subprocess.run([*snumap, "-o", str(out), "--interval", interval, "--", "sleep",
                            str(a.seconds)], check=True, capture_output=True)
            cpu = children_cpu() - c0
            with open_recording(out) as rec:
                ts = rec.sample_times
                span = (ts[-1] - ts[0]) / 1e9
                alone.append([f"record {interval}, command sleeps {a.seconds:g} s",
                              f"{cpu:.2f}", f"{(len(ts) - 1) / span:.0f}"])
        load1 = os.getloadavg()[0]
    base = statistics.median(w for w, *_ in res["untraced"])
    rows = []
    for name, rs in res.items():
        wall = statistics.median(r[0] for r in rs)
        rows.append([name, f"{wall:.3f}", "-" if name == "untraced" else
                     f"{100 * (wall / base - 1):+.1f} %",
                     "-" if name == "untraced" else f"{statistics.median(r[2] for r in rs):.2f}",
                     "-" if name == "untraced" else f"{statistics.median(r[3] for r in rs):.0f}",
                     "-" if name == "untraced" else
                     f"{statistics.median(r[4] for r in rs) / 2**20:.2f}"])
    body = table(["run", "program s (median)", "vs untraced", "recorder CPU s",
                  "samples/s kept", "file MiB"], rows)
    body += (f"\n{a.repeat} runs of each, alternating; {iters} stencil sweeps (1024 x 1024, 2 "
             f"OpenMP threads) of about {a.seconds:g} s untraced. Load average "
             f"{load0:.1f} at the start and {load1:.1f} at the end (other work on the "
             "machine counts in every row alike).\n")
    body += "\n" + table(["recorder alone", "recorder CPU s (start and stop included)",
                          "samples/s kept"], alone)
    body += ("\nAt 1 ms the recorder reads the per-PU counters, /proc/stat, RAPL and the "
             "traced processes' memory at every sample and the rest every 10 ms; what holds "
             "it below 1,000 samples a second here is the CPU it gets (2 PUs, the program on "
             "both) and the encoding of each sample's readings (about as costly as reading "
             "them).\n")
    print(body)
    write_section("record_interval", "Record overhead: default interval and 1 ms", body)


if __name__ == "__main__":
    main()
