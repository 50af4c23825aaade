"""`snumap export --format parquet`: the tables read back with DuckDB, and the three queries
of the README run as printed there, against what `snumap report` computes."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from snumap_tui.analysis.intervals import UNTRACED
from snumap_tui.analysis.load import load
from snumap_tui.analysis.report import build_report
from snumap_tui.analysis.stats import task_stats
from snumap_tui.analysis.synth import synthetic_events, synthetic_topology, write_recording
from snumap_tui.cli import main
from snumap_tui.store import metric_series
from snumap_tui.store import open as open_recording
from snumap_tui.trace.events import MIGRATE, TaskInfo
from tests.test_analysis import SCENARIO, make_events
from tests.test_export_perfetto import _samples
from tests.test_report import TASKS

duckdb = pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_queries() -> list[str]:
    text = README.read_text()
    section = text[text.index("## Exports"):]
    section = section[:section.index("\n## ", 4)]
    return re.findall(r"```sql\n(.*?)```", section, re.DOTALL)


def sql(con: Any, query: str, where: Path) -> list[tuple[Any, ...]]:
    return con.execute(query.replace("'run.parquet/", f"'{where}/")).fetchall()


@pytest.fixture(scope="module")
def busy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A 16-PU, 2-package machine over 3 s, with migrations, exported."""
    d = tmp_path_factory.mktemp("pq")
    topo = synthetic_topology(2, 2, 2, 2, host="b")
    ev = synthetic_events(30000, list(topo.pu_os_indexes), n_threads=40,
                          duration_ns=3 * 10**9, t0_ns=10**9, seed=5)
    tasks = [TaskInfo(1000 + i, 1000 + i // 16 * 16, f"t{i}") for i in range(40)]
    rec = write_recording(d / "busy.rec", topo, ev, tasks=tasks, chunk=4000)
    out = d / "busy.parquet"
    assert main(["export", str(rec), "--format", "parquet", "-o", str(out)]) == 0
    return rec, out


def test_tables_and_run_time_per_thread_equal_the_reports(busy: tuple[Path, Path]) -> None:
    rec, out = busy
    assert sorted(p.name for p in out.iterdir()) == [
        ".snumap-output",       # the marker that lets a later --force replace it
        "events.parquet", "intervals.parquet", "process_memory.parquet", "regions.parquet",
        "samples.parquet", "tasks.parquet", "thread_counters.parquet", "topology.parquet"]
    con = duckdb.connect()
    with open_recording(rec) as r:
        report = build_report(r)
        n_events = r.event_count
        ev = r.events()
    got = dict(sql(con, "SELECT tid, sum(dur_ns) FROM 'run.parquet/intervals.parquet' "
                        "WHERE tid > 0 GROUP BY tid", out))
    want = {t["tid"]: t["runtime_s"] for t in report["tasks"]}
    assert set(got) == set(want)
    assert all(abs(got[t] / 1e9 - want[t]) < 1e-9 for t in want)
    assert sql(con, "SELECT count(*) FROM 'run.parquet/events.parquet'", out)[0][0] == n_events
    kinds = dict(sql(con, "SELECT kind, count(*) FROM 'run.parquet/events.parquet' "
                          "GROUP BY kind", out))
    assert kinds == report["event_kinds"]
    first = sql(con, "SELECT t_ns, cpu, tid, tid2, pid, pid2, arg FROM "
                     "'run.parquet/events.parquet' LIMIT 3", out)
    assert first == [tuple(int(e[f]) for f in ("t_ns", "cpu", "tid", "tid2", "pid", "pid2",
                                               "arg")) for e in ev[:3]]
    names = dict(sql(con, "SELECT tid, comm FROM 'run.parquet/tasks.parquet'", out))
    assert names[1003] == "t3"
    pus = sql(con, "SELECT os_index, package, numa_node FROM 'run.parquet/topology.parquet' "
                   "WHERE type = 'PU' ORDER BY os_index", out)
    assert pus[0] == (0, 0, 0) and pus[15] == (15, 1, 3)


def test_the_readme_queries(busy: tuple[Path, Path]) -> None:
    rec, out = busy
    q_numa, q_migr, q_busiest = readme_queries()
    con = duckdb.connect()
    with open_recording(rec) as r:
        iv = load(r).intervals
        stats = task_stats(iv, r.topology)
        ev = r.events()
        topo = r.topology
    # 1. Run time per thread per NUMA node: the report's numa split.
    got = {(tid, node): s for tid, _comm, node, s in sql(con, q_numa, out)}
    want = {(tid, node): round(ns / 1e9, 3) for tid, st in stats.items() if tid != UNTRACED
            for node, ns in st.numa.items()}
    assert got == want
    # 2. Migrations across packages, counted from the events with the topology.
    pkg = {pu: topo.package_of(pu).os_index for pu in topo.pu_os_indexes}
    m = ev[ev["kind"] == MIGRATE]
    cross: dict[tuple[int, int, int], int] = defaultdict(int)
    for tid, src, dst in zip(m["tid"].tolist(), m["arg"].tolist(), m["cpu"].tolist()):
        if pkg[src] != pkg[dst]:
            cross[tid, pkg[src], pkg[dst]] += 1
    rows = sql(con, q_migr, out)
    assert {(t, a, b): n for t, n, a, b in rows} == dict(cross) and len(rows) > 10
    # 3. The busiest PUs per second: busy time of each PU in each second from the intervals.
    rows = sql(con, q_busiest, out)
    t0 = min(int(s[0]) for s in iv.start if len(s))
    seconds = sorted({r[0] for r in rows})
    assert seconds == [0, 1, 2]
    for sec in seconds:
        lo, hi = t0 + sec * 10**9, t0 + (sec + 1) * 10**9
        busy_ns = {}
        for r, cpu in enumerate(iv.cpus.tolist()):
            s, e, t = iv.start[r], iv.end[r], iv.tid[r]
            keep = t != 0
            busy_ns[cpu] = int(np.clip(np.minimum(e[keep], hi) - np.maximum(s[keep], lo), 0,
                                       None).sum())
        top = sorted(busy_ns.items(), key=lambda kv: (-round(kv[1] / 1e7, 1), kv[0]))[:3]
        assert [(c, round(b / 1e7, 1)) for c, b in top] == \
            [(c, b) for s, c, b in rows if s == sec]


def test_samples_are_the_models_metrics(tmp_path: Path) -> None:
    rec = write_recording(tmp_path / "s.rec", synthetic_topology(2, 1, 1, 1, host="h"),
                          make_events(SCENARIO), tasks=TASKS, samples=_samples())
    out = tmp_path / "s.parquet"
    assert main(["export", str(rec), "--format", "parquet", "-o", str(out)]) == 0
    con = duckdb.connect()
    got = sql(con, "SELECT t_ns, value FROM 'run.parquet/samples.parquet' WHERE metric = "
                   "'util_pct' AND object_type = 'PU' AND os_index = 1 ORDER BY t_ns", out)
    with open_recording(rec) as r:
        m = metric_series(r)
    assert [v for _, v in got] == m.of("util_pct", "PU", 1).tolist() == [25.0, 0.0]
    assert [t for t, _ in got] == m.t_ns.tolist()
    machine = sql(con, "SELECT value FROM 'run.parquet/samples.parquet' WHERE metric = "
                       "'util_pct' AND object_type = 'Machine' ORDER BY t_ns", out)
    assert [v for (v,) in machine] == [37.5, 50.0]


def test_csv_samples_are_the_parquet_samples(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """One name, one table: ``--format csv --table samples`` has the rows of Parquet's
    ``samples`` (the metrics per object per frame); the raw readings are ``readings``."""
    import csv
    import io

    rec = write_recording(tmp_path / "s.rec", synthetic_topology(2, 1, 1, 1, host="h"),
                          make_events(SCENARIO), tasks=TASKS, samples=_samples())
    out = tmp_path / "s.parquet"
    assert main(["export", str(rec), "--format", "parquet", "-o", str(out)]) == 0
    want = sql(duckdb.connect(), "SELECT t_ns, wall_ns, dt_s, metric, object_type, os_index, "
               "value FROM 'run.parquet/samples.parquet'", out)
    capsys.readouterr()
    assert main(["export", str(rec), "--format", "csv", "--table", "samples", "-o", "-"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    got = [(int(r["t_ns"]), int(r["wall_ns"]), float(r["dt_s"]), r["metric"],
            r["object_type"], int(r["os_index"]), float(r["value"])) for r in rows]
    assert want and sorted(got) == sorted(want)
    assert ("util_pct", "PU", 1, 25.0) in {(m, o, i, v) for _, _, _, m, o, i, v in got}
