"""A flood of critical sections through the region probes: tests/programs/scalep.c (a compute
region, then N/4 `#pragma omp critical` over the threads, a million at the default N) run
untraced and recorded with ``--regions auto``; per thread count the recording's region
records, the kernel's summaries, the critical calls they account for and what was lost.

``--snumap`` runs another snumap (an older checkout's: ``OLD/.venv/bin/python -m
snumap_tui.cli``) to measure before and after on one machine. Needs root, gcc -fopenmp.
Writes the "regions_flood" section of docs/benchmarks.md with --write.

    .venv/bin/python bench/regions_flood.py [--threads 2,8,16] [--snumap CMD] [--write]
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from _report import table, write_section


def one(snumap: list[str], prog: Path, threads: int, n: int, tmp: Path) -> list[str]:
    env = ["env", f"OMP_NUM_THREADS={threads}", str(prog), str(n)]
    t = time.monotonic()
    subprocess.run(env, check=True, capture_output=True)
    bare = time.monotonic() - t
    rec = tmp / f"flood{threads}.rec"
    t = time.monotonic()
    # In TMP: ``python -m`` puts the working directory first on sys.path, and a checkout
    # there would be imported instead of the snumap asked for.
    r = subprocess.run([*snumap, "record", "-o", str(rec), "--force", "--", *env],
                       capture_output=True, text=True, check=True, cwd=tmp)
    traced = time.monotonic() - t
    m = re.search(r"regions: (\d+) region records lost", r.stderr)
    lost = int(m.group(1)) if m else 0
    probe = ("from snumap_tui import store; import sys\n"
             "with store.open(sys.argv[1]) as f: r = f.regions()\n"
             "s = getattr(r, 'sums', None)\n"
             "print(len(r.rows), 0 if s is None else len(s),"
             " 0 if s is None else int(s['count'].sum()))")
    out = subprocess.run([*snumap[:-2], "-c", probe, str(rec)], capture_output=True,
                         text=True, check=True, cwd=tmp).stdout.split()
    rows, sums, summed = (int(x) for x in out)
    calls = n // 4
    return [str(threads), f"{bare:.2f}", f"{traced:.2f}", f"{rows:,}", f"{sums:,}",
            f"{summed:,}", f"{lost:,} ({100 * lost / (2 * calls):.1f} %)",
            f"{rows / traced:,.0f}"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="2")
    ap.add_argument("-n", type=int, default=4_000_000)
    ap.add_argument("--snumap", default=f"{sys.executable} -m snumap_tui.cli")
    ap.add_argument("--label", default="this checkout")
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args()
    snumap = shlex.split(a.snumap)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        prog = tmp / "scalep"
        subprocess.run(["gcc", "-O2", "-g", "-fopenmp", str(ROOT / "tests/programs/scalep.c"),
                        "-o", str(prog)], check=True)
        rows = [one(snumap, prog, int(t), a.n, tmp) for t in a.threads.split(",")]
    head = ["threads", "untraced s", "recorded s", "region records", "summaries",
            "calls summed", "records lost", "records/s written"]
    text = table(head, rows)
    print(f"{a.label}:\n{text}")
    if a.write:
        write_section("regions_flood", "Region probes: a flood of critical sections",
                      f"{a.label}:\n\n{text}")


if __name__ == "__main__":
    main()
