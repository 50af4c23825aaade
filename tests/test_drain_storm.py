"""A context-switch storm on every PU of this machine, recorded system-wide with counters per
run interval, loses nothing: no scheduling event, no counter record (issue 29 item 4; the
16-PU figure is bench/observer_storm.py's). The storm is pairs of processes handing one byte
back and forth over pipes, one pair per PU, built here with the system's C compiler."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from snumap_tui.store import open as open_recording
from snumap_tui.trace.libbpf import LibbpfTracer

pytestmark = pytest.mark.skipif(not LibbpfTracer.status().available or not shutil.which("cc"),
                                reason="needs the libbpf backend (root, BTF) and a C compiler")

PINGPONG = r"""
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
/* PAIRS pairs of processes, each passing a byte to its partner and back, for SECS seconds. */
int main(int argc, char **argv) {
    int pairs = atoi(argv[1]);
    double secs = atof(argv[2]);
    for (int p = 0; p < pairs; p++) {
        int there[2], back[2];
        if (pipe(there) || pipe(back)) return 1;
        if (fork() == 0) {                      /* the echo: returns what comes */
            close(there[1]); close(back[0]);
            char c;
            while (read(there[0], &c, 1) == 1 && write(back[1], &c, 1) == 1) {}
            _exit(0);
        }
        if (fork() == 0) {                      /* the player: sends until time is up */
            close(there[0]); close(back[1]);
            struct timespec t0, t;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            char c = 'x';
            for (long n = 1;; n++) {
                if (write(there[1], &c, 1) != 1 || read(back[0], &c, 1) != 1) break;
                if (n % 4096 == 0) {
                    clock_gettime(CLOCK_MONOTONIC, &t);
                    if (t.tv_sec - t0.tv_sec + (t.tv_nsec - t0.tv_nsec) / 1e9 > secs) break;
                }
            }
            close(there[1]);
            _exit(0);
        }
        close(there[0]); close(there[1]); close(back[0]); close(back[1]);
    }
    while (wait(NULL) > 0) {}
    return 0;
}
"""


def test_a_storm_on_every_pu_with_counters_loses_nothing(tmp_path: Path) -> None:
    src = tmp_path / "pingpong.c"
    src.write_text(PINGPONG)
    prog = tmp_path / "pingpong"
    subprocess.run(["cc", "-O2", "-o", str(prog), str(src)], check=True)
    out = tmp_path / "storm.rec"
    pus = len(os.sched_getaffinity(0))
    r = subprocess.run([sys.executable, "-m", "snumap_tui.cli", "record", "--system-wide",
                        "--backend", "libbpf", "--events", "task-clock,context-switches",
                        "-o", str(out), "--", str(prog), str(pus), "2"],
                       check=False, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    with open_recording(out) as rec:
        n = sum(c[2] for c in rec.event_chunks)
        lost = sum(rec.lost.values())
        rows = len(rec.thread_counters().rows)
        counter_lost = [i for i in rec.infos if i.get("what") == "counter records lost"]
    # Two seconds of ping-pong on every PU: hundreds of thousands of switches a second here.
    assert n > 200_000, r.stderr
    assert lost == 0, f"{lost} of {n + lost} events lost: {r.stderr}"
    assert rows > n // 4
    assert counter_lost and all(row == [0] for i in counter_lost for row in i["rows"]), \
        counter_lost
    assert " 0 lost" in r.stderr
