"""The long fuzz run: damaged and crafted recordings (every backend this machine can record
with) and formulas, then headers, topologies, metrics files, fsroot trees and marker streams,
for a few minutes, with its counts written to docs/benchmarks.md.

    .venv/bin/python bench/fuzz.py --seconds 300 --seed 1

The engines are tests/fuzz_harness.py and tests/fuzz_inputs.py (tests/test_fuzz.py runs them
for ~45 s and ~20 s in the suite). Each runs in a child process under an address-space limit, so a decompression bomb that inflated
would fail there, and the counts come back as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import table, write_section

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--inputs-seconds", type=float, default=100,
                    help="time for tests/fuzz_inputs.py (headers, topologies, metrics files, "
                         "fsroot trees, marker streams), after the recordings")
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix=f"snumap-fuzz-bench-{os.getpid()}-") as tmp:
        out = Path(tmp) / "counts.json"
        p = subprocess.run([sys.executable, str(REPO / "tests" / "fuzz_harness.py"),
                            "--seconds", str(args.seconds), "--seed", str(args.seed),
                            "--json", str(out)], text=True, check=False)
        if not out.exists():
            print("the fuzzer wrote no counts", file=sys.stderr)
            return 1
        got = json.loads(out.read_text())
        inputs_out = Path(tmp) / "inputs.json"
        q = subprocess.run([sys.executable, str(REPO / "tests" / "fuzz_inputs.py"),
                            "--seconds", str(args.inputs_seconds), "--seed", str(args.seed),
                            "--json", str(inputs_out)], text=True, check=False)
        inputs = json.loads(inputs_out.read_text()) if inputs_out.exists() else {}
    load_after = os.getloadavg()
    rows = []
    tallies = [(w, got[w]) for w in ("recordings", "formulas")]
    tallies += [(w, inputs[w]) for w in ("headers", "topologies", "metrics", "fsroot",
                                         "markers", "chunks", "merged", "fsnumbers")
                if w in inputs]
    for what, t in tallies:
        crashes = f" ({t['crashes']} crashes)" if t.get("crashes") else ""
        rows.append([what, f"{t['cases']:,}", f"{t['runs']:,}", f"{t['data']:,}",
                     f"{t['clean_errors']:,}", f"{t['tracebacks']}{crashes}", t["hangs"],
                     t["multi_line_errors"], f"{t['slowest_s']:.2f} s",
                     f"{t['peak_rss_mib']:.0f} MiB ({t['base_rss_mib']:.0f})"])
    seeds = ", ".join(f"{k} ({v:,} B)" for k, v in got["seeds"].items())
    skipped = f" Backends that could not record here: {got['skipped_backends']}." \
        if got["skipped_backends"] else ""
    body = (
        f"Seed {got['seed']}, {got['seconds']:.0f} s in all (seed recordings included); load "
        f"average {load_before[0]:.2f} before, {load_after[0]:.2f} after (other work shares "
        f"this machine). Seed recordings: {seeds}.{skipped}\n\n"
        "A case is one damaged or crafted input (bit flips; cuts at and around chunk "
        "boundaries; structure-aware edits with fresh CRCs, half with a rebuilt index; lying "
        "chunk headers; concatenations; zstd bombs of 64 MiB-1 GiB; formulas, mutated and "
        "pathological, and metrics files). A run is one reader over one case: for recordings "
        "the API (events, columns, samples, metric series, data frames, verify), `report` "
        "(text and JSON), `export` (chrome, intervals, samples, events, Perfetto, Parquet) "
        "and the replay's "
        "load. Then tests/fuzz_inputs.py, an even share of its time per input: recording "
        "headers (structure-aware JSON edits, Infinity/NaN, deep nesting, floods of empty "
        "objects, lone surrogates) through the same readers; JSON and hwloc XML topologies "
        "(`topo --topology`); metrics files (`exporter --print-rules`); fake `--fsroot` trees "
        "with FIFOs, /dev/zero, absurd cpulists and huge files (`topo`, `probe`, `top "
        "--batch`); marker streams into a live FIFO, then reported; thread counters and "
        "process memory chunks crafted within their schema (floods of pids, tids, PU and "
        "NUMA node numbers: `chunks`); merged headers with their node tables edited "
        "(`merged`); fsroot numbers swapped for words, signs, exponents and 30 digits "
        "(`fsnumbers`). Runs through hwloc go in "
        "a forked child; a child killed by a signal is a crash (counted with the tracebacks). "
        "Data: the run gave a result; clean error: one `snumap:` line and exit 2. The "
        "fuzzing process runs under a 3 GiB address-space limit; its peak resident size is shown "
        "next to what the harness alone (seeds made, bombs built) took before the first "
        "case.\n\n"
        + table(["input", "cases", "runs", "data", "clean errors", "tracebacks", "hangs",
                 "multi-line errors", "slowest run", "peak RSS (harness alone)"], rows))
    print(body)
    if not args.no_write:
        write_section("fuzz", "Fuzzing: damaged and crafted recordings and formulas", body)
    return p.returncode or q.returncode


if __name__ == "__main__":
    sys.exit(main())
