"""Observer, part (c): a context-switch storm on every PU, and the drain's decoder per core.

1. The storm (storm.c, 8 pairs of processes ping-ponging one byte over pipes on 16 PUs; PUs/2
   pairs by default), built at run time from the directory given with ``--programs`` (it is
   not part of this repository), recorded three ways, each alone: ``snumap record
   --system-wide`` with and without ``--events task-clock,context-switches``, and ``perf
   sched record -a`` (the peer that loses nothing there but writes ~107 bytes an event).
   Reported: the storm's own round trips a second, events kept and lost (and counter records
   lost), bytes per event kept.
2. The decoder on a synthetic dump of ``--dump-events`` (30 M) events of ``--cpus`` (16)
   rings with a counter record per switch (tests/ringdump.synthesize: the rings' bytes as the
   kernel lays them out, generated drain by drain, never stored), through each stage of the
   recorder's pipeline on this machine, CPU time per stage: the drain thread (ring bytes ->
   time-ordered events, counter rows), the main thread (switch-ins placed, task table, the
   Writer's buffers) and the Writer's flusher thread (columns, shuffling, zstd, write). The
   decoder before (the rings' records joined, decoded on the main thread) runs on the same
   dump, and both must give the same events (a digest of every batch). From the per-stage
   ns/event: the rate each stage sustains on one core, and the cores 3 M events/s need.
   With the storm part, the same on the storm's own rings, read raw while it runs again
   (tests/ringdump.capture).

Needs root (BPF, perf) for part 1; ``--skip-storm`` runs part 2 alone. storm.c is looked
for in ``--programs DIR`` (default: ../shared/programs beside the checkout, as
bench/observer.py does). Run briefly: ``python bench/observer_storm.py --seconds 2
--dump-events 2000000``; the figures for docs/benchmarks.md: ``python bench/observer.py c``
(= ``python bench/observer_storm.py``) on a quiet machine, and on a 16-PU one for part 1.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._report import table, write_section
from snumap_tui import store
from snumap_tui.recording.runtime import merge_drains
from snumap_tui.trace.bpf_layout import load_layout
from snumap_tui.trace.bpf_ring import decode_fixed, rings_events
from snumap_tui.trace.counters import ring_dtype
from tests.ringdump import COUNTERS, EVENTS, RingDump, capture, offline_tracer, synthesize

SNUMAP = [sys.executable, "-m", "snumap_tui.cli"]
PROGRAMS = Path(__file__).resolve().parents[2] / "shared" / "programs"
COUNTER_EVENTS = ["task-clock", "context-switches"]
TARGET = 3e6                    # events a second: the 16-PU storm of issue 29


# ---- 1. the storm, recorded ---------------------------------------------------------------------

def build_storm(programs: Path, work: Path) -> Path:
    src = programs / "storm.c"
    if not src.is_file():
        raise SystemExit(f"observer_storm: no storm.c in {programs} (--programs DIR)")
    exe = work / "storm"
    subprocess.run(["cc", "-O2", "-o", str(exe), str(src)], check=True)
    return exe


def _rate(text: str) -> str:
    m = re.search(r"([\d.]+) round trips/s", text)
    return f"{float(m.group(1)) / 1e3:.0f} k" if m else "?"


def record_snumap(storm: list[str], out: Path, counters: bool) -> list[object]:
    cmd = [*SNUMAP, "record", "--system-wide", "-o", str(out), "--force"]
    if counters:
        cmd += ["--events", ",".join(COUNTER_EVENTS)]
    r = subprocess.run([*cmd, "--", *storm], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        return ["failed: " + (r.stderr.strip().splitlines() or ["?"])[-1], "", "", "", ""]
    with store.open(out) as rec:
        kept = sum(c[2] for c in rec.event_chunks)
        lost = sum(rec.lost.values())
        clost = sum(row[0] for i in rec.infos if i.get("what") == "counter records lost"
                    for row in i["rows"])
    size = out.stat().st_size
    share = 100 * lost / max(kept + lost, 1)
    return [_rate(r.stdout), f"{kept / 1e6:.2f} M", f"{lost / 1e6:.2f} M ({share:.0f} %)",
            f"{clost}" if counters else "-", f"{size / max(kept, 1):.1f}"]


def record_perf(storm: list[str], out: Path) -> list[object]:
    if not shutil.which("perf"):
        return ["perf not installed", "", "", "", ""]
    r = subprocess.run(["perf", "sched", "record", "-a", "-o", str(out), "--", *storm],
                       capture_output=True, text=True, check=False)
    stats = subprocess.run(["perf", "report", "-i", str(out), "--stats"], capture_output=True,
                           text=True, check=False).stdout
    sample = re.search(r"SAMPLE events:\s+(\d+)", stats)
    lost = re.search(r"LOST events:\s+(\d+)", stats)
    lost_samples = re.search(r"LOST_SAMPLES events:\s+(\d+)", stats)
    kept = int(sample.group(1)) if sample else 0
    n_lost = (int(lost.group(1)) if lost else 0) + (int(lost_samples.group(1)) if lost_samples
                                                    else 0)
    size = out.stat().st_size if out.exists() else 0
    return [_rate(r.stdout), f"{kept / 1e6:.2f} M", f"{n_lost} records" if n_lost else "0",
            "-", f"{size / max(kept, 1):.0f}"]


def storm_part(storm: list[str], work: Path) -> str:
    pairs, seconds = int(storm[1]), float(storm[2])
    rows = [["snumap record --system-wide", *record_snumap(storm, work / "a.rec", False)],
            ["snumap record --system-wide --events task-clock,context-switches",
             *record_snumap(storm, work / "b.rec", True)],
            ["perf sched record -a", *record_perf(storm, work / "perf.data")]]
    header = ["recorder", "storm round trips/s", "events kept", "lost", "counter records lost",
              "bytes/event"]
    return (f"`storm {pairs} {seconds:g}` ({pairs} pairs of processes ping-ponging over "
            f"pipes) on {os.cpu_count()} PUs, each recorder alone:\n\n" + table(header, rows))


# ---- 2. the decoder per core --------------------------------------------------------------------

def run_pipeline(make: Callable[[], Iterator[dict[tuple[int, int], bytes]]], work: Path,
                 new: bool) -> dict[str, float]:
    """The drains MAKE gives through one decoder and the Writer; CPU seconds per stage, and a
    digest of every batch."""
    rec, _, _ = load_layout()
    cdt = ring_dtype(len(COUNTER_EVENTS), 0)
    t = offline_tracer(work, COUNTER_EVENTS)
    digest = hashlib.sha256()
    drain_cpu = main_cpu = gen_cpu = 0.0
    n = 0
    out = work / ("new.rec" if new else "old.rec")

    def decode(group: list[np.ndarray], w: store.Writer) -> int:
        if not new and t._cdrained:      # before, the decode widened the records it took
            parts, t._cdrained = t._cdrained, []
            t._cdrained = [t._widen(np.concatenate(parts))]
        k = 0
        for raw in merge_drains(group):
            batch = t.decode(raw)
            k += len(batch.events)
            digest.update(batch.events.tobytes())
            w.add_events(batch)
        return k

    p0, w0 = time.process_time(), time.perf_counter()
    # Before, the Writer encoded and compressed on the thread that added the batches: without
    # its flusher thread it still does.
    with store.Writer(out, {"bench": "observer_storm"}, force=True, autoflush=new) as w:
        w.counter_events = COUNTER_EVENTS
        group: list[np.ndarray] = []
        drains = make()
        while True:
            c0 = time.thread_time()      # making the dump is no stage's work
            drain = next(drains, None)
            gen_cpu += time.thread_time() - c0
            if drain is None:
                break
            evs = [b for (s, _c), b in sorted(drain.items()) if s == EVENTS]
            cs = [b for (s, _c), b in sorted(drain.items()) if s == COUNTERS]
            c0 = time.thread_time()
            crec = np.concatenate([decode_fixed(b, cdt)[0] for b in cs])
            if new:                  # the drain thread's work today
                group.append(rings_events(evs, rec))
                t._cdrained.append(t._widen(crec))
            else:                    # before: joined records, decoded later
                group.append(np.concatenate([decode_fixed(b, rec)[0] for b in evs]))
                t._cdrained.append(crec)
            drain_cpu += time.thread_time() - c0
            del drain, evs, cs
            if len(group) < 10:      # the Drainer's queue between two polls of the main thread
                continue
            c0 = time.thread_time()
            n += decode(group, w)
            group = []
            main_cpu += time.thread_time() - c0
        c0 = time.thread_time()
        n += decode(group, w)
        while t._cdrained:
            w.add_events(t.decode(np.zeros(0, rec)))
        main_cpu += time.thread_time() - c0
    total = time.process_time() - p0
    return {"events": n, "drain": drain_cpu, "main": main_cpu,
            "writer": max(total - gen_cpu - drain_cpu - main_cpu, 0.0), "wall": time.perf_counter() - w0,
            "bytes": out.stat().st_size, "digest": digest.hexdigest()}


def decoder_rows(make: Callable[[], Iterator[dict[tuple[int, int], bytes]]], work: Path
                 ) -> tuple[str, str, float]:
    """The table of both decoders on MAKE's drains, whether they agree, and the events."""
    new = run_pipeline(make, work, new=True)
    old = run_pipeline(make, work, new=False)
    same = new["digest"] == old["digest"] and new["events"] == old["events"]
    rows = []
    for label, r in (("before: one Python thread decodes and writes", old),
                     ("drain decodes, Writer's flusher encodes", new)):
        n = r["events"]
        ns = {k: 1e9 * r[k] / n for k in ("drain", "main", "writer")}
        busiest = max(ns.values())
        rows.append([label, f"{n / 1e6:.1f} M", f"{ns['drain']:.0f}", f"{ns['main']:.0f}",
                     f"{ns['writer']:.0f}", f"{sum(ns.values()):.0f}",
                     f"{1e3 / busiest:.2f}", f"{TARGET * sum(ns.values()) / 1e9:.2f}",
                     f"{r['bytes'] / n:.2f}"])
    header = ["pipeline", "events", "drain ns/event", "main ns/event", "writer ns/event",
              "CPU ns/event", "M events/s (busiest stage, one core each)",
              "cores for 3 M events/s", "bytes/event"]
    verdict = ("the same events, in the same order, from both decoders" if same else
               "**the decoders DIFFER**")
    return table(header, rows), verdict, new["events"]


