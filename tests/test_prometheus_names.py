"""A user's metrics file cannot break or extend the generated Prometheus rules (issue 23).

A description holding a line break ended its YAML comment and wrote rules of its own into
`snumap exporter --print-rules`; a metric name with non-ASCII letters ("é" passes
``str.isalnum``) made rule names Prometheus refuses. Descriptions are now folded into one
comment line, names are checked as ASCII identifiers when the file is read, and every rule
name is checked against Prometheus' syntax before it is written; promtool checks the output.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from snumap_tui.cli import main
from snumap_tui.errors import SnumapError
from snumap_tui.exporter.promql import METRIC_NAME, rules_yaml
from snumap_tui.model.metrics import Catalogue, make_metric
from snumap_tui.model.usermetrics import load_catalogue, parse_metrics

INJECTED = ("x\n  - name: injected\n    rules:\n      - record: evil:pwned\n"
            "        expr: vector(1)\n#")

METRICS = f'''
[metric.l3_mpki]
formula = "1000 * cache_misses / instructions"
unit = "MPKI\\r\\u2028- record: alsoevil"
description = """{INJECTED}"""
'''


def _rules_of(text: str) -> list[str]:
    return re.findall(r"^\s*- record: (\S+)$", text, flags=re.MULTILINE)


def test_a_description_cannot_inject_a_rule(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "m.toml"
    f.write_text(METRICS)
    assert main(["exporter", "--print-rules", "--metrics", str(f)]) == 0
    out = capsys.readouterr().out
    assert "name: injected" not in [ln.strip().lstrip("- ") for ln in out.splitlines()]
    rules = _rules_of(out)
    assert "evil:pwned" not in rules and "alsoevil" not in rules
    assert not any(ln.startswith("  - name: injected") for ln in out.splitlines())
    # One rule per metric and level, as for the built-in catalogue plus this metric.
    assert len(rules) == len(_rules_of(rules_yaml())) + 3
    assert all(METRIC_NAME.fullmatch(r) for r in rules)
    # The description is still there, on one comment line.
    line = next(ln for ln in out.splitlines() if "name: injected" in ln)
    assert line.lstrip().startswith("# x - name: injected")
    if shutil.which("promtool"):
        p = tmp_path / "rules.yml"
        p.write_text(out)
        done = subprocess.run(["promtool", "check", "rules", str(p)], capture_output=True,
                              text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"{len(rules)} rules found" in done.stdout


@pytest.mark.parametrize("name", ["métrique", "x٣", "1abc", "a-b", "a" * 65, "ａｂ"])
def test_metric_names_must_be_ascii_identifiers(name: str) -> None:
    text = f'[metric."{name}"]\nformula = "cycles"\n'
    with pytest.raises(SnumapError, match="may only hold letters") as e:
        parse_metrics(text, "m.toml")
    assert "\n" not in str(e.value)


def test_good_names_still_load(tmp_path: Path) -> None:
    f = tmp_path / "m.toml"
    f.write_text('[metric._my_ipc2]\nformula = "instructions / cycles"\n')
    cat = load_catalogue([f], user_config=False)
    assert "_my_ipc2" in {m.name for m in cat}
    assert "instance:snumap__my_ipc2:rate1m" in _rules_of(rules_yaml(cat))


def test_a_rule_name_prometheus_refuses_is_one_error_line() -> None:
    """Metrics made through the API (not a file) are checked where the rules are written."""
    cat = Catalogue.default()
    cat.extend([make_metric("bad name", "instructions / cycles", unit="", description="d")])
    with pytest.raises(SnumapError, match="not a valid Prometheus name"):
        rules_yaml(cat)
