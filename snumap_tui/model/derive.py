"""``derive(prev, cur, topology)``: two Samples in, one Frame out. Pure: no I/O, no clock.

Live view, pause and replay all build Frames through this one function (the store keeps
Samples), so a recording replays exactly as it was seen.

Three steps:

1. *Counters* (this module): each source's raw cumulative readings of both Samples are aligned
   by OS index onto the topology's logical PU order (or onto the objects they belong to: NUMA
   nodes, packages, the machine) and differenced. Multiplexed perf counts are scaled by
   Δenabled/Δrunning, RAPL energy is unwrapped through ``max_uj``. What a source did not
   report is NaN, never 0.
2. *Aggregation* (``aggregate.Plan``): per-PU counters are summed over each object's PUs and
   object counters over each object's subtree, all objects at once with prefix sums.
3. *Metrics* (``metrics``): each metric's formula is evaluated on the summed counters at every
   object (rule ``sum``) or per PU and averaged (rule ``mean``).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from snumap_tui.model.aggregate import Plan, plan_for
from snumap_tui.model.evaluate import compiled
from snumap_tui.model.frame import Frame
from snumap_tui.model.iorates import IoRow, io_counters
from snumap_tui.model.metrics import Catalogue, default_catalogue, perf_counter_name
from snumap_tui.model.sample import Sample
from snumap_tui.model.taskrows import derive_tasks
from snumap_tui.sources.procstat import COLUMNS as TICK_COLUMNS  # the kernel's column order
from snumap_tui.topology.model import Topology

# The columns that add up to the PU's time: guest and guest_nice are already counted in user
# and nice (kernel/sched/cputime.c account_guest_time), so they are left out of the total.
_TOTAL_COLS = 8

# RAPL domain names (powercap zone ``name`` files, perf ``power`` PMU event names) -> counter.
_RAPL_KIND = {"package": "package", "pkg": "package", "core": "core", "cores": "core",
              "uncore": "uncore", "gpu": "uncore", "dram": "dram", "ram": "dram",
              "psys": "psys"}

_NUMA_NOW = ("mem_total", "mem_free", "mem_used", "file_pages", "anon_pages", "shmem",
             "hugepages_total", "hugepages_free")
_NUMA_CUMUL = ("numa_hit", "numa_miss", "numa_foreign", "interleave_hit", "local_node",
               "other_node")


class Counters:
    """The counters of one interval: per-PU columns, per-object rows, scalars, and flags per
    counter (e.g. {"cycles": {"multiplexed"}}).

    Per-PU counters are kept as the blocks the sources deliver them in ([npu, j]: /proc/stat's
    ticks, the perf group's events), so derive stacks them with one copy; ``pu`` is the same
    by name (column views)."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.pu_names: list[str] = []
        self.pu_blocks: list[np.ndarray] = []
        self.obj: dict[str, np.ndarray] = {}
        self.scalars: dict[str, float] = {}
        self.flags: dict[str, set[str]] = {}
        self.io: list[IoRow] = []     # one row per I/O device (model/iorates.py)

    @property
    def pu(self) -> dict[str, np.ndarray]:
        """Per-PU counters by name (views into the blocks; a later block wins a name)."""
        out: dict[str, np.ndarray] = {}
        names = iter(self.pu_names)
        for b in self.pu_blocks:
            for j in range(b.shape[1]):
                out[next(names)] = b[:, j]
        return out

    def add_pu(self, names: list[str], block: np.ndarray) -> None:
        """Per-PU counters [npu, len(names)], rows in logical PU order."""
        if block.ndim == 1:
            block = block.reshape(-1, 1)
        self.pu_names.extend(names)
        self.pu_blocks.append(block)

    def pu_matrix(self) -> tuple[list[str], np.ndarray | None]:
        """Every per-PU counter as one fresh [npu, k] matrix (a column per name)."""
        if not self.pu_blocks:
            return [], None
        return self.pu_names, np.concatenate(self.pu_blocks, axis=1)

    def flag(self, counter: str, what: str) -> None:
        self.flags.setdefault(counter, set()).add(what)

    def attach(self, counter: str, obj_id: int, value: float) -> None:
        """Add a value to an object counter (several RAPL domains may land on one object)."""
        arr = self.obj.get(counter)
        if arr is None:
            arr = self.obj[counter] = np.full(self.plan.nobj, np.nan)
        arr[obj_id] = value if math.isnan(arr[obj_id]) else arr[obj_id] + value


def _r(sample: Sample, name: str) -> dict[str, Any] | None:
    r = sample.readings.get(name)
    return r if r else None


def _delta(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a - b for cumulative counters; a counter that went backwards (reset, hotplug) is NaN."""
    d = a - b
    d[d < 0] = np.nan
    return d


def _same_cpus(p: dict[str, Any], q: dict[str, Any]) -> bool:
    a, b = p["cpus"], q["cpus"]
    return a is b or (len(a) == len(b) and bool(np.array_equal(a, b)))


def _diff_aligned(plan: Plan, p: dict[str, Any], q: dict[str, Any], field: str) -> np.ndarray:
    """cur - prev of a per-CPU field, as rows per logical PU. When both samples list the same
    CPUs (the normal case) the difference is taken first and aligned once."""
    a = np.asarray(q[field], dtype=np.float64)
    b = np.asarray(p[field], dtype=np.float64)
    if a.shape[1:] != b.shape[1:]:       # the columns changed between samples: unknown
        return plan.align(q["cpus"], np.full(a.shape, np.nan))
    if _same_cpus(p, q):
        return plan.align(q["cpus"], a - b)
    return plan.align(q["cpus"], a) - plan.align(p["cpus"], b)


def _procstat(prev: Sample, cur: Sample, c: Counters) -> None:
    p, q = _r(prev, "procstat"), _r(cur, "procstat")
    if q is not None and q.get("hz"):
        c.scalars["hz"] = float(q["hz"])
    if p is None or q is None:
        return
    d = _diff_aligned(c.plan, p, q, "ticks")
    if d.ndim != 2 or d.shape[1] < 4:   # not /proc/stat's columns (user nice system idle ...)
        return
    # iowait can go backwards on NO_HZ kernels (Documentation/filesystems/proc.rst notes it is
    # unreliable): a negative tick delta is 0 time, not a reset.
    np.maximum(d, 0.0, out=d, where=~np.isnan(d))
    ncol = min(d.shape[1], len(TICK_COLUMNS))
    block = np.empty((d.shape[0], ncol + 2))
    block[:, :ncol] = d[:, :ncol]
    total = block[:, ncol]
    np.nansum(d[:, :min(ncol, _TOTAL_COLS)], axis=1, out=total)
    total[np.isnan(d[:, 3])] = np.nan           # a PU missing from either sample
    busy = block[:, ncol + 1]
    np.subtract(total, d[:, 3], out=busy)
    if ncol > 4:
        busy -= np.nan_to_num(d[:, 4])
    c.add_pu([*TICK_COLUMNS[:ncol], "total_ticks", "busy_ticks"], block)
    if "ctxt" in p and "ctxt" in q:
        dc = float(q["ctxt"]) - float(p["ctxt"])
        c.attach("ctxt", 0, dc if dc >= 0 else math.nan)


def _columns(prev_events: list[str], cur_events: list[str]) -> np.ndarray:
    """For each of cur's events, its column in prev (-1 if prev did not have it)."""
    if prev_events == cur_events:
        return np.arange(len(cur_events))
    where = {e: i for i, e in enumerate(prev_events)}
    return np.array([where.get(e, -1) for e in cur_events], dtype=np.int64)


def _perf(prev: Sample, cur: Sample, c: Counters) -> None:
    p, q = _r(prev, "perf"), _r(cur, "perf")
    if p is None or q is None or not q.get("events"):
        return
    plan = c.plan
    events = list(q["events"])
    cols = _columns(list(p.get("events", ())), events)
    same = _same_cpus(p, q)

    def delta(field: str) -> np.ndarray | None:
        """Δfield per event in cur's event order; rows in cur's CPU order when both samples
        list the same CPUs (aligned once at the end), else in logical PU order."""
        if field not in q or field not in p:
            return None
        a = np.asarray(q[field], dtype=np.float64)
        b = np.asarray(p[field], dtype=np.float64)
        if not same:
            a, b = plan.align(q["cpus"], a), plan.align(p["cpus"], b)
        if not (cols.size == b.shape[1] and (cols == np.arange(cols.size)).all()):
            bb = np.full_like(a, np.nan)
            have = cols >= 0
            bb[:, have] = b[:, cols[have]]
            b = bb
        return _delta(a, b)

    dv = delta("value")
    if dv is None:
        return
    de, dr = delta("enabled"), delta("running")
    if de is not None and dr is not None:
        # perf_event_open(2), "reading results": with multiplexing the estimate of the full
        # count is value * time_enabled / time_running; running 0 means never counted.
        with np.errstate(invalid="ignore", divide="ignore"):
            scaled = np.where(dr > 0, dv * de / dr, np.nan)
            mux = np.any((dr > 0) & (dr < de * (1 - 1e-6)), axis=0)
    else:
        scaled, mux = dv, np.zeros(len(events), dtype=bool)
    if same:
        scaled = plan.align(q["cpus"], scaled)
    names = _perf_names(tuple(events))
    c.add_pu(list(names), scaled)
    if mux.any():
        for j in np.flatnonzero(mux):
            c.flag(names[j], "multiplexed")


@functools.lru_cache(maxsize=64)
def _perf_names(events: tuple[str, ...]) -> tuple[str, ...]:
    """Counter names of a perf source's events (cached: the list is the same every sweep)."""
    return tuple(perf_counter_name(e) for e in events)


def _freq(prev: Sample, cur: Sample, c: Counters, dt: float) -> None:
    q = _r(cur, "freq")
    if q is None or "cpus" not in q:
        return
    plan = c.plan
    if "cur_khz" in q:      # instantaneous: the current sample's value
        c.add_pu(["cur_khz"], plan.align(q["cpus"], np.asarray(q["cur_khz"], dtype=np.float64)))
    p = _r(prev, "freq")
    if p is None:
        return
    got: dict[str, np.ndarray] = {}
    for f in ("aperf", "mperf", "tsc"):
        if f in q and f in p:
            got[f] = _delta(plan.align(q["cpus"], np.asarray(q[f], dtype=np.float64)),
                            plan.align(p["cpus"], np.asarray(p[f], dtype=np.float64)))
    # MPERF ticks at the TSC/base rate (Intel SDM vol. 3B 14.2, AMD APM: "MPERF"): prefer a
    # stated base frequency, else the TSC rate measured over the same interval, PU by PU. The
    # last resort, cpuinfo_max_freq, is the maximum *turbo* frequency with intel_pstate and
    # amd-pstate (GHz 30-60 % too high): flagged "base_from_max_khz" when any PU used it.
    tsc = got.pop("tsc", None)
    base = np.full(plan.npu, np.nan)
    if "base_khz" in q:
        base = plan.align(q["cpus"], np.asarray(q["base_khz"], dtype=np.float64))
    if tsc is not None and dt > 0:
        base = np.where(np.isnan(base), tsc / dt / 1000.0, base)
    if "aperf" in got and "max_khz" in q and np.isnan(base).any():
        mx = plan.align(q["cpus"], np.asarray(q["max_khz"], dtype=np.float64))
        use = np.isnan(base) & ~np.isnan(mx) & ~np.isnan(got["aperf"])
        if use.any():
            base = np.where(use, mx, base)
            c.flag("base_khz", "base_from_max_khz")
    if not np.isnan(base).all():
        got["base_khz"] = base
    for f, v in got.items():
        c.add_pu([f], v)


def _rapl_counter(domain: str) -> str | None:
    base = domain.strip().lower()
    for prefix in ("energy-", "energy_"):
        base = base.removeprefix(prefix)
    head, _, tail = base.rpartition("-")
    if head and tail.isdigit():
        base = head
    kind = _RAPL_KIND.get(base)
    return None if kind is None else f"energy_{kind}"


def _rapl(prev: Sample, cur: Sample, c: Counters) -> None:
    p, q = _r(prev, "rapl"), _r(cur, "rapl")
    if p is None or q is None or q.get("max_uj") is None or q.get("objects") is None:
        return      # energy without its range or its objects cannot be placed
    topo = c.plan.topology
    before = {d: (float(e), float(m)) for d, e, m in
              zip(p.get("domains", ()), p.get("energy_uj", ()), p.get("max_uj", ()))}
    for i, dom in enumerate(q.get("domains", ())):
        counter = _rapl_counter(dom)
        if counter is None or dom not in before:
            continue
        e, mx = float(q["energy_uj"][i]), float(q["max_uj"][i])
        pe = before[dom][0]
        if math.isnan(e) or math.isnan(pe):
            continue
        d = e - pe
        if d < 0:
            # energy_uj wraps to 0 after max_energy_range_uj (Documentation/power/powercap/
            # powercap.rst): the energy is what was left to the top plus what came after.
            if not mx > 0:
                continue
            d += mx
            c.flag(counter, "wrapped")
        typ, os_idx = q["objects"][i]
        obj = topo.root if typ == "Machine" else topo.find(str(typ), int(os_idx))
        if obj is not None:
            c.attach(counter, obj.id, d)


def _numa(prev: Sample, cur: Sample, c: Counters) -> None:
    q = _r(cur, "numa")
    if q is None or "nodes" not in q:
        return
    plan = c.plan
    nodes = q["nodes"]
    ids = np.array([plan.numa_id_of_os.get(int(n), -1) for n in nodes], dtype=np.int64)
    ok = ids >= 0
    if not ok.any():
        return
    where = ids[ok]

    def place(fields: list[str], values: np.ndarray) -> None:
        """Rows of per-node values [len(fields), nodes] onto the NUMA node objects."""
        arr = np.full((len(fields), plan.nobj), np.nan)
        arr[:, where] = values[:, ok]
        c.obj.update(zip(fields, arr))

    now = [f for f in _NUMA_NOW if f in q]
    if now:
        place(now, np.array([q[f] for f in now], dtype=np.float64).reshape(len(now), -1))
    if "mem_used" not in c.obj and "mem_total" in c.obj and "mem_free" in c.obj:
        c.obj["mem_used"] = c.obj["mem_total"] - c.obj["mem_free"]
    p = _r(prev, "numa")
    if p is None or "nodes" not in p:
        return
    cumul = [f for f in _NUMA_CUMUL if f in q and f in p]
    if not cumul:
        return
    after = np.array([q[f] for f in cumul], dtype=np.float64).reshape(len(cumul), -1)
    before = np.array([p[f] for f in cumul], dtype=np.float64).reshape(len(cumul), -1)
    pnodes = p["nodes"]
    if not (len(pnodes) == len(nodes) and np.array_equal(pnodes, nodes)):
        prow = {int(n): i for i, n in enumerate(pnodes)}
        pidx = np.array([prow.get(int(n), -1) for n in nodes], dtype=np.int64)
        b = np.full(after.shape, np.nan)
        if before.shape[1]:
            b[:, pidx >= 0] = before[:, pidx[pidx >= 0]]
        before = b
    place(cumul, _delta(after, before))


def counters(prev: Sample, cur: Sample, topology: Topology) -> Counters:
    """Step 1: every source's readings turned into interval counters on the topology."""
    plan = plan_for(topology)
    c = Counters(plan)
    dt = (cur.t_ns - prev.t_ns) / 1e9
    c.scalars["dt"] = dt if dt > 0 else math.nan
    # hz (USER_HZ) comes with the readings that count ticks: procstat's here, the tasks
    # reading's own in derive_tasks.
    _procstat(prev, cur, c)
    _perf(prev, cur, c)
    _freq(prev, cur, c, dt)
    _rapl(prev, cur, c)
    _numa(prev, cur, c)
    c.io = io_counters(prev, cur, topology, dt, c.attach)
    return c


def derive(prev: Sample, cur: Sample, topology: Topology,
           catalogue: Catalogue | None = None) -> Frame:
    """The Frame of the interval prev -> cur: every metric of the catalogue at every object
    (NaN where it cannot be computed), flags, and the process rows."""
    cat = compiled(catalogue if catalogue is not None else default_catalogue())
    c = counters(prev, cur, topology)
    plan = c.plan
    scalars = c.scalars
    scalar_names = frozenset(scalars)
    pu_names, pu = c.pu_matrix()
    obj_names = list(c.obj)
    flags: dict[str, set[str]] = {}
    empty = np.empty((0, plan.npu))
    sum_plan = cat.plan("sum", (*pu_names, *obj_names), scalar_names)
    nsum = sum_plan.nrows
    # The frame's matrix: a row per metric (and per fallback formula of ``sum`` metrics).
    values = np.empty((nsum + len(cat.mean_metrics), plan.nobj))
    # numpy's warnings silenced once: 0/0 is handled as NaN.
    with np.errstate(all="ignore"):
        # Step 3a, ``mean`` metrics: evaluated per PU (before the sums use ``pu`` as
        # scratch), then averaged over each object's PUs.
        if cat.mean_metrics:
            rp = cat.plan("mean", tuple(pu_names), scalar_names)
            per_pu = rp.run(pu.T if pu is not None else empty, scalars, plan.npu, c.flags,
                            flags)
            plan.mean_pus(per_pu[:len(cat.mean_metrics)], out=values[nsum:])
        # Step 2: every counter summed over every object (one prefix sum per kind).
        sums = plan.scratch("sums", (len(pu_names) + len(obj_names), plan.nobj))
        if pu is not None:
            plan.sum_pu_columns(pu, out=sums[:len(pu_names)])
        if obj_names:
            sums[len(pu_names):] = plan.sum_subtrees(np.stack(list(c.obj.values())))
        # Step 3b, ``sum`` metrics: the formulas on the sums, at every object.
        sum_plan.run(sums, scalars, plan.nobj, c.flags, flags, out=values[:nsum])
    rows = cat.frame_rows(nsum)
    for i, types in cat.hide_types:
        values[rows[i], ~plan.type_mask(types)] = np.nan
    ordered = {name: values[r] for name, r in zip(cat.names, rows)}
    dt = scalars["dt"]
    tasks = derive_tasks(_r(prev, "tasks"), _r(cur, "tasks"), dt, scalars.get("hz"))
    return Frame(t_ns=cur.t_ns, wall_ns=cur.wall_ns, dt_s=dt if not math.isnan(dt) else 0.0,
                 topology=topology, values=ordered, tasks=tasks, flags=flags, io=c.io)


__all__ = ["TICK_COLUMNS", "Counters", "counters", "derive"]
