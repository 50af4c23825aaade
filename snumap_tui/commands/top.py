"""`snumap top`: the live topology view, or ``--batch`` frames as text / JSON lines.

Nothing heavy at module level: textual is imported only when the TUI starts, so ``--batch``
(cron, scripts, tests) never loads it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from snumap_tui.errors import SnumapError
from snumap_tui.recording.counters import TOP_HELP, events_for_top
from snumap_tui.textsafe import safe_lines, safe_text

if TYPE_CHECKING:  # pragma: no cover
    from snumap_tui.model.frame import Frame
    from snumap_tui.model.metrics import Catalogue
    from snumap_tui.model.sampler import Sampler
    from snumap_tui.sources.base import SourceStatus
    from snumap_tui.topology.model import Topology


#: The process list's columns (ui.processes.SORT_KEYS, which the parser must not import:
#: building it stays free of the UI; a test checks the two agree).
SORT_COLUMNS = ("pid", "user", "job", "cpu", "mem", "thr", "time", "pu", "affinity", "name")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--interval", "-i", default="1s", metavar="DURATION",
                        help="time between samples (default 1s; 10ms .. 1h, e.g. 500ms, 2s)")
    parser.add_argument("--batch", "-b", action="store_true",
                        help="print frames as text (or --json lines) instead of the TUI")
    parser.add_argument("--count", "-n", type=int, default=None, metavar="N",
                        help="batch: stop after N frames (default: until interrupted)")
    parser.add_argument("--json", action="store_true",
                        help="batch: one JSON object per frame (every metric of every "
                             "object, the sources and the processes)")
    parser.add_argument("--tasks", type=int, default=10, metavar="N",
                        help="batch text: how many of the busiest processes to print (default 10)")
    parser.add_argument("-p", "--pid", metavar="PID[,PID]",
                        help="show only these processes (as htop -p)")
    parser.add_argument("-u", "--user", metavar="USER",
                        help="show only this user's processes (as htop -u)")
    parser.add_argument("--sort", metavar="COLUMN", default="cpu",
                        help="sort the processes by this column: " + ", ".join(SORT_COLUMNS)
                             + " (default cpu; < and > change it)")
    parser.add_argument("--events", default=None, metavar="LIST", help=TOP_HELP)
    parser.add_argument("--job", nargs="?", const="", default=None, metavar="JOBID",
                        help="a running Slurm job, live, from the login node: one sampler per "
                             "node started with srun --overlap (JOBID: the job of this "
                             "allocation when left out)")
    parser.add_argument("--node-frames", action="store_true",
                        help="--job --batch --json: each node's frame too, as top --batch "
                             "--json prints one (every metric of every object)")
    # A node's streaming sampler, which `top --job` starts with srun on every node.
    parser.add_argument("--stream", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--metrics", action="append", default=[], metavar="FILE",
                        help="your own metrics (TOML: [metric.NAME] formula, object, scale), "
                             "after ~/.config/snumap/metrics.toml; may be repeated")


class LiveFeed:
    """Adapts the model's Sampler to what the app needs (start/stop/interval/watched pid)."""

    def __init__(self, topology: Topology, root: Path, interval_s: float,
                 catalogue: Catalogue | None = None,
                 origin: tuple[str, str] | None = None) -> None:
        self.interval_s = interval_s
        self.sampler = make_sampler(topology, root, interval_s, catalogue, origin)
        self.origin = origin
        self.root = root

    def start(self, callback: Callable[[Frame], None]) -> None:
        if self.origin is None:
            self.sampler.start(callback)
        else:
            self.sampler.start(lambda frame: callback(relabel(frame, self.origin, self.root)))

    def stop(self) -> None:
        self.sampler.close()

    def set_interval(self, seconds: float) -> None:
        self.sampler.set_interval(seconds)
        self.interval_s = self.sampler.interval_s

    def tasks_cadence(self, every_s: float) -> None:
        """How often the app needs the whole process list (0: every frame; the selected
        process is read every frame either way)."""
        self.sampler.set_tasks_cadence(every_s)

    def show_kthreads(self, show: bool) -> None:
        """Kernel threads in the process list (htop's K; hidden by default)."""
        self.sampler.set_kthreads(show)

    def watch_pid(self, pid: int | None) -> None:
        """Ask the tasks source for this process's pages per NUMA node (numa_maps)."""
        self.sampler.watch_pids(() if pid is None else (pid,))

    def process_io(self, pid: int) -> tuple[list[Any], list[Any]]:
        """The GPUs and adapters ``pid`` has open and whether its threads run near them
        (model/process_io.py); nothing for another machine's topology."""
        if self.origin is not None and self.origin[0] == "topology":
            return [], []
        from snumap_tui.model.process_io import process_io

        last = self.sampler.last
        tasks = last.readings.get("tasks") if last is not None else None
        return process_io(self.sampler.topology, self.root, pid, tasks)

    def watch_counters(self, pid: int | None) -> None:
        """Per-thread perf counters on this process (context switches, migrations, page
        faults; IPC where the PMU counts) for the details pane; None closes them."""
        self.sampler.watch_counters(() if pid is None else (pid,))


