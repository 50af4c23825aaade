"""The tracers' user-space pipeline alone, on one core: raw ring-buffer bytes -> decode ->
tree filter and task table -> the store's Writer (encode, zstd, write), in events per second.

Why synthetic: this VM tops out at a few hundred thousand context switches per second
(stress-ng --switch, bench/sched_overhead.py); a busy many-core node makes millions, and the
question is whether the reader keeps up (target >= 2 M events/s on one core). The events are
store_pipeline.sched_trace's switch / wakeup / migrate streams, turned into the exact bytes
each backend's ring holds:

- bcc: BPF ring buffer records (8-byte header, ``struct snumap_sched_event`` from
  bpf/sched_event.h, 48-byte stride), decoded by ``bpf_ring.decode_fixed`` + ``to_events`` and
  finished by ``BccTracer._finish`` (time order, the in-kernel switch-ins placed by
  trace/reconstruct.py, task table; the kernel already filtered to the tree);
- perf: PERF_RECORD_SAMPLE records (TID|TIME|CPU|RAW, the raw part laid out by this kernel's
  tracefs ``format`` files), one buffer per CPU, decoded all CPUs at once by
  ``PerfTracer._decode_rings`` (the rings joined, then sorted by time) and finished by
  ``PerfTracer._batch``: the switch-ins the kernel did not trace reconstructed on all CPUs at
  once (trace/reconstruct.py), the user-space tree filter, the task table.

Batches are what 0.1 s of polling hands over at the stated event rate. Needs root for the
perf part (tracefs formats). Run: python bench/tracer_pipeline.py
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from snumap_tui.native import perf_event as pe

from bench._report import table, write_section
from bench.store_pipeline import sched_trace
from snumap_tui import store
from snumap_tui.trace import events as ev
from snumap_tui.trace.bcc import BccTracer
from snumap_tui.trace.bpf_layout import load_layout, to_events
from snumap_tui.trace.bpf_ring import HDR_SIZE, decode_fixed, record_stride
from snumap_tui.trace.perf import RAW_AT, PerfTracer
from snumap_tui.trace.tracefs import read_format

TID_BASE = 4_000_000        # above any live pid, so the task table never asks /proc


def bcc_ring_bytes(e: np.ndarray, rec: np.dtype) -> bytes:
    """E as the BPF ring holds them: committed headers (len, pg_off) + records."""
    stride = record_stride(rec.itemsize)
    framed = np.zeros(len(e), dtype=np.dtype({"names": ["len", "rec"], "formats": ["<u4", rec],
                                              "offsets": [0, HDR_SIZE], "itemsize": stride}))
    framed["len"] = rec.itemsize
    for f in ("t_ns", "arg", "cpu", "tid", "tid2", "pid", "pid2", "kind"):
        framed["rec"][f] = e[f]
    return framed.tobytes()


def perf_ring_bytes(e: np.ndarray) -> bytes:
    """E (one CPU's, time order) as perf samples of the sched tracepoints, interleaved."""
    kinds = {ev.SWITCH: ("sched_switch", {"prev_pid": "tid", "next_pid": "tid2",
                                          "prev_state": "arg"}),
             ev.WAKEUP: ("sched_wakeup", {"pid": "tid", "target_cpu": "cpu"}),
             ev.MIGRATE: ("sched_migrate_task", {"pid": "tid", "dest_cpu": "cpu",
                                                 "orig_cpu": "arg"})}
    size = np.zeros(len(e), dtype=np.int64)
    blobs: dict[int, np.ndarray] = {}
    for kind, (tp, fields) in kinds.items():
        fmt = read_format("sched", tp)
        raw = max(f.offset + f.size for f in fmt.fields.values())
        # The kernel pads the raw part so that the record is 8-aligned and says so in its
        # size field: record = RAW_AT + raw size (kernel/events/core.c, perf_prepare_sample).
        total = (RAW_AT + raw + 7) & ~7
        names = ["type", "size", "s_pid", "s_tid", "s_time", "s_cpu", "raw_size", "common_type"]
        formats = ["<u4", "<u2", "<i4", "<i4", "<u8", "<u4", "<u4", "<u2"]
        offsets = [0, 6, 8, 12, 16, 24, 32, RAW_AT]
        for n in fields:
            f = fmt.fields[n]
            names.append(n)
            formats.append(f"<{'i' if f.signed else 'u'}{f.size}")
            offsets.append(RAW_AT + f.offset)
        dt = np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": total})
        sel = e["kind"] == kind
        s = np.zeros(int(sel.sum()), dtype=dt)
        s["type"], s["size"], s["raw_size"] = pe.PERF_RECORD_SAMPLE, total, total - RAW_AT
        s["common_type"] = fmt.id
        s["s_pid"] = s["s_tid"] = e["pid"][sel]
        s["s_time"], s["s_cpu"] = e["t_ns"][sel], e["cpu"][sel]
        for n, src in fields.items():
            s[n] = e[src][sel]
        blobs[kind] = s.view(np.uint8).reshape(len(s), total)
        size[sel] = total
    out = np.zeros(int(size.sum()), dtype=np.uint8)
    starts = np.concatenate([[0], np.cumsum(size)[:-1]])
    for kind, b in blobs.items():
        at = starts[e["kind"] == kind]
        out[at[:, None] + np.arange(b.shape[1])] = b
    return out.tobytes()


def batches(e: np.ndarray, per_batch: int) -> list[np.ndarray]:
    return [e[i:i + per_batch] for i in range(0, len(e), per_batch)]


def run_bcc(parts: list[bytes], rec: np.dtype, tids: np.ndarray, out: Path) -> float:
    tracer = BccTracer()
    tracer._lost = dict  # type: ignore[method-assign]  # no map to read without a kernel
    for t in tids.tolist():
        tracer._tasks.learn(int(t), tgid=int(t), comm="worker")
    t0 = time.perf_counter()
    with store.Writer(out, {"bench": "tracer_pipeline"}, force=True) as w:
        for buf in parts:
            recs, _ = decode_fixed(buf, rec)
            w.add_events(tracer._finish(to_events(recs)))
    return time.perf_counter() - t0


def run_perf(parts: list[dict[int, bytes]], tids: np.ndarray, tracked: set[int] | None,
             out: Path) -> tuple[float, int]:
    tracer = PerfTracer()
    tracer._decoders()
    tracer._tracked = tracked
    for t in tids.tolist():
        tracer._tasks.learn(int(t), tgid=int(t), comm="worker")
    kept = 0
    t0 = time.perf_counter()
    with store.Writer(out, {"bench": "tracer_pipeline"}, force=True) as w:
        for per_cpu in parts:
            lost: dict[int, int] = {}
            batch = tracer._batch(tracer._decode_rings(per_cpu, lost), lost)
            kept += len(batch.events)
            w.add_events(batch)
    return time.perf_counter() - t0, kept


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    args = ap.parse_args()
    rec, _, _ = load_layout()
    rows = []
    for ncpu, nthr, rate in ((2, 200, 0.3e6), (64, 500, 2e6)):
        e = sched_trace(args.events, ncpu, nthr)
        e = e[np.isin(e["kind"], (ev.SWITCH, ev.WAKEUP, ev.MIGRATE))]
        for f in ("tid", "tid2", "pid", "pid2"):
            e[f] = np.where(e[f] > 0, e[f] + TID_BASE, e[f])
        tids = np.unique(np.concatenate([e["tid"], e["tid2"]]))
        tids = tids[tids > 0]
        per_batch = int(rate * 0.1)
        with tempfile.TemporaryDirectory() as d:
            out = Path(d) / "p.rec"
            bparts = [bcc_ring_bytes(b, rec) for b in batches(e, per_batch)]
            best = min(run_bcc(bparts, rec, tids, out) for _ in range(3))
            rows.append([f"bcc, {ncpu} CPUs, {nthr} threads", f"{len(e) / 1e6:.2f} M",
                         per_batch, "in kernel", f"{len(e) / best / 1e6:.2f}",
                         f"{out.stat().st_size / len(e):.2f}"])
            pparts = [{c: perf_ring_bytes(b[b["cpu"] == c]) for c in range(ncpu)}
                      for b in batches(e, per_batch)]
            half = set(tids[::2].tolist())
            for label, tracked in (("system-wide", None), ("half the threads", half)):
                best_t, kept = min(run_perf(pparts, tids, tracked, out) for _ in range(3))
                rows.append([f"perf, {ncpu} CPUs, {nthr} threads", f"{len(e) / 1e6:.2f} M",
                             per_batch, label, f"{len(e) / best_t / 1e6:.2f}",
                             f"{out.stat().st_size / max(kept, 1):.2f}"])
    header = ["decoder", "events", "events per batch", "filter", "M events/s (1 core)",
              "bytes/event kept"]
    body = table(header, rows)
    notes = ("\nDecoded events per second of wall time for the whole path (decode, filter, task "
             "table, encode + zstd, write to a temp file, close), best of 3, one Python thread. "
             "bcc's filter runs in the kernel, so all its events are kept; perf decodes every "
             "record and filters after. Target: >= 2 M events/s.\n")
    print(body + notes)
    write_section("tracer_pipeline", "Tracers: user-space pipeline on synthetic ring bytes",
                  body + notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
