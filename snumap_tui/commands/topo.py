"""`snumap topo`: the topology as a text tree that fits 80 columns, or as the model's JSON.

The JSON is exactly what recordings store (``Topology.to_json``), so ``snumap topo --json >
m.json`` on one machine and ``--topology m.json`` elsewhere show the same machine.
"""

from __future__ import annotations

import argparse
import sys

from snumap_tui.commands.common import topology_from_args
from snumap_tui.errors import SnumapError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="print the topology model as JSON (every object once, NUMA "
                             "nodes included)")
    parser.add_argument("--full", action="store_true",
                        help="one line per object instead of collapsing identical siblings")
    parser.add_argument("--width", type=int, default=80, metavar="COLS",
                        help="cut lines to this many columns (default: 80)")


def run(args: argparse.Namespace) -> int:
    if args.width < 20:
        raise SnumapError(f"--width {args.width}: at least 20 columns are needed")
    topo = topology_from_args(args)
    if args.json:
        sys.stdout.write(topo.to_json() + "\n")
        return 0
    from snumap_tui.textsafe import safe_lines
    from snumap_tui.topology.render import render

    # Names and info strings come from the XML or the fsroot: escaped for the terminal.
    sys.stdout.write(safe_lines(render(topo, full=args.full, width=args.width)))
    return 0
