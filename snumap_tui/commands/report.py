"""`snumap report FILE [--json]`: the summary of a recording a user pastes into a ticket.

Also the helpers every command that reads a recording back shares (replay and export
import them): ``open_readable`` turns "the header chunk is gone" into the store's own reason
(a recording cut off after 100 bytes says it is truncated, not that it "has no topology"),
``warn_damaged`` puts what the reader skipped on stderr when the output itself cannot
carry it (an export, a replay), and ``writing`` names the output a write failed on (a full
disk behind ``> FILE``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Any

from snumap_tui.errors import SnumapError
from snumap_tui.textsafe import safe_lines


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="a recording made by `snumap record`")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--top", type=int, default=20, metavar="N",
                        help="processes and threads listed in the text form (default 20)")


def open_readable(path: str, *, need_header: bool = True) -> Any:
    """``store.open(path)``; with ``need_header``, a recording whose header chunk (topology,
    host) and its copies are all lost, and that has no events either, fails here with the
    reader's first note on why: truncated or damaged. With events, the CLI reads what the API
    can: the reader then stands in a flat machine of the PUs the events name."""
    from snumap_tui.store import open as open_recording

    rec = open_recording(path)
    if need_header and not rec.header and not rec.event_count:
        notes = [d for d in rec.damaged if "header chunk is missing" not in d]
        rec.close()
        why = notes[0] if notes else "its header chunk (topology, host) is missing"
        raise SnumapError(f"{path}: cannot be read: {why}")
    return rec


def warn_damaged(rec: Any, path: str, what: str) -> int:
    """One stderr line per part of ``rec`` the reader skipped (call it after reading: damage
    is found while decoding too), then one saying ``what`` lacks it. Returns how many."""
    notes = list(getattr(rec, "damaged", []) or [])
    for d in notes:
        print(safe_lines(f"snumap: warning: {path}: damaged: {d}"), file=sys.stderr)
    if notes:
        print(f"snumap: warning: {what} lacks what was skipped", file=sys.stderr)
    return len(notes)


@contextlib.contextmanager
def writing(where: str) -> Iterator[None]:
    """An OSError while writing WHERE (ENOSPC on ``> /dev/full``, EIO) as one line that says
    what could not be written: the bare strerror the CLI prints for other OSErrors does not."""
    try:
        yield
    except OSError as e:
        raise SnumapError(f"cannot write {where}: {e.strerror or e}") from None


def run(args: argparse.Namespace) -> int:
    from snumap_tui.analysis.jobreport import format_job, job_section
    from snumap_tui.analysis.report import build_report, format_report
    from snumap_tui.analysis.textcols import output_width

    with open_readable(args.file) as rec:
        report = build_report(rec)
        job = job_section(rec, report)
        if job is not None:
            # the job's placement findings, as `top --job` gives them live
            from snumap_tui.analysis.jobfindings import report_findings

            job["findings"] = report_findings(rec, report, job)
    if job is not None:
        report["job"] = job
    # JSON escapes every control itself; the text form is escaped for the terminal (names
    # are escaped field by field where laid out, this catches the rest).
    text = json.dumps(report, indent=1) + "\n" if args.json \
        else safe_lines(format_report(report, top=args.top, width=output_width())
                        + ("\n" + format_job(job) if job else ""))
    with writing("standard output"):
        sys.stdout.write(text)
        sys.stdout.flush()        # a full disk shows here, not at exit without a name
    return 0
