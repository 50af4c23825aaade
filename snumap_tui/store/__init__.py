"""Recordings: a crash-safe, append-only, chunked file of samples and scheduling events.

``Writer`` writes one (``snumap record``); ``open`` reads one back (``snumap replay``, ``report``,
``export``). The format is specified in docs/format.md.
"""

from __future__ import annotations

from snumap_tui.store.reader import SUPPORTED_VERSIONS, Recording
from snumap_tui.store.reader import open_recording as open
from snumap_tui.store.series import MetricSeries, metric_series
from snumap_tui.store.writer import FORMAT_VERSION, Writer

__all__ = ["FORMAT_VERSION", "SUPPORTED_VERSIONS", "MetricSeries", "Recording", "Writer",
           "metric_series", "open"]
