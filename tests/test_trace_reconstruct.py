"""Missed switch-ins (trace/reconstruct.py) and the perf ring's wrap-around (native/perf_ring.py).

The perf backend's over-count: on a CPU where perf records nothing while the idle task is
current (Linux 6.18, KVM guest), a task woken onto that idle CPU is switched out without a
switch-in. Charging it from the previous traced switch there (the switch into idle, timehist's
rule) gave it the idle time; the reconstruction now starts it at the latest event that proves
it was not running yet.
"""

from __future__ import annotations

import mmap
import os
import struct

import numpy as np
from snumap_tui.native.perf_event import (
    MMAP_PAGE_DATA_HEAD,
    MMAP_PAGE_DATA_OFFSET,
    MMAP_PAGE_DATA_SIZE,
    MMAP_PAGE_DATA_TAIL,
)
from snumap_tui.native.perf_ring import PERF_RECORD_SAMPLE, PerfRing, split_records

from snumap_tui.trace import events as ev
from snumap_tui.trace.reconstruct import NotRunning, missed_switch_ins

SLEEPING = 1       # prev_state TASK_INTERRUPTIBLE
PREEMPTED = 0x100  # TASK_REPORT_MAX: "R+"


def events(*rows: tuple) -> np.ndarray:
    """(t_ns, cpu, kind, tid, tid2, arg) rows, already in time order."""
    e = np.zeros(len(rows), dtype=ev.EVENT_DTYPE)
    for i, (t, cpu, kind, tid, tid2, arg) in enumerate(rows):
        e[i] = (t, cpu, kind, tid, tid2, -1, -1, arg)
    return e


def test_child_woken_onto_blind_idle_cpu_starts_at_its_wakeup_new() -> None:
    # CPU 1 goes idle at 1000; the parent on CPU 0 forks 42 at 50000 and wakes it onto CPU 1
    # at 50010; the switch idle -> 42 on CPU 1 is not traced; 42 switches out at 60000.
    e = events((1000, 1, ev.SWITCH, 7, 0, SLEEPING),
               (50000, 0, ev.FORK, 5, 42, 0),
               (50010, 1, ev.WAKEUP_NEW, 42, 0, 0),
               (60000, 1, ev.SWITCH, 42, 0, SLEEPING))
    old = missed_switch_ins(e, {})                            # timehist's rule only
    assert old["t_ns"].tolist() == [1000]
    new = missed_switch_ins(e, {}, NotRunning())
    assert new["t_ns"].tolist() == [50010]
    assert (new["tid"].tolist(), new["tid2"].tolist(), new["arg"].tolist()) == ([0], [42], [-1])


def test_wakeup_after_sleep_bounds_the_switch_in_across_batches() -> None:
    last: dict[int, tuple[int, int]] = {}
    state = NotRunning()
    # Batch 1: 42 runs on CPU 1 and blocks; CPU 1 goes idle.
    missed_switch_ins(events((100, 1, ev.SWITCH, 0, 42, 0),
                             (900, 1, ev.SWITCH, 42, 0, SLEEPING)), last, state)
    # Batch 2: woken from CPU 0 at 5000, out of idle on CPU 1 untraced, out again at 9000.
    out = missed_switch_ins(events((5000, 1, ev.WAKEUP, 42, 0, 0),
                                   (9000, 1, ev.SWITCH, 42, 3, SLEEPING)), last, state)
    assert out["t_ns"].tolist() == [5000]
    # Batch 3: the wakeup came in an earlier batch than the switch-out that reveals the miss.
    missed_switch_ins(events((9500, 1, ev.SWITCH, 3, 0, SLEEPING),
                             (12000, 0, ev.WAKEUP, 42, 0, 0)), last, state)
    out = missed_switch_ins(events((20000, 1, ev.SWITCH, 42, 0, SLEEPING)), last, state)
    assert out["t_ns"].tolist() == [12000]