def relabel(frame: Frame, origin: tuple[str, str] | None, root: Path) -> Frame:
    """What the sources of a frame say, for whose numbers it shows (``origin_of``): the TUI
    and batch mode both pass every frame through here, so they say the same thing."""
    if origin is not None and origin[0] == "topology":
        frame.sources = foreign_statuses(origin[1])
    elif origin is not None and origin[0] == "fsroot":
        gathered_statuses(frame, root)
    return frame


def gathered_statuses(frame: Frame, root: Path) -> Frame:
    """Under --fsroot the sources read another machine's tree: their statuses go through
    ``snumap probe --fsroot``'s rewording (no modprobe/sysctl for this machine offered as that
    machine's fix; "the tree lacks X" rather than "the machine has none"), so the ``i`` screen
    and probe say the same thing."""
    from snumap_tui.commands.probe import for_gathered_tree

    frame.sources = {k: for_gathered_tree(v, root) for k, v in frame.sources.items()}
    if is_static(frame):
        static_rates_unavailable(frame)
    return frame


def is_static(frame: Frame) -> bool:
    """A gathered tree whose counters did not move between two reads (a snapshot: a live
    kernel's /proc/stat ticks always do, idle included)."""
    return frame.get("util_pct", frame.topology.root.id) is None


def static_rates_unavailable(frame: Frame) -> None:
    """Rates of a snapshot are unknown, not 0.0: every metric over time (each of its formulas
    reads ``dt``: context switches, NUMA allocations, watts per second) becomes not available.
    Instantaneous values (memory, the current frequency) stay."""
    import numpy as np

    from snumap_tui.model.metrics import default_catalogue

    for m in default_catalogue().metrics.values():
        arr = frame.values.get(m.name)
        if arr is not None and all("dt" in e.needs for e in m.exprs):
            frame.values[m.name] = np.full_like(arr, np.nan, dtype=np.float64)


def origin_of(args: argparse.Namespace) -> tuple[str, str] | None:
    """Whose numbers the view shows: None for this machine live; ("fsroot", DIR) for a
    gathered tree (--fsroot: the data comes from its files; a static one cannot move, a
    test's or a benchmark's may); ("topology",
    NAME) for another machine's tree (--topology, --synthetic): no data at all, since this
    machine's counters on that machine's PUs would be a lie."""
    if getattr(args, "topology", None):
        return ("topology", Path(args.topology).name)
    if getattr(args, "synthetic", None):
        return ("topology", f"synthetic '{args.synthetic}'")
    if getattr(args, "fsroot", None):
        return ("fsroot", Path(args.fsroot).resolve().name or str(args.fsroot))
    return None


def foreign_statuses(name: str) -> dict[str, SourceStatus]:
    """Every source off, saying why (what the i screen and batch mode show)."""
    from snumap_tui.sources import SOURCE_NAMES
    from snumap_tui.sources.base import SourceStatus

    why = (f"not this machine: {name} is another machine's topology, and this machine's "
           "counters on its PUs would be wrong")
    fix = ("run snumap top on that machine, or gather its /sys and /proc and use --fsroot")
    return {n: SourceStatus(n, False, why, fix) for n in SOURCE_NAMES}


def make_sampler(topo: Topology, root: Path, interval_s: float,
                 catalogue: Catalogue | None, origin: tuple[str, str] | None) -> Sampler:
    """The live sampler, or one without any source for another machine's topology (its
    frames carry the tree and n/a everywhere). Without kernel threads in its process list,
    as htop starts: the live view (whose K shows them) and --batch list the same processes."""
    from snumap_tui.model.sampler import Sampler

    if origin is not None and origin[0] == "topology":
        return Sampler(topo, root, interval_s, sources=[], catalogue=catalogue)
    sampler = Sampler(topo, root, interval_s, catalogue=catalogue)
    sampler.set_kthreads(False)
    return sampler


