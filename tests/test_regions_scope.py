"""Region probes land in the traced processes only (``--probe-scope process``, the default on
the eBPF path): a process outside the traced tree that maps the same library keeps the
library's original bytes at the probed function -- no breakpoint, so its calls are never
trapped -- while the traced process's copy carries the breakpoint. With ``--probe-scope file``
(the probes on the library's inode, as before) the untraced process has it too.

Both processes map a private copy of libgomp, so that another recording on the same machine
(with probes on the system's libgomp) cannot set a breakpoint in them. The traced command is a small Python script that starts the traced program, waits until it
has loaded libgomp (and its probes are set), then reads both processes' /proc/PID/mem over the
probed functions (the first 512 bytes from GOMP_critical_start: its probes sit past its
prologue) and compares it with the file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from snumap_tui.trace import elfsyms as E
from tests.test_regions_programs import SNUMAP, _compile, needs_uprobes

CALLS = 2000
LOOP_SRC = r"""
#include <stdio.h>
#include <unistd.h>
void GOMP_critical_start(void);
void GOMP_critical_end(void);
int main(void) {
    char c;
    printf("ready\n");
    fflush(stdout);
    if (read(0, &c, 1) != 1) return 1;
    for (int i = 0; i < %(calls)d; i++) { GOMP_critical_start(); GOMP_critical_end(); }
    return 0;
}
"""

# The traced command: run the traced loop, then look at both processes' bytes of FUNCTION.
CHECK_SRC = r"""
import json, os, subprocess, sys
loop, untraced, lib, off, size = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), 512

def where(pid):
    for line in open(f"/proc/{pid}/maps"):
        f = line.split()
        if len(f) >= 6 and os.path.realpath(f[5]) == lib:
            lo, hi = (int(x, 16) for x in f[0].split("-"))
            moff = int(f[2], 16)
            if moff <= off < moff + hi - lo:
                return lo + off - moff
    raise SystemExit(f"{lib} not mapped in {pid}")

def changed(pid):
    with open(f"/proc/{pid}/mem", "rb") as m:
        m.seek(where(pid))
        return m.read(size) != want

with open(lib, "rb") as f:
    f.seek(off)
    want = f.read(size)
