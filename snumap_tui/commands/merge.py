"""`snumap merge A.rec B.rec ... -o job.rec`: the recordings of a job's nodes as one.

See snumap_tui/store/merge.py for the design. Members that cannot be read are skipped and
named; damaged chunks of a member are skipped and named; the rest is merged.
"""

from __future__ import annotations

import argparse
import sys

from snumap_tui.commands.options import add_mode_argument
from snumap_tui.textsafe import safe_lines


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE",
                        help="recordings of one job's nodes (snumap record --job), any order")
    parser.add_argument("-o", "--output", required=True, metavar="FILE",
                        help="the merged recording to write")
    parser.add_argument("--force", action="store_true",
                        help="merge recordings of different jobs, and overwrite FILE")
    add_mode_argument(parser)


def run(args: argparse.Namespace) -> int:
    from snumap_tui.store.merge import merge

    def say(s: str) -> None:
        print(safe_lines(f"snumap: {s}"), file=sys.stderr)

    res = merge(args.files, args.output, force=args.force, overwrite=args.force, say=say,
                mode=args.mode)
    for d in res.damaged:
        say(f"warning: {d}")
    for n in res.nodes:
        err = n["align_error_ns"]
        how = f"±{err / 1e6:.3f} ms" if err is not None else "error unknown"
        say(f"node {n['node']}: {n['n_pus']} PUs, shift {n['shift_ns'] / 1e9:+.6f} s, "
            f"aligned by wall clock, {how} ({n['align_how']})")
    skipped = f", {len(res.skipped)} file(s) skipped" if res.skipped else ""
    say(f"merged {len(res.nodes)} node(s), {res.events} events into {res.out}{skipped}")
    return 1 if res.skipped or res.damaged else 0
