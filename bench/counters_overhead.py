"""Cost of counters per run interval (`snumap record --events`), and what they take on disk.

1. An ordinary OpenMP compute program (a 2-D Jacobi stencil, 2 threads) run untraced, under
   `snumap record` at the default interval and at the finest one this snumap accepts, without
   and with `--events`, and under `perf stat -e` (the same events) and `perf record`. The
   program times its own compute loop (omp_get_wtime), so the recorder's start-up is not
   counted; configurations run in rounds (one of each per round), medians reported, so the
   drift of a shared machine falls on all of them alike.
2. The switch storm of bench/sched_overhead.py (`perf bench sched pipe` pinned, then
   `stress-ng --switch 2`), recorded system-wide with the libbpf backend, counters off and on:
   events, lost, slowdowns, recorder CPU and RSS.
3. Bytes per run interval in the thread counters chunks (compressed), beside the bytes per
   scheduling event.

Run as root: python bench/counters_overhead.py [--size 1200] [--repeat 3] [--switch-s 2]
Writes the `counters_overhead` section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._report import table, write_section
from snumap_tui import store

EVENTS = "task-clock,page-faults,context-switches"
SNUMAP = [sys.executable, "-m", "snumap_tui.cli"]

STENCIL = r"""
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1200, iters = argc > 2 ? atoi(argv[2]) : 400;
    double *a = calloc((size_t)n * n, sizeof *a), *b = calloc((size_t)n * n, sizeof *b);
    for (int i = 0; i < n; i++) a[i] = b[i] = 1.0;
    double t0 = omp_get_wtime(), c0 = cpu_s();
    for (int it = 0; it < iters; it++) {
        #pragma omp parallel for num_threads(2) schedule(static)
        for (int i = 1; i < n - 1; i++)
            for (int j = 1; j < n - 1; j++)
                b[(size_t)i * n + j] = 0.25 * (a[(size_t)(i - 1) * n + j] + a[(size_t)(i + 1) * n + j]
                                             + a[(size_t)i * n + j - 1] + a[(size_t)i * n + j + 1]);
        double *t = a; a = b; b = t;
    }
    printf("compute_s %.6f cpu_s %.6f checksum %.3f\n", omp_get_wtime() - t0, cpu_s() - c0,
           a[(size_t)(n / 2) * n + n / 2]);
    return 0;
}
"""


def finest_interval() -> str:
    from snumap_tui.model.sampler import RECORD_MIN_INTERVAL_S, check_interval

    for text, s in (("1ms", 0.001), ("10ms", 0.01)):
        try:
            check_interval(s, RECORD_MIN_INTERVAL_S)
            return text
        except Exception:  # noqa: BLE001, S112 - the next one
            continue
    return "100ms"


def compute_s(out: str, what: str = "compute_s") -> float:
    m = re.search(rf"{what} ([\d.]+)", out)
    return float(m.group(1)) if m else float("nan")


def configs(prog: list[str], tmp: Path) -> dict[str, list[str]]:
    fine = finest_interval()
    rec = [*SNUMAP, "record", "--force", "-o"]
    return {
        "untraced": prog,
        "snumap record (100 ms)": [*rec, str(tmp / "a.rec"), "--", *prog],
        "snumap record --nice 0 (100 ms)": [*rec, str(tmp / "a0.rec"), "--nice", "0", "--",
                                            *prog],
        f"snumap record --events {EVENTS} (100 ms)": [*rec, str(tmp / "b.rec"), "--events",
                                                      EVENTS, "--", *prog],
        f"snumap record ({fine})": [*rec, str(tmp / "c.rec"), "--interval", fine, "--",
                                    *prog],
        f"snumap record --events {EVENTS} ({fine})": [*rec, str(tmp / "d.rec"), "--interval",
                                                      fine, "--events", EVENTS, "--", *prog],
        f"perf stat -e {EVENTS}": ["perf", "stat", "-e", EVENTS, "-o", str(tmp / "stat.txt"),
                                   "--", *prog],
        "perf record (default event, 4 kHz)": ["perf", "record", "-q", "-o",
                                               str(tmp / "perf.data"), "--", *prog],
    }


def stencil_rows(size: int, iters: int, repeat: int, tmp: Path) -> tuple[list[list[str]],
                                                                          dict[str, float]]:
    src = tmp / "stencil.c"
    src.write_text(STENCIL)
    exe = tmp / "stencil"
    subprocess.run(["gcc", "-O2", "-fopenmp", str(src), "-o", str(exe)], check=True)
    prog = [str(exe), str(size), str(iters)]
    # perf(1) is not everywhere (the device machines have none): its rows are left out there.
    cfg = {k: v for k, v in configs(prog, tmp).items() if shutil.which(v[0])}
    times: dict[str, list[float]] = {k: [] for k in cfg}
    cpus: dict[str, list[float]] = {k: [] for k in cfg}
    # Per round, each configuration's time over the untraced run's of the same round: the
    # machine's slow drift (other work, the host's steal) cancels in the ratio, which the
    # medians of the raw times kept (their spread here is 10-20 %).
    paired: dict[str, list[float]] = {k: [] for k in cfg}
    for _ in range(repeat):
        got: dict[str, float] = {}
        for name, cmd in cfg.items():
            r = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if r.returncode != 0:
                print(f"counters_overhead: {name} failed: {r.stderr[-300:]}", file=sys.stderr)
                continue
            got[name] = compute_s(r.stdout)
            times[name].append(got[name])
            cpus[name].append(compute_s(r.stdout, "cpu_s"))
        for name, t in got.items():
            if got.get("untraced"):
                paired[name].append(t / got["untraced"])
    med = {k: statistics.median(v) for k, v in times.items() if v}
    cmed = {k: statistics.median(v) for k, v in cpus.items() if v}
    base, cbase = med["untraced"], cmed["untraced"]
    rows = [[name, f"{t:.3f}", f"{(t / base - 1) * 100:+.1f} %",
             f"{(statistics.median(paired[name]) - 1) * 100:+.1f} %" if paired[name] else "-",
             f"{cmed[name]:.3f}", f"{(cmed[name] / cbase - 1) * 100:+.1f} %",
             " ".join(f"{x:.2f}" for x in times[name])] for name, t in med.items()]
    sizes = {}
    with store.open(tmp / "b.rec") as r:
        tc = r.thread_counters()
        chunks = [h for h in r._chunks if h.kind == store.kinds.K_THREAD_COUNTERS]
        sizes["intervals"] = len(tc)
        sizes["bytes_per_interval"] = sum(h.payload_len + 48 for h in chunks) / max(len(tc), 1)
        ev_chunks = [h for h in r._chunks if h.kind == store.kinds.K_EVENTS]
        sizes["events"] = r.event_count
        sizes["bytes_per_event"] = sum(h.payload_len + 48 for h in ev_chunks) / max(
            r.event_count, 1)
    sizes["file_a"] = (tmp / "a.rec").stat().st_size
    sizes["file_b"] = (tmp / "b.rec").stat().st_size
    return rows, sizes


def storm_rows(switch_s: int, repeat: int, tmp: Path) -> list[list[str]]:
    from bench import sched_overhead as so

    cmd = so.workload(100000, switch_s)
    rows = []
    for label, extra in (("libbpf, counters off", []), (f"libbpf --events {EVENTS}",
                                                        ["--events", EVENTS])):
        base = so.run_untraced(cmd, repeat)
        r = run_snumap_extra(so, cmd, tmp, repeat, extra)
        pipe, sw = r["work"]
        rows.append([label, str(r["events"]), str(r["lost"]),
                     f"{r['lost'] / max(r['events'] + r['lost'], 1) * 100:.2f} %",
                     str(r.get("intervals", "-")), str(r.get("counter_lost", "-")),
                     f"{base[0]:.2f} -> {pipe:.2f} ({(pipe / base[0] - 1) * 100:+.0f} %)",
                     f"{base[1]:.0f} -> {sw:.0f} ({(base[1] / sw - 1) * 100:+.0f} %)",
                     f"{r['cpu_s']:.1f}", f"{r['rss_mb']:.0f}"])
    return rows


def _fdinfo(fd: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/self/fdinfo/{fd}").read_text().splitlines():
        k, _, v = line.partition(":")
        if v.strip().isdigit():
            out[k.strip()] = int(v.strip())
    return out


def switch_program_ns(events: str | None, seconds: int) -> tuple[float, int]:
    """(ns per call, calls) of the libbpf tracer's sched_switch program, system-wide, under
    `stress-ng --switch 2`, counters off or on, from the kernel's own BPF statistics
    (kernel.bpf_stats_enabled, the program's run_time_ns / run_cnt in its fdinfo): the
    in-kernel price of a switch, whatever else runs on the machine."""
    import threading

    from snumap_tui.trace.counters import parse_events, split_events
    from snumap_tui.trace.libbpf import SWITCH_PROGRAMS, LibbpfTracer

    stats = Path("/proc/sys/kernel/bpf_stats_enabled")
    old = stats.read_text().strip()
    t = LibbpfTracer()
    t.counter_specs = parse_events(split_events(events)) if events else []
    t.start(None)
    stop = threading.Event()

    def drain() -> None:
        while not stop.wait(0.01):
            t.drain()

    th = threading.Thread(target=drain, daemon=True)
    th.start()
    try:
        obj = t._obj
        assert obj is not None
        progs = [p for p in obj.programs() if p.name in SWITCH_PROGRAMS and p.fd >= 0]
        stats.write_text("1")
        before = _fdinfo(progs[0].fd)
        subprocess.run(["stress-ng", "--switch", "2", "-t", f"{seconds}s", "-q"], check=False,
                       capture_output=True)
        after = _fdinfo(progs[0].fd)
    finally:
        stats.write_text(old)
        stop.set()
        th.join()
        t.stop()
    calls = after.get("run_cnt", 0) - before.get("run_cnt", 0)
    ns = after.get("run_time_ns", 0) - before.get("run_time_ns", 0)
    return ns / max(calls, 1), calls


def run_snumap_extra(so: object, cmd: list[str], tmp: Path, repeat: int,
                     extra: list[str]) -> dict[str, object]:
    """bench/sched_overhead.py's run_snumap (libbpf, system-wide) with EXTRA arguments."""
    import signal
    import time

    out = tmp / "storm.rec"
    out.unlink(missing_ok=True)     # the wait below is for this run's file, not the last's
    rec = subprocess.Popen([*SNUMAP, "record", "--system-wide", "--backend", "libbpf", "-o",
                            str(out), "--force", "--regions", "none", *extra],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak = so.PeakRss(rec.pid)  # type: ignore[attr-defined]
    while not out.exists() or out.stat().st_size == 0:
        time.sleep(0.1)
    time.sleep(1.0)
    work = so.median_work(cmd, repeat)  # type: ignore[attr-defined]
    rec.send_signal(signal.SIGINT)
    cpu, rss, _err = so.wait_rusage(rec, peak)  # type: ignore[attr-defined]
    with store.open(out) as r:
        res: dict[str, object] = {"work": work, "events": r.event_count,
                                  "lost": sum(r.lost.values()), "cpu_s": cpu, "rss_mb": rss}
        if extra:
            res["intervals"] = len(r.thread_counters())
            lost = [i for i in r.infos if i.get("what") == "counter records lost"]
            res["counter_lost"] = sum(int(row[0]) for i in lost for row in i.get("rows", []))
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, default=1200)
    ap.add_argument("--iters", type=int, default=400)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--switch-s", type=int, default=2)
    ap.add_argument("--no-storm", action="store_true")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root", file=sys.stderr)
        return 2
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        rows, sizes = stencil_rows(args.size, args.iters, args.repeat, tmp)
        storm = [] if args.no_storm else storm_rows(args.switch_s, 1, tmp)
    prog = ([switch_program_ns(ev, args.switch_s) for ev in (None, EVENTS, None, EVENTS)]
            if shutil.which("stress-ng") else [])
    body = table(["configuration", "wall s (median)", "vs untraced",
                  "vs untraced, paired (median of per-round ratios)", "CPU s (median)",
                  "vs untraced", "wall s of each run"], rows)
    body += (f"\nThe program: a {args.size}x{args.size} Jacobi stencil, {args.iters} sweeps, "
             "2 OpenMP threads, timing its own loop (wall, and CPU time of the process: the BPF "
             "programs and uprobes run in its context, and CPU time moves less than wall time "
             f"with the machine's other load); {args.repeat} rounds of every "
             "configuration, one of each per round. snumap at its defaults otherwise "
             "(regions auto: the OpenMP probes are on; the recorder at nice -10, and once at "
             "--nice 0). The paired column is the median over rounds of each round's time over "
             "that round's untraced time: the machine's drift cancels in it.\n\n")
    body += (f"Thread counters with `--events {EVENTS}`: {sizes['intervals']} run intervals, "
             f"{sizes['bytes_per_interval']:.1f} bytes each on disk (compressed chunk), beside "
             f"{sizes['bytes_per_event']:.1f} bytes per scheduling event; the recording "
             f"{sizes['file_a'] / 1024:.0f} KiB without, {sizes['file_b'] / 1024:.0f} KiB "
             "with.\n")
    if storm:
        body += "\nSwitch storm (bench/sched_overhead.py's workload, system-wide):\n\n"
        body += table(["recording", "events", "lost", "lost %", "run intervals",
                       "interval records lost", "pipe µs/op", "stress-ng switch ops/s",
                       "recorder CPU s", "recorder peak RSS MB"], storm)
    if prog:
        body += ("\nThe sched_switch program's own cost (the kernel's BPF statistics, run_time_ns / "
                 "run_cnt, system-wide under `stress-ng --switch 2`; off, on, off, on):\n\n")
        body += table(["counters", "ns per switch", "switches"],
                      [["off" if i % 2 == 0 else f"--events {EVENTS}", f"{ns:.0f}", str(n)]
                       for i, (ns, n) in enumerate(prog)])
    else:
        body += "\nNo stress-ng on this machine: the sched_switch program's own cost was not measured.\n"
    load_after = Path("/proc/loadavg").read_text().split()[:3]
    body += (f"\nLoad average (1, 5, 15 min) before: {' '.join(load_before)}; after: "
             f"{' '.join(load_after)} (the machine is shared with other work). Targets (issue "
             "25): record overhead <= 1 % at the default interval and <= 3 % at 1 ms; lost "
             "events <= 1 % under the storm, counters on. Where the untraced runs themselves "
             "spread by more than the target (see the runs column), a median difference says "
             "little; the program's own ns per switch does not depend on the load: the "
             "counters' cost on a program is about (its switches per second) x (the extra ns "
             "per switch), e.g. 1,000 switches a second x 0.45 us = 0.05 % of one PU.\n")
    print(body)
    write_section("counters_overhead", "Counters per run interval: overhead and size", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
