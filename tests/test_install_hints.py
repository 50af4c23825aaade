"""Every "install this" hint snumap prints names the pip of the interpreter running snumap
(``/path/to/venv/bin/python -m pip install 'snumap[regions]'``), through one helper: a bare
``pip install`` is another environment's pip unless the venv is active."""

from __future__ import annotations

import io
import shlex
import sys
import tokenize
from pathlib import Path

import numpy as np
import pytest
from snumap_tui.native import hwloc

from snumap_tui.analysis.synth import synthetic_topology
from snumap_tui.cli import main
from snumap_tui.errors import SnumapError
from snumap_tui.extras import install_extra, pip_install
from snumap_tui.sources import nvml
from snumap_tui.store.series import MetricSeries

REPO = Path(__file__).resolve().parents[1]
THIS_PIP = f"{shlex.quote(sys.executable)} -m pip install"


def test_the_helper_names_this_interpreter() -> None:
    assert install_extra("regions") == f"{THIS_PIP} 'snumap[regions]'"
    assert pip_install("pandas") == f"{THIS_PIP} pandas"


def test_no_other_string_in_the_package_says_pip_install() -> None:
    """String literals only (comments may say it): a hint written by hand is the wrong pip."""
    found = []
    for path in sorted([*(REPO / "snumap_tui").rglob("*.py"), *(REPO / "native").rglob("*.py")]):
        if path == REPO / "snumap_tui" / "extras.py":
            continue
        for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
            if tok.type in (tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", -1)) \
                    and "pip install" in tok.string:
                found.append(f"{path.relative_to(REPO)}:{tok.start[0]}")
    assert found == []


def _without(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    """Imports of MODULES fail, as where the extra is not installed."""
    for m in modules:
        for name in [n for n in sys.modules if n == m or n.startswith(m + ".")]:
            monkeypatch.delitem(sys.modules, name)
        monkeypatch.setitem(sys.modules, m, None)


def test_parquet_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    from snumap_tui.export import parquet

    _without(monkeypatch, "pyarrow")
    with pytest.raises(SnumapError) as exc:
        parquet._pa()
    assert f"{THIS_PIP} 'snumap[parquet]'" in str(exc.value)


def test_regions_hints(monkeypatch: pytest.MonkeyPatch) -> None:
    from snumap_tui.trace import elfsyms, probe_point

    _without(monkeypatch, "elftools")
    with pytest.raises(SnumapError) as exc:
        elfsyms.need_elftools()
    assert f"{THIS_PIP} 'snumap[regions]'" in str(exc.value)
    monkeypatch.setattr(probe_point, "_capstone", lambda: None)
    monkeypatch.setattr(probe_point.platform, "machine", lambda: "x86_64")
    assert f"{THIS_PIP} 'snumap[regions]'" in (probe_point.missing_note() or "")


def test_exporter_hint(monkeypatch: pytest.MonkeyPatch,
                       capsys: pytest.CaptureFixture[str]) -> None:
    _without(monkeypatch, "prometheus_client")
    assert main(["exporter", "--once"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"snumap: the exporter needs prometheus-client: " \
                          f"{THIS_PIP} 'snumap[exporter]'"


def test_gpu_hwloc_and_pandas_hints(monkeypatch: pytest.MonkeyPatch) -> None:
    assert nvml.FIX.startswith(f"{THIS_PIP} 'snumap[gpu]'")
    assert f"{THIS_PIP} 'snumap[hwloc]'" in hwloc.INSTALL_HINT
    _without(monkeypatch, "pandas")
    empty = np.zeros(0)
    series = MetricSeries(synthetic_topology(), empty, empty, empty)
    with pytest.raises(ImportError, match=f"{THIS_PIP} pandas"):
        series.to_dataframe()
