"""What the process list's CPU column shows for the metric chosen with ``m`` or F2.

A machine metric has a per-process counterpart for every process only where /proc gives one
at each sweep: CPU % (the process's share of a PU), system % and user % (its stime and
utime, ``TaskRow.sys_pct``), and memory (its resident set as a share of the machine's
memory). Those the column follows. IPC, context switches, migrations and page faults are
counted per process by perf only for the selected process (its details under the list show
them); clock, power, caches, NUMA traffic and I/O have no per-process value at all. For
those the column stays CPU %, and the list's title says why (``CpuColumn.note``).
Headless: no textual, no rich.
"""

from __future__ import annotations

from dataclasses import dataclass

from snumap_tui.model.frame import TaskRow


@dataclass(frozen=True)
class CpuColumn:
    kind: str                 # cpu, user, system or mem: what ``column_value`` returns
    label: str                # the column's header: CPU%, USR%, SYS%, MEM%
    note: str = ""            # why the column does not follow the metric ("" when it does)


CPU = CpuColumn("cpu", "CPU%")
_FOLLOWS = {
    "util_pct": CPU,
    "user_pct": CpuColumn("user", "USR%"),
    "system_pct": CpuColumn("system", "SYS%"),
    "mem_used_pct": CpuColumn("mem", "MEM%"),
    "mem_used_bytes": CpuColumn("mem", "MEM%"),
    "mem_anon_bytes": CpuColumn("mem", "MEM%"),
}
# Counted per process by perf for the selected process only (Sampler.watch_counters).
_SELECTED_ONLY = frozenset({"ipc", "ctxsw_per_s", "migrations_per_s", "faults_per_s"})


def cpu_column(metric: str, title: str) -> CpuColumn:
    """The column for machine metric ``metric`` (``title``: how the views name it)."""
    got = _FOLLOWS.get(metric)
    if got is not None:
        return got
    if metric in _SELECTED_ONLY:
        return CpuColumn("cpu", "CPU%", f"{title}: per process for the selected one only "
                                        "(below); CPU% here")
    return CpuColumn("cpu", "CPU%", f"{title} has no per-process value; CPU% here")


def column_value(kind: str, t: TaskRow, mem_total: float | None = None) -> float | None:
    """The process's number in a column of ``kind`` (None: not measured)."""
    if kind == "system":
        return t.sys_pct
    if kind == "user":
        if t.cpu_pct is None or t.sys_pct is None:
            return None
        return max(0.0, t.cpu_pct - t.sys_pct)
    if kind == "mem":
        if t.rss_bytes is None or not mem_total:
            return None
        return 100.0 * t.rss_bytes / mem_total
    return t.cpu_pct
