"""Scalability studies (`snumap scale`): one program recorded over threads, placements,
inputs and frequencies, and compared per region.

The Python API::

    from snumap_tui import study
    s = study.load("mystudy")
    s.measurements          # one dict per run x region
    s.aggregated()          # per region and configuration: times, speedup, efficiency, ...
    s.to_pandas()           # the measurements as a pandas DataFrame (aggregated=True: the table)
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from snumap_tui.study.data import StudyData


def load(path: str | Path) -> StudyData:
    """The study in directory PATH (SnumapError when it is not one)."""
    from snumap_tui.study.data import StudyData
    from snumap_tui.study.manifest import open_study

    return StudyData(open_study(path))