NOTE = ("\nCPU time per stage (thread CPU; the Writer's is the process's rest). The stages run "
        "on three threads with the GIL released in numpy and zstd: the rate the pipeline keeps "
        "is at best that of its busiest stage on its own core; \"cores for 3 M events/s\" is "
        "the CPU the recorder spends at the 16-PU storm's rate. The synthetic dump's slices "
        "and counter values are log-normal (harder to compress than a storm's, so the writer's "
        "stage costs more there).\n")


def decoder_part(args: argparse.Namespace, work: Path, storm: list[str] | None) -> str:
    out = []
    body, verdict, n = decoder_rows(
        lambda: synthesize(args.dump_events, args.cpus, args.threads, args.per_drain), work)
    out.append(f"Decoder on a synthetic dump of {n / 1e6:.1f} M events from {args.cpus} "
               f"rings ({args.threads} threads, a counter record of {len(COUNTER_EVENTS)} "
               f"events per switch, {args.per_drain} events a drain): {verdict}.\n\n" + body)
    if storm is not None:
        dump = capture_storm(storm)
        body, verdict, n = decoder_rows(dump.drains, work)
        out.append(f"\nDecoder on the storm's own rings ({n / 1e6:.2f} M events of "
                   f"{len(dump.cpus)} rings, {len(COUNTER_EVENTS)} counters, read every 10 "
                   f"ms while `storm "
                   f"{' '.join(storm[1:])}` ran): {verdict}.\n\n" + body)
    return "".join(out) + NOTE


