"""Issue 29, benchmark (b): does `snumap scale` report the efficiency the program has when
nobody watches it? A program whose first parallel region scales perfectly (OpenMP, written
here in C and compiled at run time: integer work, a static schedule, no sharing), studied at
1 ... all PUs (`--places cores`, interleaved repeats). Each run of the study records the
program and also runs it untraced (snumap scale does both); the program times its own first
region (omp_get_wtime) in both. Per thread count:

- the first region's efficiency as `scale report` gives it (per-region time from the
  recording) against the efficiency of the untraced runs (the program's own timing): target
  within 0.03 at every thread count;
- the recorder's perturbation of the whole program (recorded / untraced - 1), as the report
  shows it, and of the first region (the program's own timing, recorded / untraced - 1).

Needs root (uprobes) and gcc -fopenmp. Run briefly here; the figures that count come from a
quiet machine with many PUs:

    .venv/bin/python bench/observer_scale.py [--repeat 3] [--n 400] [--threads LIST]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _report import table, write_section

# The study in a session of its own at nice -20 (autogroup), as tests/test_scale_program.py
# favours its studies, so that a shared machine's neighbours disturb the recorded and the
# untraced runs alike.
from tests.test_scale_program import _favoured as favoured

SNUMAP = [sys.executable, "-m", "snumap_tui.cli"]
TARGET = 0.03

PROG = r"""
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
static unsigned long work(long n, unsigned long x) {  /* integer ALU only, no memory */
    unsigned long s = 0;
    for (long i = 0; i < n; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; s += x; }
    return s;
}
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 400, unit = 1000000;
    unsigned long s = 0, t = 0;
    double t0 = omp_get_wtime();
    #pragma omp parallel for reduction(+:s) schedule(static)
    for (long i = 0; i < n; i++) s += work(unit, 88172645463325252UL + i);
    double t1 = omp_get_wtime();
    #pragma omp parallel for reduction(+:t) schedule(dynamic, 1)
    for (long i = 0; i < n / 8; i++) t += work(unit / 4, 7 + i);
    printf("first_region_s %.9f\n%lu %lu\n", t1 - t0, s, t);
    return 0;
}
"""


def self_timed(log: Path) -> float | None:
    m = re.search(r"first_region_s ([0-9.]+)", log.read_text(errors="replace"))
    return float(m.group(1)) if m else None


def study(tmp: Path, threads: str, repeat: int, n: int) -> Path:
    (tmp / "prog.c").write_text(PROG)
    subprocess.run(["gcc", "-O2", "-g", "-fopenmp", "prog.c", "-o", "prog"], cwd=tmp,
                   check=True)
    subprocess.run([*SNUMAP, "scale", "--threads", threads, "--places", "cores", "--repeat",
                    str(repeat), "-o", str(tmp / "study"), "--", "./prog", str(n)], cwd=tmp,
                   check=True, start_new_session=True, preexec_fn=favoured)
    return tmp / "study"


def figures(st: Path) -> tuple[list[list[object]], list[float], dict]:
    rep = json.loads(subprocess.run([*SNUMAP, "scale", "report", str(st), "--json"],
                                    check=True, capture_output=True, text=True).stdout)
    # the first parallel region: the one at the smallest line of prog.c
    lines = {n["region"]: int(m.group(1)) for n in rep["regions"]
             if not n.get("wait") and (m := re.search(r"\(prog\.c:(\d+)\)", n["region"]))}
    first = min(lines, key=lines.__getitem__)
    node = next(n for n in rep["regions"] if n["region"] == first)
    rec = {a["threads"]: a for a in node["rows"]}
    pert = {c["threads"]: c for c in rep["perturbation"].get("configurations", [])}
    # the untraced runs' own timing of the region, and the recorded runs' (for the region's
    # perturbation), medians over repeats
    mine: dict[int, list[float]] = {}
    theirs: dict[int, list[float]] = {}
    for f in sorted((st / "runs").glob("*.json")):
        s = json.loads(f.read_text())
        if s.get("status") != "ok" or not s.get("untraced"):
            continue
        p = int(s["config"].split("-")[0].lstrip("t"))
        u = self_timed(st / "runs" / s["untraced"]["log"])
        r = self_timed(st / s["log"])
        if u is not None:
            theirs.setdefault(p, []).append(u)
        if r is not None:
            mine.setdefault(p, []).append(r)
    ps = sorted(set(rec) & set(theirs))
    u1 = statistics.median(theirs[ps[0]])
    rows, diffs = [], []
    for p in ps:
        tu = statistics.median(theirs[p])
        eff_u = u1 / tu / (p / ps[0])
        eff_r = rec[p]["efficiency"]
        d = abs(eff_r - eff_u)
        diffs.append(d)
        tr_self = statistics.median(mine[p]) if mine.get(p) else None
        c = pert.get(p) or {}
        rows.append([p, f"{rec[p]['time_median_s']:.4f}", f"{tu:.4f}",
                     f"{100 * (tr_self / tu - 1):+.1f} %" if tr_self else "n/a",
                     f"{eff_r:.3f}", f"{eff_u:.3f}", f"{d:.3f}",
                     "yes" if d <= TARGET else "no",
                     f"{100 * c['perturbation']:+.1f} %" if c else "n/a"])
    return rows, diffs, rep


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--n", type=int, default=400, help="work units of the first region "
                                                       "(~2 ms each on one PU)")
    ap.add_argument("--threads", default=None,
                    help="thread counts (default: all, 1 to the PUs, up to 16 PUs; else pow2)")
    ap.add_argument("--no-write", action="store_true", help="print only (a check run)")
    a = ap.parse_args(argv)
    if shutil.which("gcc") is None:
        print("observer_scale: gcc is not installed", file=sys.stderr)
        return 1
    pus = len(os.sched_getaffinity(0))
    threads = a.threads or ("all" if pus <= 16 else "pow2")
    with tempfile.TemporaryDirectory() as d:
        st = study(Path(d), threads, a.repeat, a.n)
        rows, diffs, rep = figures(st)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    met = all(d <= TARGET for d in diffs)
    body = (f"A program whose first parallel region scales perfectly ({a.n} units of integer "
            f"work, static schedule; the program times the region itself) under `snumap scale "
            f"--threads {threads} --places cores --repeat {a.repeat}`: each run recorded and "
            "also run untraced by scale itself, interleaved. Recorded efficiency: the "
            "region's time from the recording, as `scale report` gives it; untraced: the "
            "program's own timing of the region in the untraced runs. Target: within "
            f"{TARGET} at every thread count: {'met' if met else 'not met'} (worst "
            f"{max(diffs):.3f}). Load average when the run ended: {load}.\n\n"
            + table(["threads", "region recorded s", "region untraced s",
                     "region perturbation (own timing)", "efficiency recorded",
                     "efficiency untraced", "difference", f"<= {TARGET}",
                     "program perturbation (report)"], rows)
            + (f"\nscale report's warning: {rep['perturbation']['warning']}\n"
               if rep["perturbation"].get("warning") else
               "\nscale report: no configuration perturbed beyond 3 %.\n"))
    if not a.no_write:
        write_section("observer_scale", "Observer effect (b): efficiency recorded vs untraced",
                      body)
    print(body)
    return 0        # a run that measured: met or not is in the table


if __name__ == "__main__":
    sys.exit(main())
