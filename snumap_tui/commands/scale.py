"""`snumap scale`: a scalability study -- the command recorded over threads, placements,
inputs and frequencies (snumap_tui/study/), and its report, export, view.

    snumap scale [options] -o STUDY -- CMD ARGS...     record every configuration
    snumap scale report STUDY [--json] [--plot DIR]     speedup, efficiency, findings
    snumap scale export STUDY --format parquet -o F     one row per run x region
    snumap scale view STUDY                             efficiency diagram (terminal)
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path
from typing import Any

from snumap_tui.errors import SnumapError

VERBS = ("report", "export", "view", "task")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = ("other forms: snumap scale report STUDY [--json] [--plot DIR] "
                     "[--extrap FILE] [--measure median|mean] [--predict N]; snumap scale export STUDY --format "
                     "parquet|json|csv -o FILE; snumap scale view STUDY")
    parser.add_argument("-o", "--output", metavar="STUDY",
                        help="study directory (made; rerun the same command to resume it)")
    parser.add_argument("--threads", default="1", metavar="LIST",
                        help="thread counts (OMP_NUM_THREADS): 1,2,4 or pow2 or all (up to "
                             "the PUs; pow2:cores, all:cores up to the cores); default 1")
    parser.add_argument("--ranks", default=None, metavar="LIST",
                        help="MPI rank counts: the launcher's -np (or {ranks} in CMD)")
    parser.add_argument("--places", default="none", metavar="LIST",
                        help="placements to compare, computed on the hwloc topology: "
                             "compact, spread, cores, pus, numa, none (default none)")
    parser.add_argument("--input", action="append", default=[], metavar="NAME=ARGS",
                        help="a named argument set put where CMD says {input} (repeatable)")
    parser.add_argument("--freq", default=None, metavar="LIST",
                        help="CPU frequencies through cpufreq, e.g. 1.2GHz,2.0GHz,max "
                             "(restored afterwards)")
    parser.add_argument("--repeat", type=int, default=1, metavar="N",
                        help="runs per configuration, interleaved across configurations")
    parser.add_argument("--retry-failed", action="store_true",
                        help="on resume, record the failed runs again too")
    parser.add_argument("--oversubscribe", action="store_true",
                        help="allow more threads than the machine has PUs")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the configurations, their CPUs and commands; run nothing")
    parser.add_argument("--json", action="store_true", help="with --dry-run: as JSON")
    parser.add_argument("--slurm", nargs="?", const="", default=None, metavar="SBATCH_OPTS",
                        help='submit the runs as a Slurm job array (sbatch --array), e.g. '
                             '--slurm "-p batch -t 10"')
    parser.add_argument("--wait", action="store_true", help="with --slurm: until the job ends")
    rec = parser.add_argument_group("passed to each snumap record")
    rec.add_argument("--backend", default=None, choices=["auto", "libbpf", "bcc", "perf", "proc"])
    rec.add_argument("--interval", default=None, help="metric sampling interval")
    rec.add_argument("--regions", default=None, choices=["auto", "omp", "mpi", "none"])
    rec.add_argument("--probe", action="append", default=[], metavar="FILE:SYMBOL")
    from snumap_tui.recording.counters import HELP as EVENTS_HELP

    rec.add_argument("--events", default=None, metavar="LIST",
                     help=EVENTS_HELP + "; checked once here, kept in the study: a resume "
                          "gives the same list")
    parser.add_argument("rest", nargs=argparse.REMAINDER, metavar="-- CMD ARGS...",
                        help="the command ({input} and {ranks} are substituted)")


def run(args: argparse.Namespace) -> int:
    rest = list(args.rest or [])
    if rest and rest[0] in VERBS and not args.output:
        return _verb(rest[0], rest[1:])
    if rest and rest[0] == "--":
        rest = rest[1:]
    if args.interval is not None:       # refused here, not by each run's record
        from snumap_tui.commands.options import interval_option
        from snumap_tui.model.sampler import RECORD_MIN_INTERVAL_S

        interval_option(args.interval, RECORD_MIN_INTERVAL_S)
    args.event_names = _event_names(args)     # a bad name: one line before any run
    return _study(args, rest)


def _event_names(args: argparse.Namespace) -> list[str] | None:
    """``--events`` parsed as `snumap record` parses it (SnumapError for a bad name), as the
    names each run's record gets; None without it."""
    from snumap_tui.recording.counters import specs_from_args

    if args.events is None:
        return None
    return [s.name for s in specs_from_args(args)]


# ---- running a study ---------------------------------------------------------------------------

