"""`snumap export --format perfetto`: the trace parsed back with Perfetto's own protos (the
`perfetto` PyPI package ships them compiled), and the scheduling rebuilt the way
trace_processor rebuilds it from CompactSched (ftrace_sched_event_tracker.cc: the first compact
switch of a CPU only says who runs; each later one closes the running slice; the last slice
stays open until the end of the trace). No trace_processor binary can run here: the `perfetto`
package downloads it on first use, and this machine has no network.
"""

from __future__ import annotations

import itertools
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from snumap_tui.analysis.intervals import UNTRACED
from snumap_tui.analysis.load import load
from snumap_tui.analysis.stats import task_stats
from snumap_tui.analysis.synth import synthetic_events, synthetic_topology, write_recording
from snumap_tui.cli import main
from snumap_tui.export import perfetto as P
from snumap_tui.export.protowire import encode_varints, varint
from snumap_tui.model.sample import Sample
from snumap_tui.store import metric_series
from snumap_tui.store import open as open_recording
from snumap_tui.trace.events import OUTSIDE, SWITCH, WAKEUP, TaskInfo
from tests.test_analysis import SCENARIO, T0, T1, make_events
from tests.test_report import TASKS

pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")


def parse(path: Path) -> Any:
    trace = pb.Trace()
    trace.ParseFromString(path.read_bytes())
    return trace


def compact(trace: Any) -> dict[int, dict[str, list[Any]]]:
    """Per CPU: switches (ts, prev_state, next_pid, comm) and wakings (ts, pid, comm), in the
    order of the file, timestamps decoded (first absolute in each bundle, then deltas)."""
    out: dict[int, dict[str, list[Any]]] = defaultdict(lambda: {"switch": [], "waking": []})
    for pkt in trace.packet:
        if not pkt.HasField("ftrace_events"):
            continue
        b = pkt.ftrace_events
        cs = b.compact_sched
        n = len(cs.switch_timestamp)
        assert len(cs.switch_prev_state) == len(cs.switch_next_pid) == n
        assert len(cs.switch_next_prio) == len(cs.switch_next_comm_index) == n
        ts = np.cumsum(np.array(cs.switch_timestamp, dtype=np.uint64)).tolist()
        for i in range(n):
            out[b.cpu]["switch"].append((ts[i], cs.switch_prev_state[i], cs.switch_next_pid[i],
                                         cs.intern_table[cs.switch_next_comm_index[i]]))
        m = len(cs.waking_timestamp)
        assert len(cs.waking_pid) == len(cs.waking_target_cpu) == len(cs.waking_prio) == m
        assert len(cs.waking_comm_index) == len(cs.waking_common_flags) == m
        ts = np.cumsum(np.array(cs.waking_timestamp, dtype=np.uint64)).tolist()
        for i in range(m):
            assert cs.waking_target_cpu[i] == b.cpu
            out[b.cpu]["waking"].append((ts[i], cs.waking_pid[i],
                                         cs.intern_table[cs.waking_comm_index[i]]))
    return out


def trace_end(trace: Any, sched: dict[int, dict[str, list[Any]]]) -> int:
    ends = [p.timestamp for p in trace.packet if p.HasField("timestamp")]
    ends += [ev[-1][0] for s in sched.values() for ev in s.values() if ev]
    return max(ends)


def run_time(trace: Any) -> dict[tuple[int, int], int]:
    """ns per (tid, cpu) as trace_processor's sched table has it (open slices to the end)."""
    sched = compact(trace)
    end = trace_end(trace, sched)
    out: dict[tuple[int, int], int] = defaultdict(int)
    for cpu, s in sched.items():
        sw = sorted(s["switch"], key=lambda e: e[0])        # stable: file order at equal ts
        for (t, _st, pid, _c), nxt in zip(sw, [*sw[1:], (end,)]):
            if pid:
                out[pid, cpu] += nxt[0] - t
    return dict(out)


