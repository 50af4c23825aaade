"""The recording ends when it was asked to: what the tracer hands over while it is detached
is cut at that moment (names and lost counts are kept)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np

from snumap_tui import store
from snumap_tui.recording.session import _until
from snumap_tui.trace.events import EventBatch, TaskInfo, empty_events


def test_until_drops_only_later_events() -> None:
    ev = empty_events(4)
    ev["t_ns"] = [10, 20, 30, 40]
    batch = EventBatch(events=ev, tasks=[TaskInfo(5, 5, "x")], lost={0: 3})
    cut = _until(batch, 30)
    assert cut.events["t_ns"].tolist() == [10, 20, 30]
    assert cut.tasks == batch.tasks and cut.lost == {0: 3}
    assert _until(batch, 40) is batch


def test_duration_is_the_span_recorded(tmp_path: Path) -> None:
    out = tmp_path / "d.rec"
    proc = subprocess.run([sys.executable, "-m", "snumap_tui.cli", "record", "--backend", "proc",
                           "--duration", "1s", "-o", str(out)], capture_output=True, text=True,
                          check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    said = re.search(r"recorded ([0-9.]+) s", proc.stderr)
    assert said, proc.stderr
    with store.open(out) as rec:
        times = np.concatenate([rec.events()["t_ns"], rec.sample_times])
    span = (int(times.max()) - int(times.min())) / 1e9
    assert 0.9 <= span <= 1.25, span
    assert said.group(1) == f"{span:.3f}"          # the summary says the file's span