child = subprocess.Popen([loop], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
assert child.stdout.readline() == b"ready\n"
out = {"traced": changed(child.pid), "untraced": changed(untraced)}
child.stdin.write(b"x")
child.stdin.close()
out["rc"] = child.wait()
print(json.dumps(out))
"""


def _libgomp(loop: Path) -> str:
    out = subprocess.run(["ldd", str(loop)], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        if "libgomp" in line and "=>" in line:
            return os.path.realpath(line.split("=>")[1].split()[0])
    pytest.skip("the loop is not linked to libgomp")
    raise AssertionError


@needs_uprobes
@pytest.mark.parametrize("scope", ["process", "file"])
def test_untraced_process_gets_no_breakpoint(tmp_path: Path, scope: str) -> None:
    # A private copy of libgomp (its own inode), found through the loop's RUNPATH: no other
    # recording on this machine has probes on it.
    shutil.copy2(_libgomp(_compile(["gcc", "-fopenmp"], LOOP_SRC % {"calls": 1},
                                   tmp_path / "probe")), tmp_path / "libgomp.so.1")
    loop = _compile(["gcc", "-O1", "-fopenmp", f"-Wl,-rpath,{tmp_path}"],
                    LOOP_SRC % {"calls": CALLS}, tmp_path / "loop")
    lib = _libgomp(loop)
    assert lib == str(tmp_path / "libgomp.so.1")
    off = E.load_elf(lib).offset_of("GOMP_critical_start")
    assert off is not None
    (tmp_path / "check.py").write_text(CHECK_SRC)
    # Another user's program: the same library mapped, waiting, outside the traced tree.
    other = subprocess.Popen([str(loop)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert other.stdout is not None and other.stdout.readline() == b"ready\n"
        rec = tmp_path / "r.rec"
        r = subprocess.run([*SNUMAP, "record", "-o", str(rec), "--probe-scope", scope,
                            "--probe-budget", "0",
                            "--", sys.executable, str(tmp_path / "check.py"), str(loop),
                            str(other.pid), lib, str(off)],
                           check=False, capture_output=True, text=True, timeout=120,
                           cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        seen = json.loads(r.stdout.strip().splitlines()[-1])
    finally:
        other.kill()
        other.wait()
    assert seen["rc"] == 0
    assert seen["traced"] is True               # the traced program is probed...
    assert seen["untraced"] is (scope == "file")    # ... the other only with file scope
    rep = subprocess.run([*SNUMAP, "report", str(rec), "--json"], capture_output=True,
                         text=True, timeout=60, check=True)
    counts = {g["name"]: g["count"] for g in json.loads(rep.stdout)["regions"]}
    assert counts.get("GOMP_critical_start") == CALLS, counts


@needs_uprobes
def test_scoped_links_follow_the_tree_then_widen(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Each process joining gets its own links; exited ones are pruned when the bound is
    reached; past it the probes go on the file (one link per file and direction)."""
    from snumap_tui.trace import region_bpf as R
    from snumap_tui.trace.uprobes import Probe

    loop = _compile(["gcc", "-fopenmp"], LOOP_SRC % {"calls": 1}, tmp_path / "probe")
    lib = tmp_path / "libgomp.so.1"
    shutil.copy2(_libgomp(loop), lib)
    off = E.load_elf(str(lib)).offset_of("GOMP_critical_start")
    assert off is not None
    procs = [subprocess.Popen(["sleep", "60"]) for _ in range(4)]
    monkeypatch.setattr(R, "MAX_SCOPED", 2)
    u = R.BpfUprobes([procs[0].pid], system_wide=False, hold_exec=True, scoped=True)
    try:
        assert u.add_many([Probe(str(lib), off, False, 0, None, "g", None, 0),
                           Probe(str(lib), off, True, 1, None, "g", None, 0)]) == []
        assert u.add_process(procs[1].pid)
        assert u.scoped == {procs[0].pid, procs[1].pid}
        assert [len(u.pid_links[p.pid]) for p in procs[:2]] == [2, 2]
        procs[1].kill()
        procs[1].wait()
        assert u.add_process(procs[2].pid)          # the exited one makes room
        assert u.scoped == {procs[0].pid, procs[2].pid} and u.widened == 0
        assert len(u.links) == 4
        assert u.add_process(procs[3].pid)          # past the bound: on the file
        assert u.scoped is None and u.widened == 3
        assert len(u.links) == 2 and not u.pid_links
        assert not u.add_process(procs[1].pid + 100000)     # nothing more per process
    finally:
        u.close()
        for p in procs:
            p.kill()
            p.wait()


def test_widening_is_said_once_and_marked() -> None:
    """When the tree outgrows per-process links (``BpfUprobes.widen``), the recording says so
    once: on stderr, among the problems and as a marker."""
    from types import SimpleNamespace

    from snumap_tui.trace.region_catalog import RegionNames
    from snumap_tui.trace.regions import RegionTracer

    t = RegionTracer("auto", [], RegionNames(), say=lambda _s: None)
    added: list[int] = []
    t.uprobes = SimpleNamespace(widened=0, scoped=set(), specs=[],
                                add_process=lambda pid: added.append(pid) or True)
    t.family = {10, 11, 12}
    t._link_processes([11, 99])             # 99: not of the tree
    assert added == [11] and t.take_lines() == [] and not t.notes
    t.uprobes.widened = 65
    t._link_processes([12])
    t._link_processes([12])
    lines = t.take_lines()
    assert len(lines) == 1 and "65 processes" in lines[0] and lines[0].startswith("regions: ")
    assert [n for _t, n in t.notes] == lines
    assert sum("65 processes" in p for p in t.problems) == 1
