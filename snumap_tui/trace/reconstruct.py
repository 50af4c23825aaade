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

from dataclasses import dataclass

import numpy as np

from snumap_tui.trace import events as ev
from snumap_tui.trace.rows import insert_rows, take_rows

# prev_state of sched_switch: the TASK_REPORT bits (0x7f) and TASK_REPORT_IDLE (0x80) are
# sleeping states; 0 is runnable and TASK_REPORT_MAX (0x100) marks a preemption ("R+")
# (include/trace/events/sched.h, __trace_sched_switch_state).
SLEEP_STATES = 0xFF


# PID_MAX_LIMIT on 64-bit (include/linux/threads.h: 4 * 1024 * 1024): every tid a kernel
# reports is below it, so a table indexed by tid stays bounded.
PID_LIMIT = 1 << 22


class NotRunning:
    """Per tid, carried from batch to batch: the time of the latest event that proves the
    task was not running (``t``, 0 = none), and whether it is blocked (``blocked``: its last
    switch-out slept and no wakeup has been seen since), so that the next wakeup counts.

    Held in arrays by slot (one per tid ever seen; a tid -> slot table indexed by tid, whose
    zeroed pages cost memory only where tids are) so that a batch updates every task with a
    few numpy passes, not a dict entry per task. Slot 0 is "no task": always 0 / False."""

    def __init__(self) -> None:
        self._slot = np.zeros(0, dtype=np.int32)        # tid -> slot (0: not seen yet)
        self._big: dict[int, int] = {}                  # tids >= PID_LIMIT (not a kernel's)
        self.t = np.zeros(64, dtype=np.int64)
        self.blocked = np.zeros(64, dtype=bool)
        self.used = 1                                   # slots handed out, slot 0 included

    def _new(self, n: int) -> int:
        """The first of N new slots."""
        first = self.used
        self.used += n
        if self.used > len(self.t):
            size = max(self.used, 2 * len(self.t))
            self.t = np.concatenate([self.t, np.zeros(size - len(self.t), np.int64)])
            self.blocked = np.concatenate([self.blocked, np.zeros(size - len(self.blocked), bool)])
        return first

    def slots(self, tids: np.ndarray) -> np.ndarray:
        """The slot of each of TIDS, new tids given one; tids <= 0 get slot 0."""
        tids = np.asarray(tids, dtype=np.int64)
        if not len(tids):
            return np.zeros(0, dtype=np.intp)
        top = int(tids.max())
        if top >= PID_LIMIT:
            out = np.zeros(len(tids), dtype=np.intp)
            small = tids < PID_LIMIT
            out[small] = self.slots(tids[small])
            for i in np.flatnonzero(~small).tolist():
                tid = int(tids[i])
                if tid not in self._big:
                    self._big[tid] = self._new(1)
                out[i] = self._big[tid]
            return out
        if top >= len(self._slot):
            grown = np.zeros(min(PID_LIMIT, max(top + 1, 2 * len(self._slot))), np.int32)
            grown[:len(self._slot)] = self._slot
            self._slot = grown
        pos = np.maximum(tids, 0)
        out = self._slot[pos].astype(np.intp)
        new = (out == 0) & (tids > 0)
        if new.any():
            fresh = np.unique(tids[new])
            self._slot[fresh] = self._new(len(fresh)) + np.arange(len(fresh))
            out = self._slot[pos].astype(np.intp)
            out[tids <= 0] = 0
        return out

    def forget(self, tids: list[int]) -> None:
        """Exited tasks: their tids may be reused by new tasks."""
        s = self.slots(np.asarray(tids, dtype=np.int64))
        self.t[s] = 0
        self.blocked[s] = False


@dataclass
class _Candidates:
    """Columns of a batch's events, in the batch's order, for finding which prove a task not
    running: switch-outs, wakeups, wakeup_new and migrations of tid > 0 have the task's
    slot, every other event slot 0 (no task), so no pass has to pick them out first."""

    slot: np.ndarray
    t: np.ndarray
    kind: np.ndarray
    sleeps: np.ndarray       # a switch-out into a sleeping state


def _candidates(events: np.ndarray, state: NotRunning) -> _Candidates:
    # Whole columns copied out once: fields of the packed 37-byte records are strided, and
    # indexing a strided column costs several times what a contiguous one does.
    kind = np.ascontiguousarray(events["kind"])
    tid = np.ascontiguousarray(events["tid"])
    # SWITCH, WAKEUP, WAKEUP_NEW, MIGRATE are the kinds 1..4 (events.py): one range test.
    other = (kind < ev.SWITCH) | (kind > ev.MIGRATE)
    slot = state.slots(tid)
    slot[other] = 0
    sleeps = (kind == ev.SWITCH) & ((events["arg"] & SLEEP_STATES) != 0)
    return _Candidates(slot, events["t_ns"].astype(np.int64), kind, sleeps)


