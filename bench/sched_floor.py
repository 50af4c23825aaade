"""The kernel-side floor under any eBPF scheduling tracer on this machine: stripped-down builds
of bpf/sched.bpf.c attached system-wide with nothing reading them.

- ``return at once``: every program returns before doing anything -- the cost of a tp_btf
  program being attached to sched_switch, sched_wakeup ... at all;
- ``store, no clock``: the programs do all their work, but each record goes into a slot of a
  per-CPU array (no ring, so no reserve/submit and no reader) and carries no timestamp;
- ``store``: the same with bpf_ktime_get_ns(), the least a tracer that keeps every event
  with its time can do.

The variants are made from the shipped source by three textual edits, each checked to apply,
and compiled with the build's own clang command (scripts/build_bpf.py) into a temporary
directory; nothing here ships. bench/sched_overhead.py runs them in the same run as snumap's
backends and perf sched record.

    python bench/sched_floor.py          # as root: prints each variant's slowdowns
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SOURCE = REPO / "bpf" / "sched.bpf.c"
RETURN_AT_ONCE = "programs attached, returning at once"
STORE_NO_CLOCK = "programs storing each event in a per-CPU array, no clock, no ring"
STORE = "programs storing each event with its time in a per-CPU array, no ring"

# A per-CPU array of 256 records that reserve_event() hands out instead of the ring.
_SLOTS = """struct snumap_floor_slots {
    __u64 head;
    struct snumap_sched_event ev[256];
};

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct snumap_floor_slots);
} snumap_floor SEC(".maps");

"""
_RESERVE = (r"__u32 me = bpf_get_smp_processor_id\(\);\n\s*void \*ring = "
            r"bpf_map_lookup_elem\(&rings, &me\);\n\s*\*ringp = ring;\n\s*"
            r"struct snumap_sched_event \*e = ring \? "
            r"bpf_ringbuf_reserve\(ring, sizeof\(\*e\), 0\) : 0;")
_SLOT = """__u32 slot0 = 0;
    *ringp = 0;
    struct snumap_floor_slots *s = bpf_map_lookup_elem(&snumap_floor, &slot0);
    struct snumap_sched_event *e = s ? &s->ev[s->head++ & 255] : 0;"""


def _sub(pattern: str, repl: str, text: str, *, at_least: int = 1) -> str:
    new, n = re.subn(pattern, repl, text, flags=re.DOTALL)
    if n < at_least:
        raise RuntimeError(f"sched_floor: {pattern!r} no longer matches bpf/sched.bpf.c")
    return new


def variants(src: str) -> dict[str, str]:
    """The three stripped-down sources (see the module's docstring)."""
    at_once = _sub(r'(SEC\("tp_btf/[^"]+"\)\nint BPF_PROG\([^)]*\)\n\{\n)', r"\1    return 0;\n",
                   src, at_least=8)
    store = _sub(r"(/\* A record in the ring of this CPU)", _SLOTS + r"\1", src)
    store = _sub(_RESERVE, _SLOT, store)
    store = _sub(r"\n\s*bpf_ringbuf_submit\(e, .*?\)\);", "", store)
    no_clock = _sub(r"bpf_ktime_get_ns\(\)", "1", store, at_least=5)
    return {RETURN_AT_ONCE: at_once, STORE_NO_CLOCK: no_clock, STORE: store}


def build(tmp: Path) -> dict[str, Path]:
    """Each variant compiled into TMP (the shipped headers from bpf/); empty without clang."""
    if shutil.which("clang") is None:
        print("sched_floor: no clang, the floor rows are left out", file=sys.stderr)
        return {}
    sys.path.insert(0, str(REPO / "scripts"))
    from build_bpf import command  # the build's own flags

    out = {}
    for i, (name, text) in enumerate(variants(SOURCE.read_text()).items()):
        src, obj = tmp / f"floor{i}.bpf.c", tmp / f"floor{i}.bpf.o"
        src.write_text(text)
        # The build's command for the shipped source, pointed at the variant (its headers
        # are still found through -I bpf).
        cmd = [str(src) if a == str(SOURCE.relative_to(REPO)) else a
               for a in command(SOURCE, obj)]
        done = subprocess.run(cmd, cwd=REPO, check=False, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"clang failed on the {name!r} variant: {done.stderr.strip()}")
        out[name] = obj
    return out


def attached(obj: Path):       # type: ignore[no-untyped-def]
    """A started system-wide LibbpfTracer on OBJ, never read (stop() it after)."""
    from snumap_tui.trace.libbpf import LibbpfTracer

    tracer = LibbpfTracer(object_file=obj)
    tracer.start(None)
    return tracer


def main() -> int:
    import tempfile

    from bench.sched_overhead import median_work, workload

    cmd = workload(200000, 3)
    with tempfile.TemporaryDirectory() as d:
        for name, obj in build(Path(d)).items():
            base = median_work(cmd, 3)
            tracer = attached(obj)
            try:
                work = median_work(cmd, 3)
            finally:
                tracer.stop()
            print(f"{name}: pipe {100 * (work[0] / base[0] - 1):+.1f} %, "
                  f"stress-ng {100 * (base[1] / work[1] - 1):+.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
