"""Switch-ins the kernel did not trace, reconstructed the way `perf sched timehist` counts them.

Seen on Linux 6.18 in a VM: some switches (out of the idle task) emit no sched_switch, so a
task is switched out without a switch-in. The time since the previous traced switch on that
CPU is then charged to it (timehist's rule); this module makes that explicit as a SWITCH event
at the previous switch's time with ``arg = -1`` (events.py), so analysis that pairs switch-in
and switch-out gets the same answer. The eBPF backend does the same in bpf/sched.c; the perf
backend sees every switch in user space and calls ``missed_switch_ins`` before filtering.
"""

from __future__ import annotations

import numpy as np

from snumap_tui.trace import events as ev


def missed_switch_ins(events: np.ndarray, last: dict[int, tuple[int, int]]) -> np.ndarray:
    """Synthetic switch-ins for EVENTS (time-sorted); LAST (cpu -> (t_ns, next tid) of the
    last switch of earlier batches) is updated in place."""
    at = np.flatnonzero(events["kind"] == ev.SWITCH)
    if not len(at):
        return ev.empty_events()
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
    out = np.zeros(int(miss.sum()), dtype=ev.EVENT_DTYPE)
    out["t_ns"] = before_t[miss]
    out["cpu"] = cpu[miss]
    out["kind"] = ev.SWITCH
    out["tid"] = before_next[miss]
    out["tid2"] = prev[miss]
    out["pid"] = np.where(before_next[miss] == 0, 0, -1)
    out["pid2"] = pid[miss]
    out["arg"] = -1
    return out
