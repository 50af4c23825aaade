"""The tree stays ruff-clean (the style the project writes to: pyproject's [tool.ruff])."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_ruff_is_clean() -> None:
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    if not Path(ruff).exists():
        pytest.skip("ruff is not installed (it is in the test extras)")
    out = subprocess.run([ruff, "check", "--output-format", "concise", "."], cwd=REPO,
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-1000:]
