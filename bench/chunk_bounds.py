"""Crafted thread counters (kind 16) and process memory (kind 17) chunks through every reader
of them: `report`, `report --json`, `export --format perfetto` and `--format parquet`, each in
a child process under a 3 GiB address-space limit, with its time
(issue 30 items 10 and 11: one process over nodes -1..65535 allocated ~34 GB; 300 k pids
made report quadratic, 67 s; 200 k tids took report --json 15 s and 2.1 GB, Perfetto > 30 s).

    .venv/bin/python bench/chunk_bounds.py            # writes docs/benchmarks.md
    .venv/bin/python bench/chunk_bounds.py --scale 0.25 --no-write

The recordings are tests/crafted_chunks.py's.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import crafted_chunks as K
from _report import table, write_section

LIMIT_MIB = 3072
TIMEOUT_S = 120
CHILD = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, ({lim}, "
         "resource.RLIM_INFINITY)); from snumap_tui.cli import main; "
         "sys.exit(main(sys.argv[1:]))")


def run(argv: list[str]) -> tuple[str, float]:
    """(outcome, seconds) of `snumap ARGV` (its memory is bounded by the limit)."""
    t0 = time.monotonic()
    try:
        p = subprocess.run([sys.executable, "-c", CHILD.format(lim=LIMIT_MIB << 20), *argv],
                           capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
                           cwd=REPO)
        outcome = "ok" if p.returncode == 0 else (
            "traceback" if "Traceback" in p.stderr else f"exit {p.returncode}")
    except subprocess.TimeoutExpired:
        outcome = f"> {TIMEOUT_S} s"
    return outcome, time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=1.0,
                    help="fraction of the issue's sizes (default 1: 300 k pids, 200 k tids)")
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args()
    cases = {
        "memory: 1 pid over nodes -1..65535": lambda p: K.memory_nodes(p),
        f"memory: {int(300_000 * args.scale):,} pids":
            lambda p: K.memory_pids(p, int(300_000 * args.scale)),
        f"counters: {int(200_000 * args.scale):,} tids":
            lambda p: K.counter_tids(p, int(200_000 * args.scale)),
        f"counters: {int(200_000 * args.scale):,} tids on as many PU numbers":
            lambda p: K.counter_tids(p, int(200_000 * args.scale), int(200_000 * args.scale)),
    }
    rows = []
    with tempfile.TemporaryDirectory(prefix="snumap-chunk-bounds-") as tmp:
        for i, (name, make) in enumerate(cases.items()):
            rec = make(Path(tmp) / f"c{i}.rec")
            size = rec.stat().st_size
            for what, argv in (("report", ["report", str(rec)]),
                               ("report --json", ["report", str(rec), "--json"]),
                               ("export perfetto", ["export", str(rec), "--format", "perfetto",
                                                    "-o", f"{tmp}/o.pftrace", "--force"]),
                               ("export parquet", ["export", str(rec), "--format", "parquet",
                                                   "-o", f"{tmp}/o.pq", "--force"])):
                outcome, dt = run(argv)
                rows.append([name, f"{size / 1024:.0f} KiB", what, outcome, f"{dt:.2f} s"])
                print(" | ".join(str(c) for c in rows[-1]), flush=True)
    body = (f"Each reader in a child process under a {LIMIT_MIB} MiB address-space limit "
            f"({TIMEOUT_S} s at most), sizes x{args.scale:g} of issue 30's. Before: the "
            "first case died with ArrayMemoryError (a per-node array of every sample time), "
            "the pids took report 67 s, the tids report --json 15 s and 2.1 GB and the "
            "Perfetto export over 30 s. Now memory per node keeps the topology's nodes, "
            "timelines 4,096 processes (the rest counted), counter tables, PUs and Perfetto "
            "tracks 4,096 rows (the rest summed).\n\n"
            + table(["recording", "size", "reader", "outcome", "time"], rows))
    print(body)
    if not args.no_write:
        write_section("chunk_bounds", "Crafted counters and memory chunks: bounded readers",
                      body)
    return 0 if all(r[3] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
