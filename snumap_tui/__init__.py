"""snumap: a hardware-topology-aware live monitor and recorder for Linux."""

__version__ = "0.1.0"

from snumap_tui.phase import mark, phase

__all__ = ["__version__", "mark", "phase"]
