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

import math
from typing import Any

import numpy as np

from snumap_tui.model.aggregate import Plan, plan_for
from snumap_tui.model.frame import Frame
from snumap_tui.model.metrics import Catalogue, default_catalogue, perf_counter_name
from snumap_tui.model.sample import Sample
from snumap_tui.model.taskrows import derive_tasks
from snumap_tui.topology.model import Topology

# /proc/stat per-CPU columns, in the kernel's order (Documentation/filesystems/proc.rst 1.7).
TICK_COLUMNS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal",
                "guest", "guest_nice")
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
    """The counters of one interval: per-PU rows, per-object rows, scalars, and flags per
    counter (e.g. {"cycles": {"multiplexed"}})."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.pu: dict[str, np.ndarray] = {}
        self.obj: dict[str, np.ndarray] = {}
        self.scalars: dict[str, float] = {}
        self.flags: dict[str, set[str]] = {}

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
    # iowait can go backwards on NO_HZ kernels (Documentation/filesystems/proc.rst notes it is
    # unreliable): a negative tick delta is 0 time, not a reset.
    np.maximum(d, 0.0, out=d, where=~np.isnan(d))
    ncol = min(d.shape[1], len(TICK_COLUMNS))
    for i in range(ncol):
        c.pu[TICK_COLUMNS[i]] = d[:, i]
    total = np.nansum(d[:, :min(ncol, _TOTAL_COLS)], axis=1)
    total[np.isnan(d[:, 3])] = np.nan           # a PU missing from either sample
    c.pu["total_ticks"] = total
    c.pu["busy_ticks"] = total - d[:, 3] - np.nan_to_num(d[:, 4]) if ncol > 4 else total - d[:, 3]
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
    for j, ev in enumerate(events):
        name = perf_counter_name(ev)
        c.pu[name] = scaled[:, j]
        if mux[j]:
            c.flag(name, "multiplexed")


def _freq(prev: Sample, cur: Sample, c: Counters, dt: float) -> None:
    q = _r(cur, "freq")
    if q is None or "cpus" not in q:
        return
    plan = c.plan
    if "cur_khz" in q:      # instantaneous: the current sample's value
        c.pu["cur_khz"] = plan.align(q["cpus"], np.asarray(q["cur_khz"], dtype=np.float64))
    p = _r(prev, "freq")
    if p is None:
        return
    for f in ("aperf", "mperf", "tsc"):
        if f in q and f in p:
            c.pu[f] = _delta(plan.align(q["cpus"], np.asarray(q[f], dtype=np.float64)),
                             plan.align(p["cpus"], np.asarray(p[f], dtype=np.float64)))
    # MPERF ticks at the TSC/base rate (Intel SDM vol. 3B 14.2, AMD APM: "MPERF"): prefer a
    # stated base frequency, else the TSC rate measured over the same interval, else max_khz.
    base = None
    if "base_khz" in q:
        base = plan.align(q["cpus"], np.asarray(q["base_khz"], dtype=np.float64))
    elif "tsc" in c.pu and dt > 0:
        base = c.pu.pop("tsc") / dt / 1000.0
    elif "max_khz" in q:
        base = plan.align(q["cpus"], np.asarray(q["max_khz"], dtype=np.float64))
    c.pu.pop("tsc", None)
    if base is not None:
        c.pu["base_khz"] = base


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
    if p is None or q is None:
        return
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
    ids = np.array([plan.numa_id_of_os.get(int(n), -1) for n in q["nodes"]], dtype=np.int64)
    ok = ids >= 0
    if not ok.any():
        return

    def place(values: np.ndarray) -> np.ndarray:
        arr = np.full(plan.nobj, np.nan)
        arr[ids[ok]] = np.asarray(values, dtype=np.float64)[ok]
        return arr

    for f in _NUMA_NOW:
        if f in q:
            c.obj[f] = place(q[f])
    if "mem_used" not in c.obj and "mem_total" in c.obj and "mem_free" in c.obj:
        c.obj["mem_used"] = c.obj["mem_total"] - c.obj["mem_free"]
    p = _r(prev, "numa")
    if p is None or "nodes" not in p:
        return
    prow = {int(n): i for i, n in enumerate(p["nodes"])}
    pidx = np.array([prow.get(int(n), -1) for n in q["nodes"]], dtype=np.int64)
    for f in _NUMA_CUMUL:
        if f in q and f in p:
            before = np.asarray(p[f], dtype=np.float64)
            b = np.where(pidx >= 0, before[np.maximum(pidx, 0)] if before.size else np.nan,
                         np.nan)
            c.obj[f] = place(_delta(np.asarray(q[f], dtype=np.float64), b))


def counters(prev: Sample, cur: Sample, topology: Topology) -> Counters:
    """Step 1: every source's readings turned into interval counters on the topology."""
    plan = plan_for(topology)
    c = Counters(plan)
    dt = (cur.t_ns - prev.t_ns) / 1e9
    c.scalars["dt"] = dt if dt > 0 else math.nan
    c.scalars["hz"] = 100.0
    _procstat(prev, cur, c)
    _perf(prev, cur, c)
    _freq(prev, cur, c, dt)
    _rapl(prev, cur, c)
    _numa(prev, cur, c)
    return c


