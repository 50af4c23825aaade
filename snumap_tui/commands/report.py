"""`snumap report FILE [--json]`: the summary of a recording a user pastes into a ticket."""

from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="a recording made by `snumap record`")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--top", type=int, default=20, metavar="N",
                        help="processes and threads listed in the text form (default 20)")


def run(args: argparse.Namespace) -> int:
    from snumap_tui.analysis.report import build_report, format_report
    from snumap_tui.store import open as open_recording

    with open_recording(args.file) as rec:
        report = build_report(rec)
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print(format_report(report, top=args.top), end="")
    return 0
