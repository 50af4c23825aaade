"""Cost of tracing every context switch, system-wide, under a switch-heavy load.

One run of `perf bench sched pipe` then `stress-ng --switch` (this machine's ceiling of context
switches), untraced, under `snumap record --system-wide` with the bcc and perf backends, and
under `perf sched record -a`; for each: events captured and lost, bytes per event on disk, and
the slowdown of both workloads against the untraced run. Prints a table and writes the
`sched_overhead` section of docs/benchmarks.md.

Run as root: python bench/sched_overhead.py [--loops 200000] [--switch-s 3]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._report import table, write_section
from snumap_tui import store


def workload(loops: int, switch_s: int) -> list[str]:
    # The pipe pair is pinned to one PU: every message is then two context switches on that
    # PU, with no cross-CPU wakeup whose latency on a VM swings by 10x from run to run (the
    # unpinned figure went from 6 to 48 us/op between identical untraced runs here).
    return ["sh", "-c", (f"taskset -c 1 perf bench sched pipe -l {loops}; "
                         f"stress-ng --switch 2 -t {switch_s}s --metrics-brief 2>&1")]


def median_work(cmd: list[str], repeat: int) -> tuple[float, float]:
    """The workload ``repeat`` times: the median of each figure."""
    runs = [parse_workload(subprocess.run(cmd, capture_output=True, text=True,
                                          check=True).stdout) for _ in range(repeat)]
    pipes, sws = sorted(r[0] for r in runs), sorted(r[1] for r in runs)
    return pipes[len(runs) // 2], sws[len(runs) // 2]


def parse_workload(text: str) -> tuple[float, float]:
    """(pipe µs/op, stress-ng switch bogo ops/s)."""
    us = re.search(r"([\d.]+)\s+usecs/op", text)
    sw = re.search(r"switch\s+\d+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+([\d.]+)", text)
    return (float(us.group(1)) if us else float("nan"), float(sw.group(1)) if sw else float("nan"))


def run_untraced(cmd: list[str], repeat: int) -> tuple[float, float]:
    return median_work(cmd, repeat)


def run_snumap(cmd: list[str], backend: str, tmp: Path, repeat: int) -> dict[str, object]:
    out = tmp / f"{backend}.rec"
    rec = subprocess.Popen([sys.executable, "-m", "snumap_tui.cli", "record", "--system-wide",
                            "--backend", backend, "-o", str(out), "--force"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    while not out.exists() or out.stat().st_size == 0:
        time.sleep(0.1)
    time.sleep(1.0)                       # the tracer is attached once the header is written
    work = median_work(cmd, repeat)
    rec.send_signal(signal.SIGINT)
    _, err = rec.communicate(timeout=120)
    with store.open(out) as r:
        n = r.event_count if isinstance(r.event_count, int) else r.event_count()
        sw = int((r.events()["kind"] == 1).sum())
        lost = sum(r.lost.values())
    size = out.stat().st_size
    return {"work": work, "events": n, "switches": sw, "lost": lost,
            "bytes_per_event": size / max(n, 1), "summary": err.strip().splitlines()[-1:]}


def run_perf_sched(cmd: list[str], tmp: Path, repeat: int) -> dict[str, object]:
    data = tmp / "perf.data"
    ps = subprocess.Popen(["perf", "sched", "record", "-a", "-o", str(data)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    work = median_work(cmd, repeat)
    ps.send_signal(signal.SIGINT)
    _, err = ps.communicate(timeout=300)
    m = re.search(r"\((\d+) samples\)", err)
    samples = int(m.group(1)) if m else 0
    lost = re.search(r"lost (\d+)", err)
    return {"work": work, "events": samples,
            "lost": int(lost.group(1)) if lost else 0,
            "bytes_per_event": data.stat().st_size / max(samples, 1), "switches": None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--loops", type=int, default=200000)
    ap.add_argument("--switch-s", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3,
                    help="workload runs per configuration (medians are reported)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (system-wide tracing)", file=sys.stderr)
        return 2
    cmd = workload(args.loops, args.switch_s)
    base = run_untraced(cmd, args.repeat)
    rows, results = [], {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for name in ("bcc", "perf"):
            results[f"snumap {name}"] = run_snumap(cmd, name, tmp, args.repeat)
        results["perf sched record -a"] = run_perf_sched(cmd, tmp, args.repeat)
    for name, r in results.items():
        pipe, sw = r["work"]  # type: ignore[misc]
        rows.append([name, r["events"], r["lost"], f"{r['bytes_per_event']:.1f}",
                     f"{pipe:.1f} ({(pipe / base[0] - 1) * 100:+.0f} %)",
                     f"{sw:.0f} ({(base[1] / sw - 1) * 100:+.0f} %)"])
    rows.insert(0, ["untraced", "-", "-", "-", f"{base[0]:.1f}", f"{base[1]:.0f}"])
    header = ["tracer", "events", "lost", "bytes/event on disk", "pipe µs/op (slowdown)",
              "stress-ng switch ops/s (slowdown)"]
    body = table(header, rows)
    notes = ("\nEvents: every scheduling event stored (snumap) or every sample written (perf); "
             "snumap's bytes are the whole recording (header, 10 Hz metric samples, task names) "
             "divided by its events. `perf bench sched pipe` runs pinned to PU 1 (every message "
             "is two context switches there, no cross-CPU wakeup), then `stress-ng --switch 2` "
             "(both PUs at their switch ceiling); each configuration runs the pair "
             f"{args.repeat} times in one traced session and the medians are shown; slowdown is "
             "against the untraced medians. Target: a slowdown at most a fifth of perf sched "
             "record's. The machine is shared, so run-to-run noise of several percent is "
             "normal.\n")
    print(body + notes)
    write_section("sched_overhead", "Tracing overhead under a context-switch storm",
                  body + notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
