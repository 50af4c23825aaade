"""Recordings: a crash-safe, append-only, chunked file of samples and scheduling events.

``Writer`` writes one (``snumap record``); ``open`` reads one back (``snumap replay``, ``report``,
``export``). The format is specified in docs/format.md.

The names are imported when first asked for (PEP 562): the recorder needs the writer only,
and the reader's modules (and the metrics engine that ``metric_series`` brings) were most of a
megabyte of its RSS.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from snumap_tui.store.reader import SUPPORTED_VERSIONS, Recording
    from snumap_tui.store.reader import open_recording as open
    from snumap_tui.store.series import MetricSeries, metric_series
    from snumap_tui.store.writer import FORMAT_VERSION, Writer

__all__ = ["FORMAT_VERSION", "SUPPORTED_VERSIONS", "MetricSeries", "Recording", "Writer",
           "metric_series", "open"]

_WHERE = {"SUPPORTED_VERSIONS": ("reader", "SUPPORTED_VERSIONS"),
          "Recording": ("reader", "Recording"), "open": ("reader", "open_recording"),
          "MetricSeries": ("series", "MetricSeries"), "metric_series": ("series", "metric_series"),
          "FORMAT_VERSION": ("writer", "FORMAT_VERSION"), "Writer": ("writer", "Writer")}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{where[0]}"), where[1])
    globals()[name] = value
    return value