def report_run_time(rec_path: Path, untraced_as: dict[int, int] | None = None
                    ) -> dict[tuple[int, int], int]:
    with open_recording(rec_path) as rec:
        stats = task_stats(load(rec).intervals, rec.topology)
    return {(tid, cpu): ns for tid, s in stats.items() for cpu, ns in s.cpus.items() if ns}


def export(rec: Path, out: Path, *extra: str) -> Any:
    assert main(["export", str(rec), "--format", "perfetto", "-o", str(out), *extra]) == 0
    return parse(out)


def test_field_numbers_are_perfettos() -> None:
    """Every field number written by hand is the one in Perfetto's protos."""
    def num(msg: Any, name: str) -> int:
        return int(msg.DESCRIPTOR.fields_by_name[name].number)

    cs = pb.FtraceEventBundle.CompactSched
    checks = [
        (P.TRACE_PACKET, pb.Trace, "packet"),
        (P.PKT_FTRACE_EVENTS, pb.TracePacket, "ftrace_events"),
        (P.PKT_PROCESS_TREE, pb.TracePacket, "process_tree"),
        (P.PKT_CLOCK_SNAPSHOT, pb.TracePacket, "clock_snapshot"),
        (P.PKT_TIMESTAMP, pb.TracePacket, "timestamp"),
        (P.PKT_SEQUENCE_ID, pb.TracePacket, "trusted_packet_sequence_id"),
        (P.PKT_TRACK_EVENT, pb.TracePacket, "track_event"),
        (P.PKT_SEQUENCE_FLAGS, pb.TracePacket, "sequence_flags"),
        (P.PKT_SYSTEM_INFO, pb.TracePacket, "system_info"),
        (P.PKT_TRACK_DESCRIPTOR, pb.TracePacket, "track_descriptor"),
        (P.PKT_MACHINE_ID, pb.TracePacket, "machine_id"),
        (P.BUNDLE_CPU, pb.FtraceEventBundle, "cpu"),
        (P.BUNDLE_COMPACT_SCHED, pb.FtraceEventBundle, "compact_sched"),
        (P.CS_INTERN, cs, "intern_table"),
        (P.CS_SWITCH_TS, cs, "switch_timestamp"),
        (P.CS_SWITCH_PREV_STATE, cs, "switch_prev_state"),
        (P.CS_SWITCH_NEXT_PID, cs, "switch_next_pid"),
        (P.CS_SWITCH_NEXT_PRIO, cs, "switch_next_prio"),
        (P.CS_SWITCH_NEXT_COMM, cs, "switch_next_comm_index"),
        (P.CS_WAKING_TS, cs, "waking_timestamp"),
        (P.CS_WAKING_PID, cs, "waking_pid"),
        (P.CS_WAKING_CPU, cs, "waking_target_cpu"),
        (P.CS_WAKING_PRIO, cs, "waking_prio"),
        (P.CS_WAKING_COMM, cs, "waking_comm_index"),
        (P.CS_WAKING_FLAGS, cs, "waking_common_flags"),
        (P.PT_PROCESSES, pb.ProcessTree, "processes"),
        (P.PT_THREADS, pb.ProcessTree, "threads"),
        (P.PROC_PID, pb.ProcessTree.Process, "pid"),
        (P.PROC_PPID, pb.ProcessTree.Process, "ppid"),
        (P.PROC_CMDLINE, pb.ProcessTree.Process, "cmdline"),
        (P.PROC_CMDLINE_IS_COMM, pb.ProcessTree.Process, "cmdline_is_comm"),
        (P.THR_TID, pb.ProcessTree.Thread, "tid"),
        (P.THR_NAME, pb.ProcessTree.Thread, "name"),
        (P.THR_TGID, pb.ProcessTree.Thread, "tgid"),
        (P.TD_UUID, pb.TrackDescriptor, "uuid"),
        (P.TD_NAME, pb.TrackDescriptor, "name"),
        (P.TD_PARENT, pb.TrackDescriptor, "parent_uuid"),
        (P.TD_COUNTER, pb.TrackDescriptor, "counter"),
        (P.TD_PROCESS, pb.TrackDescriptor, "process"),
        (P.TDP_PID, pb.ProcessDescriptor, "pid"),
        (P.CD_UNIT_NAME, pb.CounterDescriptor, "unit_name"),
        (P.TE_TYPE, pb.TrackEvent, "type"),
        (P.TE_TRACK_UUID, pb.TrackEvent, "track_uuid"),
        (P.TE_NAME, pb.TrackEvent, "name"),
        (P.TE_DOUBLE_VALUE, pb.TrackEvent, "double_counter_value"),
        (P.TE_DEBUG_ANNOTATIONS, pb.TrackEvent, "debug_annotations"),
        (P.DA_NAME, pb.DebugAnnotation, "name"),
        (P.DA_STRING_VALUE, pb.DebugAnnotation, "string_value"),
        (P.CS_CLOCKS, pb.ClockSnapshot, "clocks"),
        (P.CLOCK_ID, pb.ClockSnapshot.Clock, "clock_id"),
        (P.CLOCK_TS, pb.ClockSnapshot.Clock, "timestamp"),
        (P.SI_UTSNAME, pb.SystemInfo, "utsname"),
        (P.SI_MACHINE_NAME, pb.SystemInfo, "machine_name"),
        (P.UTS_SYSNAME, pb.Utsname, "sysname"),
        (P.UTS_RELEASE, pb.Utsname, "release"),
    ]
    assert [(name, ours) for ours, msg, name in checks if num(msg, name) != ours] == []
    te = pb.TrackEvent.Type
    assert (P.TYPE_SLICE_BEGIN, P.TYPE_SLICE_END, P.TYPE_INSTANT, P.TYPE_COUNTER) == (
        te.Value("TYPE_SLICE_BEGIN"), te.Value("TYPE_SLICE_END"), te.Value("TYPE_INSTANT"),
        te.Value("TYPE_COUNTER"))
    assert (P.CLOCK_REALTIME, P.CLOCK_BOOTTIME) == (
        pb.BuiltinClock.Value("BUILTIN_CLOCK_REALTIME"),
        pb.BuiltinClock.Value("BUILTIN_CLOCK_BOOTTIME"))


