"""What the exporter exposes: one Prometheus family per counter of the metric catalogue.

The exporter publishes *counters*, not metrics: the catalogue's formulas (IPC, MPKI, GHz,
watts, miss ratios) are evaluated by PromQL on the counters' rates, summed first, so the
ratio-of-sums rule of ``model.metrics`` holds in Prometheus as it does in ``snumap top``
(``promql.py`` writes those formulas as recording rules, from the same catalogue).

Conventions (https://prometheus.io/docs/practices/naming/): the ``snumap_`` prefix, base units
(seconds, joules, hertz, bytes), cumulative counters as ``_total`` counters, instantaneous
values as gauges. Labels: ``package``, ``numa_node``, ``core`` (and ``cpu`` only with
``--per-pu``); what a source does not deliver is absent, never 0.

Each entry of ``PU_FAMILIES`` / ``OBJ_FAMILIES`` names a counter of ``model.metrics.COUNTERS``
and how its interval values become the exported value:
- ``counter``: the interval deltas are accumulated (``totals.NodeTotals``), times ``scale``;
- ``gauge``: the latest value, times ``scale`` (per-PU gauges are averaged over a core's PUs:
  a frequency is not additive).
"""

from __future__ import annotations

from dataclasses import dataclass

from snumap_tui.topology.model import Topology, TopoObject

PREFIX = "snumap_"


@dataclass(frozen=True)
class Family:
    counter: str                 # the catalogue counter (model.metrics.COUNTERS)
    name: str                    # the Prometheus name (counters: without "_total")
    kind: str                    # "counter" | "gauge"
    help: str
    unit: str = ""               # OpenMetrics unit ("seconds", "joules", "hertz", "bytes")
    scale: float = 1.0           # exported = counter value x scale ("ticks" are handled apart)
    label: tuple[str, str] | None = None   # a constant extra label, e.g. ("mode", "user")

    @property
    def exposed(self) -> str:
        """The sample name as scraped (what PromQL selects)."""
        return self.name + "_total" if self.kind == "counter" else self.name


def _f(counter: str, name: str, kind: str, help_: str, unit: str = "", scale: float = 1.0,
       label: tuple[str, str] | None = None) -> Family:
    return Family(counter, PREFIX + name, kind, help_, unit, scale, label)


# /proc/stat's per-CPU columns (Documentation/filesystems/proc.rst 1.7); guest and guest_nice
# are left out: the kernel already counts them in user and nice.
CPU_MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
CPU_SECONDS = PREFIX + "cpu_seconds"

_PU: list[Family] = [
    _f(m, "cpu_seconds", "counter", "CPU time by mode (/proc/stat), seconds", "seconds",
       label=("mode", m)) for m in CPU_MODES]
_PU += [
    _f("cycles", "cycles", "counter", "CPU cycles (perf_event_open, scaled when multiplexed)"),
    _f("instructions", "instructions", "counter", "instructions retired (perf_event_open)"),
    _f("cache_references", "cache_references", "counter", "last-level cache references"),
    _f("cache_misses", "cache_misses", "counter", "last-level cache misses"),
    _f("branches", "branches", "counter", "branch instructions"),
    _f("branch_misses", "branch_misses", "counter", "mispredicted branches"),
    _f("stalled_cycles_frontend", "stalled_cycles_frontend", "counter",
       "cycles stalled in the front end"),
    _f("stalled_cycles_backend", "stalled_cycles_backend", "counter",
       "cycles stalled in the back end"),
    _f("ref_cycles", "ref_cycles", "counter", "reference cycles (constant rate)"),
    _f("context_switches", "context_switches", "counter",
       "context switches on these PUs (perf software event)"),
    _f("cpu_migrations", "cpu_migrations", "counter",
       "task migrations onto these PUs (perf software event)"),
    _f("page_faults", "page_faults", "counter", "page faults (perf software event)"),
    _f("aperf", "aperf_cycles", "counter", "APERF: actual cycles while not halted (msr PMU)"),
    _f("mperf", "mperf_cycles", "counter",
       "MPERF: cycles at the base rate while not halted (msr PMU)"),
    _f("cur_khz", "cpu_frequency_hertz", "gauge", "current frequency (cpufreq "
       "scaling_cur_freq), mean over the PUs", "hertz", 1e3),
    _f("base_khz", "cpu_base_frequency_hertz", "gauge",
       "the rate MPERF counts at (base frequency), mean over the PUs", "hertz", 1e3),
]
PU_FAMILIES: dict[str, Family] = {f.counter: f for f in _PU}

