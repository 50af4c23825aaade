"""A real Prometheus scrapes `snumap exporter` on this machine; its HTTP API is checked
against /proc and /sys.

One exporter (0.5 s sampling) and one Prometheus (1 s scrapes, 1 s rule evaluation, the
repository's recording rules loaded) for the module, both on free loopback ports, plus a
busy process pinned to one PU inside a cgroup that looks like a Slurm job's. Waits are
bounded loops on Prometheus's answers, never sleeps that assume a speed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
RULES = REPO / "deploy" / "prometheus" / "snumap-rules.yml"
DASHBOARD = REPO / "deploy" / "grafana" / "snumap-dashboard.json"
SNUMAP = [sys.executable, "-m", "snumap_tui.cli"]
JOB_ID = str(40000 + os.getpid() % 10000)

pytestmark = pytest.mark.skipif(shutil.which("prometheus") is None,
                                reason="prometheus is not installed (scripts/setup.sh test)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cgroup2_root() -> Path | None:
    """Where the unified (v2) hierarchy is mounted, if it is."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if right.split()[:1] == ["cgroup2"]:
            return Path(left.split()[4])
    return None


def proc_stat_cpu(cpu: int) -> list[int]:
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith(f"cpu{cpu} "):
            return [int(x) for x in line.split()[1:]]
    raise AssertionError(f"cpu{cpu} not in /proc/stat")


def proc_ticks(pid: int) -> int:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])


class Env:
    def __init__(self) -> None:
        self.prom_url = ""
        self.exporter_url = ""
        self.busy_cpu = 0
        self.job_cgroup: Path | None = None
        self.procs: list[subprocess.Popen[bytes]] = []

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        args = {"query": expr} | ({"time": f"{at:.3f}"} if at is not None else {})
        url = f"{self.prom_url}/api/v1/query?" + urllib.parse.urlencode(args)
        with urllib.request.urlopen(url, timeout=10) as r:
            doc = json.load(r)
        assert doc["status"] == "success", doc
        return list(doc["data"]["result"])

    def measure_window(self, seconds: float) -> None:
        """/proc/stat of the busy PU and the busy process's CPU ticks, ``seconds`` apart; the
        tests compare Prometheus's rates over the same window with them."""
        busy = self.procs[0].pid
        self.stat_a, self.ticks_a = proc_stat_cpu(self.busy_cpu), proc_ticks(busy)
        t0 = time.monotonic()
        time.sleep(seconds)
        self.stat_b, self.ticks_b = proc_stat_cpu(self.busy_cpu), proc_ticks(busy)
        self.window = time.monotonic() - t0
        self.at = time.time()
        # The exporter samples every 0.5 s and Prometheus scrapes every 1 s: wait until a
        # scrape newer than the second reading is in; the rates are evaluated ending there.
        time.sleep(2.0)
        self.at += 1.0

    def wait_for(self, expr: str, n: int = 1, timeout: float = 40.0) -> list[dict[str, Any]]:
        """The query's result once it has at least ``n`` series (bounded)."""
        end = time.monotonic() + timeout
        while True:
            got = self.query(expr)
            if len(got) >= n or time.monotonic() > end:
                return got
            time.sleep(0.5)


