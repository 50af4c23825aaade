"""The files under deploy/: the recording rules, the Grafana dashboard, the systemd unit.

The rules and the dashboard are generated from the metric catalogue (`snumap exporter
--print-rules` / `--print-dashboard`): the committed files must be what the code makes, and
the tools that can check them do (promtool, systemd-analyze).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from snumap_tui.exporter.dashboard import dashboard_json
from snumap_tui.exporter.promql import metric_expr, rules_yaml
from snumap_tui.model.metrics import default_catalogue, make_metric

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"
RULES = DEPLOY / "prometheus" / "snumap-rules.yml"
DASHBOARD = DEPLOY / "grafana" / "snumap-dashboard.json"
UNIT = DEPLOY / "systemd" / "snumap-exporter.service"

needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None,
                                    reason="promtool is not installed (scripts/setup.sh test)")


def dashboard_queries(path: Path, instance: str = "localhost:9464", job: str = "1"
                      ) -> list[str]:
    """Every PromQL expression of the dashboard, its variables filled in."""
    doc = json.loads(path.read_text())
    out = []
    for p in doc["panels"]:
        for t in p.get("targets", ()):
            out.append(t["expr"].replace("$instance", instance).replace("$job", job)
                       .replace("$__rate_interval", "1m"))
    for v in doc["templating"]["list"]:
        q = v["query"]["query"]
        inner = q[len("label_values("):q.rindex(",")] if q.startswith("label_values(") else q
        out.append(inner.replace("$instance", instance))
    return out


def test_committed_files_are_what_the_catalogue_makes() -> None:
    assert RULES.read_text() == rules_yaml(), "regenerate: snumap exporter --print-rules"
    assert DASHBOARD.read_text() == dashboard_json(), \
        "regenerate: snumap exporter --print-dashboard"


def test_ipc_rule_is_the_ratio_of_sums() -> None:
    ipc = metric_expr(default_catalogue()["ipc"], "package")
    assert ipc == ("(sum by (instance, package) (rate(snumap_instructions_total[1m])) / "
                   "sum by (instance, package) (rate(snumap_cycles_total[1m])))")
    # Units: RAPL µJ in the catalogue, joules exported; the factors cancel to watts.
    w = metric_expr(default_catalogue()["power_pkg_w"], "package")
    assert w == ('sum by (instance, package) (rate(snumap_energy_joules_total'
                 '{domain="package"}[1m]))')
    # Fallback formulas become `or`: first with a value wins, as in derive.
    assert " or " in (metric_expr(default_catalogue()["ghz"], "package") or "")
    # A user's metric is translated the same way.
    m = make_metric("l3_mpki", "1000 * cache_misses / instructions", unit="MPKI",
                    description="x")
    assert "rate(snumap_cache_misses_total[1m])" in (metric_expr(m, "numa_node") or "")


@needs_promtool
def test_promtool_checks_the_rules_and_the_dashboard_queries(tmp_path: Path) -> None:
    done = subprocess.run(["promtool", "check", "rules", str(RULES)], check=False,
                          capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout
    # promtool has no "check this expression": the dashboard's queries as recording rules.
    qs = dashboard_queries(DASHBOARD)
    assert len(qs) >= 15
    lines = ["groups:", "  - name: dashboard", "    rules:"]
    for i, q in enumerate(qs):
        lines += [f"      - record: dashboard:q{i}", "        expr: '" + q.replace("'", "''")
                  + "'"]
    f = tmp_path / "dash.yml"
    f.write_text("\n".join(lines) + "\n")
    done = subprocess.run(["promtool", "check", "rules", str(f)], check=False,
                          capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_dashboard_has_the_heatmap_and_the_job_panels() -> None:
    doc = json.loads(DASHBOARD.read_text())
    kinds = [p["type"] for p in doc["panels"]]
    assert "status-history" in kinds            # the per-core topology heatmap
    exprs = " ".join(t["expr"] for p in doc["panels"] for t in p.get("targets", ()))
    assert "snumap_job_cpu_seconds_total" in exprs and "snumap_job_resident_bytes" in exprs
    assert {v["name"] for v in doc["templating"]["list"]} == {"instance", "job"}


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_systemd_unit_verifies(tmp_path: Path) -> None:
    text = UNIT.read_text()
    assert "ExecStart=/usr/local/bin/snumap exporter --listen 127.0.0.1:9464" in text
    # verify wants the executable to exist: point it at this checkout's.
    snumap = Path(sys.executable).with_name("snumap")
    unit = tmp_path / "snumap-exporter.service"
    unit.write_text(text.replace("/usr/local/bin/snumap", str(snumap)))
    done = subprocess.run(["systemd-analyze", "verify", str(unit)], check=False,
                          capture_output=True,
                          text=True, timeout=60, env={**os.environ, "SYSTEMD_LOG_LEVEL": "warning"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "snumap-exporter.service" not in done.stderr, done.stderr