def _record_args(args: argparse.Namespace) -> list[str]:
    out: list[str] = []
    for opt in ("backend", "interval", "regions"):
        v = getattr(args, opt)
        if v is not None:
            out += [f"--{opt}", v]
    for p in args.probe:
        out += ["--probe", p]
    if getattr(args, "event_names", None):
        out += ["--events", ",".join(args.event_names)]
    return out


def _machine(topo: Any) -> dict[str, Any]:
    from snumap_tui.sources.cpuinfo import cpu_model

    return {"hostname": platform.node(), "kernel": platform.release(),
            "arch": platform.machine(), "cpu_model": cpu_model(Path("/")),
            "pus": len(topo.pus), "cores": len(topo.by_type("Core")) or len(topo.pus),
            "packages": len(topo.by_type("Package")), "numa_nodes": len(topo.numa_nodes)}


def _plan(args: argparse.Namespace, cmd: list[str], topo: Any) -> tuple[list[dict[str, Any]],
                                                                       list[str]]:
    from snumap_tui.study import configs as C
    from snumap_tui.study.freq import parse_freq

    pus = len(topo.pus)
    cores = len(topo.by_type("Core")) or pus
    threads = C.parse_counts(args.threads, "--threads", pus, "PUs", cores)
    ranks = C.parse_counts(args.ranks, "--ranks", pus, "PUs", cores) if args.ranks else None
    places = [p.strip() for p in args.places.split(",") if p.strip()]
    for p in places:
        if p not in C.PLACES:
            raise SnumapError(f"--places {p}: choose from {', '.join(C.PLACES)}")
    if not places or len(set(places)) != len(places):
        raise SnumapError(f"--places {args.places}: give each placement once")
    inputs = C.parse_inputs(args.input)
    freqs = [parse_freq(f) for f in args.freq.split(",")] if args.freq else None
    if args.repeat < 1:
        raise SnumapError("--repeat: give 1 or more")
    C.check_command(cmd, inputs, ranks)
    most = max(threads) * max(ranks or [1])
    if most > pus and not args.oversubscribe:
        raise SnumapError(f"--threads {args.threads}: {most} threads but the machine has "
                          f"{pus} PUs (--oversubscribe to run them anyway)")
    out = []
    for cfg in C.build_configs(threads, places, ranks, inputs, freqs):
        n = cfg.threads * (cfg.ranks or 1)
        pl = C.placement(topo, cfg.places, min(n, pus)) if cfg.places != "none" else None
        out.append({**cfg.to_dict(), "key": cfg.key,
                    "cpus": list(pl.cpus) if pl else None,
                    "cpuset": C.cpulist(pl.cpus) if pl else None,
                    "omp_env": pl.env() if pl and (cfg.ranks or 1) == 1 else {},
                    "command": C.substitute(cmd, cfg)})
    return out, freqs or []


