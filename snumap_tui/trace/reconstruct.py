"""Switch-ins the kernel did not trace, reconstructed at the latest time they provably happened.

Seen on Linux 6.18 in a KVM guest: on some CPUs (here PU 1, not PU 0) perf delivers no
tracepoint record at all while the idle task is current -- not the switch out of idle, not
the wakeups in its interrupts; `perf record -e sched:sched_switch -a` + `perf script` shows
the same (0 switches with prev_pid=0 on that CPU, ~860/s on the other). A task is then
switched out on that CPU without having been switched in.

`perf sched timehist` charges such a task from the previous traced switch on the CPU, which is
the switch INTO idle: the whole idle stretch before it was woken is counted as its run time.
That was the perf backend's over-count (a freshly forked child woken onto the idle CPU got
tens of ms it never ran). Here the missing switch-in is put at the latest time at which the
task is provably not yet running, which is never later than the real switch-in:

- the previous traced switch on that CPU (timehist's bound; the CPU ran something else);
- the task's own switch-out on any CPU (a task runs on one CPU at a time, and another CPU
  cannot take it before it is off the first: ``p->on_cpu`` in kernel/sched/core.c);
- its sched_migrate_task (set_task_cpu() is only called on a task that is not running);
- its sched_wakeup_new (a new task first runs after wake_up_new_task() enqueued it, which
  traces under the target runqueue's lock that the switching CPU must take to pick it);
- the first sched_wakeup after a switch-out in which it blocked (prev_state not runnable):
  a blocked task is off the runqueue until that wakeup enqueues it, under the same lock.
  Later wakeups are not used: try_to_wake_up() also traces a wakeup of a task that is still
  on the CPU about to sleep (ttwu_runnable()), which proves nothing.

The reconstructed event is a SWITCH with ``arg = -1`` (events.py), prev = the task the last
traced switch on that CPU left running (usually idle), next = the task switched out later.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from snumap_tui.trace import events as ev
from snumap_tui.trace.rows import insert_rows, take_rows

# prev_state of sched_switch: the TASK_REPORT bits (0x7f) and TASK_REPORT_IDLE (0x80) are
# sleeping states; 0 is runnable and TASK_REPORT_MAX (0x100) marks a preemption ("R+")
# (include/trace/events/sched.h, __trace_sched_switch_state).
SLEEP_STATES = 0xFF


@dataclass
class NotRunning:
    """Per tid, carried from batch to batch: the time of the latest event that proves the
    task was not running, and whether it is blocked (its last switch-out slept and no wakeup
    has been seen since), so that the next wakeup counts."""

    t: dict[int, int] = field(default_factory=dict)
    blocked: dict[int, bool] = field(default_factory=dict)

    def forget(self, tids: list[int]) -> None:
        for tid in tids:
            self.t.pop(tid, None)
            self.blocked.pop(tid, None)


def _evidence(events: np.ndarray, state: NotRunning) -> tuple[np.ndarray, np.ndarray]:
    """(tid, t_ns) of each event of EVENTS (time-sorted) proving that tid was not running at
    t_ns, sorted by tid then time; STATE is updated with the last of each tid."""
    kind = events["kind"]
    sw = kind == ev.SWITCH
    wake = kind == ev.WAKEUP
    cand = sw | wake | (kind == ev.WAKEUP_NEW) | (kind == ev.MIGRATE)
    cand &= events["tid"] > 0
    at = np.flatnonzero(cand)
    if not len(at):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    tid = events["tid"][at].astype(np.int64)
    t = events["t_ns"][at].astype(np.int64)
    order = np.argsort(tid, kind="stable")                  # by tid, time order kept
    tid, t, at = tid[order], t[order], at[order]
    k = kind[at]
    is_wake = k == ev.WAKEUP
    # A wakeup counts only right after a blocking switch-out of the same task; migrations
    # in between do not change that (select_task_rq() migrates a task while waking it).
    sleeps = (k == ev.SWITCH) & ((events["arg"][at] & SLEEP_STATES) != 0)
    step = k != ev.MIGRATE
    marks = np.where(step, sleeps, False)
    # The "blocked" flag before each event: the last non-migrate event of the tid before it,
    # or the carried state at the tid's first event in this batch.
    idx = np.where(step, np.arange(len(at)), -1)
    start = np.ones(len(at), dtype=bool)
    start[1:] = tid[1:] != tid[:-1]
    group = np.cumsum(start) - 1
    first = np.flatnonzero(start)
    prev_idx = np.full(len(at), -1, dtype=np.int64)
    prev_idx[1:] = np.maximum.accumulate(idx)[:-1]
    in_group = (prev_idx >= 0) & (prev_idx >= first[group])
    carried = np.array([state.blocked.get(x, False) for x in tid[first].tolist()], dtype=bool)
    blocked_before = np.where(in_group, marks[np.maximum(prev_idx, 0)], carried[group])
    valid = ~is_wake | blocked_before
    # Carry the last state of each tid to the next batch.
    last = np.append(first[1:], len(at)) - 1
    has_step = np.maximum.accumulate(idx)[last] >= first
    for x, hs, j in zip(tid[last].tolist(), has_step.tolist(),
                        np.maximum.accumulate(idx)[last].tolist()):
        if hs:
            state.blocked[x] = bool(marks[j])
    vt = t[valid]
    vtid = tid[valid]
    ends = np.append(vtid[1:] != vtid[:-1], True) if len(vtid) else np.zeros(0, bool)
    for x, tt in zip(vtid[ends].tolist(), vt[ends].tolist()):
        state.t[x] = max(state.t.get(x, 0), tt)
    return vtid, vt


def missed_switch_ins(events: np.ndarray, last: dict[int, tuple[int, int]],
                      state: NotRunning | None = None) -> np.ndarray:
    """Synthetic switch-ins for EVENTS (time-sorted, all CPUs merged so that evidence from
    any CPU counts); LAST (cpu -> (t_ns, next tid) of the last switch of earlier batches) and
    STATE (the not-running evidence of earlier batches) are updated in place. Without STATE
    only the previous switch on the CPU bounds the time (timehist's rule). The result is
    sorted by time."""
    at = np.flatnonzero(events["kind"] == ev.SWITCH)
    if not len(at):
        if state is not None:
            _evidence(events, state)
        return ev.empty_events()
    before_state = None
    if state is not None:
        before_state = dict(state.t)
        etid, et = _evidence(events, state)
    cpu = events["cpu"][at]
    if cpu.min() != cpu.max():                             # per CPU, time order kept
        at = at[np.argsort(cpu, kind="stable")]
        cpu = events["cpu"][at]
    # Columns, not rows: only four of the record's fields are needed, for every switch.
    t, prev, nxt, pid = (events[f][at] for f in ("t_ns", "tid", "tid2", "pid"))
    before_next = np.empty(len(at), dtype=np.int64)
    before_t = np.zeros(len(at), dtype=np.uint64)
    before_next[1:], before_t[1:] = nxt[:-1], t[:-1]
    first = np.ones(len(at), dtype=bool)
    first[1:] = cpu[1:] != cpu[:-1]
    for i in np.flatnonzero(first).tolist():
        t_last, n_last = last.get(int(cpu[i]), (0, -1))
        before_t[i], before_next[i] = t_last, n_last
    ends = np.flatnonzero(np.append(cpu[1:] != cpu[:-1], True))
    for i in ends.tolist():
        last[int(cpu[i])] = (int(t[i]), int(nxt[i]))
    miss = (before_t > 0) & (before_next >= 0) & (prev != before_next) & (prev != 0)
    t_in = before_t[miss].astype(np.int64)
    who = prev[miss].astype(np.int64)
    if state is not None and len(t_in):
        t_out = t[miss].astype(np.int64)
        t_in = np.maximum(t_in, _latest_before(etid, et, who, t_out, before_state or {}))
    out = np.zeros(len(t_in), dtype=ev.EVENT_DTYPE)
    out["t_ns"] = t_in
    out["cpu"] = cpu[miss]
    out["kind"] = ev.SWITCH
    out["tid"] = before_next[miss]
    out["tid2"] = who
    out["pid"] = np.where(before_next[miss] == 0, 0, -1)
    out["pid2"] = pid[miss]
    out["arg"] = -1
    if len(out) > 1:
        out = out[np.argsort(out["t_ns"], kind="stable")]
    return out


def _latest_before(etid: np.ndarray, et: np.ndarray, who: np.ndarray, t_out: np.ndarray,
                   carried: dict[int, int]) -> np.ndarray:
    """For each (WHO, T_OUT): the latest evidence time of WHO strictly before T_OUT (ETID/ET
    sorted by tid then time), else what earlier batches carried, else 0."""
    out = np.zeros(len(who), dtype=np.int64)
    if not len(who):
        return out
    if len(et):
        t0 = int(min(et.min(), t_out.min()))
        span = int(max(et.max(), t_out.max())) - t0
        top = int(max(etid.max(), who.max()))
    if len(et) and span < 1 << 40 and 0 <= top < 1 << 22:
        # One int64 key (tid, time since T0) for both sides: a single searchsorted.
        ekey = (etid << 40) | (et - t0)
        qkey = (who << 40) | (t_out - t0)
        j = np.searchsorted(ekey, qkey, side="left") - 1
        jc = np.maximum(j, 0)
        hit = (j >= 0) & (etid[jc] == who)
        out[hit] = et[jc[hit]]
        miss = np.flatnonzero(~hit)
    else:
        miss = np.arange(len(who))
        lo = np.searchsorted(etid, who, side="left")
        hi = np.searchsorted(etid, who, side="right")
        for q in np.flatnonzero(hi > lo).tolist():
            a, b = int(lo[q]), int(hi[q])
            j1 = a + int(np.searchsorted(et[a:b], t_out[q], side="left")) - 1
            if j1 >= a:
                out[q] = et[j1]
        miss = miss[out[miss] == 0]
    for q in miss.tolist():
        out[q] = carried.get(int(who[q]), 0)
    return out


def place_kernel_switch_ins(events: np.ndarray, state: NotRunning) -> np.ndarray:
    """EVENTS (time-sorted) with the switch-ins a tracer already reconstructed at the previous
    switch on the CPU (SWITCH, ``arg = -1``: the bcc program does that part in the kernel,
    where it sees every switch, also those its filter drops) moved to the latest not-running
    evidence of the task before its switch-out, as ``missed_switch_ins`` places its own; never
    earlier than where the tracer put them. STATE carries the evidence across batches.

    The switch-out is the next traced switch on the same CPU (the previous one was the
    reconstruction's bound, so nothing ran there in between); when it is not in this batch
    yet, evidence up to the batch's end counts (none can follow the switch-in before it)."""
    syn = (events["kind"] == ev.SWITCH) & (events["arg"] == -1)
    if not syn.any():
        _evidence(events, state)
        return events
    real = take_rows(events, ~syn)
    before_state = dict(state.t)
    etid, et = _evidence(real, state)
    moved = take_rows(events, syn)                        # a copy
    t_syn = moved["t_ns"].astype(np.int64)
    t_out = np.full(len(moved), int(events["t_ns"].max()) + 1, dtype=np.int64)
    real_sw = take_rows(real, real["kind"] == ev.SWITCH)
    for c in np.unique(moved["cpu"]).tolist():
        on = moved["cpu"] == c
        times = real_sw["t_ns"][real_sw["cpu"] == c].astype(np.int64)
        j = np.searchsorted(times, t_syn[on], side="right")
        found = j < len(times)
        t_out[np.flatnonzero(on)[found]] = times[j[found]]
    who = moved["tid2"].astype(np.int64)
    late = _latest_before(etid, et, who, t_out, before_state)
    moved["t_ns"] = np.maximum(t_syn, np.minimum(late, t_out)).astype(np.uint64)
    if len(moved) > 1:
        moved = moved[np.argsort(moved["t_ns"], kind="stable")]
    # Each goes after the real events of its time (where a stable sort would put it).
    at = np.searchsorted(real["t_ns"], moved["t_ns"], side="right")
    return insert_rows(real, at, moved)
