"""Replay of a big recording: 10 M scheduling events on a 384-PU machine.

Measures, on a recording written through the store API (synthetic topology pack:2 numa:4
core:24 pu:2, synthetic busy-machine events, see snumap_tui.analysis.synth):
- time to open the file and show the first core-vs-time screen (whole recording, 120x40):
  the headless path (open, intervals, render) and the Textual app until its first Gantt redraw;
- time to redraw after a zoom in, a pan, a deep zoom (1 ms on screen) and a zoom back out;
- peak memory: tracemalloc's peak during open + first screen, per event, and ru_maxrss.
Targets (issue 6): first screen <= 2 s, redraw <= 100 ms, memory <= 30 bytes per event.

Each measurement runs in a fresh interpreter so peaks do not include the generator.
    python bench/replay.py [--events N] [--keep FILE]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

W, H = 120, 40


def make(path: Path, n_events: int) -> float:
    from snumap_tui.analysis.synth import synthetic_events, synthetic_topology, write_recording
    from snumap_tui.trace.events import TaskInfo

    topo = synthetic_topology(2, 4, 24, 2, host="bench384")
    cpus = list(topo.pu_os_indexes)
    parts = 10
    per = n_events // parts
    dur = 60 * 10**9 // parts          # one minute in all

    def gen():
        for k in range(parts):
            yield synthetic_events(per, cpus, n_threads=768, duration_ns=dur,
                                   t0_ns=10**9 + k * dur, seed=k)
    tasks = [TaskInfo(1000 + i, 1000 + i // 16 * 16, f"rank{i // 16}" if i % 16 == 0
                      else f"rank{i // 16}-t{i % 16}") for i in range(768)]
    t = time.perf_counter()
    write_recording(path, topo, gen(), tasks=tasks, header={"backend": "synthetic"})
    return time.perf_counter() - t


def measure(path: str) -> dict[str, float]:
    """Runs in a child: open + first screen + redraws, with tracemalloc."""
    import gc
    import resource
    import tracemalloc

    t = time.perf_counter()
    from snumap_tui.store import open as open_recording
    from snumap_tui.ui.gantt import GanttState, render_gantt
    from snumap_tui.ui.replay_data import load_replay
    imports = time.perf_counter() - t
    # Timed first without tracemalloc (it slows every allocation, and the decode thread's),
    # then the peak memory of a second, traced open + first screen.
    t = time.perf_counter()
    rec = open_recording(path)
    data = load_replay(rec)
    t_load = time.perf_counter() - t
    st = GanttState(data.t0, data.t1)
    t2 = time.perf_counter()
    render_gantt(data, st, W, H)
    t_first = time.perf_counter() - t2
    n = rec.event_count
    out = {"events": n, "intervals": len(data.intervals), "imports_s": imports,
           "load_s": t_load, "render_first_s": t_first, "first_screen_s": t_load + t_first,
           "intervals_bytes_per_event": data.intervals.nbytes / n}
    del data, rec
    gc.collect()
    tracemalloc.start()          # after the imports: what the recording costs, not the code
    t = time.perf_counter()
    rec = open_recording(path)
    data = load_replay(rec)
    st = GanttState(data.t0, data.t1)
    render_gantt(data, st, W, H)
    out["traced_first_screen_s"] = time.perf_counter() - t
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    out["peak_bytes_per_event"] = peak / n
    out["maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    def redraw(name: str) -> None:
        times = []
        for _ in range(5):
            t = time.perf_counter()
            render_gantt(data, st, W, H, cursor_t=(st.t0 + st.t1) // 2)
            times.append(time.perf_counter() - t)
        out[name] = sorted(times)[len(times) // 2]

    mid = (data.t0 + data.t1) // 2
    st.t0, st.t1 = mid - (data.t1 - data.t0) // 4, mid + (data.t1 - data.t0) // 4
    redraw("redraw_zoom_in_s")
    shift = (st.t1 - st.t0) // 4
    st.t0, st.t1 = st.t0 + shift, st.t1 + shift
    redraw("redraw_pan_s")
    st.row0 = 200
    redraw("redraw_scroll_rows_s")
    st.t0, st.t1 = mid, mid + 1_000_000
    redraw("redraw_1ms_s")
    st.t0, st.t1, st.row0 = data.t0, data.t1, 0
    redraw("redraw_whole_s")
    return out


def measure_app(path: str) -> dict[str, float]:
    """Runs in a child: the Textual app, from open to its first Gantt redraw."""
    import asyncio

    t = time.perf_counter()
    from snumap_tui.commands.replay import load_for_ui
    from snumap_tui.store import open as open_recording
    data = load_for_ui(open_recording(path))       # what `snumap replay FILE` does
    from snumap_tui.ui.replay import GanttView, ReplayApp

    async def go() -> tuple[float, float]:
        app = ReplayApp(data)
        async with app.run_test(size=(W, H)) as pilot:
            gv = app.query_one(GanttView)
            while gv.painted == 0:
                await asyncio.sleep(0.001)
            first = time.perf_counter() - t
            # Key event in, to the compositor asking for the new lines: the app's own latency.
            # (Pilot.press would add its idle detection: two sleeps of 20 ms or more.)
            times = []
            for key in ("plus", "shift+right", "minus", "down", "plus", "shift+left", "0", "up"):
                await pilot.pause()
                r0 = gv.redraws
                t1 = time.perf_counter()
                app.simulate_key(key)
                while gv.redraws == r0 or gv.painted < gv.redraws:
                    await asyncio.sleep(0.0005)
                times.append(time.perf_counter() - t1)
            await pilot.press("q")
        return first, sorted(times)[len(times) // 2]

    first, key = asyncio.run(go())
    return {"app_first_screen_s": first, "app_key_redraw_s": key}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--keep", metavar="FILE", help="write (or reuse) the recording here")
    ap.add_argument("--child", choices=("measure", "app"))
    ap.add_argument("file", nargs="?")
    a = ap.parse_args()
    if a.child:
        fn = measure if a.child == "measure" else measure_app
        print(json.dumps(fn(a.file)))
        return 0
    tmp = tempfile.TemporaryDirectory()
    path = Path(a.keep) if a.keep else Path(tmp.name) / "bench384.rec"
    gen_s = None
    if not path.exists():
        gen_s = make(path, a.events)
    res: dict[str, float] = {}
    for child in ("measure", "app"):
        out = subprocess.run([sys.executable, __file__, "--child", child, str(path)],
                             capture_output=True, text=True, check=True)
        res.update(json.loads(out.stdout.strip().splitlines()[-1]))
    size = path.stat().st_size
    for k, v in res.items():
        print(f"{k:28} {v:.4g}" if isinstance(v, float) else f"{k:28} {v}")
    from _report import table, write_section

    ok = (lambda v, lim: "yes" if v <= lim else "**no**")
    rows = [
        ["open + first core-vs-time screen (headless)", f"{res['first_screen_s']:.2f} s",
         "2 s", ok(res["first_screen_s"], 2)],
        ["  of which reading + intervals", f"{res['load_s']:.2f} s", "", ""],
        ["  of which binning + drawing 120x40", f"{res['render_first_s'] * 1e3:.0f} ms", "", ""],
        ["open + first screen in the Textual app", f"{res['app_first_screen_s']:.2f} s", "2 s",
         ok(res["app_first_screen_s"], 2)],
        ["redraw after zoom in (half the recording)", f"{res['redraw_zoom_in_s'] * 1e3:.0f} ms",
         "100 ms", ok(res["redraw_zoom_in_s"], 0.1)],
        ["redraw after pan", f"{res['redraw_pan_s'] * 1e3:.0f} ms", "100 ms",
         ok(res["redraw_pan_s"], 0.1)],
        ["redraw after scrolling to PU 200", f"{res['redraw_scroll_rows_s'] * 1e3:.0f} ms",
         "100 ms", ok(res["redraw_scroll_rows_s"], 0.1)],
        ["redraw zoomed to 1 ms", f"{res['redraw_1ms_s'] * 1e3:.1f} ms", "100 ms",
         ok(res["redraw_1ms_s"], 0.1)],
        ["redraw of the whole recording", f"{res['redraw_whole_s'] * 1e3:.0f} ms", "100 ms",
         ok(res["redraw_whole_s"], 0.1)],
        ["key event to repaint in the app (median of 8 keys)",
         f"{res['app_key_redraw_s'] * 1e3:.0f} ms",
         "100 ms", ok(res["app_key_redraw_s"], 0.1)],
        [("peak traced memory per event (a second, traced run: "
          f"{res['traced_first_screen_s']:.2f} s under tracemalloc)"),
         f"{res['peak_bytes_per_event']:.1f} B", "30 B",
         ok(res["peak_bytes_per_event"], 30)],
        ["  run intervals kept, per event", f"{res['intervals_bytes_per_event']:.1f} B", "", ""],
        ["max RSS of the process (with Python, numpy, rich)", f"{res['maxrss_mb']:.0f} MB",
         "", ""],
        ["imports (snumap, numpy, rich) before the first screen", f"{res['imports_s']:.2f} s",
         "", ""],
    ]
    body = (f"{res['events']:,} events ({res['intervals']:,} run intervals) on a synthetic "
            f"384-PU topology (pack:2 numa:4 core:24 pu:2), one minute; file "
            f"{size / 2**20:.0f} MB"
            + (f", written through the store API in {gen_s:.0f} s" if gen_s else "") + ".\n\n"
            + table(["what", "measured", "target", "met"], rows)
            + "\nThe first screen is timed without tracemalloc; the memory peak comes from a second "
            "open + first screen with it on. Key latency: from the key event posted to the app "
            "(zoom in, pan right, zoom out, row down, zoom in, pan left, whole recording, row up) "
            "until the compositor asks the chart for the new lines (Pilot.press would add its own "
            "idle detection, two sleeps of 20 ms or more).\n")
    write_section("replay", "snumap replay: 10 M events on 384 PUs", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