def test_varints_match_protobufs_encoding() -> None:
    vals = np.array([0, 1, 127, 128, 300, 2**31 - 1, 2**35, 2**63 - 1, -1, -2**31], np.int64)
    data, off = encode_varints(vals)
    msg = pb.FtraceEventBundle.CompactSched(switch_prev_state=vals.tolist())
    # A packed int64 field: key, length, then the varints; ours are the same bytes.
    assert msg.SerializeToString() == bytes([P.CS_SWITCH_PREV_STATE << 3 | 2]) + \
        varint(len(data)) + data
    assert off.tolist()[-1] == len(data)
    assert [data[a:b] for a, b in itertools.pairwise(off)] == [varint(v) for v in vals.tolist()]


def _samples() -> list[Sample]:
    # /proc/stat ticks of 2 PUs at three times: busy 50 % / 25 %, then 100 % / 0 %.
    ticks = [[[10, 0, 0, 10, 0, 0, 0, 0, 0, 0], [5, 0, 0, 15, 0, 0, 0, 0, 0, 0]],
             [[20, 0, 0, 20, 0, 0, 0, 0, 0, 0], [10, 0, 0, 30, 0, 0, 0, 0, 0, 0]],
             [[40, 0, 0, 20, 0, 0, 0, 0, 0, 0], [10, 0, 0, 50, 0, 0, 0, 0, 0, 0]]]
    return [Sample(T0 + 1000 * (i + 1), 10**18 + i,
                   {"procstat": {"cpus": np.array([0, 1]), "ticks": np.array(t, np.uint64),
                                 "hz": 100}}) for i, t in enumerate(ticks)]


