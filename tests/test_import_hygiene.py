"""Headless layers never load textual or rich: a recorder on a compute node must not pay for
a UI toolkit, and the layering keeps the model testable without a terminal."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import snumap_tui.native

HEADLESS = ("topology", "sources", "model", "trace", "store", "analysis", "native", "export",
            "jobview",
            "exporter", "study")


def _modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(snumap_tui.__path__, "snumap_tui."):
        parts = info.name.split(".")
        if len(parts) > 1 and parts[1] in HEADLESS:
            names.append(info.name)
    # native/ is mapped in as snumap_tui.native (setup.py's package_dir): walk it too.
    names += [info.name for info in pkgutil.walk_packages(snumap_tui.native.__path__,
                                                          "snumap_tui.native.")]
    return sorted(set(names))


def test_headless_modules_exist() -> None:
    mods = _modules()
    assert "snumap_tui.topology.model" in mods
    assert "snumap_tui.model.frame" in mods
    assert "snumap_tui.native.bpf_objects" in mods


def test_headless_modules_do_not_import_ui_toolkits() -> None:
    mods = _modules()
    code = (
        "import importlib, sys\n"
        f"for m in {mods!r}:\n"
        "    try:\n"
        "        importlib.import_module(m)\n"
        "    except ImportError as e:\n"
        "        if 'bcc' not in str(e): raise\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"headless modules pulled in: {out.stdout.strip()}"


def test_cli_help_does_not_import_textual() -> None:
    code = ("import sys\nfrom snumap_tui.cli import build_parser\nbuild_parser()\n"
            "print(any(m.split('.')[0] in ('textual','rich') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