def _check(args: argparse.Namespace) -> None:
    from snumap_tui.commands.options import interval_option

    args.interval = interval_option(str(args.interval))
    if args.count is not None and args.count < 1:
        raise SnumapError(f"--count {args.count}: must be at least 1")
    if args.tasks < 0:
        raise SnumapError(f"--tasks {args.tasks}: must be 0 or more")
    if args.json and not args.batch:
        raise SnumapError("--json prints frames as JSON lines instead of the live view: "
                          "use it with --batch (snumap top --batch --json)")
    if args.node_frames and not (args.job is not None and args.json):
        raise SnumapError("--node-frames adds each node's frame to top --job --batch --json")
    if args.count is not None and not (args.batch or args.stream):
        raise SnumapError("--count is the number of frames --batch prints: use it with "
                          "--batch (snumap top --batch --count N)")
    if args.fsroot and not Path(args.fsroot).is_dir():
        raise SnumapError(f"--fsroot {args.fsroot}: not a directory")
    if args.sort not in SORT_COLUMNS:
        raise SnumapError(f"--sort {args.sort}: not a column; one of "
                          + ", ".join(SORT_COLUMNS))
    pids_of(args)


def pids_of(args: argparse.Namespace) -> frozenset[int] | None:
    """-p 12,34 as a set (None: every process)."""
    if not getattr(args, "pid", None):
        return None
    from snumap_tui.ui.processes import parse_pids

    try:
        return parse_pids(args.pid)
    except ValueError as exc:
        raise SnumapError(f"-p {args.pid}: {exc} is not a PID; give PIDs as 12,34") from None


def _root(args: argparse.Namespace) -> Path:
    return Path(args.fsroot) if args.fsroot else Path("/")


def catalogue_from_args(args: argparse.Namespace) -> Catalogue:
    """The built-in metrics, the user's config file and every --metrics FILE (a bad file is
    one SnumapError line naming the file and the metric)."""
    from snumap_tui.model.usermetrics import load_catalogue

    return load_catalogue(getattr(args, "metrics", None) or ())


def run(args: argparse.Namespace) -> int:
    _check(args)
    if args.stream or args.job is not None:
        from snumap_tui.commands.top_job import run_job

        return run_job(args)
    from snumap_tui.commands.common import topology_from_args

    catalogue = catalogue_from_args(args)     # before anything starts: a bad file exits 2
    events_for_top(args, catalogue, lambda s: print(f"snumap: {safe_lines(s)}",
                                                    file=sys.stderr))
    topo = topology_from_args(args)
    root = _root(args)
    if args.batch:
        return run_batch(topo, root, args, catalogue)
    if not sys.stdout.isatty():
        raise SnumapError("the live view needs a terminal; use --batch for text or --json")
    return run_tui(topo, root, args.interval, catalogue, origin_of(args),
                   {"sort_key": args.sort, "pids": pids_of(args), "user": args.user})


def run_tui(topo: Topology, root: Path, interval_s: float,
            catalogue: Catalogue | None = None,
            origin: tuple[str, str] | None = None,
            process_list: dict[str, Any] | None = None) -> int:
    """``process_list``: the list's sort_key, pids (-p) and user (-u)."""
    feed = LiveFeed(topo, root, interval_s, catalogue, origin)
    # Sweep once now, before Textual is even imported: the sampler's first sweep after mount
    # then already has a previous sample, some 0.3 s older, so the first frame (with
    # utilisation) appears as soon as the screen does.
    feed.sampler.sweep()
    if origin is None or origin[0] == "fsroot":
        # The numbers are ready long before Textual is: show them now (first_frame.py).
        from snumap_tui.commands.first_frame import draw, first_frame

        early = first_frame(feed.sampler)
        if early is not None:
            draw(early, "live · the first numbers" if origin is None else f"tree {origin[1]}")
    from snumap_tui.ui.app import TopApp
    from snumap_tui.ui.hostinfo import HostReader

    local = origin is None or origin[0] != "topology"
    app = TopApp(topo, feed=feed, host=HostReader(root, topo, local=local,
                                                  name=origin[1] if origin else "?"),
                 interval_s=interval_s, catalogue=catalogue, origin=origin,
                 **(process_list or {}))
    app.run()
    if app.return_code:
        # A crash inside the app: one line and a failing status, never exit 0.
        raise SnumapError(f"top stopped on an internal error: {app.crash or 'unknown error'}")
    return 0


