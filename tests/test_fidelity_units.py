"""The parts of issue 32's fidelity fixes that need no root, no perf and no compiler: name
records out of the eBPF rings, the kernel's peak from /proc/PID/status, run time after
inferred switch-ins marked (tests/test_fidelity.py has the same-run comparisons)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from snumap_tui.analysis.intervals import build_intervals
from snumap_tui.trace import events as ev


def test_name_records_and_vmhwm_parse() -> None:
    from snumap_tui.sources.procmem import parse_vmhwm
    from snumap_tui.trace.tasks import TaskTable, take_names

    assert parse_vmhwm("Name:\tx\nVmHWM:\t   76800 kB\nVmRSS:\t 1 kB\n") == 76800 * 1024
    assert parse_vmhwm("Name:\tzombie\nState:\tZ\n") is None
    e = ev.empty_events(3)
    e["kind"] = [ev.SWITCH, ev.COMM, ev.COMM]
    e["t_ns"] = [1, 2, 3]
    e["tid"], e["pid"] = 7, 5
    for i, name in ((1, b"threes"), (2, b"t-sleep-and-more")):
        raw = np.frombuffer(name.ljust(16, b"\0"), dtype=np.uint8)
        e["arg"][i] = raw[:8].view("<i8")[0]
        e["tid2"][i] = raw[8:12].view("<i4")[0]
        e["pid2"][i] = raw[12:].view("<i4")[0]
    rest, names = take_names(e)
    assert rest["kind"].tolist() == [ev.SWITCH]
    assert [(n.tid, n.pid, n.comm, n.t_ns) for n in names] == \
        [(7, 5, "threes", 2), (7, 5, "t-sleep-and-more", 3)]
    table = TaskTable()
    table.learn_names(names)
    got = table.take_infos()
    assert [(i.comm, i.t_ns) for i in got] == [("threes", 2), ("t-sleep-and-more", 3)]


def test_run_time_after_an_inferred_switch_in_is_marked() -> None:
    """CPU 0: 5 runs 0-10, idle; an inferred switch-in of 7 at 30 (arg -1), 7 out at 50;
    one seen at the switch's end (arg -2) of 8 at 60, 8 out at 70; 9 switched in by a traced
    switch at 70 runs to the end (100). Only 7's 20 ns rest on an inference."""
    rows = [(10, 5, 0, 0), (30, 0, 7, -1), (50, 7, 0, 1), (60, 0, 8, -2), (70, 8, 9, 1)]
    e = ev.empty_events(len(rows))
    for i, (t, a, b, arg) in enumerate(rows):
        e[i]["t_ns"], e[i]["kind"], e[i]["tid"], e[i]["tid2"], e[i]["arg"] = t, ev.SWITCH, a, b, arg
    iv = build_intervals(e, [0], 0, 100)
    assert iv.inferred_ns == {7: 20}
    _, start, end, tid = iv.flat()
    assert list(zip(start.tolist(), end.tolist(), tid.tolist())) == \
        [(0, 10, 5), (30, 50, 7), (60, 70, 8), (70, 100, 9)]
    # split over two windows: the carried interval keeps its mark
    from snumap_tui.analysis.intervals import IntervalBuilder

    b = IntervalBuilder([0], 0)
    b.feed(e[:2])
    b.feed(e[2:])
    assert b.finish(100).inferred_ns == {7: 20}


def test_the_reports_inferred_note_is_wrapped_not_cut(tmp_path: Path) -> None:
    """The note on run time after inferred switch-ins says its count of threads and their
    time whole (cut at 80 columns it lost "threads," to "th")."""
    from snumap_tui import store
    from snumap_tui.analysis.report import build_report, format_report
    from snumap_tui.analysis.synth import synthetic_topology, write_recording
    from snumap_tui.trace.events import TaskInfo

    t0 = 10**9
    rows = [(10, 5, 0, 0), (30, 0, 7, -1), (50, 7, 0, 1), (60, 0, 8, -2), (70, 8, 9, 1)]
    e = ev.empty_events(len(rows))
    for i, (t, a, b, arg) in enumerate(rows):
        e[i]["t_ns"], e[i]["kind"], e[i]["arg"] = t0 + t * 1000, ev.SWITCH, arg
        e[i]["tid"], e[i]["tid2"], e[i]["pid"], e[i]["pid2"] = a, b, a, b
    path = write_recording(tmp_path / "inferred.rec", synthetic_topology(1, 1, 1, 1), e,
                           tasks=[TaskInfo(tid=t, pid=t, comm=f"c{t}", t_ns=t0)
                                  for t in (5, 7, 8, 9)])
    with store.open(path) as rec:
        text = format_report(build_report(rec))
    lines = text.splitlines()
    at = next(i for i, ln in enumerate(lines) if "RUN s includes" in ln)
    note = lines[at:at + 2]
    assert "inferred: 1 threads, 0.000020 s in all (--json: inferred_s per thread)" in \
        " ".join(ln.strip() for ln in note)
    assert all(len(ln) <= 80 for ln in note)