def _study(args: argparse.Namespace, cmd: list[str]) -> int:
    from snumap_tui.commands.common import topology_from_args
    from snumap_tui.study import manifest as M

    other = [o for o in ("topology", "synthetic", "fsroot") if getattr(args, o, None)]
    if other and not args.dry_run:
        raise SnumapError(f"--{other[0]} describes another machine: only --dry-run can use it")
    if args.slurm is None and args.wait:
        raise SnumapError("--wait goes with --slurm")
    topo = topology_from_args(args)
    confs, freqs = _plan(args, cmd, topo)
    if args.dry_run:
        _print_plan(confs, args.repeat, args.json)
        return 0
    if not args.output:
        raise SnumapError("give the study directory: -o STUDY")
    actuator = None
    if freqs:
        from snumap_tui.study.freq import CpuFreq

        actuator = CpuFreq(restore_file=Path(args.output) / "freq-restore.json")
        actuator.check(freqs)
    actuators = {"threads": "OMP_NUM_THREADS",
                 "places": "record --cpus (the command's affinity) and OMP_PLACES/OMP_PROC_BIND",
                 "input": "{input} in the command" if args.input else None,
                 "ranks": "the launcher's -np/-n or {ranks}" if args.ranks else None,
                 "freq": ("cpufreq scaling_min_freq/scaling_max_freq (userspace governor: "
                          "scaling_setspeed)") if freqs else None,
                 "slurm": "sbatch --array" if args.slurm is not None else None}
    options = {k: getattr(args, k) for k in ("threads", "ranks", "places", "input", "freq",
                                            "repeat")}
    manifest = M.new_manifest(cmd, _record_args(args), confs, args.repeat, _machine(topo),
                              {k: v for k, v in actuators.items() if v}, options,
                              events=args.event_names)
    study, resumed = M.create_or_resume(args.output, manifest)
    from snumap_tui.study.runner import Launch, run_pending

    launch = Launch.of(manifest)        # what runs: this plan, never the directory's copy
    say = _say
    if args.event_names and args.slurm is None:
        # said once here; each run's recording keeps them in its header's "dropped"
        from snumap_tui.recording.counters import countable, specs_from_args

        countable(specs_from_args(args), say)
    with M.flocked(study.dir / ".lock", f"study {study.dir}"):
        from snumap_tui.study.freq import restore_leftover

        for line in restore_leftover(study.dir):
            say(line)
        study.save(keys=None)
        if args.slurm is not None:
            from snumap_tui.study.slurm import submit

            # this command's configurations, as a local study runs them (study/runner.py)
            pending = [r for r in map(launch.run, study.pending(args.retry_failed)) if r]
            job = submit(study, pending, args.slurm, wait=args.wait)
            say(f"submitted {len(pending)} runs as Slurm job array {job}; then: "
                f"snumap scale report {study.dir}")
            return 0
        if resumed:
            todo = [r for r in map(launch.run, study.pending(args.retry_failed)) if r]
            say(f"resuming {study.dir}: {len(todo)} of {len(study.plan())} runs to record")
        try:
            counts = run_pending(study, launch, topo, say, retry_failed=args.retry_failed,
                                 freq=actuator)
        except KeyboardInterrupt:
            say(f"interrupted; rerun the same command to resume {study.dir}")
            return 130
    warning = _perturbation_warning(study.dir)
    if warning:
        say(f"warning: {warning}")
    failed = f", {counts['failed']} failed (kept, marked)" if counts.get("failed") else ""
    left = (f", {counts['other']} of configurations not asked for now left pending (give "
            "their options to record them)" if counts.get("other") else "")
    say(f"{counts.get('ok', 0)} runs recorded{failed}, {counts['skipped']} already complete"
        f"{left}; snumap scale report {study.dir}")
    return 0


def _perturbation_warning(path: Path) -> str | None:
    """The study's perturbation warning (scale report's), or None; a study that cannot be
    read back here has its report say why."""
    from snumap_tui.study import load
    from snumap_tui.study.aggregate import PROGRAM
    from snumap_tui.study.report import perturbation, unit_of

    try:
        agg = load(path).aggregated()
    except (SnumapError, OSError, ValueError):
        return None
    return perturbation([a for a in agg if a["region"] == PROGRAM], unit_of(agg)).get("warning")


def _say(text: str) -> None:
    print(f"snumap scale: {text}", file=sys.stderr, flush=True)


def _print_plan(confs: list[dict[str, Any]], repeat: int, as_json: bool) -> None:
    """The plan: each configuration's CPUs, OpenMP variables and the command each run
    records, its {input} and {ranks} substituted."""
    import shlex

    from snumap_tui.textsafe import safe_text

    if as_json:
        print(json.dumps({"configurations": confs, "repeat": repeat}, indent=1))
        return
    print(f"{len(confs)} configurations x {repeat} repeats = {len(confs) * repeat} runs "
          "(each recorded, and run once untraced for the recorder's perturbation)")
    for c in confs:
        env = " ".join(f"{k}={v}" for k, v in (c["omp_env"] or {}).items())
        print(safe_text(f"  {c['key']:<32} cpus {c['cpuset'] or 'any':<12} {env}").rstrip())
        print("    " + safe_text(shlex.join(c["command"])))


# ---- report, export, view, task --------------------------------------------------------------

