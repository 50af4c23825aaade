"""What `snumap scale` costs over running the same configurations by hand, and how long
`snumap scale report` takes on a large study.

1. An OpenMP program (a serialised and a scaling region) over 1 and 2 threads, compact,
   repeated REPEAT times, three ways in one run: the bare program (`time` of each run), each
   configuration recorded by hand (`snumap record` with the same OMP_* variables and --cpus,
   in the study's interleaved order), and `snumap scale` doing the same. The study's own cost
   is its wall time minus the by-hand recordings' (target: <= 1 % of the programs' run time
   plus <= 0.3 s a run); what recording itself costs (by hand minus bare) is shown beside.
2. `snumap scale report` (text and --json, a fresh process each) on a synthetic study of 200
   runs x 20 regions (snumap_tui.study.synth): target <= 2 s.

All processes get their own session at nice -20 (autogroup) so that the neighbours of a
shared machine disturb the three ways alike. Needs root (uprobes) and gcc -fopenmp.

    .venv/bin/python bench/scale_overhead.py [--repeat 3] [--n 200]
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
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _report import table, write_section

SNUMAP = [sys.executable, "-m", "snumap_tui.cli"]
# The test program of tests/test_scale_program.py, and its way of favouring the study's
# processes on a shared machine: the same measurement as the test's.
from tests.test_scale_program import PROG
from tests.test_scale_program import _favoured as favoured


def timed(argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, start_new_session=True, preexec_fn=favoured)
    return time.perf_counter() - t0


def overhead(tmp: Path, repeat: int, n: int) -> tuple[list[list[object]], dict[str, float]]:
    (tmp / "prog.c").write_text(PROG)
    subprocess.run(["gcc", "-O2", "-g", "-fopenmp", "prog.c", "-o", "prog"], cwd=tmp,
                   check=True)
    configs = [(1, "0", "{0}"), (2, "0-1", "{0},{1}")]       # compact on 2 PUs
    bare, by_hand = [], []
    for rep in range(repeat):                                  # the study's order
        for threads, cpus, places in configs:
            env = {**os.environ, "OMP_NUM_THREADS": str(threads), "OMP_PLACES": places,
                   "OMP_PROC_BIND": "close"}
            bare.append(timed(["taskset", "-c", cpus, "./prog", str(n)], env, tmp))
            out = tmp / f"hand-{threads}-{rep}.rec"
            by_hand.append(timed([*SNUMAP, "record", "-o", str(out), "--cpus", cpus, "--",
                                  "./prog", str(n)], env, tmp))
    study = timed([*SNUMAP, "scale", "--threads", "1,2", "--places", "compact", "--repeat",
                   str(repeat), "-o", str(tmp / "study"), "--", "./prog", str(n)], None, tmp)
    runs = len(bare)
    prog_s, hand_s = sum(bare), sum(by_hand)
    own = study - hand_s
    target = 0.01 * prog_s + 0.3 * runs
    rows = [
        ["programs alone (`time` of each run)", runs, f"{prog_s:.2f}", "", ""],
        ["each configuration recorded by hand (`snumap record`)", runs, f"{hand_s:.2f}",
         f"{(hand_s - prog_s) / runs:.2f} s a run over the bare program", ""],
        ["`snumap scale` (the same runs)", runs, f"{study:.2f}",
         (f"{own:+.2f} s over by hand ({own / runs:+.2f} s a run, "
         f"{100 * own / prog_s:+.1f} % of the programs' time)"),
         f"<= {target:.2f} s: {'yes' if own <= target else 'no'}"],
    ]
    return rows, {"prog_s": prog_s / runs, "own": own}


def report_time(tmp: Path) -> list[list[object]]:
    from snumap_tui.study.synth import make_study

    serial = {f"main._omp_fn.{i} (solver.c:{10 * i + 5})": (i % 10) / 10 for i in range(19)}
    t0 = time.perf_counter()
    make_study(tmp / "big", threads=[1, 2, 4, 8, 16], places=["compact", "spread", "cores",
                                                              "pus"],
               repeats=10, serial=serial, noise=0.05, figures=True,
               machine={"hostname": "synthetic", "pus": 16, "cores": 16, "packages": 2})
    made = time.perf_counter() - t0
    rows = []
    for what, extra in (("text", []), ("--json", ["--json"])):
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            subprocess.run([*SNUMAP, "scale", "report", str(tmp / "big"), *extra], check=True,
                           stdout=subprocess.DEVNULL)
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        rows.append([f"`snumap scale report` ({what}), 200 runs x 20 regions, whole process",
                     f"{med:.2f} s", "2 s", "yes" if med <= 2 else "no"])
    rows.append(["  (writing the synthetic study: 200 run files)", f"{made:.2f} s", "", ""])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--n", type=int, default=200, help="work units (~2 ms each here)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        rows, info = overhead(tmp, a.repeat, a.n)
        rep_rows = report_time(tmp)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    body = (f"The test program of tests/test_scale_program.py (a region serialised on a critical "
            f"section, then one that scales; {a.n} work units, {info['prog_s']:.2f} s a run on "
            f"average) over 1 and 2 threads, compact, {a.repeat} repeats: 2 x {a.repeat} runs "
            "each way, in one run. Every process in its own session at nice -20 (the machine "
            "is shared). Load average when the run ended: " + load + ".\n\n"
            + table(["way", "runs", "wall s", "cost", "target (1 % + 0.3 s a run)"], rows)
            + "\n" + table(["what", "measured", "target", "met"], rep_rows))
    write_section("scale_overhead", "snumap scale: a study's cost over by-hand runs; report",
                  body)
    print(body)


if __name__ == "__main__":
    main()
