"""The recording pipeline in user space alone: synthetic scheduling events through the store's
encode + compress + write path, on one core, and back through the reader.

Why synthetic: this VM makes a few tens of thousands of context switches per second, a busy
many-core node makes millions; the question is whether the store keeps up with the latter
(target: >= 2 M events/s on one core) and how big the file is (target: <= 12 bytes/event).

The generator builds what sched_switch traces look like: each CPU runs a chain of slices with
log-normal lengths (µs to ms), mostly of "its" threads, sometimes idle; each switch's prev task is
the previous switch's next task on that CPU; about half the switch-ins are preceded by a wakeup
a few µs earlier; a few migrations. Run: ``python bench/store_pipeline.py [--events N]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._report import table, write_section
from snumap_tui import store
from snumap_tui.analysis.synth import synthetic_events
from snumap_tui.trace.events import EVENT_DTYPE, MIGRATE, SWITCH, WAKEUP, EventBatch


def sched_trace(n_events: int, n_cpus: int, n_threads: int, seed: int = 0,
                threads_per_process: int = 8) -> np.ndarray:
    """Realistic-looking switch/wakeup/migrate events, time-sorted (see module docstring)."""
    rng = np.random.default_rng(seed)
    n_sw = int(n_events * 0.62)
    per_cpu = n_sw // n_cpus
    n_sw = per_cpu * n_cpus
    cpu = np.repeat(np.arange(n_cpus, dtype=np.int64), per_cpu)
    # slice lengths: log-normal around 50 µs, from ~2 µs to tens of ms
    dur = np.exp(rng.normal(np.log(50_000), 1.6, n_sw)).astype(np.int64) + 500
    start = np.full(n_sw, 1_000_000_000_000, dtype=np.int64)
    for c in range(n_cpus):
        s = slice(c * per_cpu, (c + 1) * per_cpu)
        start[s] += np.cumsum(dur[s]) + int(rng.integers(0, 100_000))
    home = rng.integers(0, max(1, n_threads // n_cpus), n_sw) * n_cpus + cpu
    tid_next = np.where(rng.random(n_sw) < 0.8, 10_000 + home % n_threads, 0)
    roam = rng.random(n_sw) < 0.05
    tid_next[roam] = 10_000 + rng.integers(0, n_threads, int(roam.sum()))
    tid_prev = np.empty(n_sw, dtype=np.int64)
    tid_prev[1:] = tid_next[:-1]
    first = np.arange(0, n_sw, per_cpu)
    tid_prev[first] = 0

    def pid_of(t: np.ndarray) -> np.ndarray:
        return np.where(t == 0, 0, 10_000 + (t - 10_000) // threads_per_process
                        * threads_per_process)

    sw = np.zeros(n_sw, dtype=EVENT_DTYPE)
    sw["t_ns"] = start
    sw["cpu"] = cpu
    sw["kind"] = SWITCH
    sw["tid"], sw["tid2"] = tid_prev, tid_next
    sw["pid"], sw["pid2"] = pid_of(tid_prev), pid_of(tid_next)
    sw["arg"] = np.where(tid_prev == 0, 0, rng.choice([0, 1, 2], n_sw, p=[0.3, 0.65, 0.05]))
    woken = np.flatnonzero(tid_next != 0)
    n_wk = min(len(woken), int(n_events * 0.34))
    pick = rng.choice(woken, n_wk, replace=False)
    wk = np.zeros(n_wk, dtype=EVENT_DTYPE)
    wk["t_ns"] = start[pick] - rng.integers(1_000, 30_000, n_wk)
    wk["cpu"] = cpu[pick]
    wk["kind"] = WAKEUP
    wk["tid"], wk["pid"] = tid_next[pick], pid_of(tid_next[pick])
    wk["tid2"], wk["pid2"] = -1, -1
    n_mg = max(0, n_events - n_sw - n_wk)
    mg = np.zeros(n_mg, dtype=EVENT_DTYPE)
    mpick = rng.choice(woken, n_mg)
    mg["t_ns"] = start[mpick] - rng.integers(30_000, 60_000, n_mg)
    mg["cpu"] = cpu[mpick]
    mg["kind"] = MIGRATE
    mg["tid"], mg["pid"] = tid_next[mpick], pid_of(tid_next[mpick])
    mg["tid2"], mg["pid2"] = -1, -1
    mg["arg"] = rng.integers(0, n_cpus, n_mg)
    ev = np.concatenate([sw, wk, mg])
    return ev[np.argsort(ev["t_ns"], kind="stable")]


def per_cpu_batches(ev: np.ndarray, batch: int, n_cpus: int) -> list[np.ndarray]:
    """How a per-CPU ring reader hands events over: batches of one CPU's events at a time."""
    out = []
    for lo in range(0, ev.size, batch * n_cpus):
        window = ev[lo:lo + batch * n_cpus]
        for c in range(n_cpus):
            part = window[window["cpu"] == c]
            if part.size:
                out.append(part)
    return out