#: Batch text fits a plain 80-column terminal or a mail/log line.
BATCH_WIDTH = 80
#: What the tree's memory heading cannot say, said once under it.
MEM_NOTE = "mem used excludes the page cache (what free(1) calls used)"


def wrap_line(text: str, width: int = BATCH_WIDTH, indent: str = "    ") -> list[str]:
    """``text`` wrapped at word boundaries into lines of at most ``width`` columns, the
    continuation lines indented so a reason reads as one item; a word longer than a line
    (a long path) is broken rather than overflowing."""
    import textwrap

    if len(text) <= width:
        return [text]
    return textwrap.wrap(text, width=width, subsequent_indent=indent,
                         break_on_hyphens=False) or [text[:width]]


def clip(text: str, width: int) -> str:
    """``text`` cut to ``width`` columns, ending in an ellipsis when something was cut."""
    return text if len(text) <= width else text[:max(0, width - 1)] + "\u2026"


def batch_tree(frame: Frame) -> list[str]:
    """The folded tree for batch text, then a one-line note that used memory excludes the
    page cache (the heading has no room to say it)."""
    from snumap_tui.ui.tree_rows import plain_tree

    lines = plain_tree(frame)
    if not lines:
        return lines
    return [lines[0], *(clip(x, BATCH_WIDTH) for x in lines[1:]), MEM_NOTE]


def task_lines(frame: Frame, ntasks: int, width: int = BATCH_WIDTH,
               args: argparse.Namespace | None = None) -> list[str]:
    """The first ``ntasks`` processes in the --sort order (the busiest by default), only
    those of -p and -u, the COMMAND column cut so each row fits ``width``."""
    from snumap_tui.ui.processes import affinity_label, command_label, only, sort_tasks

    tasks = frame.tasks if args is None else only(frame.tasks, pids_of(args), args.user or None)
    out = [f"{'PID':>7} {'USER':<10} {'CPU%':>6} {'PU':>4}  {'AFFINITY':<22} COMMAND"]
    for t in sort_tasks(tasks, getattr(args, "sort", "cpu"))[:ntasks]:
        cpu = "n/a" if t.cpu_pct is None else f"{t.cpu_pct:.1f}"
        pu = "" if t.last_cpu is None else str(t.last_cpu)
        row = (f"{t.pid:>7} {safe_text(t.user)[:10]:<10} {cpu:>6} {pu:>4}  "
               f"{affinity_label(frame.topology, t.affinity)[:22]:<22} ")
        out.append(row + clip(safe_text(command_label(t.cmdline, t.comm)), width - len(row)))
    return out


def batch_text(frame: Frame, host_line: str, ntasks: int,
               origin: tuple[str, str] | None = None,
               args: argparse.Namespace | None = None) -> str:
    """One frame as text no wider than 80 columns: a header, what is not measured and why
    (wrapped at words), the folded tree with its numbers, the busiest processes."""
    from snumap_tui.analysis.textcols import output_width
    from snumap_tui.ui.hostinfo import source_marks

    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(frame.wall_ns / 1e9))
    out = wrap_line(f"== {stamp}  {host_line}  interval {frame.dt_s:.2f}s")
    if origin is not None and origin[0] == "topology":
        out += wrap_line(f"topology of {origin[1]}: no live data (not this machine)")
    else:
        if origin is not None:
            moving = not is_static(frame)
            out += wrap_line(f"data from the tree {origin[1]}" if moving else
                             f"static snapshot of {origin[1]}: its counters do not move")
        for n, ok, why in source_marks(frame.sources):
            if not ok:
                out += wrap_line(f"unavailable: {n}{': ' + why if why else ''}")
    out += batch_tree(frame)
    for line in user_metric_lines(frame):
        out += wrap_line(line)
    if ntasks and frame.tasks:
        # The COMMAND column as wide as the terminal; whole when piped (a file, grep).
        out += task_lines(frame, ntasks, max(output_width(), BATCH_WIDTH), args=args)
    # The host line, the fsroot's strings and the tree's names are the machine's: escaped.
    return safe_lines("\n".join(out) + "\n")


