"""Reading a BPF ring buffer from Python: libbpf's ring_buffer__poll with a Python callback per
record (native/bpf_objects.RingBuffer) against mapping the ring and decoding it in numpy
batches (snumap_tui/trace/bpf_ring.BpfRingReader, what the tracers use).

The producer is bpf/sched.bpf.o, system-wide, under `stress-ng --switch 2`; each reader runs
alone for the same time and consumes everything. Reported: records read, the reader's CPU
time (this thread) and CPU ns per record. Run as root: python bench/ringbuf_read.py [--secs 3]
"""

from __future__ import annotations

import argparse
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from snumap_tui.native import libbpf

from bench._report import table, write_section
from snumap_tui.trace.bpf_layout import bpf_dir, load_layout
from snumap_tui.trace.bpf_ring import BpfRingSet
from snumap_tui.trace.libbpf import load_sched, ring_cpus

RING = 8 << 20          # per CPU


class _Ring:
    """What libbpf.RingBuffer needs of a map: its descriptor and a name."""

    def __init__(self, fd: int, cpu: int) -> None:
        self.fd, self.name = fd, f"ring of CPU {cpu}"


def open_sched(fds: list[int]) -> tuple[libbpf.BpfObject, list[int]]:
    """The recorder's object, system-wide, loaded with a RING per online CPU; and those CPUs."""
    ncpu = libbpf.num_possible_cpus()
    cpus = ring_cpus(ncpu)
    obj = libbpf.BpfObject.open(bpf_dir() / "sched.bpf.o")
    load_sched(obj, True, ncpu, cpus, RING, fds)
    return obj, cpus


def lost(obj: libbpf.BpfObject) -> int:
    raw = obj.map("lost").lookup(b"\0\0\0\0") or b""
    return sum(struct.unpack(f"<{len(raw) // 8}Q", raw))


def run(kind: str, secs: float) -> tuple[int, float, int]:
    """(records, reader CPU seconds, lost) for reader KIND over SECS of a switch storm."""
    fds: list[int] = []
    obj, cpus = open_sched(fds)
    n = 0
    try:
        obj.attach_all()
        if kind == "callback":
            count = [0]

            def one(_rec: bytes) -> None:
                count[0] += 1

            rings = [libbpf.RingBuffer(_Ring(fd, c), one) for c, fd in zip(cpus, fds, strict=True)]
            c0, end = time.thread_time(), time.monotonic() + secs
            while time.monotonic() < end:
                for ring in rings:
                    ring.poll(0)
                time.sleep(0.01)
            obj.detach()
            for ring in rings:
                ring.consume()
            cpu = time.thread_time() - c0
            for ring in rings:
                ring.free()
            n = count[0]
        else:
            rec_dtype, _, _ = load_layout()
            reader = BpfRingSet(fds, RING, rec_dtype)
            c0, end = time.thread_time(), time.monotonic() + secs
            while time.monotonic() < end:
                n += len(reader.read())
                time.sleep(0.01)
            obj.detach()
            n += len(reader.read())
            cpu = time.thread_time() - c0
            reader.close()
        return n, cpu, lost(obj)
    finally:
        obj.close()
        for fd in fds:
            os.close(fd)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--secs", type=float, default=3.0)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (eBPF)", file=sys.stderr)
        return 2
    rows = []
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    for kind in ("callback", "numpy batches"):
        storm = subprocess.Popen(["stress-ng", "--switch", "2", "-t", f"{args.secs + 2:.0f}s"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(0.5)
            n, cpu, dropped = run("callback" if kind == "callback" else "mmap", args.secs)
        finally:
            storm.kill()
            storm.wait()
        rows.append(["libbpf ring_buffer__poll, Python callback" if kind == "callback"
                     else "mmap + numpy batches (BpfRingSet)", f"{n:,}", f"{dropped:,}",
                     f"{cpu:.2f}", f"{cpu / max(n, 1) * 1e9:.0f}"])
    body = table(["reader", "records", "lost (ring full)", "reader CPU s", "CPU ns / record"],
                 rows)
    notes = (f"\n{args.secs:.0f} s of `stress-ng --switch 2` each, bpf/sched.bpf.o system-wide "
             f"(a ring of 8 MiB per CPU, each read every 10 ms); reader CPU is this thread's "
             f"(time.thread_time). The batch reader "
             f"only decodes the records into an array; the callback reader only counts. "
             f"Load average before: {load}.\n")
    print(body + notes)
    write_section("ringbuf_read", "Reading the BPF ring buffer from Python", body + notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
