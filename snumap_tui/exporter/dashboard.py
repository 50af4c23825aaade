"""The Grafana dashboard of the exporter's series (``snumap exporter --print-dashboard``).

Per node: a topology heatmap (one row per core, ordered package / NUMA node / core, coloured
by utilisation, and by IPC where the PMU counts), the recording rules per package (IPC, MPKI,
GHz, watts) and per NUMA node (memory, miss ratio); per job: where its threads run and where
its memory sits, per NUMA node. ``deploy/grafana/snumap-dashboard.json`` is its output.

Prometheus stores the exporter's ``job`` label as ``exported_job`` (its own ``job`` is the
scrape job's) unless the scrape config sets ``honor_labels: true``: the queries use
``exported_job``.
"""

from __future__ import annotations

import json
from typing import Any

from snumap_tui.exporter.promql import rule_name
from snumap_tui.model.metrics import default_catalogue

DS = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
NODE = 'instance="$instance"'
JOB = 'instance="$instance",exported_job="$job"'
CORE = "package, numa_node, core"
CORE_LEGEND = "pkg {{package}} node {{numa_node}} core {{core}}"


def _rule(metric: str, level: str) -> str:
    return f'{rule_name(default_catalogue()[metric], level)}{{{NODE}}}'


def _panel(pid: int, title: str, kind: str, targets: list[tuple[str, str]], x: int, y: int,
           w: int = 12, h: int = 8, unit: str = "short", **opts: Any) -> dict[str, Any]:
    return {
        "id": pid, "title": title, "type": kind, "datasource": DS,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "targets": [{"refId": chr(ord("A") + i), "datasource": DS, "expr": expr,
                     "legendFormat": legend} for i, (expr, legend) in enumerate(targets)],
        "fieldConfig": {"defaults": {"unit": unit, **opts.pop("defaults", {})},
                        "overrides": []},
        "options": opts.pop("options", {}),
        **opts,
    }


def _row(pid: int, title: str, y: int) -> dict[str, Any]:
    return {"id": pid, "type": "row", "title": title, "collapsed": False,
            "gridPos": {"x": 0, "y": y, "w": 24, "h": 1}, "panels": []}


def _heat(pid: int, title: str, expr: str, y: int, unit: str, lo: float, hi: float
          ) -> dict[str, Any]:
    """A status-history panel: one row per core, time across, colour by value."""
    return _panel(pid, title, "status-history", [(expr, CORE_LEGEND)], 0, y, w=24, h=10,
                  unit=unit, defaults={"min": lo, "max": hi,
                                       "color": {"mode": "continuous-GrYlRd"}},
                  options={"showValue": "never", "rowHeight": 0.9,
                           "legend": {"showLegend": False}})


def dashboard() -> dict[str, Any]:
    busy = (f'sum by ({CORE}) (rate(snumap_cpu_seconds_total{{{NODE},mode!~"idle|iowait"}}'
            f'[$__rate_interval]))')
    every = f"sum by ({CORE}) (rate(snumap_cpu_seconds_total{{{NODE}}}[$__rate_interval]))"
    ipc = (f"sum by ({CORE}) (rate(snumap_instructions_total{{{NODE}}}[$__rate_interval])) / "
           f"sum by ({CORE}) (rate(snumap_cycles_total{{{NODE}}}[$__rate_interval]))")
    pkg = "package {{package}}"
    node = "node {{numa_node}}"
    panels = [
        _row(1, "Topology of $instance", 0),
        _heat(2, "CPU utilisation per core (package / NUMA node / core)",
              f"100 * {busy} / {every}", 1, "percent", 0, 100),
        _heat(3, "IPC per core (needs a hardware PMU)", ipc, 11, "none", 0, 4),
        _row(4, "Packages", 21),
        _panel(5, "IPC per package (Σinstructions / Σcycles)", "timeseries",
               [(_rule("ipc", "package"), pkg)], 0, 22),
        _panel(6, "Cache misses per 1000 instructions", "timeseries",
               [(_rule("mpki", "package"), pkg)], 12, 22),
        _panel(7, "Frequency (GHz)", "timeseries", [(_rule("ghz", "package"), pkg)], 0, 30),
        _panel(8, "Power (RAPL)", "timeseries",
               [(_rule("power_pkg_w", "package"), pkg + " package"),
                (_rule("power_dram_w", "package"), pkg + " DRAM")], 12, 30, unit="watt"),
        _row(9, "NUMA nodes", 38),
        _panel(10, "Memory used per NUMA node", "timeseries",
               [(f"snumap_memory_used_bytes{{{NODE}}}", node),
                (f"snumap_memory_size_bytes{{{NODE}}}", node + " size")], 0, 39,
               unit="bytes"),
        _panel(11, "NUMA miss ratio (allocations off their intended node)", "timeseries",
               [(_rule("numa_miss_pct", "numa_node"), node)], 12, 39, unit="percent"),
        _row(12, "Job $job on $instance", 47),
        _panel(13, "Where the job's threads run: CPUs busy per NUMA node", "timeseries",
               [((f"sum by (numa_node) (rate(snumap_job_cpu_seconds_total{{{JOB}}}"
                 f"[$__rate_interval]))"), node)], 0, 48,
               defaults={"custom": {"stacking": {"mode": "normal"}, "fillOpacity": 40}}),
        _panel(14, "Where the job's memory sits: resident bytes per NUMA node", "bargauge",
               [(f"sum by (numa_node) (snumap_job_resident_bytes{{{JOB}}})", node)], 12, 48,
               unit="bytes", options={"orientation": "horizontal",
                                      "reduceOptions": {"calcs": ["lastNotNull"]}}),
        _panel(15, "Job IPC (per-thread counters)", "timeseries",
               [((f"sum(rate(snumap_job_instructions_total{{{JOB}}}[$__rate_interval])) / "
                 f"sum(rate(snumap_job_cycles_total{{{JOB}}}[$__rate_interval]))"), "IPC")],
               0, 56),
        _panel(16, "Job context switches per second", "timeseries",
               [((f"sum(rate(snumap_job_context_switches_total{{{JOB}}}"
                 f"[$__rate_interval]))"), "switches/s")], 12, 56),
        _row(17, "What snumap cannot measure on $instance, and why", 64),
        _panel(18, "Unavailable sources", "table",
               [(f'snumap_source_info{{{NODE},available="0"}}', "")], 0, 65, w=24, h=8,
               options={"showHeader": True},
               transformations=[{"id": "labelsToFields", "options": {"mode": "columns"}}]),
    ]
    var = {"type": "query", "datasource": DS, "refresh": 2, "includeAll": False,
           "multi": False, "hide": 0}
    return {
        "__inputs": [{"name": "DS_PROMETHEUS", "label": "Prometheus", "type": "datasource",
                      "pluginId": "prometheus", "pluginName": "Prometheus"}],
        "title": "snumap: topology, NUMA and jobs",
        "uid": "snumap-topology",
        "tags": ["snumap", "hpc", "numa"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": [
            {**var, "name": "instance", "label": "node",
             "query": {"query": "label_values(snumap_machine_info, instance)",
                       "refId": "instance"},
             "definition": "label_values(snumap_machine_info, instance)"},
            {**var, "name": "job", "label": "batch job",
             "query": {"query": 'label_values(snumap_job_processes{instance="$instance"}, '
                                'exported_job)', "refId": "job"},
             "definition": 'label_values(snumap_job_processes{instance="$instance"}, '
                           'exported_job)'},
        ]},
        "panels": panels,
    }


def dashboard_json() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"
