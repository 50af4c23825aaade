"""`snumap merge` through the store API: clocks shifted by a known amount, ids qualified by
node, and the bad inputs (other job, same node twice, a damaged or foreign member, 1,000
files); `record --job` outside a job; the parsers of job membership and ranks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from snumap_tui import store
from snumap_tui.analysis.jobreport import job_section
from snumap_tui.analysis.report import build_report
from snumap_tui.analysis.synth import synthetic_topology, write_recording
from snumap_tui.errors import SnumapError
from snumap_tui.recording.job import expand_output
from snumap_tui.sources.jobprocs import job_of, parse_environ, rank_of, same_job, step_of
from snumap_tui.sources.jobs import parse_cgroup
from snumap_tui.store import chunks as C
from snumap_tui.store.merge import merge

sys.path.insert(0, str(Path(__file__).parent))
from jobrecs import WALL, busy_events, node_rec


def test_merge_aligns_known_shift_and_qualifies_ids(tmp_path: Path) -> None:
    # Node b booted 5 s after node a: the same wall instant is 5 s less on b's monotonic clock.
    shift = 5_000_000_000
    a = node_rec(tmp_path / "a.rec", "a", 100 * 10**9, WALL, rank_pids={0: 500, 1: 501})
    b = node_rec(tmp_path / "b.rec", "b", 95 * 10**9, WALL + shift,
                 rank_pids={2: 500, 3: 777}, runs={3: [(0, 30_000_000)]})
    res = merge([b, a], tmp_path / "job.rec")
    assert [n["node"] for n in res.nodes] == ["b", "a"]
    na = res.nodes[1]
    assert na["shift_ns"] == -shift
    assert na["align_error_ns"] == 4_000_100    # both NTP maxerrors + both read windows
    with store.open(tmp_path / "job.rec") as rec:
        assert rec.version == 2 and rec.complete and not rec.damaged
        assert [o.name for o in rec.topology.by_type("Machine")] == ["b", "a"]
        assert rec.topology.root.type == "System"
        ev = rec.events()
        # b's events stay, a's move onto b's clock: both ranks started at the same wall time
        starts = {int(e["tid2"]): int(e["t_ns"]) for e in ev if e["tid2"] > 0}
        assert len(starts) == 4                        # pid 500 on both nodes: two tasks
        assert len(set(starts.values())) == 1 and set(starts.values()) == {95 * 10**9}
        assert set(ev["cpu"].tolist()) == {0, 1, 2, 3}
        table = rec.nodes
        assert sorted(table.label(t) for t in starts) == ["a:500", "a:501", "b:500", "b:777"]
        report = build_report(rec)
        job = job_section(rec, report)
    assert job is not None
    ranks = {r["rank"]: (r["node"], r["local_pid"], round(r["runtime_s"], 6)) for r in job["ranks"]}
    assert ranks == {0: ("a", 500, 0.01), 1: ("a", 501, 0.01), 2: ("b", 500, 0.01),
                     3: ("b", 777, 0.03)}
    assert job["imbalance"]["ranks"]["max_over_mean"] == pytest.approx(0.03 / 0.015)
    nodes = {n["node"]: round(n["runtime_s"], 6) for n in job["nodes"]}
    assert nodes == {"a": 0.02, "b": 0.04}


def test_same_clock_alignment_and_merged_input_refused(tmp_path: Path) -> None:
    a = node_rec(tmp_path / "a.rec", "a", 10**9, WALL, rank_pids={0: 5}, boot="same")
    b = node_rec(tmp_path / "b.rec", "b", 10**9, WALL, rank_pids={1: 6}, boot="same")
    res = merge([a, b], tmp_path / "j.rec")
    assert res.nodes[1]["align_how"].startswith("same clock")
    assert res.nodes[1]["align_error_ns"] == 100
    res2 = merge([tmp_path / "j.rec", a], tmp_path / "k.rec")
    assert res2.skipped and "already a merged recording" in res2.skipped[0]


def test_bad_inputs(tmp_path: Path) -> None:
    a = node_rec(tmp_path / "a.rec", "a", 10**9, WALL, rank_pids={0: 5})
    other = node_rec(tmp_path / "o.rec", "o", 10**9, WALL, rank_pids={0: 5}, job="43")
    with pytest.raises(SnumapError, match="different jobs"):
        merge([a, other], tmp_path / "x.rec")
    assert len(merge([a, other], tmp_path / "x.rec", force=True).nodes) == 2
    twin = node_rec(tmp_path / "a2.rec", "a", 10**9, WALL, rank_pids={0: 9})
    with pytest.raises(SnumapError, match="both from node 'a'"):
        merge([a, twin], tmp_path / "y.rec")
    junk = tmp_path / "junk.rec"
    junk.write_bytes(b"not a recording at all" * 10)
    # a damaged events chunk in b: merged without it, and said
    b = node_rec(tmp_path / "b.rec", "b", 10**9, WALL, rank_pids={1: 6})
    data = bytearray(b.read_bytes())
    with store.open(b) as rec:
        h = next(h for h in rec._chunks if h.kind == C.K_EVENTS)
    data[h.offset + C.CHUNK_HEADER_SIZE + 3] ^= 0xFF
    b.write_bytes(bytes(data))
    res = merge([a, b, junk], tmp_path / "z.rec")
    assert len(res.skipped) == 1 and "junk.rec" in res.skipped[0]
    assert len(res.damaged) == 1 and "damaged events chunk" in res.damaged[0]
    with store.open(tmp_path / "z.rec") as rec:
        assert len(rec.nodes.nodes) == 2 and len(rec.events()) == 2   # a's two switches
    with pytest.raises(SnumapError, match="nothing to merge"):
        merge([junk], tmp_path / "w.rec")


def test_merge_cli_lines_and_exit(tmp_path: Path) -> None:
    a = node_rec(tmp_path / "a.rec", "a", 10**9, WALL, rank_pids={0: 5})
    other = node_rec(tmp_path / "o.rec", "o", 10**9, WALL, rank_pids={0: 5}, job="43")
    p = subprocess.run([sys.executable, "-m", "snumap_tui.cli", "merge", str(a), str(other),
                        "-o", str(tmp_path / "m.rec")], capture_output=True, text=True,
                       check=False)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "--force" in p.stderr
    assert "Traceback" not in p.stderr


def test_merge_1000_files(tmp_path: Path) -> None:
    """1,000 members (no pid_max: their task ids are scanned) merge into one file whose
    every node is there; memory stays one chunk plus headers (bench/merge.py measures it)."""
    paths = []
    topo = synthetic_topology(1, 1, 1, 1)
    for i in range(1000):
        ev = busy_events(10**9, 0, 1000 + i % 7, [(i, i + 1000)])
        paths.append(write_recording(tmp_path / f"n{i}.rec", topo, ev,
                                     header={"host": f"n{i:04d}", "start_wall_ns": WALL}))
    res = merge(paths, tmp_path / "all.rec")
    assert len(res.nodes) == 1000 and res.events == 2000 and not res.skipped
    with store.open(tmp_path / "all.rec") as rec:
        ev = rec.events()
        assert len(ev) == 2000 and len(rec.topology.pus) == 1000
        assert len(set(ev["tid2"][ev["tid2"] > 0].tolist())) == 1000   # one task per node
        assert np.all(np.diff(ev["t_ns"].astype(np.int64)) >= 0)


def test_record_job_outside_a_job(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "PBS_"))}
    p = subprocess.run([sys.executable, "-m", "snumap_tui.cli", "record", "--job", "-o",
                        str(tmp_path / "x.rec")], capture_output=True, text=True, env=env,
                       check=False)
    assert p.returncode == 2 and p.stderr.count("\n") == 1
    assert "SLURM_JOB_ID" in p.stderr and not (tmp_path / "x.rec").exists()


def test_job_parsers() -> None:
    v1 = parse_cgroup("4:cpuset:/slurm/uid_1000/job_1234/step_0/task_1\n"
                      "3:memory:/slurm/uid_1000/job_1234/step_0/task_1\n")
    v2 = parse_cgroup("0::/system.slice/slurmstepd.scope/job_77/step_batch/user/task_0\n")
    assert job_of(v1, {}) == "slurm:1234" and step_of(v1, {}) == "0"
    assert job_of(v2, {}) == "slurm:77" and step_of(v2, {}) == "batch"
    plain = parse_cgroup("0::/user.slice/user-1000.slice/session-3.scope\n")
    env = parse_environ(b"SLURM_JOB_ID=9\0SLURM_STEP_ID=2\0PMI_RANK=5\0SLURM_PROCID=1\0X\0")
    assert job_of(plain, env) == "slurm:9" and step_of(plain, env) == "2"
    assert rank_of(env) == (5, "PMI_RANK")
    assert rank_of({"OMPI_COMM_WORLD_RANK": "3", "SLURM_PROCID": "0"}) == (3,
                                                                           "OMPI_COMM_WORLD_RANK")
    assert rank_of({"SLURM_PROCID": "7"}) == (7, "SLURM_PROCID") and rank_of({}) is None
    pbs = parse_cgroup("0::/pbs_jobs.service/jobid/123.srv/tasks\n")
    assert same_job(job_of(pbs, {}), "pbs", "123.srv") and same_job("pbs:123.srv", "pbs", "123")
    assert not same_job("slurm:12", "slurm", "1")
    assert expand_output("job-%j-%N.rec", "42", "cn01") == "job-42-cn01.rec"
    assert expand_output("100%%-%j", "7", "x") == "100%-7"


def test_node_samples_on_the_merged_time_base(tmp_path: Path) -> None:
    """Each node's samples stay that node's (kind 12), read back on the merged time base;
    the merged recording's samples are the job's steps (store/jobsamples.py), here node b's
    alone (node a recorded none)."""
    from snumap_tui.model.sample import Sample
    from snumap_tui.store.merge import node_samples

    a = node_rec(tmp_path / "a.rec", "a", 10**9, WALL, rank_pids={0: 5})
    b = node_rec(tmp_path / "b.rec", "b", 4 * 10**9, WALL - 3 * 10**9, rank_pids={1: 6})
    with store.open(b) as rec:
        header = dict(rec.header)
    b2 = tmp_path / "b2.rec"
    with store.Writer(b2, header) as w:
        w.add_sample(Sample(4 * 10**9 + 5, WALL + 10**9 + 5, {"procstat": {"x": 1}}))
        w.add_sample(Sample(4 * 10**9 + 9, WALL + 10**9 + 9, {"procstat": {"x": 2}}))
    merge([a, b2], tmp_path / "m.rec")
    with store.open(tmp_path / "m.rec") as rec:
        assert [(s.t_ns, s.readings["procstat"]["x"]) for s in rec.samples()] == \
            [(10**9 + 5, 1), (10**9 + 9, 2)]
        assert rec.sample_times.tolist() == [10**9 + 5, 10**9 + 9]
        got = [(s.t_ns, s.readings["procstat"]["x"]) for s in node_samples(rec, 1)]
        assert got == [(10**9 + 5, 1), (10**9 + 9, 2)]      # b's clock onto a's: -3 s
        assert list(node_samples(rec, 0)) == []


def test_job_scanner_sees_a_task_after_its_exec(tmp_path: Path) -> None:
    """slurmstepd forks a task that is slurmstepd (name, environment) until its exec; the
    scanner must look at it again, not remember it as "not the job's"."""
    from snumap_tui.sources.jobprocs import JobScanner

    def proc(pid: int, comm: str, env: bytes, cgroup: str = "0::/\n") -> None:
        d = tmp_path / str(pid)
        d.mkdir(exist_ok=True)
        (d / "comm").write_text(comm + "\n")
        (d / "environ").write_bytes(env)
        (d / "cgroup").write_text(cgroup)

    proc(10, "bash", b"HOME=/\0")
    proc(11, "slurmstepd", b"")
    proc(12, "app", b"SLURM_JOB_ID=5\0SLURM_STEP_ID=0\0SLURMD_NODENAME=n2\0PMI_RANK=3\0")
    proc(13, "slurm_script", b"SLURM_JOB_ID=5\0SLURMD_NODENAME=n1\0SLURM_PROCID=0\0")
    sc = JobScanner("slurm", "5", node="n1", proc=tmp_path)
    new, alive = sc.scan()
    assert [(p.pid, p.step, p.rank) for p in new] == [(13, "batch", None)] and alive == [13]
    proc(11, "app", b"SLURM_JOB_ID=5\0SLURM_STEP_ID=0\0SLURMD_NODENAME=n1\0PMI_RANK=2\0")
    new, alive = sc.scan()
    assert [(p.pid, p.comm, p.step, p.rank, p.rank_var) for p in new] == [
        (11, "app", "0", 2, "PMI_RANK")]
    assert sorted(alive) == [11, 13] and sc.steps_alive() == {"0", "batch"}


def test_job_scanner_reads_a_young_process_again_only_after_its_exec(tmp_path: Path) -> None:
    """A process not of the job is classified again in its first RECHECK_S only when its
    comm changed (its exec): its environment and cgroup are not read every scan (the scan ran
    every 50 ms over every young process of the node: 21 % of a core in a two-node test)."""
    from snumap_tui.sources.jobprocs import JobScanner

    d = tmp_path / "30"
    d.mkdir()
    (d / "comm").write_text("slurmstepd\n")
    (d / "environ").write_bytes(b"HOME=/\0")
    (d / "cgroup").write_text("0::/\n")
    sc = JobScanner("slurm", "5", proc=tmp_path)
    seen: list[int] = []
    real = sc.classify
    sc.classify = lambda pid, *a: (seen.append(pid), real(pid, *a))[1]  # type: ignore[method-assign]
    for _ in range(4):
        assert sc.scan() == ([], [])
    assert seen == [30]
    (d / "environ").write_bytes(b"SLURM_JOB_ID=5\0PMI_RANK=4\0")
    (d / "comm").write_text("app\n")                     # its exec
    new, alive = sc.scan()
    assert seen == [30, 30] and [(p.pid, p.comm, p.rank) for p in new] == [(30, "app", 4)]
    assert alive == [30] and sc._comms == {}


def test_job_scanner_in_a_cgroup_waits_for_the_exec(tmp_path: Path) -> None:
    """Under proctrack/cgroup a task is in the job's cgroup from its fork, while it is still
    slurmstepd (no rank, no node in its environment): the scanner must not settle on that,
    but take it once it has exec'd (its rank, and its node: not the other slurmd's)."""
    from snumap_tui.sources import jobprocs
    from snumap_tui.sources.jobprocs import JobScanner

    cg = "4:memory:/slurm_n1/uid_0/job_5/step_0/task_1\n"
    d = tmp_path / "21"
    d.mkdir()
    (d / "comm").write_text("slurmstepd\n")
    (d / "environ").write_bytes(b"SLURM_CONF=/etc/slurm.conf\0")
    (d / "cgroup").write_text(cg)
    sc = JobScanner("slurm", "5", node="n2", proc=tmp_path)
    assert sc.scan() == ([], [])                  # not yet: it has not exec'd
    (d / "comm").write_text("app\n")
    (d / "environ").write_bytes(b"SLURM_JOB_ID=5\0SLURMD_NODENAME=n1\0PMI_RANK=1\0")
    assert sc.scan() == ([], [])                  # n1's task, not n2's
    sc1 = JobScanner("slurm", "5", node="n1", proc=tmp_path)
    new, alive = sc1.scan()
    assert [(p.pid, p.comm, p.step, p.rank) for p in new] == [(21, "app", "0", 1)]
    # A step daemon in the cgroup stays slurmstepd: taken as it is once RECHECK_S has passed.
    (d / "comm").write_text("slurmstepd\n")
    (d / "environ").write_bytes(b"")
    sc2 = JobScanner("slurm", "5", node="n1", proc=tmp_path)
    assert sc2.scan() == ([], [])
    sc2._young = {pid: t - jobprocs.RECHECK_S for pid, t in sc2._young.items()}
    new, alive = sc2.scan()
    assert [(p.pid, p.comm, p.rank) for p in new] == [(21, "slurmstepd", None)] and alive == [21]


def test_job_scanner_follows_the_step_daemons_of_a_single_slurmd(tmp_path: Path) -> None:
    """With one slurmd on the host, the job's step daemons are followed (their tasks are
    then traced from their fork), except the recorder's own step's."""
    from snumap_tui.sources.jobprocs import JobScanner

    for pid, comm, cmd in ((2, "slurmd", b"slurmd\0-D\0"), (3, "slurmstepd", b"slurmstepd: [5.0]\0"),
                           (4, "slurmstepd", b"slurmstepd: [5.1]\0"),
                           (6, "slurmstepd", b"slurmstepd: [6.0]\0")):
        d = tmp_path / str(pid)
        d.mkdir()
        (d / "comm").write_text(comm + "\n")
        (d / "cmdline").write_bytes(cmd)
        (d / "environ").write_bytes(b"")
        (d / "cgroup").write_text("0::/\n")
    sc = JobScanner("slurm", "5", exclude_steps=("0",), proc=tmp_path)
    assert sc.scan() == ([], []) and sc.stepds == [4]
    sc.scan()
    assert sc.stepds == []                       # each is handed over once
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "comm").write_text("slurmd\n")
    assert JobScanner("slurm", "5", proc=tmp_path).stepd_prefix is None   # two slurmd


def test_node_lookup_whatever_the_order_of_the_headers_nodes() -> None:
    """A merged header whose nodes are not in the order of their bases (edited, or written by
    another tool) still maps each PU and task to its own node; below every base is no node."""
    from snumap_tui.store.nodes import NodeTable

    t = NodeTable([{"node": "b", "cpu_base": 4, "tid_base": 1 << 22},
                   {"node": "a", "cpu_base": 0, "tid_base": 0},
                   {"node": "c", "cpu_base": 8, "tid_base": 2 << 22}])
    assert [t.node_of_cpu(c) for c in (0, 3, 4, 7, 8, 100)] == [1, 1, 0, 0, 2, 2]
    assert [t.split_tid(x) for x in (5, (1 << 22) + 5, (2 << 22) + 9)] == \
        [("a", 5), ("b", 5), ("c", 9)]
    assert t.node_of_tid(0) is None
    assert NodeTable([{"cpu_base": 2}]).node_of_cpu(1) is None