def write_run(ev: np.ndarray, batches: list[np.ndarray], path: Path) -> tuple[float, int]:
    """Seconds to push every batch through Writer and close it; bytes on disk."""
    t = time.perf_counter()
    w = store.Writer(path, {"bench": True}, force=True)
    for b in batches:
        w.add_events(EventBatch(b))
    w.close()
    return time.perf_counter() - t, path.stat().st_size


def read_runs(path: Path, n: int) -> dict[str, float]:
    t = time.perf_counter()
    rec = store.open(path)
    t_open = time.perf_counter() - t
    tracemalloc.start()
    t = time.perf_counter()
    ev = rec.events()
    t_all = time.perf_counter() - t
    _, peak_all = tracemalloc.get_traced_memory()
    del ev
    tracemalloc.stop()
    tracemalloc.start()
    t = time.perf_counter()
    cols = rec.event_columns(("t_ns", "cpu", "kind", "tid2"))
    t_cols = time.perf_counter() - t
    _, peak_cols = tracemalloc.get_traced_memory()
    del cols
    tracemalloc.stop()
    t_lo, t_hi = rec.t_start, rec.t_end
    mid = t_lo + (t_hi - t_lo) // 2
    t = time.perf_counter()
    win = rec.events(mid, mid + (t_hi - t_lo) // 100)
    t_seek = time.perf_counter() - t
    rec.close()
    return {"open_ms": t_open * 1e3, "all_mev_s": n / t_all / 1e6,
            "all_b_ev": peak_all / n, "cols_mev_s": n / t_cols / 1e6,
            "cols_b_ev": peak_cols / n, "seek_ms": t_seek * 1e3, "seek_n": win.size}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=3_000_000)
    ap.add_argument("--no-report", action="store_true", help="print only")
    args = ap.parse_args()
    n = args.events
    cases = [("sched chains, 2 CPUs, 200 threads", 2, 200),
             ("sched chains, 16 CPUs, 300 threads", 16, 300),
             ("sched chains, 64 CPUs, 500 threads", 64, 500)]
    rows_w, rows_r = [], []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.rec"
        runs = [(name, sched_trace(n, c, th), c) for name, c, th in cases]
        runs.append(("analysis.synth (uniform times), 64 CPUs",
                     synthetic_events(n, list(range(64)), n_threads=500,
                                      duration_ns=n * 500), 64))
        for name, ev, n_cpus in runs:
            batches = per_cpu_batches(ev, 512, n_cpus)
            best = min(write_run(ev, batches, path)[0] for _ in range(3))
            size = path.stat().st_size
            span_s = (int(ev["t_ns"][-1]) - int(ev["t_ns"][0])) / 1e9
            rows_w.append([name, f"{n / 1e6:.1f} M", f"{n / span_s / 1e6:.2f} M/s",
                           f"{n / best / 1e6:.2f}", f"{size / n:.2f}",
                           f"{size / 1e6:.1f}"])
            r = read_runs(path, n)
            rows_r.append([name, f"{r['open_ms']:.1f}", f"{r['all_mev_s']:.1f}",
                           f"{r['all_b_ev']:.0f}", f"{r['cols_mev_s']:.1f}",
                           f"{r['cols_b_ev']:.0f}", f"{r['seek_ms']:.1f} ({r['seek_n']} ev)"])
            print(rows_w[-1], rows_r[-1], flush=True)
    body = (
        "Writer.add_events in per-CPU batches of ~512 events (as a ring reader hands them over),"
        " zstd level 3, 65 536 events per chunk, to a file on local disk, closed with its index;"
        " best of 3, one Python thread. Targets: >= 2 M events/s, <= 12 bytes/event.\n\n"
        + table(["events", "n", "event rate in trace", "write M events/s (1 core)",
                 "bytes/event on disk", "file MB"], rows_w)
        + "\nReading back the same file: `store.open`, all events as EVENT_DTYPE rows, the four"
        " columns a core-vs-time view needs (`event_columns(('t_ns','cpu','kind','tid2'))`),"
        " and a 1 % time window from the middle. Peak memory by tracemalloc (numpy allocations),"
        " per event.\n\n"
        + table(["events", "open ms", "events() M/s", "events() peak B/ev",
                 "4 columns M/s", "4 columns peak B/ev", "1 % window ms"], rows_r))
    print(body)
    if not args.no_report:
        write_section("store_pipeline", "Recording store: user-space pipeline", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
