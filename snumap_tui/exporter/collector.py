"""The exposition: a prometheus-client Collector over the exporter's latest snapshot.

A scrape never touches a source: it renders the snapshot the sampler thread left (the
counters of ``totals`` and ``jobs``, the sources' statuses), and the rendered bytes are kept
per sweep and format, so a hundred concurrent scrapes of one sweep cost one rendering.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from snumap_tui.exporter.families import (
    OBJ_FAMILIES,
    PREFIX,
    Family,
    cpu_objects,
    object_labels,
    perf_family,
)
from snumap_tui.exporter.jobs import JobSnapshot, JobTotals
from snumap_tui.exporter.totals import NodeTotals, Snapshot
from snumap_tui.sources.base import SourceStatus
from snumap_tui.topology.model import Topology


@dataclass
class ExporterState:
    """What the sampler thread updates and the collector reads."""

    topology: Topology
    per_pu: bool
    nodes: NodeTotals
    jobs: JobTotals
    statuses: Callable[[], dict[str, SourceStatus]]
    sweeps: int = 0
    sweep_seconds: float = 0.0
    errors: dict[str, str] = field(default_factory=dict)   # what broke at run time (textfile)


def _family(fam: Family, labelnames: list[str]) -> CounterMetricFamily | GaugeMetricFamily:
    if fam.kind == "counter":
        return CounterMetricFamily(fam.name, fam.help, labels=labelnames, unit=fam.unit)
    return GaugeMetricFamily(fam.name, fam.help, labels=labelnames, unit=fam.unit)


def expand_statuses(statuses: dict[str, SourceStatus]) -> dict[str, SourceStatus]:
    """The sources' statuses, plus one per event a source lacks (``perf:cycles`` when the
    perf source works with software events only): an absent ``snumap_cycles_total`` then
    has a ``snumap_source_up{source="perf:cycles"} 0`` and a reason beside it."""
    out = dict(statuses)
    for name, st in statuses.items():
        missing = st.detail.get("missing") if isinstance(st.detail, dict) else None
        if isinstance(missing, dict):
            for ev, why in missing.items():
                out.setdefault(f"{name}:{ev}", SourceStatus(f"{name}:{ev}", False, str(why),
                                                            st.fix))
    return out


class SnumapCollector(Collector):
    """Turns an ExporterState into metric families (what ``/metrics`` serves)."""

    def __init__(self, state: ExporterState) -> None:
        self.state = state
        ids, labels, names = cpu_objects(state.topology, state.per_pu)
        self._cpu_ids, self._cpu_labels, self._cpu_names = ids, labels, list(names)
        topo = state.topology
        self._obj_labels = {o.id: object_labels(topo, o) for o in topo}

    def collect(self) -> Iterator[Metric]:
        st = self.state
        snap = st.nodes.snapshot
        yield from self._per_cpu(snap)
        yield from self._per_object(snap)
        yield from self._jobs(st.jobs.snapshot)
        yield from self._sources()
        yield from self._self()

    # ---- per core (per PU) ---------------------------------------------------------------
    def _per_cpu(self, snap: Snapshot) -> Iterator[Metric]:
        fams: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}
        for counter in snap.pu:
            fam = perf_family(counter)
            vals = self.state.nodes.per_object(snap, counter, self._cpu_ids)
            extra = [fam.label[0]] if fam.label else []
            mf = fams.get(fam.name)
            if mf is None:
                mf = fams[fam.name] = _family(fam, self._cpu_names + extra)
            tail = [fam.label[1]] if fam.label else []
            for labels, v in zip(self._cpu_labels, vals.tolist()):
                if not math.isnan(v):            # NaN: not available, so absent
                    mf.add_metric([*labels, *tail], v * fam.scale)
        yield from fams.values()

    # ---- NUMA nodes, packages, the machine ------------------------------------------------
    def _per_object(self, snap: Snapshot) -> Iterator[Metric]:
        fams: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}
        for counter, row in snap.obj.items():
            fam = OBJ_FAMILIES[counter]
            for oid in np.flatnonzero(~np.isnan(row)).tolist():
                labels = self._obj_labels[oid]
                names = list(labels) + ([fam.label[0]] if fam.label else [])
                key = f"{fam.name}|{','.join(names)}"
                mf = fams.get(key)
                if mf is None:
                    mf = fams[key] = _family(fam, names)
                values = list(labels.values()) + ([fam.label[1]] if fam.label else [])
                mf.add_metric(values, float(row[oid]) * fam.scale)
        # One family per name (the energy of packages and the machine's psys differ in
        # labels, which Prometheus allows within a family).
        merged: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}
        for key, mf in fams.items():
            name = key.split("|", 1)[0]
            if name in merged:
                merged[name].samples.extend(mf.samples)
            else:
                merged[name] = mf
        yield from merged.values()

    # ---- jobs ----------------------------------------------------------------------------
    def _jobs(self, js: JobSnapshot) -> Iterator[Metric]:
        base = ["scheduler", "job", "user"]
        cpu = CounterMetricFamily(PREFIX + "job_cpu_seconds", "CPU time of the job's threads "
                                  "by the NUMA node of the PU they ran on", labels=[
                                      *base, "numa_node"], unit="seconds")
        for (key, node), v in sorted(js.cpu_seconds.items()):
            cpu.add_metric([*key, node], v)
        mem = GaugeMetricFamily(PREFIX + "job_resident_bytes", "resident memory of the "
                                "job's processes by NUMA node (numa_maps)",
                                labels=[*base, "numa_node"], unit="bytes")
        for (key, node), v in sorted(js.resident_bytes.items()):
            mem.add_metric([*key, node], v)
        procs = GaugeMetricFamily(PREFIX + "job_processes", "processes of the job",
                                  labels=base)
        for key, n in sorted(js.processes.items()):
            procs.add_metric(list(key), n)
        yield from (cpu, mem, procs)
        per: dict[str, CounterMetricFamily] = {}
        for (key, counter), v in sorted(js.counters.items()):
            mf = per.get(counter)
            if mf is None:
                mf = per[counter] = CounterMetricFamily(
                    f"{PREFIX}job_{counter}", f"{counter} of the job's threads "
                    "(per-thread perf_event_open)", labels=base)
            mf.add_metric(list(key), v)
        yield from per.values()

    # ---- what works and what does not ----------------------------------------------------
    def _sources(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(PREFIX + "source_up", "1 when the source delivers data, 0 "
                               "when it is unavailable (snumap_source_info says why)",
                               labels=["source"])
        info = InfoMetricFamily(PREFIX + "source", "why a source is unavailable (or its "
                                "caveat) and how to fix it", labels=["source"])
        statuses = expand_statuses(self.state.statuses())
        for name, st in sorted(statuses.items()):
            up.add_metric([name], 1.0 if st.available else 0.0)
            info.add_metric([name], {"available": "1" if st.available else "0",
                                     "reason": st.reason or "", "fix": st.fix or ""})
        for name, why in sorted(self.state.errors.items()):
            up.add_metric([name], 0.0)
            info.add_metric([name], {"available": "0", "reason": why, "fix": ""})
        yield from (up, info)

    def _self(self) -> Iterator[Metric]:
        st = self.state
        topo = st.topology
        model = next((v for o in topo for k, v in o.infos if k == "CPUModel"), "")
        yield InfoMetricFamily(PREFIX + "machine", "the topology the counters are laid on", {
            "packages": str(len(topo.by_type("Package"))),
            "numa_nodes": str(len(topo.numa_nodes)), "cores": str(len(topo.by_type("Core"))),
            "pus": str(len(topo.pus)), "cpu_model": model})
        yield CounterMetricFamily(PREFIX + "exporter_sweeps", "sweeps of the sources",
                                  value=st.sweeps)
        yield CounterMetricFamily(PREFIX + "exporter_sweep_seconds", "wall time spent "
                                  "sweeping the sources", value=st.sweep_seconds,
                                  unit="seconds")


class Exposition:
    """The rendered /metrics body, one per (sweep, format), rendered on first request."""

    def __init__(self, state: ExporterState) -> None:
        self.state = state
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(SnumapCollector(state))
        self._lock = threading.Lock()
        self._cache: dict[bool, tuple[int, bytes]] = {}
        self.renders = 0
        self.render_seconds = 0.0

    def render(self, openmetrics: bool = False) -> bytes:
        seq = self.state.sweeps
        with self._lock:             # concurrent scrapes of one sweep wait for one render
            hit = self._cache.get(openmetrics)
            if hit is not None and hit[0] == seq:
                return hit[1]
            t0 = time.perf_counter()
            if openmetrics:
                from prometheus_client.openmetrics.exposition import generate_latest as gen_om

                body = gen_om(self.registry)
            else:
                from prometheus_client.exposition import generate_latest

                body = generate_latest(self.registry)
            self.render_seconds += time.perf_counter() - t0
            self.renders += 1
            self._cache[openmetrics] = (seq, body)
            return body