@pytest.fixture()
def recording(tmp_path: Path) -> Path:
    return write_recording(tmp_path / "known.rec", synthetic_topology(2, 1, 1, 1, host="h"),
                           make_events(SCENARIO), tasks=TASKS, samples=_samples(),
                           header={"kernel": "6.1.0", "start_wall_ns": 10**18,
                                   "start_monotonic_ns": T0},
                           markers=[(T0, "command start"), (T1, "command exit 0")])


def test_known_scenario_sched_names_counters_markers(recording: Path, tmp_path: Path) -> None:
    trace = export(recording, tmp_path / "run.pftrace")
    sched = compact(trace)
    # One opening switch per CPU at the start (the running task), then the recorded ones.
    assert sched[0]["switch"] == [(T0, 0, 0, "swapper"), (2000, 0, 101, "solver"),
                                  (5000, 0, 102, "solver-w"), (7000, 1, 0, "swapper")]
    assert sched[1]["switch"] == [(T0, 0, 201, "io"), (3000, 1, 0, "swapper"),
                                  (6000, 0, 101, "solver")]
    assert sched[0]["waking"] == [(1500, 101, "solver")]
    assert sched[1]["waking"] == [(5500, 101, "solver")]
    assert run_time(trace) == report_run_time(recording)
    assert trace_end(trace, sched) == T1
    # Names: the process tree.
    tree = [p.process_tree for p in trace.packet if p.HasField("process_tree")]
    assert len(tree) == 1
    assert {(p.pid, tuple(p.cmdline)) for p in tree[0].processes} == {(100, ("solver",)),
                                                                      (200, ("io",))}
    assert {(t.tid, t.tgid, t.name) for t in tree[0].threads} == {
        (101, 100, "solver"), (102, 100, "solver-w"), (201, 200, "io")}
    # Counters: utilisation per PU, the model's numbers at each frame's end.
    tracks = {p.track_descriptor.uuid: p.track_descriptor for p in trace.packet
              if p.HasField("track_descriptor")}
    values: dict[str, list[tuple[int, float]]] = defaultdict(list)
    instants = []
    for p in trace.packet:
        if p.HasField("track_event"):
            te = p.track_event
            if te.type == pb.TrackEvent.TYPE_COUNTER:
                values[tracks[te.track_uuid].name].append((p.timestamp, te.double_counter_value))
            elif te.type == pb.TrackEvent.TYPE_INSTANT:
                instants.append((p.timestamp, te.name, tracks[te.track_uuid].name))
    assert values["PU 0 utilisation %"] == [(T0 + 2000, 50.0), (T0 + 3000, 100.0)]
    assert values["PU 1 utilisation %"] == [(T0 + 2000, 25.0), (T0 + 3000, 0.0)]
    with open_recording(recording) as rec:
        m = metric_series(rec)
    assert [v for _, v in values["PU 1 utilisation %"]] == m.of("util_pct", "PU", 1).tolist()
    assert not any("IPC" in name for name in values)        # no PMU recorded: no track
    util = next(t for t in tracks.values() if t.name == "PU 0 utilisation %")
    assert tracks[util.parent_uuid].name == "snumap utilisation % per PU"
    assert util.counter.unit_name == "%"
    assert instants == [(T0, "command start", "snumap markers"),
                        (T1, "command exit 0", "snumap markers")]
    # The header: kernel release (trace_processor decodes prev_state by it), wall clock.
    info = next(p.system_info for p in trace.packet if p.HasField("system_info"))
    assert info.utsname.release == "6.1.0" and info.machine_name == "h"
    clocks = next(p.clock_snapshot for p in trace.packet if p.HasField("clock_snapshot"))
    assert {(c.clock_id, c.timestamp) for c in clocks.clocks} == {(6, T0), (1, 10**18)}
    # The TrackEvent sequence starts cleared, once.
    flags = [p.sequence_flags for p in trace.packet if p.HasField("sequence_flags")]
    assert flags == [1]


