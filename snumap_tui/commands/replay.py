"""`snumap replay FILE`: the views of `snumap top` and the core-vs-time chart, driven by a
recording, with a time cursor. The topology is the recording's own, so no hwloc is needed.

The replay screenshots in screenshots/ are made with ``--screenshot`` by
``scripts/replay_screenshots.sh`` (a real recording of scripts/demo_barrier.py on this machine,
and a generated 384-PU recording); rebuild them after changing the drawing.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from snumap_tui.commands.options import add_mode_argument
from snumap_tui.errors import SnumapError
from snumap_tui.textsafe import safe_lines

MAX_SPEED = 1000.0      # --speed: recording seconds per second



def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="a recording made by `snumap record`")
    parser.add_argument("--speed", type=float, default=1.0,
                        help="playback speed (recording seconds per second, default 1)")
    parser.add_argument("--at", metavar="TIME",
                        help="start with the cursor this long after the recording's start "
                             "(e.g. 12.5, 250ms, 1:02.5)")
    parser.add_argument("--screenshot", metavar="OUT.svg",
                        help="do not open the terminal UI: write an SVG screenshot and exit")
    parser.add_argument("--force", action="store_true",
                        help="with --screenshot: replace OUT.svg if it exists")
    add_mode_argument(parser)
    parser.add_argument("--size", default="120x40", metavar="WxH",
                        help="with --screenshot: the terminal size (default 120x40)")
    parser.add_argument("--keys", default="", metavar="KEYS",
                        help="with --screenshot: keys to press first, comma-separated "
                             "(e.g. 'plus,plus,tab')")
    parser.add_argument("--by", choices=("process", "thread", "group", "region"),
                        default="process",
                        help="what the core-vs-time colours stand for (key c switches); "
                             "region: OpenMP region, MPI call or marker phase")


def load_for_ui(rec: Any, lazy: bool = True) -> Any:
    """``load_replay(rec)`` in a worker thread while the Textual UI modules import (about
    0.2 s of Python that would otherwise come before or after the load: part of the time to
    the first screen, which bench/replay.py measures through this function)."""
    from concurrent.futures import ThreadPoolExecutor

    from snumap_tui.ui.replay_data import first_nodes, load_replay

    # A merged job of many nodes: the nodes of the first screen first, the rest in the app.
    nodes = first_nodes(rec) if lazy else None
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="snumap-load") as pool:
        fut = pool.submit(load_replay, rec, nodes)
        import snumap_tui.ui.replay  # noqa: F401  (textual and rich, meanwhile)
        return fut.result()


def run(args: argparse.Namespace) -> int:
    from snumap_tui.commands.options import option_value, parse_duration
    from snumap_tui.commands.report import open_readable, warn_damaged

    at_s = option_value("--at", args.at, lambda t: parse_duration(t, positive=False)) \
        if args.at else None
    if not 0 < args.speed <= MAX_SPEED:      # nan and inf fail this too
        raise SnumapError(f"--speed {args.speed:g}: out of range (more than 0, up to "
                          f"{MAX_SPEED:g} recording seconds per second)")
    with open_readable(args.file) as rec:
        # Without a terminal Textual would write escape codes into a pipe and wait for keys
        # that never come; refuse before the load, as `snumap top` does.
        if not args.screenshot and not sys.stdout.isatty():
            raise SnumapError("the replay view needs a terminal; use `snumap report FILE` for "
                              "text, or --screenshot OUT.svg")
        data = load_for_ui(rec, lazy=not args.screenshot)   # a screenshot shows every node
        from snumap_tui.ui.replay import ReplayApp

        app = ReplayApp(data, speed=args.speed)
        if args.by == "region" and data.regions is None:
            raise SnumapError(f"--by region: {args.file} has no regions (record with "
                              "--regions auto and OpenMP/MPI, --probe or SNUMAP_MARKERS)")
        app.state.mode = args.by
        if at_s is not None:
            app.cursor_t = data.t0 + int(at_s * 1e9)
        if args.screenshot:
            rc = _screenshot(app, args)
        else:
            app.run()
            rc = app_exit_code(app, "replay")
        warn_damaged(rec, args.file, "the replay")
        return rc


def app_exit_code(app: Any, name: str) -> int:
    """The exit code of a finished Textual app: 0, or 1 after an exception inside it. Textual
    prints the traceback and returns None either way (so a crash used to exit 0); this adds
    one line saying what failed, which a script sees in the exit code."""
    exc = getattr(app, "_exception", None)     # set by Textual's exception handler
    rc = int(getattr(app, "return_code", 0) or 0) or (1 if exc is not None else 0)
    if rc:
        what = f"{type(exc).__name__}: {exc}" if exc is not None else f"exit code {rc}"
        print(safe_lines(f"snumap: the {name} view stopped on an internal error ({what}); "
                         "the traceback is above"), file=sys.stderr)
    return rc


def _screenshot(app: object, args: argparse.Namespace) -> int:
    """Run the app headless at --size, press --keys, save the screen as SVG."""
    from snumap_tui.ui.screenshot import save_screenshot

    keys = [k for k in args.keys.split(",") if k]
    saved = save_screenshot(app, args.screenshot, args.size, keys=keys, force=args.force,
                            inputs=[args.file], mode=args.mode)
    rc = app_exit_code(app, "replay")
    if not rc and saved:
        print(safe_lines(f"snumap: wrote {args.screenshot}"))
    return rc