def test_a_wakeup_of_a_task_that_did_not_sleep_proves_nothing() -> None:
    # 42 was preempted (runnable) on CPU 0 at 2000: it can be picked without any wakeup, so a
    # later sched_wakeup (ttwu_runnable() while it runs, about to sleep) is no bound; its
    # switch-out on CPU 0 is.
    e = events((1000, 1, ev.SWITCH, 7, 0, SLEEPING),
               (2000, 0, ev.SWITCH, 42, 8, PREEMPTED),
               (30000, 0, ev.WAKEUP, 42, 0, 0),
               (40000, 1, ev.SWITCH, 42, 0, SLEEPING))
    assert missed_switch_ins(e, {}, NotRunning())["t_ns"].tolist() == [2000]
    # Only the first wakeup after it blocked counts, not a second one during its run.
    e = events((1000, 1, ev.SWITCH, 7, 0, SLEEPING),
               (2000, 0, ev.SWITCH, 42, 8, SLEEPING),
               (3000, 0, ev.WAKEUP, 42, 0, 0),
               (30000, 0, ev.WAKEUP, 42, 0, 0),
               (40000, 1, ev.SWITCH, 42, 0, SLEEPING))
    assert missed_switch_ins(e, {}, NotRunning())["t_ns"].tolist() == [3000]


def test_migration_and_evidence_after_the_switch_out_do_not_count_late() -> None:
    # A migration of 42 proves it was not running then; events after its switch-out on
    # CPU 1 (its next wakeup) must not move the switch-in past that switch-out.
    e = events((1000, 1, ev.SWITCH, 7, 0, SLEEPING),
               (4000, 1, ev.MIGRATE, 42, 0, 0),
               (8000, 1, ev.SWITCH, 42, 0, SLEEPING),
               (9000, 0, ev.WAKEUP, 42, 0, 0))
    out = missed_switch_ins(e, {}, NotRunning())
    assert out["t_ns"].tolist() == [4000]
    # Never before the previous switch on that CPU (evidence from long ago is weaker).
    e = events((10, 0, ev.WAKEUP_NEW, 42, 0, 0),
               (1000, 1, ev.SWITCH, 7, 0, SLEEPING),
               (8000, 1, ev.SWITCH, 42, 0, SLEEPING))
    assert missed_switch_ins(e, {}, NotRunning())["t_ns"].tolist() == [1000]


def test_traced_switch_ins_add_nothing() -> None:
    e = events((1000, 1, ev.SWITCH, 0, 42, 0),
               (2000, 0, ev.WAKEUP, 43, 0, 0),
               (3000, 1, ev.SWITCH, 42, 43, PREEMPTED),
               (4000, 1, ev.SWITCH, 43, 0, SLEEPING))
    assert len(missed_switch_ins(e, {}, NotRunning())) == 0


def reference_switch_ins(batches: list[np.ndarray]) -> list[list[tuple[int, int, int, int]]]:
    """The rule of reconstruct.py, one event at a time with dicts: per batch, the sorted
    (t_ns, cpu, tid, tid2) of each missed switch-in."""
    last: dict[int, tuple[int, int]] = {}
    proof: dict[int, int] = {}
    blocked: dict[int, bool] = {}
    out = []
    for e in batches:
        carried = dict(proof)
        valid: dict[int, list[int]] = {}
        for t, kind, tid, arg in zip(e["t_ns"].tolist(), e["kind"].tolist(),
                                     e["tid"].tolist(), e["arg"].tolist()):
            if kind not in (ev.SWITCH, ev.WAKEUP, ev.WAKEUP_NEW, ev.MIGRATE) or tid <= 0:
                continue
            if kind != ev.WAKEUP or blocked.get(tid, False):
                valid.setdefault(tid, []).append(t)
                proof[tid] = max(proof.get(tid, 0), t)
            if kind != ev.MIGRATE:
                blocked[tid] = kind == ev.SWITCH and arg & 0xFF != 0
        found = []
        for t, cpu, kind, tid, tid2 in zip(e["t_ns"].tolist(), e["cpu"].tolist(),
                                           e["kind"].tolist(), e["tid"].tolist(),
                                           e["tid2"].tolist()):
            if kind != ev.SWITCH:
                continue
            t_last, n_last = last.get(cpu, (0, -1))
            last[cpu] = (t, tid2)
            if t_last > 0 and n_last >= 0 and tid not in (n_last, 0):
                before = [x for x in valid.get(tid, []) if x < t]
                bound = before[-1] if before else carried.get(tid, 0)
                found.append((max(t_last, bound), cpu, n_last, tid))
        out.append(sorted(found))
    return out


