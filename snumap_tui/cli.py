"""`snumap` and its subcommands.

Each subcommand lives in ``snumap_tui.commands.<name>`` and exposes ``add_arguments(parser)``
and ``run(args) -> int``. Those modules must not import textual, rich or numpy-heavy code at
module level, so that ``snumap --help`` and ``snumap topo`` start fast.
"""

from __future__ import annotations

# Before anything loads numpy: its BLAS (and any OpenMP runtime) sizes its pool when it loads,
# one thread per PU (snumap_tui/threadpools.py); the commands give the user's values back to
# the programs they start.
from snumap_tui import threadpools

threadpools.pin()

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from snumap_tui import __version__
from snumap_tui.errors import SnumapError
from snumap_tui.textsafe import safe_lines

COMMANDS: dict[str, str] = {
    "top": "live topology view (Textual TUI, or --batch text/JSON)",
    "record": "record metrics and every scheduling event into a crash-safe file",
    "replay": "show a recording again, with a time cursor and a core-vs-time view",
    "report": "summary of a recording (text or --json)",
    "scale": "scalability study: record a command over threads, placements, inputs, "
             "frequencies; report speedup and efficiency per region",
    "merge": "merge the recordings of a job's nodes into one recording",
    "export": "export a recording as a Perfetto trace, Parquet tables, Chrome JSON or CSV",
    "topo": "the topology as a text tree or JSON",
    "exporter": "serve the live counters to Prometheus (OpenMetrics) or a node_exporter textfile",
    "probe": "what this machine offers (PMU, RAPL, NUMA, eBPF, ...), and how to fix what is missing",
}


#: Commands that read a recording, not a machine: --topology/--fsroot/--synthetic would mean
#: nothing there (the recording carries its machine's topology), so they do not take them.
RECORDING_COMMANDS = frozenset({"report", "export", "replay"})


def add_machine_options(parser: argparse.ArgumentParser) -> None:
    """Options every command takes to show another machine than this one."""
    g = parser.add_argument_group("machine")
    g.add_argument("--topology", metavar="FILE.xml", help="an hwloc XML export to use as the topology")
    g.add_argument("--fsroot", metavar="DIR",
                   help="a gathered /sys + /proc tree (as hwloc's HWLOC_FSROOT) to read instead of /")
    g.add_argument("--synthetic", metavar="DESC",
                   help='an hwloc synthetic description, e.g. "pack:2 numa:2 core:4 pu:2"')


#: What `snumap` alone runs (`setup.sh run` starts it too).
DEFAULT_COMMAND = "top"


def with_default_command(argv: list[str]) -> list[str]:
    """ARGV with `top` put first when it names no command: `snumap` alone, or `snumap --batch`
    (options only, which go to top); `--help` and `--version` stay snumap's own."""
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version")):
        return [DEFAULT_COMMAND, *argv]
    return argv


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser; with ``only`` (the subcommand being run) only that subcommand's module is
    imported and its options added (the others are listed, for ``snumap --help``): each
    module costs import time that `snumap top`'s first frame waits for."""
    parser = argparse.ArgumentParser(
        prog="snumap",
        description="Hardware-topology-aware live monitor and recorder for Linux. "
                    f"Without a COMMAND, snumap starts `{DEFAULT_COMMAND}` (as htop does).",
    )
    parser.add_argument("--version", action="version", version=f"snumap {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_text in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if only is not None and name != only:
            continue
        if name not in RECORDING_COMMANDS:
            add_machine_options(p)
        module = importlib.import_module(f"snumap_tui.commands.{name}")
        module.add_arguments(p)
        p.set_defaults(_module=module)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # SIGPIPE stays ignored (Python's choice): with its default, a scraper that hangs up
    # mid-answer would kill `snumap exporter`, and a test calling main() in-process would make
    # the test process die on its next write to a closed socket. A closed stdout (`snumap topo
    # | head`) is a BrokenPipeError, ended quietly below.
    argv = with_default_command(list(sys.argv[1:] if argv is None else argv))
    parser = build_parser(argv[0] if argv and argv[0] in COMMANDS else None)
    args = parser.parse_args(argv)
    try:
        return int(args._module.run(args) or 0)
    except SnumapError as exc:
        # A message may quote a name from the machine or a file: escaped for the terminal.
        print(safe_lines(f"snumap: {exc}"), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        _quiet_stdout()
        return 141
    except OSError as exc:
        # Permission problems, missing files, a full disk: the machine's state, not a bug.
        where = f": {exc.filename}" if getattr(exc, "filename", None) else ""
        print(safe_lines(f"snumap: {exc.strerror or exc}{where}"), file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


def _quiet_stdout() -> None:
    """The reader of stdout went away: send what is left to /dev/null, so that the flush at
    exit raises nothing more (what Python's documentation advises for SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
