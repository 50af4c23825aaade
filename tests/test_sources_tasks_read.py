"""Reading procfs files to their end: seq_file-backed files such as /proc/PID/numa_maps come
in several reads, each a little short of the buffer (whole records only)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from snumap_tui.sources.tasks import TasksSource, parse_numa_maps

# A child with a few hundred mappings, each touched, then asleep so its numa_maps is stable.
CHILD = r"""
import mmap, sys, time
maps = []
for i in range(300):
    m = mmap.mmap(-1, 4096 * (1 + i % 3))
    m[0] = 1
    maps.append(m)
print("ready", flush=True)
time.sleep(60)
"""


@pytest.mark.skipif(not Path("/proc/self/numa_maps").exists(), reason="no numa_maps here")
def test_numa_maps_of_a_process_with_many_mappings_is_read_whole() -> None:
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        path = f"/proc/{child.pid}/numa_maps"
        whole = Path(path).read_text()
        assert len(whole) > 16384, "the test needs a numa_maps of several reads"
        src = TasksSource(Path("/"))
        fast = src._read(path)
        assert fast.count("\n") == whole.count("\n")
        pages = parse_numa_maps(fast, src.base_page_kb)
        assert sum(pages.values()) == sum(parse_numa_maps(whole, src.base_page_kb).values())
        assert sum(pages.values()) >= 300          # every mapping was touched
    finally:
        child.kill()
        child.wait()