def test_switch_ins_match_the_rule_event_by_event() -> None:
    # Random batches of few tasks on few CPUs (many chain breaks, sleeps, preemptions, wakeups
    # of running tasks), through the vectorised passes and the one-event-at-a-time rule.
    rng = np.random.default_rng(5)
    placed = 0
    for _ in range(40):
        ntid, ncpu = int(rng.integers(2, 12)), int(rng.integers(1, 4))
        batches, t0 = [], 1000
        for _ in range(int(rng.integers(1, 6))):
            n = int(rng.integers(0, 50))
            e = np.zeros(n, dtype=ev.EVENT_DTYPE)
            e["t_ns"] = t0 + np.sort(rng.integers(0, 10 * n + 1, n))
            t0 += 10 * n + 10
            e["cpu"] = rng.integers(0, ncpu, n)
            e["kind"] = rng.choice([ev.SWITCH] * 3 + [ev.WAKEUP] * 2 + [ev.WAKEUP_NEW,
                                                                        ev.MIGRATE, ev.FORK], n)
            e["tid"], e["tid2"] = rng.integers(0, ntid, n), rng.integers(0, ntid, n)
            e["arg"] = rng.choice([0, SLEEPING, PREEMPTED], n)
            batches.append(e)
        want = reference_switch_ins(batches)
        last: dict[int, tuple[int, int]] = {}
        state = NotRunning()
        for e, w in zip(batches, want):
            got = missed_switch_ins(e, last, state)
            assert got["t_ns"].tolist() == sorted(got["t_ns"].tolist())
            assert sorted(zip(got["t_ns"].tolist(), got["cpu"].tolist(), got["tid"].tolist(),
                              got["tid2"].tolist())) == w
            placed += len(w)
    assert placed > 100


# ---- the ring: a record that straddles the end of the data area ----------------------------

def sample(tid: int, t: int, raw: bytes) -> bytes:
    """A PERF_RECORD_SAMPLE with TID|TIME|CPU|RAW (perf_event_open(2)), padded to 8."""
    body = struct.pack("<iiQII", tid, tid, t, 1, 0) + struct.pack("<I", len(raw)) + raw
    body += b"\0" * (-(8 + len(body)) % 8)
    return struct.pack("<IHH", PERF_RECORD_SAMPLE, 0, 8 + len(body)) + body


def test_ring_reassembles_a_record_that_wraps(tmp_path) -> None:
    page = os.sysconf("SC_PAGE_SIZE")
    pages = 1
    size = pages * page
    recs = [sample(100 + i, 1000 + i, bytes([i]) * 60) for i in range(3)]
    stream = b"".join(recs)
    tail = 10 * size - len(recs[0]) - 16     # the second record crosses the end
    head = tail + len(stream)
    path = tmp_path / "ring"
    with open(path, "wb") as f:
        f.write(b"\0" * (1 + pages) * page)
    fd = os.open(path, os.O_RDWR)
    try:
        with mmap.mmap(fd, (1 + pages) * page) as m:
            struct.pack_into("<QQQQ", m, MMAP_PAGE_DATA_HEAD, head, tail, page, size)
            assert MMAP_PAGE_DATA_TAIL == MMAP_PAGE_DATA_HEAD + 8
            assert (MMAP_PAGE_DATA_OFFSET, MMAP_PAGE_DATA_SIZE) == (1040, 1048)
            for i, b in enumerate(stream):
                m[page + (tail + i) % size] = b
        ring = PerfRing(fd, pages)
        try:
            assert ring.pending() == len(stream)
            got = ring.read()
            assert ring.pending() == 0 and ring.read() == b""
        finally:
            ring.close()
    finally:
        os.close(fd)
    assert got == stream
    types, _offs, sizes = split_records(got)
    assert types.tolist() == [PERF_RECORD_SAMPLE] * 3
    assert sizes.tolist() == [len(r) for r in recs]