def capture_storm(storm: list[str]) -> RingDump:
    """The rings' bytes while STORM runs (its first 0.3 s left out), counting the events."""
    p = subprocess.Popen(storm, stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        return capture(max(float(storm[2]) - 0.6, 0.5), COUNTER_EVENTS)
    finally:
        p.wait()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--programs", type=Path, default=os.environ.get("SNUMAP_BENCH_PROGRAMS")
                    or PROGRAMS, help="the directory holding storm.c (default: the shared "
                    "programs beside the checkout, as bench/observer.py finds them)")
    ap.add_argument("--pairs", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--skip-storm", action="store_true")
    ap.add_argument("--dump-events", type=int, default=30_000_000)
    ap.add_argument("--cpus", type=int, default=16)
    ap.add_argument("--threads", type=int, default=32)
    ap.add_argument("--per-drain", type=int, default=30_000)
    ap.add_argument("--no-write", action="store_true", help="print only (a check run)")
    args = ap.parse_args(argv)
    parts = []
    storm: list[str] = []
    with tempfile.TemporaryDirectory(prefix="snumap-storm-") as d:
        work = Path(d)
        if not args.skip_storm:
            storm = [str(build_storm(args.programs, work)), str(args.pairs), str(args.seconds)]
            parts.append(storm_part(storm, work))
            print(parts[-1], flush=True)
        parts.append(decoder_part(args, work, None if args.skip_storm else storm))
        print(parts[-1], flush=True)
    if not args.no_write:
        write_section("observer_storm", "Observer (c): switch storm and the drain's decoder",
                      "\n".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
