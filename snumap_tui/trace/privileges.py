"""Moved to ``snumap_tui.sources.privileges`` (sources must not import trace; trace imports
sources). Re-exported here for the tracers that still import it from this path."""

from __future__ import annotations

from snumap_tui.sources.privileges import CAPS, effective_caps, has_caps, parse_capeff

__all__ = ["CAPS", "effective_caps", "has_caps", "parse_capeff"]
