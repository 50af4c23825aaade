"""`snumap export FILE --format perfetto|parquet|chrome|csv [-o OUT]`: hand a recording to
other tools.

perfetto: a native Perfetto trace (protobuf; scheduling as Perfetto's own sched tracks), for
any size. parquet: a directory of Parquet tables (events, intervals, samples, tasks, topology)
for DuckDB, pandas, Polars, Spark. chrome: a Chrome trace JSON (chrome://tracing,
ui.perfetto.dev) for small recordings: above ``CHROME_MAX_EVENTS`` events it refuses and names
--format perfetto. csv: the run intervals (default), the metrics per object per frame
(``--table samples``: the Parquet export's samples table), the sources' raw readings
(``--table readings``) or the raw scheduling events (``--table events``).

Without -o the output is named after the input (run.rec -> run.pftrace, run.parquet/,
run.chrome.json, run.csv); ``-o -`` writes chrome or csv to standard output. Not run.json:
that is where ``snumap report --json run.rec > run.json`` puts the report. Every format uses one
time base: the recording's CLOCK_MONOTONIC nanoseconds (microseconds in Chrome's ``ts``).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import IO, Any

from snumap_tui.commands.options import add_mode_argument
from snumap_tui.errors import SnumapError
from snumap_tui.textsafe import safe_lines

FORMATS = ("perfetto", "parquet", "chrome", "csv")
CHROME_MAX_EVENTS = 1_000_000      # trace viewers stop loading JSON near ~256 MB / 1 M events
SUFFIX = {"perfetto": ".pftrace", "parquet": ".parquet", "chrome": ".chrome.json"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="a recording made by `snumap record`")
    parser.add_argument("--format", choices=FORMATS, required=True,
                        help="perfetto: native Perfetto trace (any size); parquet: a directory "
                        "of Parquet tables; chrome: trace JSON for small recordings; csv: a table")
    parser.add_argument("--table", choices=("intervals", "samples", "readings", "events"),
                        default="intervals", help="with --format csv: which table (default "
                        "intervals: cpu, start, end, tid, pid, comm; samples: the metrics per "
                        "object per frame, as Parquet's; readings: the sources' raw fields)")
    parser.add_argument("-o", "--output", metavar="OUT",
                        help="output file (a directory for parquet; default: named after FILE; "
                        "'-': standard output, chrome and csv only)")
    parser.add_argument("--force", action="store_true",
                        help="overwrite OUT if it exists (a file, or a directory of an earlier "
                        "parquet export, never another directory); write Chrome JSON of any "
                        "size")
    add_mode_argument(parser)


def default_output(src: str, fmt: str, table: str) -> Path:
    """run.rec -> run.pftrace / run.parquet / run.chrome.json / run.csv (run.samples.csv,
    ...)."""
    p = Path(src)
    if fmt == "csv":
        return p.with_suffix(".csv" if table == "intervals" else f".{table}.csv")
    return p.with_suffix(SUFFIX[fmt])


def _write_text(args: argparse.Namespace, rec: Any, out: IO[str]) -> int:
    from snumap_tui.analysis.intervals import INTERVAL_FIELDS
    from snumap_tui.analysis.load import load
    from snumap_tui.export.chrome import write_chrome
    from snumap_tui.export.counters import counter_values
    from snumap_tui.export.tables import (
        write_events_csv,
        write_intervals_csv,
        write_readings_csv,
        write_samples_csv,
    )

    if args.format == "chrome":
        ld = load(rec)
        hdr = rec.header or {}
        meta = {k: hdr.get(k) for k in ("host", "kernel", "backend", "command",
                                        "start_wall_ns", "start_monotonic_ns") if k in hdr}
        meta["approximate"] = ld.intervals.approximate
        meta["time_base"] = "ts: CLOCK_MONOTONIC microseconds, as recorded"
        table = getattr(rec, "nodes", None)      # a job merged from several nodes
        nodes = [(n, int(e.get("cpu_base", 0))) for n, e in zip(table.names, table.nodes)] \
            if table is not None else None
        return write_chrome(out, ld.intervals, rec.tasks, rec.markers, host=hdr.get("host"),
                            meta=meta, counters=counter_values(rec), nodes=nodes,
                            label=table.label if table else str, regions=rec.regions())
    if args.table == "samples":
        from snumap_tui.export.counters import frames

        return write_samples_csv(out, frames(rec), rec.topology)
    if args.table == "readings":
        return write_readings_csv(out, rec.samples())
    if args.table == "events":
        return write_events_csv(out, rec.iter_event_columns(INTERVAL_FIELDS))
    return write_intervals_csv(out, load(rec).intervals, rec.tasks)


def _write(args: argparse.Namespace, rec: Any, out_path: Path | None) -> tuple[int, str]:
    """Write the export (to a temporary name beside OUT, renamed at the end: safeout);
    returns (count, what was counted)."""
    from snumap_tui.safeout import SafeOutput

    sink = SafeOutput(out_path, force=args.force, inputs=[args.file], mode=args.mode,
                      **_dir_kw(args)) \
        if out_path is not None else None
    with sink or contextlib.nullcontext():
        return _write_to(args, rec, sink)


def _dir_kw(args: argparse.Namespace) -> dict[str, Any]:
    """A parquet export is a directory; one written before the marker existed holds only
    snumap's tables, and counts as snumap's for --force."""
    if args.format != "parquet":
        return {}
    from snumap_tui.export.parquet import TABLES

    return {"directory": True, "own_names": {f"{t}.parquet" for t in TABLES}}


def _write_to(args: argparse.Namespace, rec: Any, sink: Any) -> tuple[int, str]:
    if args.format == "perfetto":
        from snumap_tui.analysis.caps import MAX_ROWS
        from snumap_tui.export.perfetto import write_perfetto

        assert sink is not None
        with sink.open() as f:
            st = write_perfetto(f, rec)
        what = "sched_switch and sched_waking events"
        if st["region_slices"] or st["region_marks"]:
            what += f", {st['region_slices']} region slices, {st['region_marks']} region marks"
            if st["region_slices_clipped"]:
                what += (f" ({st['region_slices_clipped']} slices of regions open at the "
                         "recording's start or end, clipped to it)")
        if st["thread_counter_owners_left_out"]:
            what += (f"; counter tracks for the {MAX_ROWS} threads and processes with the "
                     f"most on-CPU time, {st['thread_counter_owners_left_out']} more left out")
        if st["memory_processes_left_out"]:
            what += (f"; memory tracks for the {MAX_ROWS} processes with the most memory, "
                     f"{st['memory_processes_left_out']} more left out")
        return st["switches"] + st["wakings"], what
    if args.format == "parquet":
        from snumap_tui.export.parquet import write_parquet

        assert sink is not None
        counts = write_parquet(sink.tmp, rec)
        return counts["events"], "events (" + ", ".join(
            f"{k} {v}" for k, v in counts.items() if k != "events") + ")"
    stream = sink.open(text=True) if sink is not None \
        else contextlib.nullcontext(sys.stdout)
    with stream as out:
        n = _write_text(args, rec, out)
        out.flush()       # a full disk shows here (or at close), named by writing()
    return n, "rows"


def run(args: argparse.Namespace) -> int:
    from snumap_tui.commands.report import open_readable, warn_damaged, writing

    if args.table != "intervals" and args.format != "csv":
        raise SnumapError("--table goes with --format csv")
    if args.output == "-":
        if args.format not in ("chrome", "csv"):
            raise SnumapError(f"--format {args.format} cannot go to standard output: give -o FILE")
        out_path = None
    else:
        out_path = Path(args.output) if args.output else default_output(
            args.file, args.format, args.table)
    if out_path is not None:    # said before the work; checked again when it is renamed
        from snumap_tui.safeout import check_output

        check_output(out_path, force=args.force, inputs=[args.file], **_dir_kw(args))
    # The samples and the raw events do not need the header chunk (topology, host).
    need_header = args.format != "csv" or args.table == "intervals"
    with open_readable(args.file, need_header=need_header) as rec:
        if args.format == "chrome" and rec.event_count > CHROME_MAX_EVENTS and not args.force:
            raise SnumapError(
                f"{args.file} has {rec.event_count:,} events: Chrome JSON that large does not "
                f"load in trace viewers; use --format perfetto (or --force)")
        where = str(out_path) if out_path else "standard output"
        with writing(where):
            n, what = _write(args, rec, out_path)
        # Damage is also found while decoding: warn after the export, not before.
        warn_damaged(rec, args.file, f"the export to {where}")
    if out_path:
        print(safe_lines(f"snumap: wrote {n} {what} to {out_path}"), file=sys.stderr)
    return 0
