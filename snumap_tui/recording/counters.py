"""`record --events LIST`: counters per run interval (trace/counters.py, docs/attribution.md).

The names are parsed before anything starts (a malformed or unknown one is one line, exit 2);
the tracer opens them on every CPU and reads them at each switch. An event this machine
cannot count ("LLC-load-misses not supported here: no hardware PMU (virtual machine)") is one
line at start-up and left out; the recording goes on with the others.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

HELP = ("count these events per run interval of every traced thread, read at each context "
        "switch (libbpf backend): perf(1) names, comma-separated: task-clock, page-faults, "
        "cycles, instructions, LLC-load-misses, a sysfs PMU event, rNNNN, PMU/event=0x..,"
        "umask=0x../ (at most 8)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--events", default=None, metavar="LIST", help=HELP)


def specs_from_args(args: argparse.Namespace, root: Path = Path("/")) -> list[Any]:
    """The EventSpecs ``--events`` names ([] without it); SnumapError for a bad name."""
    from snumap_tui.trace.counters import parse_events, split_events

    text = getattr(args, "events", None)
    if text is None:
        return []
    return parse_events(split_events(text), root)


def started(tracer: Any, specs: list[Any], say: Any) -> dict[str, Any] | None:
    """After the tracer started: one line per event left out and what the recording counts;
    the header's ``counters`` entry (None when nothing was asked)."""
    from snumap_tui.trace.counters import describe_events

    if not specs:
        return None
    if not getattr(tracer, "counts_intervals", False):
        why = (f"--events: the {tracer.name} backend cannot read counters per run interval "
               "(the libbpf backend does; /proc polling counts what /proc gives): no counters "
               "in this recording")
        say(why)
        return {"events": [], "source": None, "dropped": [why]}
    for line in tracer.counter_dropped:
        say(line)
    counted = list(tracer.counter_specs)
    if not counted:
        say("--events: none of the events can be counted here; recording without counters")
    return {"events": describe_events(counted), "source": tracer.counter_source,
            "dropped": list(tracer.counter_dropped)}


def finish(writer: Any, tracer: Any, t_ns: int, say: Any) -> None:
    """After the tracer stopped: the interval records its rings could not take, as an info
    chunk ("counter records lost": their intervals' counts are missing from the tables) and
    a line when there were any."""
    lost = int(getattr(tracer, "counter_lost_total", 0) or 0)
    if not getattr(tracer, "counter_specs", None):
        return
    writer.add_info(t_ns, "counter records lost", {"columns": ["lost"], "rows": [[lost]]})
    if lost:
        say(f"{lost} run intervals' counter records were lost (the rings were full): their "
            "counts are missing from the per-thread tables")


TOP_HELP = ("perf events to count too, as perf(1) names them, comma-separated (task-clock, "
            "LLC-load-misses, a sysfs PMU event, rNNNN, PMU/event=0x../): per PU, and per "
            "thread for the process the processes view selects")


def events_for_top(args: argparse.Namespace, catalogue: Any, say: Any) -> list[str]:
    """``top --events``: each event is tried on one PU first; one this machine cannot count
    is one line (left out), a bad name is an error. The rest join the metrics file's events
    (``catalogue.extra_counters``: the perf source per PU, the per-thread counters of the
    selected process). Returns the names kept."""
    names = countable(specs_from_args(args), say)
    catalogue.extra_counters = frozenset(catalogue.extra_counters) | frozenset(names)
    return names


def countable(specs: list[Any], say: Any) -> list[str]:
    """The names of SPECS this machine can count, each tried on one PU; one line (SAY) per
    event left out, or one for all when counters cannot be opened at all."""
    from snumap_tui.sources.freq import online_cpus
    from snumap_tui.trace.counters import CpuCounters

    if not specs:
        return []
    try:
        cpus = online_cpus(Path("/"))[:1] or [0]
    except (OSError, ValueError):
        cpus = [0]
    probe = CpuCounters(specs, cpus)
    try:
        probe.open()
    except OSError as e:            # no permission: the perf source says so in its status
        say(f"--events: cannot open counters here: {e}")
        return []
    finally:
        probe.close()
    for line in probe.dropped:
        say(line)
    return probe.names
