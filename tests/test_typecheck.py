"""The package stays mypy-clean (the project's habit: ruff and mypy clean).

mypy runs with pyproject's [tool.mypy] on the package as it is installed: native/ is
``snumap_tui.native`` (setup.py's package_dir), which mypy cannot learn from the editable
install's import hook, so the check runs on a tree of symlinks with that layout. That way the
package's calls into native/ are checked against native's real signatures (a plain ``mypy``
from the repository sees them as missing imports). A cold run takes about 10 s on a 2-vCPU VM;
the cache lives in the repository's .mypy_cache (git-ignored), so later runs are faster.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def installed_layout(dest: Path) -> Path:
    """``dest``/snumap_tui: every entry of the package symlinked, plus native/ as its
    ``native`` subpackage; returns ``dest``."""
    pkg = dest / "snumap_tui"
    pkg.mkdir()
    for entry in (ROOT / "snumap_tui").iterdir():
        if entry.name != "__pycache__":
            (pkg / entry.name).symlink_to(entry)
    (pkg / "native").symlink_to(ROOT / "native")
    return dest


def test_installed_layout_puts_native_inside_the_package(tmp_path: Path) -> None:
    tree = installed_layout(tmp_path)
    assert (tree / "snumap_tui" / "native" / "__init__.py").resolve() == \
        (ROOT / "native" / "__init__.py").resolve()
    assert not (tree / "snumap_tui" / "__pycache__").exists()


def test_the_package_is_mypy_clean(tmp_path: Path) -> None:
    pytest.importorskip("mypy", reason="mypy is not installed (pip install -e .[test])")
    tree = installed_layout(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--cache-dir", str(ROOT / ".mypy_cache" / "installed-layout"), "--no-error-summary",
         "snumap_tui"],
        check=False, cwd=tree, capture_output=True, text=True, timeout=300)
    report = (proc.stdout + proc.stderr).replace("snumap_tui/native/", "native/")
    assert proc.returncode == 0, f"mypy is not clean:\n{report}"
    assert report.strip() == ""
