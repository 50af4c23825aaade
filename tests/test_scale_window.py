"""A run's `(program)` time in `snumap scale` ends at the program's exit event, not at the
"command exit" marker the recorder writes once it has noticed the exit and reaped the child
(issue 32 item 8)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from snumap_tui import store
from snumap_tui.study.measure import command_window, measure
from snumap_tui.trace import events as ev

SNUMAP = [sys.executable, "-m", "snumap_tui.cli"]


class _Rec:
    """A recording's markers, header and exit events (what command_window reads)."""

    def __init__(self, header: dict, markers: list, exits: list[tuple[int, int]]) -> None:
        self.header, self.markers = header, markers
        self.t_start, self.t_end = 0, 10_000
        self._exits = exits

    def iter_event_columns(self, fields, t0, t1):
        t = np.array([x[0] for x in self._exits], np.uint64)
        keep = (t >= t0) & (t < t1)
        yield {"t_ns": t[keep], "kind": np.full(int(keep.sum()), ev.EXIT, np.uint8),
               "pid": np.array([x[1] for x in self._exits], np.int32)[keep]}


def test_window_ends_at_the_commands_exit_event() -> None:
    marks = [(1000, "command start: prog"), (9000, "command exit: status 0")]
    # the command (pid 7) exits at 4000 (its last thread at 4100); a grandchild left behind
    # exits at 5000; the marker comes at 9000
    rec = _Rec({"command_pid": 7}, marks, [(4000, 7), (4100, 7), (5000, 8), (9500, 7)])
    assert command_window(rec) == (1000, 4100)
    # an older recording (no command_pid): the last exit of any traced thread
    assert command_window(_Rec({}, marks, [(4000, 7), (5000, 8)])) == (1000, 5000)
    # no exit event seen (proc backend): the marker
    assert command_window(_Rec({"command_pid": 7}, marks, [])) == (1000, 9000)
    # no markers: the recording
    assert command_window(_Rec({}, [], [(4000, 7)])) == (0, 10_000)


@pytest.mark.skipif(os.geteuid() != 0, reason="recording needs root")
def test_program_time_of_a_real_recording(tmp_path: Path) -> None:
    out = tmp_path / "r.rec"
    subprocess.run([*SNUMAP, "record", "--regions", "none", "-o", str(out), "--",
                    "sleep", "0.25"], check=True, capture_output=True, timeout=120)
    with store.open(out) as rec:
        pid = rec.header["command_pid"]
        marks = {text.split(":")[0]: int(t) for t, text in rec.markers}
        e = rec.events()
    exits = e[(e["kind"] == ev.EXIT) & (e["pid"] == pid)]
    assert len(exits), "the command's exit event is recorded"
    t_exit = int(exits["t_ns"].max())
    assert marks["command start"] < t_exit < marks["command exit"]
    m = measure(out)
    assert m["program"]["time_s"] == pytest.approx((t_exit - marks["command start"]) / 1e9,
                                                   abs=1e-9)
    # the sleep itself at least, and less than the marker says (the recorder's reaping)
    assert 0.25 <= m["program"]["time_s"] < (marks["command exit"] - marks["command start"]) / 1e9
