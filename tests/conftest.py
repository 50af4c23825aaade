"""Shared test fixtures: where the corpus of real machines lives (beside the repository)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus"


@pytest.fixture(scope="session")
def corpus() -> Path:
    """../shared/corpus, or skip when this checkout has none beside it."""
    if not CORPUS.is_dir():
        pytest.skip("../shared/corpus is not beside this checkout")
    return CORPUS
