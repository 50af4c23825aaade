"""What snumap's region probes cost a process it does not trace: another user's program on the
same node calling the probed library. A neighbour calls GOMP_critical_start/end (libgomp, the
system's copy) in a loop and counts its calls a second, while nothing records, while
``snumap record --probe-scope file`` records an OpenMP program (the probes on the library's
inode: every process mapping it takes the trap, the BPF program drops the hit) and while
``snumap record --probe-scope process`` (the default: uprobe_multi links with the traced
processes' pids, so the kernel sets no breakpoint in the neighbour). Paired rounds, the modes
interleaved; the figure is the median calls/s. Beside it, the runs of the recorder's uprobe
programs during the neighbour's loop (their run_cnt, from the recorder's fdinfo with BPF
statistics on for the run only): the neighbour's calls that reached a BPF program.

Needs root, gcc with -fopenmp. Writes the "probe_scope" section of docs/benchmarks.md.

    .venv/bin/python bench/probe_scope.py [--repeat 5] [--seconds 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import table, write_section
from observer_critical import BPF_ENABLE_STATS, _bpf

SNUMAP = [sys.executable, "-m", "snumap_tui.cli"]
NEIGHBOUR = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
void GOMP_critical_start(void);
void GOMP_critical_end(void);
int main(int argc, char **argv) {
    double secs = atof(argv[1]);
    struct timespec a, b;
    long n = 0;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do {
        for (int i = 0; i < 1000; i++) { GOMP_critical_start(); GOMP_critical_end(); }
        n += 1000;
        clock_gettime(CLOCK_MONOTONIC, &b);
    } while ((b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9 < secs);
    printf("%ld %.9f\n", n, (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9);
    return 0;
}
"""
# The traced program: one parallel region, then it says so and sleeps while the neighbour runs.
TRACED = r"""
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
int main(int argc, char **argv) {
    #pragma omp parallel num_threads(2)
    { if (omp_get_thread_num() == 0) omp_get_num_threads(); }
    FILE *f = fopen(argv[1], "w");
    fputs("go\n", f);
    fclose(f);
    usleep((useconds_t)(atof(argv[2]) * 1e6));
    return 0;
}
"""
MODES = ("no snumap", "record --probe-scope file", "record --probe-scope process")
KPROBE = 2                  # bpf_prog_type of uprobe(_multi) programs


def uprobe_runs(pid: int) -> int:
    """run_cnt summed over the uprobe programs process PID holds (BPF statistics on)."""
    total = 0
    fds = Path(f"/proc/{pid}/fdinfo")
    for fd in fds.iterdir():
        try:
            info = dict(line.split(":", 1) for line in fd.read_text().splitlines()
                        if ":" in line)
        except OSError:
            continue
        if info.get("prog_type", "").strip() == str(KPROBE) and "run_cnt" in info:
            total += int(info["run_cnt"])
    return total


def build(tmp: Path) -> tuple[Path, Path]:
    out = []
    for name, src in (("neighbour", NEIGHBOUR), ("traced", TRACED)):
        (tmp / f"{name}.c").write_text(src)
        subprocess.run(["gcc", "-O2", "-fopenmp", str(tmp / f"{name}.c"), "-o",
                        str(tmp / name)], check=True)
        out.append(tmp / name)
    return out[0], out[1]


def neighbour_rate(prog: Path, seconds: float) -> float:
    n, s = subprocess.run([str(prog), str(seconds)], capture_output=True, text=True,
                          check=True).stdout.split()
    return int(n) / float(s)


def one(mode: str, neighbour: Path, traced: Path, seconds: float, tmp: Path
        ) -> tuple[float, int | None]:
    """(neighbour calls/s, uprobe program runs during its loop) in MODE."""
    if mode == "no snumap":
        return neighbour_rate(neighbour, seconds), None
    go = tmp / "go"
    go.unlink(missing_ok=True)
    rec = subprocess.Popen([*SNUMAP, "record", "-o", str(tmp / "r.rec"), "--force",
                            "--probe-scope", mode.rsplit(" ", 1)[1], "--",
                            str(traced), str(go), str(seconds + 3)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        t0 = time.monotonic()
        while not go.exists():
            if rec.poll() is not None or time.monotonic() - t0 > 60:
                raise RuntimeError(f"record did not start the program: {rec.stderr}")
            time.sleep(0.02)
        time.sleep(0.3)                 # past the program's start: the recorder is steady
        before = uprobe_runs(rec.pid)
        rate = neighbour_rate(neighbour, seconds)
        runs = uprobe_runs(rec.pid) - before
    finally:
        _, err = rec.communicate(timeout=120)
    if rec.returncode != 0:
        raise RuntimeError(f"record failed: {err[-400:]}")
    return rate, runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=2.0, help="the neighbour's loop")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    stats = _bpf(BPF_ENABLE_STATS, struct.pack("<I", 0))     # on while this fd is open
    rates: dict[str, list[float]] = {m: [] for m in MODES}
    runs: dict[str, list[int]] = {m: [] for m in MODES}
    try:
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            neighbour, traced = build(tmp)
            for r in range(args.repeat):
                for mode in MODES:
                    rate, n = one(mode, neighbour, traced, args.seconds, tmp)
                    rates[mode].append(rate)
                    if n is not None:
                        runs[mode].append(n)
                    print(f"round {r + 1} {mode}: {rate / 1e6:.2f} M calls/s"
                          + ("" if n is None else f", uprobe program runs {n:,}"), flush=True)
    finally:
        os.close(stats)
    base = statistics.median(rates["no snumap"])
    rows = []
    for mode in MODES:
        med = statistics.median(rates[mode])
        per_call = (f"{statistics.median(runs[mode]) / (med * args.seconds):.2f}"
                    if runs[mode] else "-")
        rows.append([mode, f"{med / 1e6:.2f}", f"{med / base:.3f}",
                     f"{1e9 / med:.0f}", per_call])
        print(f"{mode}: {med / 1e6:.2f} M calls/s ({med / base:.3f} of untraced), "
              f"uprobe program runs per neighbour call {per_call}")
    if not args.no_write:
        body = ("A process snumap does not trace calls GOMP_critical_start/end of the "
                "system's libgomp in a loop while `snumap record` records another OpenMP "
                f"program; median of {args.repeat} paired rounds of {args.seconds:g} s. "
                "'Runs per call': the recorder's uprobe programs run during the loop per "
                "neighbour call (2 probes a call pair are hit with file scope: entry and "
                "return of GOMP_critical_start).\n\n"
                + table(["mode", "neighbour M calls/s", "of untraced", "ns/call",
                         "uprobe runs per neighbour call"], rows))
        write_section("probe_scope", "Region probes and the node's other processes", body,
                      run=f"python bench/probe_scope.py --repeat {args.repeat}")


if __name__ == "__main__":
    main()