def _fold(c: _Candidates, state: NotRunning) -> None:
    """Carry a batch into STATE: each task's latest valid evidence and whether it ends the
    batch blocked. No sort: the latest valid evidence of a task is its last switch-out,
    migration or wakeup_new, or, later than those only, the first wakeup after its last
    switch-out when that one slept (with no switch-out in the batch: its first wakeup, when
    it was carried in blocked); later wakeups found it already woken. The last event of
    each kind per task is one ``ufunc.at`` over all events (slot 0 collects the events of no
    task and is reset at the end); the first step after the last switch-out is one more,
    over the few events that follow their task's last switch-out."""
    n = len(c.slot)
    if not n:
        return
    idx = np.arange(n)
    m = state.used
    slot, kind = c.slot, c.kind
    # Kinds 1..4 are the candidates' (events.py); kind & 7 keeps them, and maps the others
    # (slot 0 only) somewhere in the same 8 columns.
    flat = np.full(m * 8, -1, dtype=np.intp)
    np.maximum.at(flat, slot * 8 + (kind & 7), idx)
    last = flat.reshape(m, 8)
    sw_, wk_, wn_, mg_ = (last[:, k] for k in (ev.SWITCH, ev.WAKEUP, ev.WAKEUP_NEW, ev.MIGRATE))
    last_out = sw_                                         # per slot: last switch-out
    last_proof = np.maximum(np.maximum(sw_, wn_), mg_)     # last non-wakeup candidate
    last_step = np.maximum(np.maximum(sw_, wk_), wn_)      # last event setting "blocked"
    after = np.flatnonzero(idx > last_out[slot])
    after = after[kind[after] != ev.MIGRATE]
    first_after = np.full(m, n, dtype=np.intp)            # per slot: first step after it
    np.minimum.at(first_after, slot[after], after)
    s = np.flatnonzero(first_after < n)
    j = first_after[s]
    lo = last_out[s]
    blocked_before = np.where(lo >= 0, c.sleeps[np.maximum(lo, 0)], state.blocked[s])
    ok = (kind[j] == ev.WAKEUP) & blocked_before
    last_proof[s[ok]] = np.maximum(last_proof[s[ok]], j[ok])
    s = np.flatnonzero(last_proof >= 0)
    state.t[s] = np.maximum(state.t[s], c.t[last_proof[s]])
    s = np.flatnonzero(last_step >= 0)
    state.blocked[s] = c.sleeps[last_step[s]]     # a wakeup or wakeup_new: not blocked
    state.t[0], state.blocked[0] = 0, False


def _evidence(c: _Candidates, want: np.ndarray,
              state: NotRunning) -> tuple[np.ndarray, np.ndarray]:
    """(slot, t_ns) of each candidate of a task in WANT (slots) that proves it was not
    running at t_ns, sorted by slot then time, with the blocked flags STATE carried into the
    batch. Only the tasks of missed switch-ins, so a few of the batch's events."""
    mark = np.zeros(state.used, dtype=bool)
    mark[want] = True
    mark[0] = False
    at = np.flatnonzero(mark[c.slot])
    if not len(at):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = np.argsort(c.slot[at], kind="stable")         # by task, time order kept
    at = at[order]
    code, t, k, sleeps = c.slot[at].astype(np.int64), c.t[at], c.kind[at], c.sleeps[at]
    # A wakeup counts only right after a blocking switch-out of the same task; migrations
    # in between do not change that (select_task_rq() migrates a task while waking it).
    step = k != ev.MIGRATE
    # The "blocked" flag before each event: the last non-migrate event of the task before
    # it, or the carried state at the task's first event in this batch.
    idx = np.where(step, np.arange(len(at)), -1)
    start = np.ones(len(at), dtype=bool)
    start[1:] = code[1:] != code[:-1]
    group = np.cumsum(start) - 1
    first = np.flatnonzero(start)
    prev_idx = np.full(len(at), -1, dtype=np.int64)
    prev_idx[1:] = np.maximum.accumulate(idx)[:-1]
    in_group = (prev_idx >= 0) & (prev_idx >= first[group])
    carried = state.blocked[code[first]]
    blocked_before = np.where(in_group, sleeps[np.maximum(prev_idx, 0)], carried[group])
    valid = (k != ev.WAKEUP) | blocked_before
    return code[valid], t[valid]


