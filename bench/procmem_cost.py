"""What reading a process's memory per NUMA node costs at 1 GiB resident: the sources
sources/procmem.py chose between, timed on a child that maps and touches 1 GiB (4 KiB pages,
then with transparent huge pages where madvise allows them), and one ProcessMemory.read() as
record makes it at every sample.

Writes the "procmem_cost" section of docs/benchmarks.md.

    .venv/bin/python bench/procmem_cost.py [--mib 1024] [--runs 20]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import median_ms, table, write_section

from snumap_tui.sources.procmem import ProcessMemory

# Maps N MiB (MADV_HUGEPAGE when asked), touches every page, says "ready", waits for stdin.
HOG = """
import mmap, sys
n = int(sys.argv[1]) << 20
m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
if sys.argv[2] == "huge" and hasattr(m, "madvise"):
    m.madvise(mmap.MADV_HUGEPAGE)
for i in range(0, n, 4096):
    m[i] = 1
print("ready", flush=True)
sys.stdin.read()
"""


def read_all(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        parts = []
        while True:
            b = os.read(fd, 1 << 16)
            if not b:
                return b"".join(parts)
            parts.append(b)
    finally:
        os.close(fd)


def measure(mib: int, pages: str, runs: int) -> list[list[object]]:
    p = subprocess.Popen([sys.executable, "-c", HOG, str(mib), pages], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        rss = int(read_all(f"/proc/{p.pid}/statm").split()[1]) * os.sysconf("SC_PAGE_SIZE")
        label = f"{rss / 2**30:.2f} GiB, {pages} pages"
        rows = []
        for f in ("statm", "status", "numa_maps", "smaps_rollup"):
            ms = median_ms(lambda f=f: read_all(f"/proc/{p.pid}/{f}"), runs)
            rows.append([label, f"/proc/PID/{f}", f"{ms:.3f}"])
        src = ProcessMemory()
        src.watch([p.pid])
        ms = median_ms(src.read, runs)
        how = "statm (one node: exact)" if src.one_node else "statm + numa_maps when due"
        rows.append([label, f"ProcessMemory.read() [{how}]", f"{ms:.3f}"])
        # The path of a machine with several nodes (forced here): statm at every read,
        # numa_maps when due. Reads 1 ms apart for 2 s, RSS steady: the mean per read.
        src = ProcessMemory()
        src.one_node, src.nodes = False, [0, 1]
        src.watch([p.pid])
        t_end, n, busy = time.monotonic() + 2.0, 0, 0.0
        while time.monotonic() < t_end:
            t = time.perf_counter()
            src.read()
            busy += time.perf_counter() - t
            n += 1
            time.sleep(0.001)
        rows.append([label, (f"ProcessMemory.read(), several nodes: mean of {n} reads 1 ms "
                            f"apart ({src.walks} numa_maps walks)"), f"{busy / n * 1e3:.3f}"])
        return rows
    finally:
        if p.stdin:
            p.stdin.close()
        p.wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=20)
    a = ap.parse_args()
    t0 = time.monotonic()
    rows = measure(a.mib, "4k", a.runs) + measure(a.mib, "huge", a.runs)
    body = table(["resident", "read", "median ms"], rows)
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    body += (f"\nTransparent huge pages: `{thp.read_text().strip() if thp.exists() else 'n/a'}`. "
             "numa_maps and smaps_rollup walk the page tables (cost grows with the resident "
             "pages, far less with huge pages); statm is a counter. record reads statm at "
             "every sample and numa_maps only when the RSS moved by 1/32 or 5 s passed, never "
             "sooner than 10 times the last walk took (sources/procmem.py); on a machine with "
             f"one node with memory it never walks. Took {time.monotonic() - t0:.0f} s.\n")
    print(body)
    write_section("procmem_cost", "Process memory per node: cost at 1 GiB resident", body)


if __name__ == "__main__":
    main()
