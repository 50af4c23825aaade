"""Regions of real programs, compiled here: an OpenMP program (gcc + libgomp, clang + libomp)
with a known number of parallel regions, one of them imbalanced; an MPI program of 2 ranks
whose rank 1 sleeps before each barrier; a shell script writing markers. Recorded with
``snumap record`` as a user would, checked through ``snumap report --json``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from snumap_tui.trace.uprobes import pmu_type

SNUMAP = [sys.executable, "-m", "snumap_tui.cli"]
ITER = 4                 # balanced + imbalanced regions per run
WORK_CALLS = 7
MPI_N, MPI_SLEEP_US = 3, 300_000     # long sleeps: a loaded machine adds ~15 ms a barrier

OMP_SRC = r"""
#include <omp.h>
#include <stdlib.h>
static volatile double sink;
static void spin(double ms) {
    double t0 = omp_get_wtime();
    while ((omp_get_wtime() - t0) * 1e3 < ms) sink += 1.0;
}
__attribute__((noinline)) void work(int i) { sink += i; }
int main(void) {
    for (int i = 0; i < %(iter)d; i++) {
        #pragma omp parallel num_threads(2)
        { spin(4); }
        #pragma omp parallel num_threads(2)
        { spin(omp_get_thread_num() == 0 ? 40 : 2); }
    }
    #pragma omp parallel num_threads(2)
    {
        spin(1);
        #pragma omp barrier
        spin(1);
    }
    for (int i = 0; i < %(work)d; i++) work(i);
    return 0;
}
"""

MPI_SRC = r"""
#include <mpi.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
int main(int argc, char **argv) {
    int rank;
    double slept = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int x = 0;               /* both ranks start the timed part together (not in MPI_Barrier) */
    MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < %(n)d; i++) {
        if (rank == 1) {            /* the sleep as it happened: wake-up latency included */
            double t = now();
            usleep(%(us)d);
            slept += now() - t;
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
    if (rank == 1) printf("slept %%.6f\n", slept);
    MPI_Finalize();
    return 0;
}
"""

MARKERS_SH = """#!/bin/sh
echo "begin load" > "$SNUMAP_MARKERS"
sleep 0.05
echo "end load" > "$SNUMAP_MARKERS"
echo "mark checkpoint" > "$SNUMAP_MARKERS"
echo "this is not a marker" > "$SNUMAP_MARKERS"
echo "end never-begun" > "$SNUMAP_MARKERS"
echo "begin load" > "$SNUMAP_MARKERS"
sleep 0.02
echo "end load" > "$SNUMAP_MARKERS"
"""

needs_uprobes = pytest.mark.skipif(os.geteuid() != 0 or pmu_type() is None,
                                   reason="uprobes need root and the uprobe PMU")


def _compile(cc: list[str], src: str, out: Path) -> Path:
    if shutil.which(cc[0]) is None:
        pytest.skip(f"{cc[0]} is not installed")
    c = out.with_suffix(".c")
    c.write_text(src)
    r = subprocess.run([*cc, str(c), "-o", str(out)], check=False, capture_output=True,
                       text=True)
    if r.returncode != 0:
        pytest.skip(f"{' '.join(cc)} cannot build the test program: {r.stderr[-200:]}")
    return out


def _record(tmp: Path, name: str, cmd: list[str], *extra: str) -> tuple[dict, str]:
    report, err, _out = _record_out(tmp, name, cmd, *extra)
    return report, err


def _record_out(tmp: Path, name: str, cmd: list[str], *extra: str) -> tuple[dict, str, str]:
    rec = tmp / f"{name}.rec"
    r = subprocess.run([*SNUMAP, "record", "-o", str(rec), *extra, "--", *cmd],
                       check=False, capture_output=True, text=True, timeout=120, cwd=tmp)
    assert r.returncode == 0, r.stderr
    rep = subprocess.run([*SNUMAP, "report", str(rec), "--json"], capture_output=True,
                         text=True, timeout=60, check=True)
    return json.loads(rep.stdout), r.stderr, r.stdout


def _by_name(report: dict) -> dict[str, dict]:
    return {g["name"]: g for g in report["regions"]}


def _check_omp(report: dict, barrier: str) -> None:
    regs = _by_name(report)
    parallel = sorted((g for g in report["regions"] if g["role"] == "parallel"),
                      key=lambda g: g["name"])
    assert sorted(g["count"] for g in parallel) == [1, ITER, ITER], parallel
    assert regs[barrier]["count"] == 1 and regs[barrier]["wait"]
    # The imbalanced region (the second in the source, line 14 or 15) is the first finding.
    imb = max(parallel, key=lambda g: g["imbalance_waste_s"])
    assert ":14)" in imb["name"] or ":15)" in imb["name"], imb["name"]
    assert imb["imbalance"] > 1.5
    first = report["findings"][0]
    assert first["kind"] == "imbalanced_region" and first["region"] == imb["name"]
    assert all(len(g["threads"]) == 2 for g in parallel)


@needs_uprobes
def test_openmp_gcc_regions_counts_and_imbalance(tmp_path: Path) -> None:
    src = OMP_SRC % {"iter": ITER, "work": WORK_CALLS}
    prog = _compile(["gcc", "-g", "-O1", "-fopenmp"], src, tmp_path / "omp_gcc")
    report, err = _record(tmp_path, "gcc", [str(prog)], "--probe", f"{prog}:work")
    assert "libgomp" in err and "OpenMP region bodies" in err
    _check_omp(report, "GOMP_barrier")
    regs = _by_name(report)
    assert any(n.startswith("main._omp_fn.") and "omp_gcc.c:" in n for n in regs)
    assert regs["work"]["count"] == WORK_CALLS and regs["work"]["kind"] == "user"
    text = subprocess.run([*SNUMAP, "report", str(tmp_path / "gcc.rec")], capture_output=True,
                          text=True, check=True).stdout
    assert "Regions (by wall time" in text and "GOMP_barrier" in text


@needs_uprobes
def test_openmp_clang_libomp_regions(tmp_path: Path) -> None:
    src = OMP_SRC % {"iter": ITER, "work": WORK_CALLS}
    prog = _compile(["clang", "-g", "-O1", "-fopenmp"], src, tmp_path / "omp_clang")
    report, err = _record(tmp_path, "clang", [str(prog)])
    assert "libomp" in err
    _check_omp(report, "__kmpc_barrier")


@needs_uprobes
def test_mpi_barrier_wait_of_the_fast_rank(tmp_path: Path) -> None:
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun is not installed")
    prog = _compile(["mpicc", "-O1"], MPI_SRC % {"n": MPI_N, "us": MPI_SLEEP_US},
                    tmp_path / "mpi_barrier")
    report, err, out = _record_out(tmp_path, "mpi", ["mpirun", "-np", "2", str(prog)])
    assert "MPI entry points" in err
    b = _by_name(report)["MPI_Barrier"]
    assert b["count"] == MPI_N and b["calls"] == 2 * MPI_N
    assert _by_name(report)["MPI_Allreduce"]["count"] == 1
    assert _by_name(report)["MPI_Init"]["count"] == 1
    waits = sorted(t["wait_s"] for t in b["threads"])
    # What rank 1 slept, as it measured it: on a loaded machine its wake-ups come late, and
    # rank 0 rightly waits for that too (~20 ms a barrier at load 8 here).
    injected = float(out.split("slept")[1].split()[0])
    assert injected >= MPI_N * MPI_SLEEP_US / 1e6
    fast = waits[-1]                        # the rank that did not sleep waited for the other
    assert abs(fast - injected) <= 0.1 * injected, (fast, injected)
    assert waits[0] < 0.5 * injected
    assert report["findings"][0]["kind"] == "waiting"
    trace = tmp_path / "mpi.json"
    subprocess.run([*SNUMAP, "export", str(tmp_path / "mpi.rec"), "--format", "chrome",
                    "-o", str(trace)], check=True, capture_output=True, timeout=60)
    ev = json.loads(trace.read_text())["traceEvents"]
    bars = [e for e in ev if e["ph"] == "X" and e["name"] == "MPI_Barrier"]
    assert len(bars) == 2 * MPI_N and all(e["cat"] == "mpi,wait" for e in bars)
    assert len({e["tid"] for e in bars}) == 2               # one track per rank
    pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    pf = tmp_path / "mpi.pftrace"
    subprocess.run([*SNUMAP, "export", str(tmp_path / "mpi.rec"), "--format", "perfetto",
                    "-o", str(pf)], check=True, capture_output=True, timeout=60)
    tr = pb.Trace()
    tr.ParseFromString(pf.read_bytes())
    thread_of = {p.track_descriptor.uuid: p.track_descriptor.thread.tid for p in tr.packet
                 if p.HasField("track_descriptor") and p.track_descriptor.HasField("thread")}
    pbars = [p for p in tr.packet if p.HasField("track_event")
             and p.track_event.name == "MPI_Barrier"]
    assert len(pbars) == 2 * MPI_N and all(tuple(p.track_event.categories) == ("mpi", "wait")
                                           for p in pbars)
    assert {thread_of[p.track_event.track_uuid] for p in pbars} == {e["tid"] for e in bars}


@needs_uprobes
def test_shell_markers_and_bad_lines(tmp_path: Path) -> None:
    sh = tmp_path / "markers.sh"
    sh.write_text(MARKERS_SH)
    sh.chmod(0o755)
    report, err = _record(tmp_path, "markers", [str(sh)])
    regs = _by_name(report)
    assert regs["load"]["kind"] == "marker" and regs["load"]["count"] == 2
    assert regs["load"]["wall_s"] >= 0.04       # stamped when read: a busy machine delays it
    assert regs["checkpoint"]["count"] == 1
    assert "never-begun" not in regs
    assert "not begin/end/mark NAME" in err and "without a 'begin'" in err
    out = tmp_path / "markers.json"
    subprocess.run([*SNUMAP, "export", str(tmp_path / "markers.rec"), "--format", "chrome",
                    "-o", str(out)], check=True, capture_output=True, timeout=60)
    ev = json.loads(out.read_text())["traceEvents"]
    slices = [e for e in ev if e["ph"] == "X" and e.get("cat") == "marker"]
    assert [e["name"] for e in slices] == ["load", "load"]
    # microseconds; the script sleeps 50 ms between begin and end, but lines are stamped when
    # snumap reads them, and a begin read late under a loaded test run shortens the slice
    assert slices[0]["dur"] >= 25_000
    assert [e["name"] for e in ev if e["ph"] == "i" and e.get("cat") == "marker"] == \
        ["checkpoint"]


def test_probe_errors_are_one_line(tmp_path: Path) -> None:
    for spec, msg in ((f"{tmp_path}/gone:main", "no such file"),
                      ("nocolon", "expected FILE:SYMBOL"),
                      (f"{sys.executable}:no_such_function_here", "no function")):
        r = subprocess.run([*SNUMAP, "record", "-o", str(tmp_path / "x.rec"), "--probe", spec,
                            "--", "true"], check=False, capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 2, r.stderr
        assert msg in r.stderr and "Traceback" not in r.stderr
        assert not (tmp_path / "x.rec").exists()


@needs_uprobes
def test_regions_none_records_no_regions(tmp_path: Path) -> None:
    prog = _compile(["gcc", "-O1", "-fopenmp"], OMP_SRC % {"iter": 1, "work": 1},
                    tmp_path / "omp_none")
    report, err = _record(tmp_path, "none", [str(prog)], "--regions", "none")
    assert report["regions"] == [] and "regions (none): off" in err


def _check_replay_by_region(rec_path: Path) -> None:
    """The core-vs-time view coloured by region: region names in the legend, a selected
    busy cell names its region, markers are ticks, and the keys reach them."""
    import asyncio

    from snumap_tui.store import open as open_rec
    from snumap_tui.ui.gantt import GanttState, cell_detail, render_gantt
    from snumap_tui.ui.replay import ReplayApp
    from snumap_tui.ui.replay_data import load_replay

    with open_rec(rec_path) as rec:
        data = load_replay(rec)
        assert data.regions is not None and "region" in data.modes
        st = GanttState(data.t0, data.t1, mode="region")
        out = render_gantt(data, st, 120, 20)
        shown = [data.key_name("region", k) for k, _ in out.legend]
        assert any("_omp_fn." in n for n in shown), shown
        legend = "".join(seg.text for seg in out.lines[-1])
        assert shown[0][:20] in legend
        assert "▼" in "".join(seg.text for seg in out.lines[0])      # command start/exit
        names = set(data.regions.names)
        busy = [(r, c) for r in range(out.bins.key.shape[0])
                for c in range(out.bins.key.shape[1]) if out.bins.key[r, c] > 0]
        assert busy
        st.sel_row, st.sel_col = busy[0]
        detail = cell_detail(data, st, out.bins, 200)
        assert any(n in detail for n in names), detail

        async def go() -> None:
            app = ReplayApp(data)
            async with app.run_test(size=(100, 30)) as pilot:
                await pilot.pause()
                await pilot.press("c", "c", "c")
                assert app.state.mode == "region"
                await pilot.press("end", "B")
                assert app.cursor_t in [t for t, _ in data.ticks]

        asyncio.run(go())


@needs_uprobes
def test_replay_by_region(tmp_path: Path) -> None:
    prog = _compile(["gcc", "-g", "-O1", "-fopenmp"], OMP_SRC % {"iter": 2, "work": 1},
                    tmp_path / "omp_replay")
    _record(tmp_path, "replay", [str(prog)])
    _check_replay_by_region(tmp_path / "replay.rec")


@needs_uprobes
def test_stripped_program_is_said_and_still_counted(tmp_path: Path) -> None:
    prog = _compile(["gcc", "-O1", "-fopenmp"], OMP_SRC % {"iter": 2, "work": 1},
                    tmp_path / "omp_stripped")
    if shutil.which("strip") is None:
        pytest.skip("strip (binutils) is not installed")
    subprocess.run(["strip", str(prog)], check=True)
    report, err = _record(tmp_path, "stripped", [str(prog)])
    assert "omp_stripped is stripped" in err
    spans = [g for g in report["regions"] if g["role"] == "parallel"]
    # No body names: the regions are named by address, still counted by GOMP_parallel.
    assert sorted(g["count"] for g in spans) == [1, 2, 2], spans


CALLS_SRC = r"""
#include <stdio.h>
static volatile long sink;
/* starts with loads and a compare: its probe moves to the jle (trace/probe_point.py) */
__attribute__((noinline)) long probed(long n) {
    long s = sink;
    for (long k = 0; k < n; k++) s += k;
    return s;
}
int main(void) {
    long total = 0;
    for (long i = 0; i < %(n)d; i++) total += probed(i %% 7);
    printf("%%ld\n", total);
    return 0;
}
"""


@needs_uprobes
def test_probe_past_the_prologue_sees_every_call_and_returns_right(tmp_path: Path) -> None:
    """A probe moved from the entry to the first emulated instruction: every call is one
    region (entry and return), and the program's results (return values, return addresses
    hijacked by the uretprobe there) are those of the untraced run."""
    from snumap_tui.trace.elfsyms import load_elf

    n = 3000
    prog = _compile(["gcc", "-O1", "-fcf-protection=none"], CALLS_SRC % {"n": n},
                    tmp_path / "calls")
    elf = load_elf(prog)
    entry, moved = elf.offset_of("probed"), elf.probe_offset("probed")
    assert entry is not None and moved is not None and moved > entry
    plain = subprocess.run([str(prog)], check=True, capture_output=True, text=True).stdout
    report, _err, out = _record_out(tmp_path, "calls", [str(prog)], "--regions", "none",
                                    "--probe", f"{prog}:probed")
    assert out == plain == f"{sum(i % 7 * (i % 7 - 1) // 2 for i in range(n))}\n"
    regs = _by_name(report)
    assert regs["probed"]["count"] == n and regs["probed"]["kind"] == "user"