# RAPL energy (Documentation/power/powercap/powercap.rst): µJ in the model, joules here; one
# family with a domain label so that `sum by (package)` adds package and DRAM only when asked.
ENERGY = PREFIX + "energy_joules"
_OBJ: list[Family] = [
    _f(f"energy_{d}", "energy_joules", "counter", "RAPL energy by domain, joules", "joules",
       1e-6, ("domain", d)) for d in ("package", "core", "uncore", "dram", "psys")]
# NUMA nodes (Documentation/admin-guide/numastat.rst; node meminfo).
_OBJ += [
    _f("numa_hit", "numa_hit", "counter", "pages allocated on the intended node (numastat)"),
    _f("numa_miss", "numa_miss", "counter",
       "pages allocated on this node though intended for another (numastat)"),
    _f("numa_foreign", "numa_foreign", "counter",
       "pages intended for this node but allocated on another (numastat)"),
    _f("interleave_hit", "numa_interleave_hit", "counter",
       "interleaved pages allocated on the intended node (numastat)"),
    _f("local_node", "numa_local_node", "counter",
       "pages allocated here by a process running on this node (numastat)"),
    _f("other_node", "numa_other_node", "counter",
       "pages allocated here by a process running on another node (numastat)"),
    _f("mem_total", "memory_size_bytes", "gauge", "memory of the NUMA node", "bytes"),
    _f("mem_free", "memory_free_bytes", "gauge", "free memory of the NUMA node", "bytes"),
    _f("mem_used", "memory_used_bytes", "gauge",
       "memory in use on the NUMA node, page cache included", "bytes"),
    _f("file_pages", "memory_file_bytes", "gauge", "page cache on the NUMA node", "bytes"),
    _f("anon_pages", "memory_anon_bytes", "gauge", "anonymous memory on the NUMA node",
       "bytes"),
    _f("shmem", "memory_shmem_bytes", "gauge", "shared memory on the NUMA node", "bytes"),
    _f("hugepages_total", "memory_hugepages_bytes", "gauge",
       "huge pages reserved on the NUMA node", "bytes"),
    _f("hugepages_free", "memory_hugepages_free_bytes", "gauge",
       "huge pages free on the NUMA node", "bytes"),
    _f("ctxt", "machine_context_switches", "counter",
       "context switches of the whole machine (/proc/stat ctxt)"),
]
OBJ_FAMILIES: dict[str, Family] = {f.counter: f for f in _OBJ}


def perf_family(counter: str) -> Family:
    """The family of a per-PU counter: the table's, or for a perf event a user's metrics file
    asked for, a counter named after it."""
    got = PU_FAMILIES.get(counter)
    if got is not None:
        return got
    return _f(counter, counter, "counter", f"perf event {counter} (perf_event_open)")


# ---- labels -------------------------------------------------------------------------------
def _idx(o: TopoObject | None) -> str:
    if o is None:
        return ""
    return str(o.os_index if o.os_index is not None else o.logical_index)


def cpu_objects(topology: Topology, per_pu: bool) -> tuple[list[int], list[tuple[str, ...]],
                                                            tuple[str, ...]]:
    """The objects per-PU counters are exported at (cores, or PUs with ``per_pu``; PUs when
    the topology has no cores), their label values and the label names."""
    cores = topology.by_type("Core")
    objs = list(topology.pus if per_pu or not cores else cores)
    names: tuple[str, ...] = ("package", "numa_node", "core") + (("cpu",) if per_pu else ())
    labels: list[tuple[str, ...]] = []
    for o in objs:
        pu0 = topology.pus[o.pu_range[0]]
        core = topology.ancestor_of_type(pu0, "Core") if o.type == "PU" else o
        vals = (_idx(topology.ancestor_of_type(o, "Package")),
                _idx(topology.numa_of(pu0.os_index) if pu0.os_index is not None else None),
                _idx(core) or _idx(pu0))
        labels.append(vals + ((str(pu0.os_index),) if per_pu else ()))
    return [o.id for o in objs], labels, names


def object_labels(topology: Topology, obj: TopoObject) -> dict[str, str]:
    """Labels of an object an object counter is attached to: a NUMA node (its number and
    package), a package, the machine (none)."""
    out: dict[str, str] = {}
    pkg = obj if obj.type == "Package" else topology.ancestor_of_type(obj, "Package")
    if pkg is not None:
        out["package"] = _idx(pkg)
    if obj.type == "NUMANode":
        out["numa_node"] = _idx(obj)
    return out


def node_of_cpu(topology: Topology) -> dict[int, str]:
    """PU OS index -> the numa_node label of its local node ("" when none)."""
    return {p.os_index: _idx(topology.numa_of(p.os_index)) for p in topology.pus
            if p.os_index is not None}