def user_metric_lines(frame: Frame, per_metric: int = 16) -> list[str]:
    """One line per metric of the user's file: its value on the objects it is attached to
    (the machine and its packages when it names none), at most ``per_metric`` of them."""
    from snumap_tui.ui.metricspec import user_metric_names, view_for

    out = []
    for name in user_metric_names(frame.values):
        view = view_for(name)
        types = view.metric.objects or ("Machine", "Package")
        objs = [o for o in frame.topology if o.type in types][:per_metric]
        cells = [(f"{o.type}:{o.os_index}" if o.os_index is not None and not o.is_cache
                  else f"{o.type}#{o.logical_index}") + f"={view.fmt(frame.get(name, o.id), 0)}"
                 for o in objs]
        unit = f" ({view.unit})" if view.unit else ""
        out.append(f"{name}{unit}: " + " ".join(cells))
    return out


def _json_default(o: Any) -> Any:
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def watch_details(sampler: Sampler, topo: Topology, pids: frozenset[int] | None,
                  origin: tuple[str, str] | None) -> dict[int, Any]:
    """For ``-p``: per-thread counters and memory per node of those processes (this machine
    only: perf counts the running kernel's threads); pid -> its MemoryWatch."""
    if not pids or origin is not None:
        return {}
    from snumap_tui.analysis.live_threads import MemoryWatch
    from snumap_tui.analysis.memory import node_kinds

    sampler.watch_pids(pids, counters=True)
    return {pid: MemoryWatch(node_kinds(topo)) for pid in sorted(pids)}


def detail_of(frame: Frame, details: dict[int, Any]) -> list[dict[str, Any]]:
    """The process view of each -p process still there (analysis/live_threads.py)."""
    from snumap_tui.analysis.live_threads import process_detail

    out = []
    for pid, watch in details.items():
        task = frame.task(pid)
        if task is not None:
            out.append(process_detail(task, watch))
    return out


def detail_text(frame: Frame, details: dict[int, Any]) -> str:
    from snumap_tui.analysis.live_threads import detail_lines
    from snumap_tui.ui.metricspec import fmt_bytes

    lines = []
    for d in detail_of(frame, details):
        lines += detail_lines(d, fmt_bytes, BATCH_WIDTH)
    return safe_lines("\n".join(lines) + "\n") if lines else ""


def check_pids(root: Path, args: argparse.Namespace,
               origin: tuple[str, str] | None) -> None:
    """-p: none of the processes there is one line and exit 2 (an empty list printed for
    ever says nothing); some gone, a warning naming them."""
    pids = pids_of(args)
    if not pids or (origin is not None and origin[0] == "topology"):
        return
    gone = sorted(p for p in pids if not (root / "proc" / str(p)).is_dir())
    if len(gone) == len(pids):
        raise SnumapError(f"-p {args.pid}: no such process"
                          + (f" under {root}" if origin is not None else ""))
    if gone:
        print(f"snumap: warning: -p: no process {', '.join(map(str, gone))}; showing the "
              "others", file=sys.stderr)


def run_batch(topo: Topology, root: Path, args: argparse.Namespace,
              catalogue: Catalogue | None = None) -> int:
    """Sample, wait, sample: print each Frame until --count frames or Ctrl-C."""
    from snumap_tui.ui.hostinfo import read_host
    from snumap_tui.ui.metricspec import use_catalogue
    from snumap_tui.ui.processes import only

    use_catalogue(catalogue)
    origin = origin_of(args)
    host = read_host(root, topo, local=origin is None or origin[0] != "topology",
                     name=origin[1] if origin else "?")
    kernel = host.kernel if host.kernel.startswith("kernel") else f"Linux {host.kernel}"
    host_line = f"{host.host} {kernel} {host.cpu_model}"
    check_pids(root, args, origin)
    sampler = make_sampler(topo, root, args.interval, catalogue, origin)
    # -p PID: its threads' counters and its memory per node, as the live view's process view.
    details = watch_details(sampler, topo, pids_of(args), origin)
    printed = 0
    try:
        sampler.sweep()
        next_t = time.monotonic()
        while args.count is None or printed < args.count:
            next_t += args.interval
            time.sleep(max(0.0, next_t - time.monotonic()))
            frame = sampler.frame()
            if frame is None:
                continue
            relabel(frame, origin, root)
            if args.json:
                rows = only(frame.tasks, pids_of(args), args.user or None)   # as the text
                out = frame.to_dict(rows)
                if details:
                    out["process_detail"] = detail_of(frame, details)
                sys.stdout.write(json.dumps(out, default=_json_default) + "\n")
            else:
                text = batch_text(frame, host_line, args.tasks, origin, args)
                if details:
                    text += detail_text(frame, details)
                sys.stdout.write(text)
            sys.stdout.flush()
            printed += 1
    except KeyboardInterrupt:
        return 130 if printed == 0 else 0
    finally:
        sampler.close()
    return 0
