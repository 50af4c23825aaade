"""`snumap export FILE --format chrome|csv [-o OUT]`: hand a recording to other tools.

chrome: a Chrome trace JSON (chrome://tracing, https://ui.perfetto.dev), one track per PU with
each run interval named by its thread. csv: the run intervals (default), the samples in long
form (``--table samples``) or the raw scheduling events (``--table events``).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import IO, Any

from snumap_tui.errors import SnumapError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="a recording made by `snumap record`")
    parser.add_argument("--format", choices=("chrome", "csv"), required=True,
                        help="chrome: trace JSON for Perfetto / chrome://tracing; csv: a table")
    parser.add_argument("--table", choices=("intervals", "samples", "events"),
                        default="intervals", help="with --format csv: which table (default "
                        "intervals: cpu, start, end, tid, pid, comm)")
    parser.add_argument("-o", "--output", metavar="OUT", help="output file (default: stdout)")
    parser.add_argument("--force", action="store_true", help="overwrite OUT if it exists")


def _write(args: argparse.Namespace, rec: Any, out: IO[str]) -> int:
    from snumap_tui.analysis.intervals import INTERVAL_FIELDS
    from snumap_tui.analysis.load import load
    from snumap_tui.export.chrome import write_chrome
    from snumap_tui.export.tables import write_events_csv, write_intervals_csv, write_samples_csv

    if args.format == "chrome":
        ld = load(rec)
        hdr = rec.header or {}
        meta = {k: hdr.get(k) for k in ("host", "kernel", "backend", "command",
                                        "start_wall_ns") if k in hdr}
        meta["approximate"] = ld.intervals.approximate
        table = getattr(rec, "nodes", None)      # a job merged from several nodes
        nodes = [(n, int(e.get("cpu_base", 0))) for n, e in zip(table.names, table.nodes)] \
            if table is not None else None
        return write_chrome(out, ld.intervals, rec.tasks, rec.markers, host=hdr.get("host"),
                            meta=meta, nodes=nodes, label=table.label if table else str,
                            regions=rec.regions())
    if args.table == "samples":
        return write_samples_csv(out, rec.samples())
    if args.table == "events":
        return write_events_csv(out, rec.iter_event_columns(INTERVAL_FIELDS))
    return write_intervals_csv(out, load(rec).intervals, rec.tasks)


def run(args: argparse.Namespace) -> int:
    from snumap_tui.commands.report import open_readable, warn_damaged, writing

    if args.table != "intervals" and args.format != "csv":
        raise SnumapError("--table goes with --format csv")
    out_path = Path(args.output) if args.output else None
    if out_path is not None and out_path.exists() and not args.force:
        raise SnumapError(f"{out_path} already exists (use --force to overwrite it)")
    # The samples and the raw events do not need the header chunk (topology, host).
    need_header = args.format == "chrome" or args.table == "intervals"
    with open_readable(args.file, need_header=need_header) as rec:
        where = str(out_path) if out_path else "standard output"
        with writing(where):
            sink = open(out_path, "w", newline="") if out_path \
                else contextlib.nullcontext(sys.stdout)  # noqa: SIM115 (closed by the with)
            with sink as out:
                n = _write(args, rec, out)
                out.flush()       # a full disk shows here (or at close), named by writing()
        # Damage is also found while decoding: warn after the export, not before.
        warn_damaged(rec, args.file, f"the export to {where}")
    if out_path:
        print(f"snumap: wrote {n} rows to {out_path}", file=sys.stderr)
    return 0
