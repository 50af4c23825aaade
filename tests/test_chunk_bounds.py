"""The thread counters (16) and process memory (17) chunks read back bounded by distinct keys
(issue 30 items 10-12): NUMA nodes only the topology's, processes and threads up to a stated
cap with the rest counted, every analysis linear in rows; and the merged-header and fsroot
numbers the last round left open. The crafted recordings are tests/crafted_chunks.py's; the
times and memory of report and export on the full-size ones are bench/chunk_bounds.py's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import crafted_chunks as K

from snumap_tui.analysis import attribution, memory
from snumap_tui.analysis.caps import MAX_ROWS

PY = sys.executable


def snumap(*argv: str, limit_mib: int = 3072, timeout: int = 120
           ) -> subprocess.CompletedProcess[str]:
    """`snumap ARGV` under an address-space limit (a per-node x per-time allocation fails)."""
    pre = f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({limit_mib << 20}, " \
          f"resource.RLIM_INFINITY)); from snumap_tui.cli import main; import sys; " \
          f"sys.exit(main(sys.argv[1:]))"
    return subprocess.run([PY, "-c", pre, *argv], capture_output=True, text=True,
                          timeout=timeout, check=False)


def test_a_process_spread_over_every_node_number_keeps_the_topologys_nodes(
        tmp_path: Path) -> None:
    rec = K.memory_nodes(tmp_path / "n.rec")
    p = snumap("report", str(rec), "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads(p.stdout)
    mem = next(x["memory"] for x in r["processes"] if x["pid"] == 100)
    assert set(mem["nodes"]) == {"0", "1"}          # the topology's two NUMA nodes only
    assert r["memory"]["left_out"] == [
        "65534 rows naming a NUMA node the topology lacks: left out"]
    out = tmp_path / "o.pftrace"
    p = snumap("export", str(rec), "--format", "perfetto", "-o", str(out))
    assert p.returncode == 0 and out.stat().st_size > 0, p.stderr[-2000:]


def test_memory_timelines_are_capped_by_process_and_keep_the_reported_ones() -> None:
    rows = np.zeros(2 * 50, dtype=K.MEMORY_DTYPE)
    rows["t_ns"] = 1000
    rows["pid"] = np.repeat(np.arange(1, 51), 2)
    rows["node"] = np.tile([-1, 0], 50)
    rows["bytes"] = np.repeat(np.arange(1, 51) << 20, 2)
    b = memory.bounded(rows, [0], max_pids=10, keep=[1])
    assert sorted(set(b.rows["pid"].tolist())) == [1, *range(42, 51)]   # 1 kept, 9 largest
    assert b.processes_left_out == 40
    assert "40 more processes" in b.notes()[0]
    tls = memory.timelines(rows, [0], max_pids=10)
    assert len(tls) == 10 and tls[50].nodes[0].tolist() == [50 << 20]


def test_300k_pids_report_lists_the_traced_ones_and_counts_the_rest(tmp_path: Path) -> None:
    rec = K.memory_pids(tmp_path / "p.rec", pids=20_000)
    p = snumap("report", str(rec), "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads(p.stdout)
    assert r["memory"]["left_out"] == [
        (f"{20_000 - MAX_ROWS} more processes past the first "
        f"{MAX_ROWS} (by memory): left out")]
    traced = {x["pid"]: x["memory"] for x in r["processes"]}
    assert traced[1]["rss_bytes"] == 1 << 12 and traced[2]["nodes"] == {"0": 2 << 12}
    # The Perfetto export keeps as many memory tracks and says so (never dropped silently).
    p = snumap("export", str(rec), "--format", "perfetto", "-o", str(tmp_path / "m.pftrace"))
    assert p.returncode == 0, p.stderr[-2000:]
    assert (f"memory tracks for the {MAX_ROWS} processes with the most memory, "
            f"{20_000 - MAX_ROWS} more left out") in p.stderr, p.stderr


def test_a_flood_of_tids_and_pu_numbers_is_capped_with_the_rest_summed(tmp_path: Path) -> None:
    n = MAX_ROWS + 1000
    rec = K.counter_tids(tmp_path / "t.rec", tids=n, cpus=n)
    p = snumap("report", str(rec), "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    c = json.loads(p.stdout)["counters"]
    assert len(c["threads"]) == MAX_ROWS
    assert len(c["cpus"]) == MAX_ROWS
    rest = c["threads_left_out"]
    assert rest["count"] == 1000 and rest["intervals"] == 1000
    # Nothing lost: the listed threads and the rest sum to every interval's task-clock.
    total = sum(t["events"]["task-clock"] for t in c["threads"]) + rest["events"]["task-clock"]
    assert total == 900 * n
    assert c["processes"][0]["events"]["task-clock"] == 4 * 900
    text = snumap("report", str(rec))
    assert "and 1000 more, not listed" in text.stdout, text.stdout[-3000:]
    out = tmp_path / "o.pftrace"
    p = snumap("export", str(rec), "--format", "perfetto", "-o", str(out))
    assert p.returncode == 0, p.stderr[-2000:]
    assert "1000 more left out" in p.stderr, p.stderr     # threads; 1,274 processes all kept


def test_region_attribution_groups_threads_once(tmp_path: Path) -> None:
    """Per region, each thread's instances are found by one sort (was a scan per thread)."""
    tid = np.array([5, 3, 5, 3, 9])
    parts = attribution._split(tid)
    assert {k: v.tolist() for k, v in parts.items()} == {3: [1, 3], 5: [0, 2], 9: [4]}