def test_regions_are_slices_on_their_threads_tracks(tmp_path: Path) -> None:
    """Issue 10's export: each region instance a slice on its thread's track (nested as the
    calls were, kind and wait as categories), each mark an instant; a thread-less mark on one
    global track."""
    from snumap_tui.export.perfetto_regions import NO_THREAD_TRACK
    from snumap_tui.trace.region_catalog import BEGIN, END, MARK, REGION_DTYPE, RegionNames

    names = RegionNames()
    par = names.intern("main._omp_fn.0 (a.c:3)", "omp", "body")
    bar = names.intern("GOMP_barrier", "omp", "call", wait=True)
    mk = names.intern("phase 2", "marker", "marker")
    spec = [(1000, 101, 100, BEGIN, par), (1200, 101, 100, BEGIN, bar),
            (1900, 101, 100, END, bar), (2000, 101, 100, END, par),
            (1000, 102, 100, BEGIN, par), (1500, 102, 100, END, par),
            (1600, 102, 100, MARK, mk), (1700, 0, 0, MARK, mk)]
    rows = np.zeros(len(spec), REGION_DTYPE)
    for i, (t, tid, pid, op, rid) in enumerate(spec):
        rows[i]["t_ns"], rows[i]["tid"], rows[i]["pid"] = t, tid, pid
        rows[i]["op"], rows[i]["rid"] = op, rid
    rec = write_recording(tmp_path / "r.rec", synthetic_topology(2, 1, 1, 1, host="h"),
                          make_events(SCENARIO), tasks=TASKS,
                          regions=(rows, list(names.items)))
    trace = export(rec, tmp_path / "r.pftrace")
    threads = {p.track_descriptor.uuid: (p.track_descriptor.thread.pid,
                                         p.track_descriptor.thread.tid)
               for p in trace.packet if p.HasField("track_descriptor")
               and p.track_descriptor.HasField("thread")}
    named = {p.track_descriptor.uuid: p.track_descriptor.name for p in trace.packet
             if p.HasField("track_descriptor")}
    assert sorted(threads.values()) == [(100, 101), (100, 102)]
    got: dict[Any, list[Any]] = defaultdict(list)
    for p in trace.packet:
        if not p.HasField("track_event"):
            continue
        te = p.track_event
        where = threads.get(te.track_uuid, named.get(te.track_uuid))
        if te.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
            got[where].append((p.timestamp, "B", te.name, tuple(te.categories)))
        elif te.type == pb.TrackEvent.TYPE_SLICE_END:
            got[where].append((p.timestamp, "E"))
        elif te.type == pb.TrackEvent.TYPE_INSTANT and where != "snumap markers":
            got[where].append((p.timestamp, "I", te.name, tuple(te.categories)))
    body = "main._omp_fn.0 (a.c:3)"
    assert sorted(got[(100, 101)]) == sorted([
        (1000, "B", body, ("omp",)), (1200, "B", "GOMP_barrier", ("omp", "wait")),
        (1900, "E"), (2000, "E")])
    # Nesting as written: the outer region begins before the barrier inside it.
    begins = [e for e in got[(100, 101)] if e[1] == "B"]
    assert [e[2] for e in begins] == [body, "GOMP_barrier"]
    assert sorted(got[(100, 102)]) == [(1000, "B", body, ("omp",)), (1500, "E"),
                                       (1600, "I", "phase 2", ("marker",))]
    assert got[NO_THREAD_TRACK] == [(1700, "I", "phase 2", ("marker",))]


def test_untraced_tasks_keep_their_tids_and_add_up_to_reports_other(tmp_path: Path) -> None:
    rows = [r if r[0] != 3000 else (3000, SWITCH, 1, 201, 0, OUTSIDE, 0, 1) for r in SCENARIO]
    rec = write_recording(tmp_path / "u.rec", synthetic_topology(2, 1, 1, 1, host="h"),
                          make_events(rows), tasks=TASKS, markers=[(T0, "start"), (T1, "end")])
    got = run_time(export(rec, tmp_path / "u.pftrace"))
    want = report_run_time(rec)
    assert want.pop((UNTRACED, 1)) == got.pop((201, 1)) == 2000
    assert got == want


