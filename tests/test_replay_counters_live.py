"""The replay's process view on a real recording made with ``snumap record --events
task-clock,page-faults`` (software events, counted per run interval by the libbpf backend):
a thread that touches fresh pages shows its faults per ms under its CPU row, and the figure
at the cursor follows the cursor."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_replay import run_pilot

from snumap_tui.analysis.counter_figures import ThreadSeries, columns, figures
from snumap_tui.store import open as open_recording
from snumap_tui.trace.libbpf import LibbpfTracer
from snumap_tui.ui.process_view import ProcessPanel
from snumap_tui.ui.replay import ReplayApp

pytestmark = pytest.mark.skipif(not LibbpfTracer.status().available,
                                reason="the libbpf backend cannot run here (root, BTF)")

PROG = r"""
import mmap, threading, time
def fault():
    for _ in range(4):
        m = mmap.mmap(-1, 32 << 20)
        for i in range(0, 32 << 20, 4096):
            m[i] = 1
        m.close()
        time.sleep(0.05)
time.sleep(0.3)
t = threading.Thread(target=fault)
t.start()
t.join()
"""


def test_real_recording_shows_page_faults_per_thread(tmp_path: Path) -> None:
    rec_path = tmp_path / "real.rec"
    (tmp_path / "prog.py").write_text(PROG)
    r = subprocess.run([sys.executable, "-m", "snumap_tui.cli", "record", "-o", str(rec_path),
                        "--backend", "libbpf", "--events", "task-clock,page-faults", "--",
                        sys.executable, str(tmp_path / "prog.py")],
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    with open_recording(rec_path) as rec:
        s = ThreadSeries(rec.thread_counters())
        t0 = int(rec.header["start_monotonic_ns"])
    assert s.events == ["task-clock", "page-faults"]
    faults = figures(s.events)[1]
    # The faulting thread: the one with the most page faults; 32768 pages touched in all.
    edges = np.linspace(t0, t0 + 5 * 10**9, 501).astype(np.int64)
    per = {t: columns(s, t, edges, faults) for t in s.tids()}
    tid = max(per, key=lambda t: np.nansum(per[t]))
    assert np.nansum(per[tid]) * 10 >= 32768       # per ms over 10 ms columns
    peak = edges[int(np.nanargmax(per[tid]))] + 5 * 10**6

    def at_cursor(panel: ProcessPanel) -> float:
        head = "".join(seg.text for seg in panel.lines[0])
        m = re.search(r"page-faults/ms at cursor ([0-9.]+)", head)
        assert m, head
        return float(m.group(1))

    async def steps(app: ReplayApp, pilot) -> None:
        await pilot.press("p", "X")                  # page-faults/ms
        await pilot.pause()
        panel = app.query_one(ProcessPanel)
        text = ["".join(seg.text for seg in line) for line in panel.lines]
        assert any(line.lstrip().startswith("page-fa") for line in text[1:]), text
        quiet = at_cursor(panel)                     # the interpreter asleep, no thread yet
        app.set_cursor(peak)
        await pilot.pause()
        assert at_cursor(panel) > max(10 * quiet, 100.0)      # thousands of faults a ms
    run_pilot(rec_path, (120, 40), steps, at_ns=250 * 10**6)
