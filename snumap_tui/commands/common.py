"""Helpers shared by the command modules (kept free of textual/rich so commands start fast)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from snumap_tui.topology.model import Topology


def topology_from_args(args: argparse.Namespace) -> Topology:
    """The machine the user asked for: ``--topology FILE.xml``, ``--synthetic DESC``,
    ``--fsroot DIR``, or this machine. Raises SnumapError (one line, exit 2) on bad input."""
    from snumap_tui.topology.build import load_topology

    return load_topology(xml=getattr(args, "topology", None),
                         synthetic=getattr(args, "synthetic", None),
                         fsroot=getattr(args, "fsroot", None))