def _stack(rows: dict[str, np.ndarray], names: list[str], width: int) -> np.ndarray:
    out = np.empty((len(names), width))
    for i, n in enumerate(names):
        out[i] = rows[n]
    return out


def _coalesce(first: np.ndarray | None, nxt: np.ndarray) -> np.ndarray:
    if first is None:
        return nxt
    gap = np.isnan(first)
    if gap.any():
        first[gap] = nxt[gap]
    return first


def _evaluate(cat: Catalogue, env: dict[str, Any], pu_env: dict[str, Any],
              c: Counters) -> tuple[dict[str, np.ndarray], dict[str, set[str]]]:
    """Every metric at every object: ``sum`` metrics on the summed counters, ``mean`` metrics
    per PU then averaged (all of them in one prefix sum)."""
    plan = c.plan
    values: dict[str, np.ndarray] = {}
    flags: dict[str, set[str]] = {}
    mean_names: list[str] = []
    mean_rows: list[np.ndarray] = []
    for m in cat:
        have, size = (pu_env, plan.npu) if m.rule == "mean" else (env, plan.nobj)
        v: np.ndarray | None = None
        for e in m.exprs:
            if e.needs <= have.keys() and (v is None or np.isnan(v).any()):
                v = _coalesce(v, e.evaluate_quiet(have, size))
                for n in e.needs:     # flag a metric with what its counters went through
                    if n in c.flags:
                        flags.setdefault(m.name, set()).update(c.flags[n])
        if v is None:
            v = np.full(size, np.nan)
        if m.rule == "mean":
            mean_names.append(m.name)
            mean_rows.append(v)
        else:
            values[m.name] = v
    if mean_rows:
        values.update(zip(mean_names, plan.mean_pus(np.vstack(mean_rows))))
    return values, flags


def derive(prev: Sample, cur: Sample, topology: Topology,
           catalogue: Catalogue | None = None) -> Frame:
    """The Frame of the interval prev -> cur: every metric of the catalogue at every object
    (NaN where it cannot be computed), flags, and the process rows."""
    cat = catalogue if catalogue is not None else default_catalogue()
    c = counters(prev, cur, topology)
    plan = c.plan
    needed = cat.needs()
    # Step 2: sum every needed counter over every object (two prefix sums in all).
    pu_names = [n for n in c.pu if n in needed]
    obj_names = [n for n in c.obj if n in needed]
    env: dict[str, Any] = dict(c.scalars)
    if pu_names:
        env.update(zip(pu_names, plan.sum_pus(_stack(c.pu, pu_names, plan.npu))))
    if obj_names:
        env.update(zip(obj_names, plan.sum_subtrees(_stack(c.obj, obj_names, plan.nobj))))
    pu_env: dict[str, Any] = {**c.scalars, **c.pu}
    # Step 3: the formulas (numpy's warnings silenced once: 0/0 is handled as NaN).
    with np.errstate(all="ignore"):
        values, flags = _evaluate(cat, env, pu_env, c)
    ordered: dict[str, np.ndarray] = {}
    for m in cat:
        arr = values[m.name]
        if m.objects is not None:
            arr[~plan.type_mask(m.objects)] = np.nan
        ordered[m.name] = arr
    dt = c.scalars["dt"]
    tasks = derive_tasks(_r(prev, "tasks"), _r(cur, "tasks"), dt, c.scalars["hz"])
    return Frame(t_ns=cur.t_ns, wall_ns=cur.wall_ns, dt_s=dt if not math.isnan(dt) else 0.0,
                 topology=topology, values=ordered, tasks=tasks, flags=flags)


__all__ = ["TICK_COLUMNS", "Counters", "counters", "derive"]