def _verb(verb: str, argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog=f"snumap scale {verb}")
    p.add_argument("study", metavar="STUDY")
    if verb == "report":
        p.add_argument("--json", action="store_true")
        p.add_argument("--plot", metavar="DIR", help="write SVG/PNG plots there (matplotlib)")
        p.add_argument("--extrap", metavar="FILE", help="write the study for Extra-P")
        p.add_argument("--force", action="store_true",
                       help="replace the --extrap file(s) and the --plot files")
        from snumap_tui.study.aggregate import MEASURES

        p.add_argument("--measure", default=MEASURES[0], choices=MEASURES,
                       help="the models' (and the --extrap file's) figure per configuration: "
                            "the median (default) or the mean of its repeats")
        p.add_argument("--predict", type=int, metavar="P",
                       help="extrapolate the models to P threads too")
        p.add_argument("--metric", default="time", metavar="NAME",
                       help="the figure the models fit: time (default), energy, on_cpu_s, "
                            "ipc, ghz, mpki, llc_miss_ratio, faults, memory, or an event "
                            "the study counted (--events), e.g. page-faults")
    elif verb == "export":
        p.add_argument("--format", default="parquet", choices=["parquet", "json", "csv"])
        p.add_argument("-o", "--output", required=True, metavar="FILE")
        p.add_argument("--force", action="store_true", help="overwrite FILE")
    elif verb == "view":
        p.add_argument("--screenshot", metavar="OUT.svg",
                       help="do not open the terminal UI: write an SVG screenshot and exit")
        p.add_argument("--size", default="120x40", metavar="WxH",
                       help="with --screenshot: the terminal size (default 120x40)")
        p.add_argument("--force", action="store_true", help="replace OUT.svg if it exists")
    elif verb == "task":
        p.add_argument("--list", required=True)
        p.add_argument("--index", type=int, required=True)
    args = p.parse_args(argv)
    if verb == "task":
        return _task(args)
    from snumap_tui.study import load

    data = load(args.study)
    if verb == "report":
        return _report(data, args)
    if verb == "export":
        return _export(data, args)
    from snumap_tui.ui.scale_view import run_view

    return run_view(data, screenshot=args.screenshot, size=args.size, force=args.force)


def _report(data: Any, args: argparse.Namespace) -> int:
    from snumap_tui.study import extrap, plots
    from snumap_tui.study.report import format_report
    from snumap_tui.textsafe import safe_text

    rep = data.report(args.predict, args.metric, args.measure)
    if args.plot:
        rep["plots"] = [str(x) for x in plots.write_plots(Path(args.plot), data.aggregated(),
                                                          force=args.force)]
    if args.extrap:
        rep["extrap"] = [str(x) for x in extrap.write_extrap(
            Path(args.extrap), data.measurements, force=args.force, measure=args.measure,
            program_untraced=(rep["perturbation"].get("program_basis") == "untraced"))]
    if args.json:
        print(json.dumps(rep, indent=1, default=str))
    else:
        print(format_report(rep))
        for f in rep.get("plots", []):
            print(safe_text(f"plot: {f}"))
        if args.extrap:
            several = " (one file per placement and frequency)" if len(rep["extrap"]) > 1 \
                else ""
            print(safe_text(f"Extra-P input{several}: {', '.join(rep['extrap'])}"))
    return 0


def _export(data: Any, args: argparse.Namespace) -> int:
    from snumap_tui.safeout import SafeOutput

    out = Path(args.output)
    with SafeOutput(out, force=args.force, inputs=[data.dir]) as sink:
        if args.format == "parquet":
            with sink.open() as f:
                n = data.write_parquet(f)
        elif args.format == "json":
            doc = data.to_json()
            with sink.open(text=True) as f:
                f.write(json.dumps(doc, indent=1, default=str))
            n = len(doc["measurements"])
        else:
            import csv

            with sink.open(text=True) as f:
                w = csv.DictWriter(f, fieldnames=data.column_names(), extrasaction="ignore")
                w.writeheader()
                w.writerows(data.rows())
            n = len(data.measurements)
    from snumap_tui.textsafe import safe_text

    print(safe_text(f"snumap scale: {n} rows (run x region) to {out}"), file=sys.stderr)
    return 0


def _task(args: argparse.Namespace) -> int:
    """One Slurm array task: its run, recorded on this node, as the study (opened once,
    trusted: the submitting user's) plans it."""
    from snumap_tui.study.freq import restore_leftover
    from snumap_tui.study.manifest import open_study
    from snumap_tui.study.runner import Launch, execute
    from snumap_tui.study.slurm import task_run
    from snumap_tui.topology.build import load_topology

    study = open_study(args.study, trust=True)
    launch = Launch.of(study.manifest)
    run = task_run(study, Path(args.list), args.index)
    actuator = None
    if run.config.freq is not None:
        from snumap_tui.study.freq import CpuFreq, restore_file_for_task

        for line in restore_leftover(study.dir):
            _say(line)
        # recorded before the first change: a SIGKILLed task leaves what to undo
        actuator = CpuFreq(restore_file=restore_file_for_task(study.dir))
        actuator.check([run.config.freq])
        actuator.set(run.config.freq)
    try:
        st = execute(study, launch, run, load_topology(io=False), _say)
    finally:
        if actuator is not None:
            actuator.restore()
        study.save()
    _say(f"{run.id}: {st['status']}")
    return 0 if st["status"] == "ok" else 1
