"""`snumap exporter`: the live counters as Prometheus/OpenMetrics, on HTTP or as a textfile.

Nothing heavy at module level (prometheus-client is imported when the exporter starts).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from snumap_tui.errors import SnumapError
from snumap_tui.extras import install_extra


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--listen", metavar="ADDR:PORT", default=None,
                        help="serve /metrics here (default 127.0.0.1:9464: loopback only; "
                             "any other address must be given, e.g. 0.0.0.0:9464)")
    parser.add_argument("--interval", "-i", default="1s", metavar="DURATION",
                        help="sampling interval (default 1s; 10ms .. 1h)")
    parser.add_argument("--per-pu", action="store_true",
                        help="per-PU series with a cpu label (default: per core)")
    parser.add_argument("--textfile", metavar="DIR", default=None,
                        help="write DIR/snumap.prom atomically at each interval, for "
                             "node_exporter's textfile collector (no port opened unless "
                             "--listen is given too)")
    parser.add_argument("--no-jobs", action="store_true",
                        help="no per-job series (and no process list reads)")
    parser.add_argument("--print-rules", action="store_true",
                        help="print the Prometheus recording rules of the metric catalogue "
                             "(with --metrics files) and exit")
    parser.add_argument("--print-dashboard", action="store_true",
                        help="print the Grafana dashboard (JSON) and exit")
    parser.add_argument("--metrics", action="append", default=[], metavar="FILE",
                        help="--print-rules: your own metrics (TOML) too")
    parser.add_argument("--once", action="store_true",
                        help="print one exposition (two sweeps, --interval apart) and exit")


def run(args: argparse.Namespace) -> int:
    from snumap_tui.commands.options import interval_option

    interval = interval_option(args.interval)
    if args.print_rules:
        from snumap_tui.commands.top import catalogue_from_args
        from snumap_tui.exporter.promql import rules_yaml

        sys.stdout.write(rules_yaml(catalogue_from_args(args)))
        return 0
    if args.print_dashboard:
        from snumap_tui.exporter.dashboard import dashboard_json

        sys.stdout.write(dashboard_json())
        return 0
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise SnumapError("the exporter needs prometheus-client: "
                          + install_extra("exporter")) from None
    from snumap_tui.exporter.server import DEFAULT_LISTEN, check_textfile_dir

    textfile = check_textfile_dir(args.textfile) if args.textfile else None
    listen = args.listen if args.listen is not None else (None if textfile else DEFAULT_LISTEN)
    if args.fsroot and not Path(args.fsroot).is_dir():
        raise SnumapError(f"--fsroot {args.fsroot}: not a directory")
    from snumap_tui.commands.common import topology_from_args
    from snumap_tui.exporter.runtime import Exporter

    if args.topology or args.synthetic:
        raise SnumapError("the exporter counts this machine (or a --fsroot tree): "
                          "--topology/--synthetic would lay its counters on another machine")
    topo = topology_from_args(args)
    root = Path(args.fsroot) if args.fsroot else Path("/")
    exp = Exporter(topo, root, interval, per_pu=args.per_pu, textfile=textfile,
                   jobs=not args.no_jobs)
    try:
        if args.once:
            exp.on_sample(exp.sampler.sweep())
            threading.Event().wait(interval)
            exp.on_sample(exp.sampler.sweep())
            sys.stdout.buffer.write(exp.render())
            return 0
        if listen is not None:
            srv = exp.serve(listen)
            host, port = str(srv.server_address[0]), srv.port
            shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            print(f"snumap exporter: serving http://{shown}/metrics", file=sys.stderr,
                  flush=True)
        if textfile is not None:
            print(f"snumap exporter: writing {textfile / 'snumap.prom'} every "
                  f"{interval:g} s", file=sys.stderr, flush=True)
        stop = exp.failed                # SIGTERM/SIGINT, or the sampler stopping
        stopped_by_signal = threading.Event()

        def on_signal(*_: object) -> None:
            stopped_by_signal.set()
            stop.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, on_signal)
        exp.start()
        stop.wait()
        return 0 if stopped_by_signal.is_set() else 1
    finally:
        exp.close()
