"""`snumap exporter`: its own CPU at 1 s sampling with a 15 s scrape, and its series at 384 PUs.

1. CPU: `snumap exporter --interval 1s` runs on this machine (per-job series on: the process
   list every 5 s), scraped every 15 s by this script, for --seconds (120 by default) after
   a 5 s warm-up; the CPU time of its process (utime + stime, all threads, /proc/PID/stat) is
   reported as % of one core. In the same run, side by side: node_exporter (Debian's
   prometheus-node-exporter, default collectors, scraped the same way) when installed, and
   `snumap exporter --no-jobs` (no process list) and `snumap exporter --textfile` (no
   port, the file rewritten every second).
2. Size: the exposition of a generated 2-socket, 8-node, 384-PU tree (tests/fakefs.py: 192
   cores, SMT 2) with every source a real node has: /proc/stat, cpufreq, RAPL, NUMA, the
   processes, and a synthetic perf source with all the default events plus APERF/MPERF
   (the fake tree has no PMU): series per node by default and with --per-pu, the bytes of
   one scrape, the time to render it and to add one Sample to the totals.

    .venv/bin/python bench/exporter.py [--seconds 120]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests"))

from _report import table, write_section

HZ = os.sysconf("SC_CLK_TCK")


def cpu_ticks(pid: int) -> int:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(url: str) -> int:
    with urllib.request.urlopen(url, timeout=10) as r:
        return len(r.read())


def measure_cpu(seconds: float, tmp: Path) -> list[list[Any]]:
    """Every tool at once; (label, CPU %, scrapes, bytes per scrape)."""
    snumap_port, nojobs_port = free_port(), free_port()
    tools: dict[str, tuple[list[str], str | None]] = {
        "snumap exporter (1 s sampling, 15 s scrape)": (
            [sys.executable, "-m", "snumap_tui.cli", "exporter", "--listen",
             f"127.0.0.1:{snumap_port}", "--interval", "1s"],
            f"http://127.0.0.1:{snumap_port}/metrics"),
        "snumap exporter --no-jobs (1 s sampling, 15 s scrape)": (
            [sys.executable, "-m", "snumap_tui.cli", "exporter", "--listen",
             f"127.0.0.1:{nojobs_port}", "--interval", "1s", "--no-jobs"],
            f"http://127.0.0.1:{nojobs_port}/metrics"),
        "snumap exporter --textfile (1 s sampling, file every 1 s)": (
            [sys.executable, "-m", "snumap_tui.cli", "exporter", "--textfile", str(tmp),
             "--interval", "1s"], None),
    }
    ne = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
    if ne:
        p = free_port()
        tools["node_exporter 1.5 (default collectors, 15 s scrape)"] = (
            [ne, f"--web.listen-address=127.0.0.1:{p}"], f"http://127.0.0.1:{p}/metrics")
    procs = {k: subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL) for k, (cmd, _) in tools.items()}
    try:
        time.sleep(5.0)
        start = {k: cpu_ticks(p.pid) for k, p in procs.items()}
        t0 = time.monotonic()
        sizes: dict[str, list[int]] = {k: [] for k in tools}
        while time.monotonic() - t0 < seconds:
            for k, (_, url) in tools.items():
                if url:
                    sizes[k].append(scrape(url))
            time.sleep(max(0.0, 15.0 - (time.monotonic() - t0) % 15.0))
        wall = time.monotonic() - t0
        used = {k: (cpu_ticks(p.pid) - start[k]) / HZ for k, p in procs.items()}
    finally:
        for p in procs.values():
            p.terminate()
            p.wait(10)
    rows = []
    for k in tools:
        s = sizes[k]
        rows.append([k, f"{100 * used[k] / wall:.2f} %", len(s) or "-",
                     f"{statistics.median(s) / 1024:.0f} KiB" if s else
                     f"{(tmp / 'snumap.prom').stat().st_size / 1024:.0f} KiB (file)"])
    return rows


class FreqWithMsr:
    """The fake tree's cpufreq source plus APERF/MPERF/TSC counters, as a node with the msr
    PMU delivers them (the fake tree has none)."""

    name = "freq"

    def __init__(self, inner: Any, cpus: int) -> None:
        import numpy as np

        self.inner, self.root, self.n = inner, inner.root, 0
        self.cpus = np.arange(cpus, dtype=np.int64)

    def status(self) -> Any:
        return self.inner.status()

    def read(self) -> dict[str, Any]:
        import numpy as np

        self.n += 1
        r = dict(self.inner.read())
        c = np.full(len(self.cpus), 2.0e9 * self.n)
        r.update({"cpus": self.cpus, "aperf": c * 1.2, "mperf": c, "tsc": c,
                  "base_khz": np.full(len(self.cpus), 2.0e6)})
        return r

    def close(self) -> None:
        self.inner.close()


def measure_size(tmp: Path) -> list[list[Any]]:
    from fakefs import FakeRoot
    from test_exporter_model import FakePerf, sources

    from snumap_tui.exporter.runtime import Exporter
    from snumap_tui.sources.perf import HW_EVENTS, SW_EVENTS
    from snumap_tui.topology.build import load_topology

    fake = FakeRoot(tmp / "fake384", cpus=384, nodes=8, packages=2)
    topo = load_topology(fsroot=fake.root)
    rows = []
    for per_pu in (False, True):
        src = sources(fake, perf=False)
        src = [FreqWithMsr(s, 384) if s.name == "freq" else s for s in src]
        src.append(FakePerf(list(range(384)), (*HW_EVENTS, "ref-cycles", *SW_EVENTS)))
        exp = Exporter(topo, fake.root, sources=src, per_pu=per_pu)
        try:
            exp.on_sample(exp.sampler.sweep())
            add_ms, render_ms = [], []
            for k in range(6):
                fake.advance(1.0, busy={c: 1.0 for c in range(k * 40, k * 40 + 96)})
                sample = exp.sampler.sweep()
                t = time.perf_counter()
                exp.on_sample(sample)
                add_ms.append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                body = exp.render()
                render_ms.append((time.perf_counter() - t) * 1000)
        finally:
            exp.close()
        lines = [ln for ln in body.decode().splitlines() if ln and not ln.startswith("#")]
        fams = {re.split(r"[{ ]", ln, maxsplit=1)[0] for ln in lines}
        rows.append(["--per-pu" if per_pu else "default (per core)", len(lines), len(fams),
                     f"{len(body) / 1024:.0f} KiB", f"{statistics.median(render_ms[1:]):.0f}",
                     f"{statistics.median(add_ms[1:]):.1f}",
                     "(opt-in)" if per_pu else "yes" if len(lines) <= 5000 else "NO"])
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--seconds", type=float, default=120.0)
    args = ap.parse_args()
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="snumap-bench12-") as d:
        tmp = Path(d)
        (tmp / "textfile").mkdir()
        size_rows = measure_size(tmp)
        cpu_rows = measure_cpu(args.seconds, tmp / "textfile")
    load1 = os.getloadavg()
    body = (
        f"CPU: every exporter runs at once for {args.seconds:.0f} s (after 5 s of warm-up), "
        f"scraped every 15 s by the script; CPU = utime + stime of its process over the "
        f"window, % of one core. Target: <= 0.5 %. Load average before/after: "
        f"{load0[0]:.2f} / {load1[0]:.2f} (the machine is shared with other jobs).\n\n"
        + table(["exporter", "CPU (% of a core)", "scrapes", "per scrape"], cpu_rows)
        + "\nSize: the exposition of a generated 384-PU tree (2 packages, 8 NUMA nodes, 192 "
        "cores with 2 PUs each, tests/fakefs.py) with every source a real node has, perf "
        "synthetic (all default events and ref-cycles, APERF/MPERF); 2 batch jobs. Render = "
        "one /metrics body (text format), add = one Sample into the totals (the sampler "
        "thread's extra work per sweep), medians of 5. Target: <= 5,000 series per node by "
        "default.\n\n"
        + table(["labels", "series", "families", "bytes", "render ms", "add ms",
                 "<= 5,000"], size_rows))
    write_section("exporter", "snumap exporter: own CPU and series per node", body)
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