def _start_busy(env: Env) -> subprocess.Popen[bytes]:
    """A process spinning on the last PU, with 64 MiB touched, in a Slurm-like cgroup when
    the machine lets us make one (it must be in the cgroup before the exporter sees it)."""
    env.busy_cpu = max(os.sched_getaffinity(0))
    code = ("import os,sys\n"
            f"os.sched_setaffinity(0, {{{env.busy_cpu}}})\n"
            "b = bytearray(64 << 20)\n"
            "for i in range(0, len(b), 4096): b[i] = 1\n"
            "sys.stdout.write('ready\\n'); sys.stdout.flush()\n"
            "while True: pass\n")
    root = cgroup2_root()
    cmd = [sys.executable, "-c", code]
    if root is not None:
        cg = root / f"slurm_snumap_i12_{os.getpid()}" / f"job_{JOB_ID}"
        try:
            cg.mkdir(parents=True)
            env.job_cgroup = cg
            cmd = ["sh", "-c", f'echo $$ > {cg}/cgroup.procs && exec "$@"', "sh", *cmd]
        except OSError:
            env.job_cgroup = None
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE)
    assert p.stdout is not None and p.stdout.readline() == b"ready\n"
    return p


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("prom12")
    e = Env()
    try:
        e.procs.append(_start_busy(e))
        exp = subprocess.Popen([*SNUMAP, "exporter", "--listen", "127.0.0.1:0",
                                "--interval", "0.5s"], stderr=subprocess.PIPE, cwd=REPO)
        e.procs.append(exp)
        assert exp.stderr is not None
        line = exp.stderr.readline().decode()
        m = re.search(r"http://(127\.0\.0\.1:\d+)/metrics", line)
        assert m, line
        e.exporter_url = f"http://{m.group(1)}"
        port = free_port()
        (tmp / "prometheus.yml").write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            f"rule_files:\n  - {RULES}\n"
            "scrape_configs:\n  - job_name: snumap\n    static_configs:\n"
            f"      - targets: ['{m.group(1)}']\n")
        prom = subprocess.Popen(
            ["prometheus", f"--config.file={tmp / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL, stderr=(tmp / "prometheus.log").open("wb"))
        e.procs.append(prom)
        e.prom_url = f"http://127.0.0.1:{port}"
        end = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{e.prom_url}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < end, (tmp / "prometheus.log").read_text()[-2000:]
            assert prom.poll() is None, (tmp / "prometheus.log").read_text()[-2000:]
            time.sleep(0.2)
        # Enough samples for rate() over 10 s.
        e.wait_for("count_over_time(snumap_exporter_sweeps_total[30s]) >= 12")
        e.measure_window(15.0)
        yield e
    finally:
        for p in reversed(e.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        if e.job_cgroup is not None:
            for d in (e.job_cgroup, e.job_cgroup.parent):
                try:
                    d.rmdir()
                except OSError:
                    pass


def test_rate_of_cpu_seconds_matches_proc_stat(env: Env) -> None:
    hz = os.sysconf("SC_CLK_TCK")
    from snumap_tui.topology.build import load_topology

    topo = load_topology()
    core = topo.core_of(env.busy_cpu)
    assert core is not None
    a, b = env.stat_a, env.stat_b
    # user + system of the busy PU, per second, from the kernel ...
    want = (b[0] + b[2] - a[0] - a[2]) / hz / env.window
    got = env.query(f'sum(rate(snumap_cpu_seconds_total{{mode=~"user|system",'
                    f'core="{core.os_index}"}}[15s]))', at=env.at)
    assert len(got) == 1
    value = float(got[0]["value"][1])
    # ... and from Prometheus over (nearly) the same 15 s: a spinning PU is steady.
    assert value == pytest.approx(want, abs=0.2)
    assert value > 0.05          # (its share of a PU depends on the machine's load)
    # Every PU's time adds up to one second per second per PU (seconds, not ticks).
    allcpu = env.query("sum(rate(snumap_cpu_seconds_total[10s]))")
    assert float(allcpu[0]["value"][1]) == pytest.approx(len(topo.pus), rel=0.1)


def test_numa_node_memory_gauge_matches_sysfs(env: Env) -> None:
    nodes = sorted(Path("/sys/devices/system/node").glob("node[0-9]*"))
    assert nodes
    for node in nodes:
        n = node.name[4:]
        meminfo = {}
        for line in (node / "meminfo").read_text().splitlines():
            parts = line.split()
            meminfo[parts[2].rstrip(":")] = int(parts[3]) * 1024
        size = env.query(f'snumap_memory_size_bytes{{numa_node="{n}"}}')
        assert [float(r["value"][1]) for r in size] == [meminfo["MemTotal"]]
        free = env.query(f'snumap_memory_free_bytes{{numa_node="{n}"}}')
        assert float(free[0]["value"][1]) == pytest.approx(meminfo["MemFree"],
                                                            abs=0.05 * meminfo["MemTotal"])


def test_recording_rules_and_dashboard_queries_evaluate(env: Env) -> None:
    util = env.wait_for("instance_package:snumap_util_pct:rate1m")
    assert util and 0.0 < float(util[0]["value"][1]) <= 100.0
    assert env.wait_for("instance_numa_node:snumap_mem_used_pct:rate1m")
    # No PMU here: IPC has no series at all (absent, never 0) and the reason is scraped.
    assert env.query("instance_package:snumap_ipc:rate1m") == [] or \
        Path("/sys/bus/event_source/devices/cpu").exists()
    assert env.query('snumap_source_info{source="rapl"}')
    # Every query of the Grafana dashboard is valid PromQL that Prometheus evaluates.
    from test_exporter_deploy import dashboard_queries

    for expr in dashboard_queries(DASHBOARD, instance=env.exporter_url.split("//")[1],
                                  job=JOB_ID):
        env.query(expr)


def test_job_series_in_prometheus(env: Env) -> None:
    if env.job_cgroup is None:
        pytest.skip("cannot create a cgroup here for a Slurm-like job")
    # Prometheus keeps its own `job` label (the scrape job): the exporter's becomes
    # `exported_job` unless the scrape config says honor_labels.
    sel = f'exported_job="{JOB_ID}",scheduler="slurm"'
    expr = f"sum by (numa_node) (rate(snumap_job_cpu_seconds_total{{{sel}}}[10s]))"
    assert env.wait_for(expr)
    hz = os.sysconf("SC_CLK_TCK")
    cpu = env.query(expr.replace("[10s]", "[15s]"), at=env.at)
    # The job's one process ran on the busy PU's node only; its rate is the process's own.
    from snumap_tui.topology.build import load_topology

    node = load_topology().numa_of(env.busy_cpu)
    assert node is not None
    assert [r["metric"]["numa_node"] for r in cpu] == [str(node.os_index)]
    want = (env.ticks_b - env.ticks_a) / hz / env.window
    assert float(cpu[0]["value"][1]) == pytest.approx(want, abs=0.2)
    assert float(cpu[0]["value"][1]) > 0.05
    mem = env.wait_for(f"sum(snumap_job_resident_bytes{{{sel}}})")
    assert mem and float(mem[0]["value"][1]) >= 64 << 20
    assert env.wait_for(f"snumap_job_context_switches_total{{{sel}}}")
    assert all("pid" not in r["metric"] for r in env.query("{__name__=~'snumap_.*'}"))


def test_promtool_checks_the_exposition(env: Env) -> None:
    for accept in ("text/plain", "application/openmetrics-text; version=1.0.0"):
        req = urllib.request.Request(f"{env.exporter_url}/metrics", headers={"Accept": accept})
        with urllib.request.urlopen(req, timeout=10) as r:
            body = r.read()
            ctype = r.headers["Content-Type"]
        assert accept.split(";")[0] in ctype
        if accept == "text/plain":
            done = subprocess.run(["promtool", "check", "metrics"], input=body, check=False,
                                  capture_output=True, timeout=30)
            assert done.returncode == 0, done.stdout + done.stderr
        else:
            assert body.endswith(b"# EOF\n")
