"""A Sample: the raw, cumulative readings of every source at one sweep.

The store keeps Samples (not Frames), so live view, pause and replay all derive Frames through
the same ``derive(prev, cur)``.

Contract for ``readings`` (source name -> dict of fields). Per-PU arrays are aligned with that
source's ``cpus`` array (OS indexes, int64); values that a source could not read are absent
(field missing) or NaN in a float array, never 0. Counters are cumulative (monotonic, except RAPL
which wraps at ``max_uj``); derive() takes differences.

- "procstat"  (/proc/stat): cpus int64[n]; ticks uint64[n, 10] in the kernel's column order
  user, nice, system, idle, iowait, irq, softirq, steal, guest, guest_nice (USER_HZ ticks);
  hz int; ctxt int; procs_running int; procs_blocked int. PUs that are offline are absent.
- "perf"      (perf_event_open per PU): cpus int64[n]; events list[str] (e.g. "cycles",
  "instructions", "cache-references", "cache-misses", "branch-misses", "stalled-cycles-frontend",
  "context-switches", "cpu-migrations", "page-faults"); value float64[n, k], enabled
  float64[n, k], running float64[n, k] (raw, unscaled; NaN where the event is not open on that PU).
- "freq"      cpus int64[n]; cur_khz float64[n] (cpufreq scaling_cur_freq, instantaneous), and/or
  aperf, mperf float64[n] (cumulative, msr PMU) with tsc float64[n] (cumulative, the rate MPERF
  counts at) when the msr PMU has it; base_khz float64[n] (cpufreq base_frequency) and max_khz
  float64[n] (cpuinfo_max_freq: max turbo, a last resort as a base) when known.
- "rapl"      domains list[str] ("package-0", "core-0", "uncore-0", "dram-0", "psys");
  objects list[[type, os_index]] each domain maps to (["Package", 0], ["Machine", 0]);
  energy_uj float64[d] (raw counter, may wrap), max_uj float64[d]; via str ("powercap"|"perf").
- "numa"      nodes int64[m]; mem_total, mem_free, mem_used, file_pages, anon_pages, shmem,
  hugepages_total, hugepages_free: float64[m] bytes (instantaneous);
  numa_hit, numa_miss, numa_foreign, interleave_hit, local_node, other_node: float64[m] pages
  (cumulative).
- "tasks"     threads: dict of parallel lists/arrays: pid, tid, ppid, uid, comm, state, last_cpu,
  utime, stime (ticks, cumulative), nice; processes: dict pid -> {"cmdline", "user", "affinity"
  (list[int]), "cgroup", "job" (Slurm/PBS/systemd unit or None), "numa_pages" (dict node -> pages,
  only for processes asked for), "counters" (only for processes asked for:
  {"events": list[str], "value": float64[k] cumulative over its threads, scaled for
  multiplexing, "multiplexed": bool[k], "threads": int})}; hz int (the ticks' USER_HZ);
  partial list[int] (only these processes were read this sweep); folded bool (one row per
  process, tid = pid, its CPU time; processes' "nthreads" counts its threads).
- "net"       (/sys/class/net/*/statistics) names list[str] (physical interfaces and lo; other
  virtual ones are not read); physical bool[n] (has a device link: not lo); numa int64[n]
  (sysfs numa_node, -1 unknown); busid list[str | None] (the PCI function); rx_bytes,
  tx_bytes, rx_packets, tx_packets float64[n] (cumulative).
- "ib"        (/sys/class/infiniband/*/ports/*/counters) names list[str] ("mlx5_0:1"); devices
  list[str]; physical, numa, busid as "net"; rx_bytes, tx_bytes (port_*_data x 4), rx_packets,
  tx_packets float64[n] (cumulative, NaN when a 32-bit counter saturated); saturated list[str].
- "disk"      (/proc/diskstats, whole disks) names, physical, numa, busid as "net"; reads,
  read_bytes, writes, write_bytes, io_ms float64[n] (cumulative; io_ms: field 10, ms busy).
- "gpu"       (NVML) names list[str] ("nvml0"); busid list[str]; util_pct, mem_util_pct,
  mem_used, mem_total, power_w float64[n] (instantaneous); energy_mj float64[n] (cumulative,
  NaN on GPUs without the counter).

Sources may add fields; derive() ignores what it does not know.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Sample:
    t_ns: int                   # CLOCK_MONOTONIC (time.monotonic_ns()): same clock as sched events
    wall_ns: int                # time.time_ns() at the same moment
    readings: dict[str, dict[str, Any]] = field(default_factory=dict)
