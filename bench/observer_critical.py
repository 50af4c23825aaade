"""The observer effect on a program that takes a critical section 16 M times (issue 29 (a) and
item 3): tests/programs/critical.c (a computing parallel region, then N `#pragma omp
critical` over the threads) run in paired rounds untraced, under `snumap record` (default:
the probe budget detaches the critical section's probes), `snumap record --regions none` and
`perf record -e sched:sched_switch`; per mode the median over rounds of the program's own
wall time divided by the same round's untraced one. Then what a probe hit costs: a call of a
small function probed vs unprobed (entry, entry and return, summed in the kernel, a probe the
kernel single-steps, a process outside the traced tree) and GOMP_critical_start at one
thread, with the BPF programs' own run time per hit from the kernel's BPF stats
(BPF_ENABLE_STATS, bpf_prog_info.run_time_ns / run_cnt).

Needs root (uprobes), gcc -fopenmp; perf for its column. bench/observer.py calls ``main``;
alone:

    .venv/bin/python bench/observer_critical.py [--rounds 5] [--calls 16000000] [--write]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from _report import table, write_section

PROGRAM = ROOT / "tests" / "programs" / "critical.c"
SNUMAP = [sys.executable, "-m", "snumap_tui.cli"]
CALLS_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static volatile long sink;
/* starts with a load: the kernel single-steps a probe here */
__attribute__((noinline)) void stepped(long i) { sink += i; }
/* starts with a call: emulated */
__attribute__((noinline)) long emulated(long i) { long r = i * 3; stepped(i); return r + sink; }
int main(int argc, char **argv) {
    long n = atol(argv[1]);
    int step = argc > 2 && !strcmp(argv[2], "stepped");
    char c;
    if (read(0, &c, 1) < 0) return 1;        /* probes attached: go */
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    if (step) for (long i = 0; i < n; i++) stepped(i);
    else for (long i = 0; i < n; i++) emulated(i);
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%.3f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n);
    return 0;
}
"""
BPF_OBJ_GET_INFO_BY_FD, BPF_ENABLE_STATS = 15, 32
RUN_TIME_AT = 192           # struct bpf_prog_info: run_time_ns, run_cnt


def _bpf(cmd: int, attr: bytes) -> int:
    from snumap_tui.trace.region_bpf import bpf_syscall

    return bpf_syscall(cmd, ctypes.create_string_buffer(attr, 128), 128)


def prog_run(fd: int) -> tuple[int, int]:
    """(run_time_ns, run_cnt) of BPF program FD (counted while BPF stats are enabled)."""
    info = ctypes.create_string_buffer(256)
    _bpf(BPF_OBJ_GET_INFO_BY_FD, struct.pack("<IIQ", fd, 256, ctypes.addressof(info)))
    return struct.unpack_from("<QQ", info, RUN_TIME_AT)


def build(tmp: Path) -> tuple[Path, Path]:
    crit, calls = tmp / "critical", tmp / "calls"
    subprocess.run(["gcc", "-O2", "-g", "-fopenmp", str(PROGRAM), "-o", str(crit)], check=True)
    (tmp / "calls.c").write_text(CALLS_C)
    subprocess.run(["gcc", "-O2", "-g", str(tmp / "calls.c"), "-o", str(calls)], check=True)
    return crit, calls


def _wall(out: str) -> tuple[float, float]:
    m = re.search(r"critical ([\d.]+) wall ([\d.]+)", out)
    if m is None:
        raise RuntimeError(f"no timing in {out[-300:]!r}")
    return float(m.group(2)), float(m.group(1))


def run_mode(mode: str, prog: Path, threads: int, calls: int, work: int, tmp: Path
             ) -> tuple[float, float, str]:
    """(program wall s, critical phase s, record's last line) of one run in MODE."""
    cmd = ["env", f"OMP_NUM_THREADS={threads}", str(prog), str(calls), str(work)]
    if mode == "snumap record":
        cmd = [*SNUMAP, "record", "-o", str(tmp / "r.rec"), "--force", "--", *cmd]
    elif mode == "--regions none":
        cmd = [*SNUMAP, "record", "-o", str(tmp / "r.rec"), "--force", "--regions", "none",
               "--", *cmd]
    elif mode == "perf sched_switch":
        cmd = ["perf", "record", "-q", "-e", "sched:sched_switch", "-o", str(tmp / "perf.data"),
               "--", *cmd]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp, check=True, timeout=900)
    wall, crit = _wall(r.stdout + r.stderr)
    last = [ln for ln in r.stderr.splitlines() if ln.startswith("snumap: recorded")]
    return wall, crit, last[-1] if last else ""