# ---- still open from the last round (issue 30 item 12) -------------------------------------
def merged_with(tmp_path: Path, edit: Any) -> Path:
    from test_bounds import merged_with as mw
    return mw(tmp_path, edit)


@pytest.mark.parametrize("edit", ["cpu_base null", "nodes empty", "nodes null"])
def test_a_damaged_merged_header_reports_and_exports(tmp_path: Path, edit: str) -> None:
    fn = {"cpu_base null": lambda h: h["nodes"][0].update(cpu_base=None),
          "nodes empty": lambda h: h.update(nodes=[]),
          "nodes null": lambda h: h.update(nodes=None)}[edit]
    rec = merged_with(tmp_path, fn)
    for argv in (["report", str(rec)], ["report", str(rec), "--json"],
                 ["export", str(rec), "--format", "perfetto", "-o", str(tmp_path / "o.pf"),
                  "--force"]):
        p = snumap(*argv)
        assert p.returncode == 0 and "Traceback" not in p.stderr, (argv, p.stderr[-2000:])


@pytest.mark.parametrize("line", ["cpu0 abc 0 0 1000 0 0 0 0 0 0", "ctxt abc",
                                  "cpu1 0 0 0 -5 0 0 0 0 0 0", "btime 1e999"])
def test_fsroot_proc_stat_with_words_for_numbers(tmp_path: Path, line: str) -> None:
    from fakefs import FakeRoot
    root = tmp_path / "fs"
    FakeRoot(root, cpus=2)
    stat = root / "proc" / "stat"
    key = line.split()[0]
    stat.write_text("".join(line + "\n" if ln.split()[:1] == [key] else ln + "\n"
                            for ln in stat.read_text().splitlines()))
    for cmd in (("top", "--batch", "-n", "1"), ("probe",)):
        p = snumap(*cmd, "--fsroot", str(root))
        assert "Traceback" not in p.stderr, (cmd, p.stderr[-2000:])
        assert p.returncode == 0 or len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_proc_stat_parser_drops_only_the_line_it_cannot_read() -> None:
    from snumap_tui.sources.procstat import parse_proc_stat

    text = ("cpu  1 0 0 2 0 0 0 0 0 0\ncpu0 abc 0 0 1 0 0 0 0 0 0\ncpu1 4 0 0 1 0 0 0 0 0 0\n"
            "ctxt x\nbtime 7\n")
    r = parse_proc_stat(text)
    assert r["cpus"].tolist() == [1] and r["ticks"][0, 0] == 4
    assert "ctxt" not in r and r["btime"] == 7


def test_a_null_cpu_base_reads_as_absent() -> None:
    from snumap_tui.store.kinds import K_HEADER, validate

    got, _notes = validate(K_HEADER, {"nodes": [{"cpu_base": None, "tid_base": 5,
                                                "node": None}]}, 1)
    assert got["nodes"] == [{"tid_base": 5, "node": None}]


@pytest.mark.parametrize(("source", "kept"), [("libbpf: x", 1001), ("perf: x", 1002)])
def test_perfetto_keeps_the_threads_the_report_ranks_first(tmp_path: Path, source: str,
                                                           kept: int,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """Past the cap the Perfetto export keeps the threads with the most on-CPU time as the
    report takes it: the runs' lengths (libbpf), the counted task-clock for reads (perf)."""
    import io

    from snumap_tui import store
    from snumap_tui.analysis import caps
    from snumap_tui.analysis.synth import write_recording
    from snumap_tui.export.perfetto import PerfettoWriter
    from snumap_tui.export.perfetto_counters import write_thread_counters
    from snumap_tui.trace.counters import counter_dtype

    rows = np.zeros(2, counter_dtype(len(K.EVENTS)))
    rows["tid"], rows["pid"] = [1001, 1002], 1000
    rows["t_start"] = K.T0
    rows["t_end"] = [K.T0 + 10**6, K.T0 + 10]            # 1001: the longer row ...
    rows["value"][:, 0] = [10, 10**6]                    # ... 1002: the more task-clock
    rows["enabled"] = rows["running"] = 10
    rows["n"] = len(K.EVENTS)
    ev, tasks = K._base_events([1000])
    path = write_recording(tmp_path / "r.rec", K.TOPOLOGY, ev, tasks=tasks,
                           counters=(rows, K.EVENTS),
                           header={"counters": {"source": source, "events": K.EVENTS}})
    monkeypatch.setattr(caps, "MAX_ROWS", 1)
    w = PerfettoWriter(io.BytesIO())
    names: list[str] = []
    track = w.track
    monkeypatch.setattr(w, "track",
                        lambda name, *a, **k: names.append(name) or track(name, *a, **k))
    with store.open(path) as rec:
        _values, _tracks, left_out = write_thread_counters(w, rec)
    assert left_out == 1
    assert f"task-clock (thread {kept})" in names and \
        f"task-clock (thread {2003 - kept})" not in names
    with store.open(path) as rec:
        c = attribution.counter_section(rec)
    assert c["threads"][0]["tid"] == kept
