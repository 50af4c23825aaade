"""Merging a job's node recordings: N nodes of M scheduling events each (generated).

Each node is a 2-package, 32-PU machine (synthetic topology pack:2 numa:2 core:4 pu:2) with
synthetic busy-machine events over one minute, its monotonic clock offset from the others by
a known amount, written through the store API as `snumap record --job` would (header with
node, job, pid_max, clock readings). Measured, each in a fresh interpreter:
- `snumap merge`'s work (store.merge.merge): wall time, events per second, ru_maxrss of the
  process and tracemalloc's peak (what Python allocated: the bounded part);
- replay's first core-vs-time screen of the merged job (open, run intervals of the whole
  recording, binning and drawing 120x40), headless, with its ru_maxrss.
Targets (issue 11): >= 10 M events/s merged, first screen <= 2 s.

    python bench/merge.py [--scales 16x1000000,64x1000000] [--no-replay] [--dir D] [--write-doc]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

WALL = 1_790_000_000_000_000_000


def make_node(path: Path, k: int, n_events: int) -> None:
    from snumap_tui.analysis.synth import synthetic_events, synthetic_topology
    from snumap_tui.store import Writer
    from snumap_tui.trace.events import EventBatch, TaskInfo

    topo = synthetic_topology(2, 2, 4, 2, host=f"cn{k:03d}")
    cpus = list(topo.pu_os_indexes)
    mono0 = (1000 + 37 * k) * 10**9          # every node booted at another time
    offset = WALL - mono0
    clock = {"t_monotonic_ns": mono0, "wall_minus_monotonic_ns": offset, "uncertainty_ns": 40,
             "ntp": {"synced": True, "maxerror_ns": 1_000_000, "esterror_ns": 1000}}
    header = {"host": f"cn{k:03d}", "node": f"cn{k:03d}", "job": {"system": "slurm", "id": "7"},
              "pid_max": 4194304, "clock_start": clock, "start_monotonic_ns": mono0,
              "start_wall_ns": WALL, "backend": "synthetic", "topology": topo.to_dict()}
    parts = max(1, n_events // 250_000)
    per = n_events // parts
    dur = 60 * 10**9 // parts
    with Writer(path, header, force=True, autoflush=False) as w:
        w.add_events(EventBatch(tasks=[TaskInfo(1000 + i, 1000 + i // 16 * 16, f"rank{i}")
                                       for i in range(64)]))
        for p in range(parts):
            ev = synthetic_events(per, cpus, n_threads=64, duration_ns=dur,
                                  t0_ns=mono0 + p * dur, seed=k * 1000 + p)
            for i in range(0, len(ev), 65536):
                w.add_events(EventBatch(events=ev[i:i + 65536]))
        w.add_info(mono0, "job processes", {
            "columns": ["pid", "comm", "step", "node", "rank", "rank_var"],
            "rows": [[1000 + 16 * r, f"rank{r}", "0", f"cn{k:03d}", k * 4 + r, "PMI_RANK"]
                     for r in range(4)]})
        w.add_info(mono0 + 60 * 10**9, "clock end", {
            "clock": {**clock, "t_monotonic_ns": mono0 + 60 * 10**9}, "tid_max": w.tid_max})


def child_merge(files: list[str], out: str) -> dict[str, float]:
    import resource
    import tracemalloc

    from snumap_tui.store.merge import merge

    tracemalloc.start()
    t = time.perf_counter()
    res = merge(files, out, overwrite=True)
    dt = time.perf_counter() - t
    _, peak = tracemalloc.get_traced_memory()
    return {"merge_s": dt, "events": res.events, "py_peak_mb": peak / 2**20,
            "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "out_mb": os.path.getsize(out) / 2**20}


def child_replay(path: str) -> dict[str, float]:
    import resource

    t = time.perf_counter()
    from snumap_tui.store import open as open_recording
    from snumap_tui.ui.gantt import GanttState, render_gantt
    from snumap_tui.ui.replay_data import first_nodes, load_replay

    t_imp = time.perf_counter() - t
    t = time.perf_counter()
    rec = open_recording(path)
    # As `snumap replay` does: the nodes of the first screen's rows, then the others (in the
    # app, in a thread while that screen is up).
    nodes = first_nodes(rec)
    data = load_replay(rec, nodes)
    t_load = time.perf_counter() - t
    t = time.perf_counter()
    st = GanttState(data.t0, data.t1)
    render_gantt(data, st, 120, 40)
    t_render = time.perf_counter() - t
    t = time.perf_counter()
    if data.pending:
        data.adopt(load_replay(rec))
        render_gantt(data, st, 120, 40)
    t_rest = time.perf_counter() - t
    t = time.perf_counter()
    data.fold(None, fold=True)
    render_gantt(data, st, 120, 40)
    t_fold = time.perf_counter() - t
    return {"import_s": t_imp, "load_s": t_load, "render_s": t_render,
            "first_screen_s": t_load + t_render, "first_nodes": len(nodes or ()),
            "every_node_s": t_load + t_render + t_rest, "fold_all_render_s": t_fold,
            "replay_maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def in_child(fn: str, *args: object) -> dict[str, float]:
    code = (f"import sys, json; sys.path.insert(0, {str(REPO / 'bench')!r}); import merge; "
            f"print(json.dumps(merge.{fn}(*json.loads(sys.argv[1]))))")
    p = subprocess.run([sys.executable, "-c", code, json.dumps(list(args))],
                       capture_output=True, text=True, check=True)
    return json.loads(p.stdout.strip().splitlines()[-1])


def run_scale(nodes: int, events: int, d: str, replay: bool) -> dict[str, float]:
    files = []
    t = time.perf_counter()
    for k in range(nodes):
        f = Path(d) / f"job-7-cn{k:03d}-{events}.rec"
        if not f.exists():            # --dir keeps the generated nodes for the next run
            make_node(f, k, events)
        files.append(str(f))
    res: dict[str, float] = {"nodes": nodes, "events_per_node": events,
                             "generate_s": time.perf_counter() - t,
                             "in_mb": sum(os.path.getsize(f) for f in files) / 2**20}
    out = str(Path(d) / f"job-{nodes}x{events}.rec")
    # the floor: the same bytes copied by cat (page cache warm for both)
    t = time.perf_counter()
    subprocess.run(f"cat {' '.join(files)} > {out}.cat", shell=True, check=True)
    res["cat_s"] = time.perf_counter() - t
    os.unlink(out + ".cat")
    res.update(in_child("child_merge", files, out))
    res["merged_events_per_s"] = res["events"] / res["merge_s"]
    print(json.dumps(res), file=sys.stderr, flush=True)
    if replay:
        res.update(in_child("child_replay", out))
    Path(out).unlink()
    return res


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scales", default="16x1000000,64x1000000",
                    help="NODESxEVENTS,... (default 16x1000000,64x1000000)")
    ap.add_argument("--no-replay", action="store_true")
    ap.add_argument("--dir", default=None, help="keep the generated node recordings here")
    ap.add_argument("--write-doc", action="store_true", help="write docs/benchmarks.md")
    args = ap.parse_args()
    results = []
    with contextlib.ExitStack() as stack:
        d = args.dir or stack.enter_context(tempfile.TemporaryDirectory(
            prefix="snumap-bench-merge-"))
        Path(d).mkdir(parents=True, exist_ok=True)
        for scale in args.scales.split(","):
            n, e = (int(x) for x in scale.lower().split("x"))
            results.append(run_scale(n, e, d, not args.no_replay))
    load = os.getloadavg()
    print(json.dumps(results, indent=1))
    if args.write_doc:
        write_doc(results, load)
    return 0


NOTE = ("\n\nThe first screen reads only the nodes whose PU rows it shows, so its time no longer grows "
        "with the job: the rest (about 0.1 us per event here, the same pipeline as one machine's "
        "replay) is read behind it, and the header says `reading N more nodes` until then. What "
        "needs every node (scrolling to a later node, folding every node, the whole job's "
        "colours) is complete once that is done. Folding every node bins every PU row of the "
        "whole range, hence its cost.")


def write_doc(results: list[dict[str, float]], load: tuple[float, float, float]) -> None:
    sys.path.insert(0, str(REPO / "bench"))
    from _report import table, write_section

    def ok(v: float, target: float, higher: bool = False) -> str:
        return "yes" if (v >= target if higher else v <= target) else "no"

    rows = []
    for r in results:
        scale = f"{r['nodes']} x {r['events_per_node'] / 1e6:g} M"
        rows.append([scale, "merge: time", f"{r['merge_s']:.2f} s", "", ""])
        rows.append([scale, "merge: events/s", f"{r['merged_events_per_s'] / 1e6:.1f} M/s",
                     ">= 10 M/s", ok(r["merged_events_per_s"], 10e6, True)])
        rows.append([scale, "merge: cat of the same bytes (floor)", f"{r['cat_s']:.2f} s",
                     "", f"merge/cat {r['merge_s'] / max(r['cat_s'], 1e-9):.1f}x"])
        rows.append([scale, "merge: Python peak (tracemalloc) / ru_maxrss",
                     f"{r['py_peak_mb']:.1f} MB / {r['maxrss_mb']:.0f} MB",
                     f"in {r['in_mb']:.0f} MB", ""])
        if "first_screen_s" in r:
            first = (f"the nodes of its rows ({r['first_nodes']:.0f}) read first"
                     if r.get("first_nodes") else "every node read")
            rows.append([scale, f"replay: open + first core-vs-time screen 120x40 ({first})",
                         f"{r['first_screen_s']:.2f} s", "<= 2 s", ok(r["first_screen_s"], 2)])
            rows.append([scale, "replay: every node read and drawn (behind the first screen)",
                         f"{r['every_node_s']:.2f} s", "", ""])
            rows.append([scale, "replay: fold every node, redraw", f"{r['fold_all_render_s']:.2f} s",
                         "", ""])
            rows.append([scale, "replay: ru_maxrss", f"{r['replay_maxrss_mb']:.0f} MB", "", ""])
    body = (f"Load average at the end: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} (the machine may "
            "be shared: a load near its 2 cores inflates every time here).\n\n"
            "Generated nodes (2 packages, 32 PUs, one minute of synthetic busy-machine events, "
            "clocks offset per node) written through the store API; merged by "
            "`store.merge.merge` in a fresh interpreter; then replay's first screen of the "
            "merged job (headless: open, run intervals, bin and draw), as `snumap replay` reads it: a "
            "job of 4 nodes or more shows the nodes of its first 80 PU rows first and reads the "
            "others in a thread while that screen is up (`ui/replay_data.first_nodes`).\n\n"
            + table(["nodes x events", "measure", "value", "target", "met"], rows) + NOTE)
    write_section("merge", "snumap merge: a job's node recordings into one", body)


if __name__ == "__main__":
    raise SystemExit(main())