def rounds(prog: Path, threads: int, calls: int, work: int, n: int, tmp: Path
           ) -> tuple[list[list[Any]], str]:
    modes = ["untraced", "snumap record", "--regions none"]
    if shutil.which("perf"):
        modes.append("perf sched_switch")
    got: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}
    last = ""           # record's last line (default mode)
    for i in range(n):
        # Interleaved, the order turned each round: a drift of the machine hits every mode.
        order = modes[i % len(modes):] + modes[:i % len(modes)]
        for m in order:
            w, c, line = run_mode(m, prog, threads, calls, work, tmp)
            got[m].append((w, c))
            last = line if m == "snumap record" else last
        print(f"round {i + 1}: " + ", ".join(f"{m} {got[m][-1][0]:.3f} s" for m in modes),
              flush=True)
    rows = []
    for m in modes:
        ratio = [w / b[0] for (w, _c), b in zip(got[m], got["untraced"])]
        cratio = [c / b[1] for (_w, c), b in zip(got[m], got["untraced"])]
        rows.append([m, f"{statistics.median(w for w, _ in got[m]):.3f}",
                     f"{statistics.median(c for _, c in got[m]):.3f}",
                     f"{100 * (statistics.median(ratio) - 1):+.1f} %",
                     f"{min(ratio):.2f}-{max(ratio):.2f}",
                     f"{100 * (statistics.median(cratio) - 1):+.1f} %"])
    return rows, last


def _held_run(cmd: list[str], probes: list[Any], tracked: bool,
              env: dict[str, str] | None = None) -> tuple[str, str]:
    """CMD's output, run once PROBES are attached (it waits for a line on its stdin), and the
    BPF programs' ns per hit over the run ("" unprobed; "-" no hit)."""
    from snumap_tui.trace.region_bpf import BpfUprobes

    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         env=env)
    up = None
    try:
        before: list[tuple[int, int]] = []
        if probes:
            up = BpfUprobes([p.pid] if tracked else [0x7FFFFFF0], system_wide=False)
            failed = up.add_many(probes)
            if failed:
                raise OSError(failed[0][1])
            before = [prog_run(up._entry), prog_run(up._return)]
        assert p.stdin is not None
        p.stdin.write("\n")
        p.stdin.flush()
        while up is not None and p.poll() is None:
            up.drain()          # as the recorder does: a full ring would make hits cheaper
            time.sleep(0.01)
        out = p.communicate(timeout=600)[0]
        bpf = ""
        if up is not None:
            after = [prog_run(up._entry), prog_run(up._return)]
            t = sum(a[0] - b[0] for a, b in zip(after, before))
            n = sum(a[1] - b[1] for a, b in zip(after, before))
            bpf = f"{t / n:.0f}" if n else "-"
        return out, bpf
    finally:
        if p.poll() is None:
            p.kill()
        if up is not None:
            up.close()


def _probed(prog: Path, args: list[str], probes: list[Any], tracked: bool) -> tuple[float, str]:
    """ns per call of PROG ARGS with PROBES attached (none: unprobed); BPF ns per hit."""
    out, bpf = _held_run([str(prog), *args], probes, tracked)
    return float(out.split()[-1]), bpf