def test_many_windows_and_cpus_give_reports_run_time(tmp_path: Path) -> None:
    """A busy 16-PU machine, written in windows of 3000 events and bundles of 500: the opening
    switches, the carried CPUs and the per-bundle intern tables all have to line up."""
    topo = synthetic_topology(2, 2, 2, 2, host="b")
    cpus = list(topo.pu_os_indexes)
    ev = synthetic_events(20000, cpus, n_threads=40, duration_ns=10**9, t0_ns=10**9, seed=3)
    tasks = [TaskInfo(1000 + i, 1000 + i // 16 * 16, f"t{i}") for i in range(40)]
    rec = write_recording(tmp_path / "b.rec", topo, ev, tasks=tasks, chunk=1000)
    out = tmp_path / "b.pftrace"
    with open_recording(rec) as r, open(out, "wb") as f:
        old = P.MAX_BUNDLE
        P.MAX_BUNDLE = 500
        try:
            stats = P.write_perfetto(f, r, window_events=3000)
        finally:
            P.MAX_BUNDLE = old
    trace = parse(out)
    sched = compact(trace)
    n_sw = int((ev["kind"] == SWITCH).sum())
    assert stats["switches"] == n_sw
    assert sum(len(s["switch"]) for s in sched.values()) == n_sw + len(sched)
    assert sum(len(s["waking"]) for s in sched.values()) == int((ev["kind"] == WAKEUP).sum())
    for s in sched.values():
        ts = [e[0] for e in s["switch"]]
        assert ts == sorted(ts)
    assert run_time(trace) == report_run_time(rec)
    names = {e[2]: e[3] for s in sched.values() for e in s["switch"]}
    assert all(names[t.tid] == t.comm for t in tasks if t.tid in names)


def test_multi_machine_tag(recording: Path, tmp_path: Path) -> None:
    out = tmp_path / "m.pftrace"
    with open_recording(recording) as r, open(out, "wb") as f:
        P.write_perfetto(f, r, machine_id=3)
    trace = parse(out)
    assert {p.machine_id for p in trace.packet} == {3}
    uuids = [p.track_descriptor.uuid for p in trace.packet if p.HasField("track_descriptor")]
    assert uuids and all(u >> 32 == 3 for u in uuids)


def _record(out: Path, *args: str) -> None:
    p = subprocess.run([sys.executable, "-m", "snumap_tui.cli", "record", "-o", str(out),
                        *args], capture_output=True, text=True, timeout=120, check=False)
    assert p.returncode == 0, p.stderr


@pytest.mark.skipif(shutil.which("stress-ng") is None, reason="stress-ng is not installed")
def test_a_real_recording(tmp_path: Path) -> None:
    """A context-switch storm recorded with the best tracer here: every traced thread's run
    time per CPU is the report's, and the tasks outside the traced tree add up to its
    "other (not traced)" per CPU."""
    rec = tmp_path / "real.rec"
    _record(rec, "--", "stress-ng", "--switch", "1", "--switch-freq", "5000", "-t", "1s")
    with open_recording(rec) as r:
        if "proc" in str(r.header.get("backend")):
            pytest.skip("no scheduling tracer works here (only /proc polling)")
        switches = int((r.event_columns(("kind",))["kind"] == SWITCH).sum())
    trace = export(rec, tmp_path / "real.pftrace")
    got = run_time(trace)
    want = report_run_time(rec)
    other = {k[1]: v for k, v in want.items() if k[0] == UNTRACED}
    traced = {k: v for k, v in want.items() if k[0] != UNTRACED}
    assert traced and {k: got.get(k) for k in traced} == traced
    outside: dict[int, int] = defaultdict(int)
    for (tid, cpu), ns in got.items():
        if (tid, cpu) not in traced:
            outside[cpu] += ns
    assert dict(outside) == other
    sched = compact(trace)
    assert sum(len(s["switch"]) for s in sched.values()) == switches + len(sched)


def test_a_proc_polled_recording_gets_its_intervals_as_switches(tmp_path: Path) -> None:
    rec = tmp_path / "proc.rec"
    _record(rec, "--backend", "proc", "--interval", "50ms", "--", sys.executable, "-c",
            "import time\nt = time.time()\nwhile time.time() - t < 0.6: pass")
    got = run_time(export(rec, tmp_path / "proc.pftrace"))
    want = report_run_time(rec)
    assert want and got == want


@pytest.mark.skipif(shutil.which("trace_processor_shell") is None,
                    reason="no trace_processor_shell here (the perfetto package downloads it on "
                           "first use, which needs the network)")
def test_trace_processor_reads_the_run_times(recording: Path, tmp_path: Path) -> None:
    """Where Perfetto's own trace processor is installed, its sched table gives the report's
    run time per thread per CPU (open slices end at the trace's end)."""
    from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig

    out = tmp_path / "tp.pftrace"
    export(recording, out)
    tp = TraceProcessor(trace=str(out), config=TraceProcessorConfig(
        bin_path=shutil.which("trace_processor_shell")))
    try:
        rows = tp.query(
            "SELECT thread.tid AS tid, sched.cpu AS cpu, SUM(CASE WHEN sched.dur < 0 THEN "
            "TRACE_END() - sched.ts ELSE sched.dur END) AS ns FROM sched JOIN thread "
            "USING (utid) WHERE thread.tid != 0 GROUP BY 1, 2").as_pandas_dataframe()
    finally:
        tp.close()
    got = {(int(r.tid), int(r.cpu)): int(r.ns) for r in rows.itertuples()}
    assert got == report_run_time(recording)


def test_a_merged_job_is_one_machine_per_node(tmp_path: Path) -> None:
    """`snumap merge` of two nodes: each node's bundles, process tree and tids on its own
    machine (node k: machine k + 1), run time per local tid per local PU the report's."""
    from tests.test_merge_views import merged

    job = merged(tmp_path)
    trace = export(job, tmp_path / "job.pftrace")
    with open_recording(job) as rec:
        table = rec.nodes
        bases = table.cpu_bases().tolist()
        tid_bases = table.tid_bases().tolist()
    by_machine: dict[int, Any] = defaultdict(pb.Trace)
    for p in trace.packet:
        if p.HasField("ftrace_events") or p.HasField("process_tree"):
            assert p.machine_id in (1, 2)
            by_machine[p.machine_id].packet.append(p)
    assert sorted(by_machine) == [1, 2]
    want: dict[tuple[int, int, int], int] = {}
    for (tid, cpu), ns in report_run_time(job).items():
        k = max(i for i, b in enumerate(bases) if b <= cpu)
        want[k + 1, tid - tid_bases[k], cpu - bases[k]] = ns
    end = trace_end(trace, compact(trace))
    got: dict[tuple[int, int, int], int] = defaultdict(int)
    for m, sub in by_machine.items():
        for cpu, s in compact(sub).items():
            sw = sorted(s["switch"], key=lambda e: e[0])
            for (t, _st, pid, _c), nxt in zip(sw, [*sw[1:], (end,)]):
                if pid:
                    got[m, pid, cpu] += nxt[0] - t
    assert want and dict(got) == want
    names = {(m, t.tid): t.name for m, sub in by_machine.items()
             for p in sub.packet if p.HasField("process_tree") for t in p.process_tree.threads}
    assert names[1, 500] == "rank0" and names[2, 500] == "rank2" and names[2, 502] == "rank3"


def test_process_memory_is_counter_tracks_under_each_process(tmp_path: Path) -> None:
    """Memory per traced process and node: a counter track per node (and the RSS) whose
    parent is the process's track, in bytes, a value where it changed."""
    from snumap_tui.store import Writer
    from snumap_tui.store.procmem import rows_at
    from snumap_tui.trace.events import EventBatch

    mib = 1 << 20
    path = tmp_path / "m.rec"
    with Writer(path, {"topology": synthetic_topology(1, 1, 1, 1).to_dict(),
                       "start_monotonic_ns": T0}) as w:
        w.add_events(EventBatch(events=make_events(SCENARIO), tasks=TASKS))
        for t, b in ((T0, 10 * mib), (T0 + 1000, 10 * mib), (T0 + 2000, 50 * mib)):
            w.add_process_memory(rows_at(t, [(100, -1, b, True), (100, 0, b, True)]))
    trace = export(path, tmp_path / "m.pftrace")
    tds = {p.track_descriptor.uuid: p.track_descriptor for p in trace.packet
           if p.HasField("track_descriptor")}
    procs = {u: td.process.pid for u, td in tds.items() if td.HasField("process")}
    mem = {u: td for u, td in tds.items() if td.name.startswith("snumap memory")}
    assert {td.name for td in mem.values()} == {"snumap memory RSS (pid 100)",
                                                "snumap memory N0 DRAM (pid 100)"}
    assert all(procs[td.parent_uuid] == 100 and td.counter.unit_name == "bytes"
               for td in mem.values())
    node0 = next(u for u, td in mem.items() if "N0" in td.name)
    values = [(p.timestamp, p.track_event.double_counter_value) for p in trace.packet
              if p.HasField("track_event") and p.track_event.track_uuid == node0]
    assert values == [(T0, 10 * mib), (T0 + 2000, 50 * mib)]


def test_a_merged_jobs_counters_and_memory_go_to_each_nodes_machine(tmp_path: Path) -> None:
    """`snumap merge` keeps every node's counters per run interval and process memory; in
    Perfetto they are counter tracks on that node's machine, under the node's own thread
    and process ids, with the node's values (they were left out of merged jobs)."""
    from snumap_tui.store.merge import merge
    from tests.test_merge_attribution import WALL, attr_rec

    ev = ["task-clock", "page-faults"]
    a = attr_rec(tmp_path / "a.rec", "a", 10 * 10**9, WALL, ev)
    b = attr_rec(tmp_path / "b.rec", "b", 7 * 10**9, WALL + 3 * 10**9, ev, faults=2000,
                 mem=96 << 20)
    merge([a, b], tmp_path / "job.rec")
    trace = export(tmp_path / "job.rec", tmp_path / "job.pftrace")
    tracks: dict[int, tuple[int, Any]] = {}
    values: dict[int, list[float]] = defaultdict(list)
    for p in trace.packet:
        if p.HasField("track_descriptor"):
            tracks[p.track_descriptor.uuid] = (p.machine_id, p.track_descriptor)
        elif p.HasField("track_event") and p.track_event.type == pb.TrackEvent.TYPE_COUNTER:
            values[p.track_event.track_uuid].append(p.track_event.double_counter_value)
            assert p.machine_id == tracks[p.track_event.track_uuid][0]

    def last(name: str) -> tuple[int, float, Any]:
        [(uuid, (m, td))] = [(u, t) for u, t in tracks.items() if t[1].name == name]
        return m, values[uuid][-1], tracks[td.parent_uuid][1]

    for node, faults, mem in ((1, 1000, 64 << 20), (2, 2000, 96 << 20)):
        m, v, parent = last(f"page-faults (node {node} thread 500)")
        assert (m, v) == (node, faults)
        assert (parent.thread.pid, parent.thread.tid) == (500, 500)     # the node's own ids
        m, v, _ = last(f"task-clock (node {node} process 500)")
        assert (m, v) == (node, 30 * 1_000_000)
        m, v, parent = last(f"snumap memory RSS (node {node} pid 500)")
        assert (m, v) == (node, mem) and parent.process.pid == 500
