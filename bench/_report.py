"""Shared by the benchmarks: describe the machine and write a section of docs/benchmarks.md.

Each benchmark owns one section, delimited by ``<!-- bench:NAME -->`` markers, and rewrites only
that section, so benchmarks can run in any order and in separate runs.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


def machine() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    virt = ""
    if Path("/sys/hypervisor/type").exists() or "hypervisor" in Path("/proc/cpuinfo").read_text():
        virt = ", virtual machine"
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (f"{model}, {os.cpu_count()} PUs, {mem_gib:.0f} GiB{virt}; Linux {platform.release()}; "
            f"Python {platform.python_version()}")


def write_section(name: str, title: str, body: str, run: str | None = None) -> None:
    """Replace (or append) the section NAME of docs/benchmarks.md; RUN is the command that
    wrote it (default ``python bench/NAME.py``: a script with several parts names its own)."""
    stamp = _dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    block = (f"<!-- bench:{name} -->\n## {title}\n\n"
             f"Machine: {machine()}. Run: {stamp}, `{run or f'python bench/{name}.py'}`.\n\n"
             f"{body.rstrip()}\n<!-- /bench:{name} -->\n")
    text = DOC.read_text() if DOC.exists() else (
        "# Benchmarks\n\nEvery number here was written by a script under `bench/`, "
        "with the machine it ran on. Re-run a script to refresh its section.\n\n")
    pattern = re.compile(rf"<!-- bench:{re.escape(name)} -->.*?<!-- /bench:{re.escape(name)} -->\n",
                         re.DOTALL)
    text = pattern.sub(lambda _m: block, text) if pattern.search(text) else text + "\n" + block
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(text)


def table(header: list[str], rows: list[list[object]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out) + "\n"


def median_ms(fn: Callable[[], object], runs: int) -> float:
    """Median wall time of ``fn`` in milliseconds over ``runs`` calls, after one warm-up call
    (libraries loaded, files in the page cache)."""
    fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000
