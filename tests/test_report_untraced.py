"""A recording of a command in a busy system: switch partners outside the traced tree
(pid/pid2 = OUTSIDE) are "other (not traced)", never tasks with run times of their own.

The events are written through the store API with known times; the tracers' own marking is
checked on hand-made events (perf's user-space filter) and live in test_trace_backends.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from snumap_tui.analysis.binning import OTHER, bin_rows
from snumap_tui.analysis.intervals import UNTRACED, build_intervals
from snumap_tui.analysis.report import build_report, format_report
from snumap_tui.analysis.synth import synthetic_topology, write_recording
from snumap_tui.store import open as open_recording
from snumap_tui.trace.events import FORK, OUTSIDE, SWITCH, TaskInfo
from snumap_tui.trace.perf import PerfTracer
from tests.test_analysis import make_events

T0, T1 = 1000, 10000
X = OUTSIDE
# The traced command: 101 and 102 of process 100. 900 (a kworker) and 901 (btop) are not in
# its tree; the tracer kept their switches because a traced task was on the other side, or
# because they went idle on a PU the command used.
BUSY_SYSTEM = [
    (2000, SWITCH, 0, 0, 101, 0, 100, 0),        # PU 0: idle -> 101
    (3000, SWITCH, 0, 101, 900, 100, X, 0),      # 101 preempted by the kworker
    (3500, SWITCH, 0, 900, 0, X, 0, 1),          # kworker -> idle (an idle edge)
    (4000, SWITCH, 0, 0, 101, 0, 100, 0),
    (6000, SWITCH, 0, 101, 901, 100, X, 0),      # 101 -> btop
    (7000, SWITCH, 0, 901, 102, X, 100, 0),      # btop -> 102
    (9000, SWITCH, 0, 102, 0, 100, 0, 1),
    (2500, SWITCH, 1, 901, 102, X, 100, 0),      # PU 1: btop ran from the start until 2500
    (5000, SWITCH, 1, 102, 0, 100, 0, 1),
]
TASKS = [TaskInfo(101, 100, "cmd"), TaskInfo(102, 100, "cmd-worker")]


@pytest.fixture()
def busy_recording(tmp_path: Path) -> Path:
    topo = synthetic_topology(1, 1, 2, 1, host="testhost")
    return write_recording(tmp_path / "busy.rec", topo, make_events(BUSY_SYSTEM), tasks=TASKS,
                           markers=[(T0, "command start"), (T1, "command exit: status 0")],
                           header={"backend": "test", "system_wide": False})


def test_report_lists_only_the_traced_tree_with_exact_run_times(busy_recording: Path) -> None:
    with open_recording(busy_recording) as rec:
        r = build_report(rec)
    tasks = {t["tid"]: t for t in r["tasks"]}
    assert sorted(tasks) == [101, 102]
    assert tasks[101]["runtime_s"] == pytest.approx(3000e-9)
    assert tasks[101]["cpus"] == {"0": pytest.approx(3000e-9)}
    assert tasks[102]["runtime_s"] == pytest.approx(4500e-9)
    assert tasks[102]["cpus"] == {"0": pytest.approx(2000e-9), "1": pytest.approx(2500e-9)}
    assert [p["pid"] for p in r["processes"]] == [100]
    # Other work: 500 + 1000 ns on PU 0 (kworker, btop), 1500 ns on PU 1 (btop before 2500);
    # the kworker's idle edge ends its time at 3500, not at 101's return at 4000.
    u = r["untraced"]
    assert u["runtime_s"] == pytest.approx(3000e-9)
    assert u["cpus"] == {"0": pytest.approx(1500e-9), "1": pytest.approx(1500e-9)}
    busy = {c["cpu"]: (c["busy_s"], c["untraced_s"]) for c in r["cpus"]}
    assert busy[0] == (pytest.approx(6500e-9), pytest.approx(1500e-9))
    assert busy[1] == (pytest.approx(4000e-9), pytest.approx(1500e-9))
    text = format_report(r)
    assert "other" in text and "not traced" in text
    assert " 900 " not in text and " 901 " not in text


def test_old_recordings_without_the_marker_read_as_before() -> None:
    # Partners with pid -1 (recordings made before OUTSIDE): charged to the partner as before.
    old = [(t, k, c, a, b, -1 if p == X else p, -1 if q == X else q, s)
           for t, k, c, a, b, p, q, s in BUSY_SYSTEM]
    iv = build_intervals(make_events(old), [0, 1], T0, T1)
    assert UNTRACED not in np.concatenate(iv.tid).tolist()
    assert 901 in iv.tid[1].tolist()


def test_gantt_shows_untraced_time_as_other() -> None:
    iv = build_intervals(make_events(BUSY_SYSTEM), [0, 1], T0, T1)
    # Nine columns of 1000 ns from T0: PU 1's first cell (1000-2000) is all btop's.
    g = bin_rows(iv, [0, 1], T0, T1, 9)
    assert g.key[1, 0] == OTHER and g.busy[1, 0] == pytest.approx(1.0)
    assert g.key[0, 5] == OTHER            # 6000-7000 on PU 0: btop
    assert g.key[0, 1] == 101 and g.key[0, 6] == 102
    # A filter to one task keeps other work grey as well.
    g = bin_rows(iv, [0, 1], T0, T1, 9, only_key=102)
    assert g.key[1, 0] == OTHER and g.key[1, 2] == 102


def _tracer_following(tids: set[int]) -> PerfTracer:
    t = PerfTracer()
    t._tracked = set(tids)
    return t


def test_perf_filter_marks_partners_outside_and_keeps_idle_edges() -> None:
    ev = make_events([
        (100, SWITCH, 1, 0, 900, 0, -1, 0),      # before the tree ever ran on PU 1: dropped
        (150, SWITCH, 1, 900, 901, -1, -1, 0),   # two untraced tasks: dropped
        (200, FORK, 0, 101, 102, 100, -1, 0),    # 102 joins the tree
        (300, SWITCH, 1, 901, 102, -1, -1, 0),   # kept: 901 is outside
        (400, SWITCH, 1, 102, 900, 100, -1, 1),  # kept: 900 is outside
        (500, SWITCH, 1, 900, 905, -1, -1, 0),   # untraced -> untraced: dropped
        (600, SWITCH, 1, 905, 0, -1, 0, 1),      # idle edge on a PU the tree used: kept
        (700, SWITCH, 0, 0, 907, 0, -1, 0),      # idle edge, but the tree never ran on PU 0
    ])
    out = _tracer_following({101})._follow(ev)
    sw = out[out["kind"] == SWITCH]
    assert sw["t_ns"].tolist() == [300, 400, 600]
    assert sw["pid"].tolist() == [OUTSIDE, 100, OUTSIDE]
    assert sw["pid2"].tolist() == [-1, OUTSIDE, 0]


def _shared_pus(intruder_traced: bool) -> list[tuple[int, ...]]:
    """Threads 101 and 102 (process 100) each own a PU, and swap PUs halfway; another task
    takes 30 % of each PU, preempting them 100 times a PU. INTRUDER_TRACED: that task is a
    third thread of the traced process (oversubscription), else outside the traced tree."""
    rows = []
    q = 100 if intruder_traced else X
    for k in range(100):
        t = 20_000 + k * 1000
        for cpu, (a, b) in enumerate([(101, 102), (102, 101)]):
            mine = a if k < 50 else b
            other = 103 if intruder_traced else 900 + cpu
            rows.append((t, SWITCH, cpu, other, mine, q, 100, 1))        # it sleeps
            rows.append((t + 700, SWITCH, cpu, mine, other, 100, q, 0))  # mine preempted
    return rows


@pytest.mark.parametrize("traced", [False, True])
def test_preemptions_by_untraced_load_are_not_oversubscription(tmp_path: Path,
                                                               traced: bool) -> None:
    topo = synthetic_topology(1, 1, 2, 1, host="testhost")
    tasks = [*TASKS, TaskInfo(103, 100, "cmd-third")] if traced else TASKS
    rec = write_recording(tmp_path / "o.rec", topo, make_events(_shared_pus(traced)),
                          tasks=tasks, header={"backend": "test", "system_wide": False},
                          markers=[(20_000, "command start"), (120_000, "command exit")])
    with open_recording(rec) as r:
        rep = build_report(r)
    kinds = {f["kind"]: f["text"] for f in rep["findings"]}
    if traced:       # a third traced thread: the traced threads do oversubscribe
        assert "oversubscribed" in kinds and "untraced_load" not in kinds, kinds
        return
    assert "oversubscribed" not in kinds, kinds           # 2 threads on 2 PUs
    assert "untraced load" in kinds["untraced_load"] and "PU 0 (100 preemptions" in \
        kinds["untraced_load"], kinds
    assert [c["preemptions_untraced"] for c in rep["cpus"]] == [100, 100]
