"""snumap: a hardware-topology-aware live monitor and recorder for Linux."""

__version__ = "0.1.0"