def missed_switch_ins(events: np.ndarray, last: dict[int, tuple[int, int]],
                      state: NotRunning | None = None) -> np.ndarray:
    """Synthetic switch-ins for EVENTS (time-sorted, all CPUs merged so that evidence from
    any CPU counts); LAST (cpu -> (t_ns, next tid) of the last switch of earlier batches) and
    STATE (the not-running evidence of earlier batches) are updated in place. Without STATE
    only the previous switch on the CPU bounds the time (timehist's rule). The result is
    sorted by time.

    The chain breaks (a switch-out of a task the CPU's previous switch did not switch in)
    are found first; evidence is searched only for their tasks, and for the rest STATE is
    just carried forward (most batches have no break at all)."""
    at = np.flatnonzero(events["kind"] == ev.SWITCH)
    if not len(at):
        if state is not None:
            _fold(_candidates(events, state), state)
        return ev.empty_events()
    # Contiguous copies before indexing: a field of the packed 37-byte records is strided,
    # and gathering from a strided column costs several times what it does from a copy.
    cpu = np.ascontiguousarray(events["cpu"])[at]
    top = int(cpu.max())
    if int(cpu.min()) != top:                             # per CPU, time order kept
        # A stable sort of 16-bit keys is a radix sort: linear, unlike one of 32-bit keys.
        key = cpu.astype(np.uint16) if top < 1 << 16 else cpu
        at = at[np.argsort(key, kind="stable")]
    # The switches' whole rows, copied as bytes (rows.py); their fields are read in order.
    sw = take_rows(events, at)
    cpu, t, prev, nxt, pid = sw["cpu"], sw["t_ns"], sw["tid"], sw["tid2"], sw["pid"]
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
    miss = np.flatnonzero(miss)
    t_in = before_t[miss].astype(np.int64)
    who = prev[miss].astype(np.int64)
    if state is not None:
        c = _candidates(events, state)
        if len(miss):
            t_out = t[miss].astype(np.int64)
            slot = state.slots(who)
            etid, et = _evidence(c, slot, state)
            t_in = np.maximum(t_in, _latest_before(etid, et, slot, t_out, state.t[slot]))
        _fold(c, state)
    if not len(miss):
        return ev.empty_events()
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
                   carried: np.ndarray) -> np.ndarray:
    """For each (WHO, T_OUT): the latest evidence time of WHO strictly before T_OUT (ETID/ET
    sorted by task then time; tasks by slot), else what earlier batches carried (CARRIED,
    one per query; 0 for none)."""
    out = np.zeros(len(who), dtype=np.int64)
    if not len(who):
        return out
    if len(et):
        t0 = int(min(et.min(), t_out.min()))
        span = int(max(et.max(), t_out.max())) - t0
        top = int(max(etid.max(), who.max()))
    if len(et) and span < 1 << 40 and 0 <= top < 1 << 22:
        # One int64 key (task, time since T0) for both sides: a single searchsorted.
        ekey = (etid << 40) | (et - t0)
        qkey = (who.astype(np.int64) << 40) | (t_out - t0)
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
    out[miss] = carried[miss]
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
        _fold(_candidates(events, state), state)
        return events
    real = take_rows(events, ~syn)
    cands = _candidates(real, state)
    moved = take_rows(events, syn)                        # a copy
    t_syn = moved["t_ns"].astype(np.int64)
    t_out = np.full(len(moved), int(events["t_ns"].max()) + 1, dtype=np.int64)
    real_sw = take_rows(real, real["kind"] == ev.SWITCH)
    for cpu in np.unique(moved["cpu"]).tolist():
        on = moved["cpu"] == cpu
        times = real_sw["t_ns"][real_sw["cpu"] == cpu].astype(np.int64)
        j = np.searchsorted(times, t_syn[on], side="right")
        found = j < len(times)
        t_out[np.flatnonzero(on)[found]] = times[j[found]]
    slot = state.slots(moved["tid2"])
    etid, et = _evidence(cands, slot, state)
    late = _latest_before(etid, et, slot, t_out, state.t[slot])
    _fold(cands, state)
    moved["t_ns"] = np.maximum(t_syn, np.minimum(late, t_out)).astype(np.uint64)
    if len(moved) > 1:
        moved = moved[np.argsort(moved["t_ns"], kind="stable")]
    # Each goes after the real events of its time (where a stable sort would put it).
    at = np.searchsorted(real["t_ns"], moved["t_ns"], side="right")
    return insert_rows(real, at, moved)