def _crit_ns(prog: Path, n: int, probes: list[Any]) -> tuple[float, str]:
    """ns per critical section at one thread (the critical phase over N calls)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    # Held by a shell until the probes are on (the same pid execs the program).
    out, bpf = _held_run(["sh", "-c", 'read x; exec "$0" "$@"', str(prog), str(n), "1000"],
                         probes, True, env)
    return _wall(out)[1] / n * 1e9, bpf


def per_hit(calls_prog: Path, crit_prog: Path, n: int) -> list[list[Any]]:
    """The ns-per-hit table: each case's added ns per call (best of 3), BPF ns per hit."""
    from snumap_tui.trace import elfsyms as E
    from snumap_tui.trace.uprobes import Probe

    elf = E.load_elf(calls_prog)
    rows: list[list[Any]] = []
    for sym in ("emulated", "stepped"):
        off = elf.probe_offset(sym)
        assert off is not None
        path = str(calls_prog)
        base = min(_probed(calls_prog, [str(n), sym], [], True)[0] for _ in range(3))
        cases = [
            ("entry, process outside the traced tree", [Probe(path, off, False, 0)], False),
            ("entry", [Probe(path, off, False, 0)], True),
            ("entry + return", [Probe(path, off, False, 0), Probe(path, off, True, 1)], True),
            ("entry + return, summed in the kernel",
             [Probe(path, off, False, 0, None, "", 0), Probe(path, off, True, 1, None, "", 0)],
             True),
        ]
        for label, probes, tracked in cases:
            best = min((_probed(calls_prog, [str(n), sym], probes, tracked) for _ in range(3)),
                       key=lambda x: x[0])
            kind = "emulated" if sym == "emulated" else "single-stepped"
            rows.append([f"{label} ({kind} first instruction)", f"{best[0] - base:,.0f}",
                         best[1]])
            print(rows[-1], flush=True)
    lib = next((f for f in E.library_closure(str(crit_prog)) if "libgomp" in f), None)
    if lib is not None:
        off = E.load_elf(lib).probe_offset("GOMP_critical_start")
        if off is not None:
            m = max(n, 1_000_000)
            base = min(_crit_ns(crit_prog, m, [])[0] for _ in range(3))
            probes = [Probe(lib, off, False, 0, None, "", 0),
                      Probe(lib, off, True, 1, None, "", 0)]
            got = min((_crit_ns(crit_prog, m, probes) for _ in range(3)), key=lambda x: x[0])
            label = ("GOMP_critical_start at 1 thread, entry + return summed in the kernel "
                     "(per critical section)")
            rows.append([label, f"{got[0] - base:,.0f}", got[1]])
            print(rows[-1], flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=16_000_000)
    ap.add_argument("--work", type=int, default=1_500_000,
                    help="iterations of the computing region before the critical one")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--hits", type=int, default=300_000, help="calls of each ns-per-hit case")
    ap.add_argument("--write", action="store_true", help="write docs/benchmarks.md")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("observer_critical: uprobes need root", file=sys.stderr)
        return 1
    load0 = os.getloadavg()[0]
    stats_fd = _bpf(BPF_ENABLE_STATS, struct.pack("<I", 0))     # BPF_STATS_RUN_TIME
    try:
        with tempfile.TemporaryDirectory(prefix="snumap-bench-critical-") as d:
            tmp = Path(d)
            crit, calls = build(tmp)
            rows, last = rounds(crit, args.threads, args.calls, args.work, args.rounds, tmp)
            hits = per_hit(calls, crit, args.hits)
    finally:
        os.close(stats_fd)
    load1 = os.getloadavg()[0]
    body = (f"{args.calls:,} critical sections over {args.threads} OpenMP threads after a "
            f"computing region ({args.work:,} iterations), {args.rounds} paired rounds (the "
            "modes interleaved, their order turned each round); times are the program's own "
            "(omp_get_wtime), the overhead the median over rounds of the ratio to the same "
            "round's untraced run.\n\n")
    body += table(["mode", "program wall s (median)", "critical phase s",
                   "overhead (median ratio)", "ratio range", "critical phase overhead"], rows)
    # The file's temporary directory is this machine's: named by its base name only.
    last = re.sub(r"to /\S*/(r\.rec)", r"to \1", last)
    body += f"\nLast line of the last `snumap record`: `{last}`\n\n"
    body += ("What a probe hit costs the thread that makes it: a call probed vs unprobed "
             f"({args.hits:,} calls, best of 3 each), and the BPF programs' own time per hit "
             "from the kernel's BPF stats (the rest is the trap: the breakpoint, the kernel's "
             "uprobe handling, the return trampoline).\n\n")
    body += table(["case", "added ns per call", "BPF ns per hit"], hits)
    busy = max(load0, load1) > 0.5 * (os.cpu_count() or 1)
    body += (f"\nLoad average {load0:.1f} at the start, {load1:.1f} at the end"
             + (" -- a busy machine: a critical section whose holder is preempted by another "
                "user's work makes every mode's times noise here; these figures show the "
                "bench runs, not the overhead (run it on a quiet machine)" if busy else "")
             + ". The budget "
             "(--probe-budget, default 1 % of a thread's time per function) turns these "
             "costs into a rate: ~6,450 calls/s per thread for an entry and return on "
             "emulated instructions at the costs snumap assumes (850 + 700 ns).\n")
    print(body)
    if args.write:
        write_section("observer_critical", "Observer effect: a critical section taken "
                      f"{args.calls:,} times", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
