"""`snumap probe`: what this machine offers, what is missing, why, and how to fix it.

Every line is a SourceStatus: the data sources' own ``status()`` (the same words ``snumap top``
shows for an unavailable metric) plus the system checks of ``snumap_tui.sources.system``.
With ``--fsroot DIR`` the file-based sources read that tree, and everything that needs the
running kernel (perf, tracepoints, eBPF, capabilities) says "not this machine".
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from snumap_tui.errors import SnumapError
from snumap_tui.extras import install_extra

if TYPE_CHECKING:  # pragma: no cover
    from snumap_tui.sources.base import SourceStatus

# (section title, status names in it) for the text output
SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Topology", ("hwloc",)),
    ("CPU time and tasks", ("procstat", "tasks")),
    ("Hardware counters", ("perf",)),   # + every perf:EVENT line
    ("Frequency", ("freq", "msr-pmu")),
    ("Energy", ("rapl:powercap", "rapl:perf", "rapl")),
    ("Memory", ("numa", "numa_maps")),
    ("I/O", ("net", "ib", "disk", "gpu")),
    ("Scheduling events", ("tracepoints", "trace:libbpf", "trace:bcc", "kernel-headers", "btf")),
    ("Privileges", ("perf_event_paranoid", "cap:CAP_PERFMON", "cap:CAP_BPF",
                    "cap:CAP_SYS_ADMIN")),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="print every check as JSON (name, available, reason, fix, detail)")


def hwloc_status(args: argparse.Namespace) -> SourceStatus:
    from snumap_tui.commands.common import topology_from_args
    from snumap_tui.sources.base import SourceStatus

    try:
        topo = topology_from_args(args)
    except SnumapError as exc:
        return SourceStatus("hwloc", False, str(exc), "apt install libhwloc15 (Debian/Ubuntu)"
                            " or hwloc-libs (Fedora); without root: "
                            + install_extra("hwloc") if "libhwloc" in str(exc) else None)
    counts = {t: len(topo.by_type(t)) for t in ("Package", "Core", "PU", "NUMANode")}
    version = topo.meta.get("hwlocVersion")
    what = ", ".join(f"{n} {label}{'s' if n != 1 else ''}" for n, label in (
        (counts["Package"], "package"), (counts["Core"], "core"), (counts["PU"], "PU"),
        (counts["NUMANode"], "NUMA node")))
    detail: dict[str, Any] = {"counts": counts, "source": topo.meta.get("source")}
    lib_said = ""
    from snumap_tui.native import hwloc

    if hwloc.is_loaded():     # not for a snumap JSON topology, read without hwloc
        path, origin = hwloc.loaded_from()
        detail.update(library=path, library_origin=origin)
        lib_said = f" (libhwloc: {origin}, {path})"
    return SourceStatus("hwloc", True, (f"hwloc {version}: {what}" if version else what)
                        + lib_said, None, detail)


def ebpf_status(backend: str, live: bool) -> SourceStatus:
    """The libbpf or bcc tracer's own verdict (on this machine only)."""
    from snumap_tui.sources.base import SourceStatus
    from snumap_tui.trace.select import tracer_class

    if not live:
        return SourceStatus(f"trace:{backend}", False, "not this machine (--fsroot)", None)
    try:
        cls = tracer_class(backend)
    except ImportError as exc:   # the tracer module itself is missing from this build
        return SourceStatus(f"trace:{backend}", False, f"no eBPF tracer: {exc}", None)
    return cls.status()


def rapl_statuses(root: Path) -> list[SourceStatus]:
    """RAPL both ways (powercap, perf power PMU), then the source's own verdict: one
    RaplSource, its own reader, the power PMU opened once."""
    from snumap_tui.sources.rapl import RaplSource

    src = RaplSource(root)
    try:
        return src.verdicts()
    finally:
        src.close()


# What each file-based check reads, relative to the root: with --fsroot, a missing one means
# the gathered tree does not say (hwloc-gather-topology copies only part of /sys), not that
# the other machine lacks it.
TREE_NEEDS: dict[str, tuple[str, ...]] = {
    "freq": ("sys/devices/system/cpu/cpu0/cpufreq", "sys/bus/event_source/devices/msr"),
    "msr-pmu": ("sys/bus/event_source/devices/msr",),
    "rapl:powercap": ("sys/class/powercap",),
    "rapl:perf": ("sys/bus/event_source/devices/power",),
    "rapl": ("sys/class/powercap", "sys/bus/event_source/devices/power"),
    "numa": ("sys/devices/system/node",),
    "net": ("sys/class/net",),
    "ib": ("sys/class/infiniband",),
    "disk": ("proc/diskstats",),
}


def for_gathered_tree(s: SourceStatus, root: Path) -> SourceStatus:
    """A check made on a gathered tree (--fsroot): never a fix for this machine (modprobe,
    sysctl, a driver) presented as one for that machine; when the tree lacks what the check
    reads, say so instead of "the machine has none"."""
    from snumap_tui.sources.base import SourceStatus

    if s.available or (s.fix is None and s.name not in TREE_NEEDS):
        return s
    missing = [rel for rel in TREE_NEEDS.get(s.name, ()) if not (root / rel).exists()]
    detail = {**s.detail, "fix_on_that_machine": s.fix} if s.fix else dict(s.detail)
    if missing and len(missing) == len(TREE_NEEDS[s.name]):
        detail["unknown"] = True
        return SourceStatus(s.name, False, "unknown for that machine: the gathered tree has "
                            "no " + " and no ".join(missing), None, detail)
    reason = (s.reason or "unavailable") + " on that machine"
    if s.fix:
        reason += " (a fix would be made there, not on this one)"
    return SourceStatus(s.name, False, reason, None, detail)


def collect(args: argparse.Namespace) -> list[SourceStatus]:
    """Every check, in section order."""
    from snumap_tui.sources import IO_SOURCE_NAMES, all_sources
    from snumap_tui.sources import system as sysck
    from snumap_tui.sources._io import is_live
    from snumap_tui.sources.perf import PerfSource

    fsroot = getattr(args, "fsroot", None)
    root = Path(fsroot) if fsroot else Path("/")
    if fsroot and not root.is_dir():
        raise SnumapError(f"--fsroot {fsroot}: not a directory")
    if fsroot:
        from snumap_tui.topology.build import check_links_inside

        check_links_inside(root)
    live = is_live(root)
    out: list[SourceStatus] = [hwloc_status(args)]
    sources = {s.name: s for s in all_sources(root, names=("procstat", "freq", "numa",
                                                            "tasks", *IO_SOURCE_NAMES))}
    perf = PerfSource(root)
    try:
        out.append(sources["procstat"].status())
        out.append(sources["tasks"].status())
        out.append(perf.status())
        out.extend(perf.statuses())
        out.append(sources["freq"].status())
        out.append(sysck.msr_status(root))
        out.extend(rapl_statuses(root))
        out.append(sources["numa"].status())
        out.append(sysck.numa_maps_status(root))
        out.extend(sources[n].status() for n in IO_SOURCE_NAMES)
        out.append(sysck.tracepoint_status(root))
        out.append(ebpf_status("libbpf", live))
        out.append(ebpf_status("bcc", live))
        out.append(sysck.kernel_headers_status(root))
        out.append(sysck.btf_status(root))
        if live:            # region probes (record --regions, --probe): the uprobe PMU
            from snumap_tui.trace.uprobes import status as uprobe_status

            out.append(uprobe_status())
        out.append(sysck.paranoid_status(root))
        out.extend(sysck.capability_statuses(root))
    finally:
        perf.close()
        for s in sources.values():
            s.close()
    if not live:
        out = [for_gathered_tree(s, root) for s in out]
    return out


def record_plan(checks: list[SourceStatus]) -> dict[str, Any]:
    """Which tracer `snumap record` will use here and why not the better ones: the choice
    record makes (trace.select.pick on the same statuses), and `record --job`'s (perf first:
    recording/job.job_backend). Only for this machine."""
    from snumap_tui.recording.job import job_backend
    from snumap_tui.trace.select import ORDER, pick, tracer_class

    known = {s.name.removeprefix("trace:"): s for s in checks if s.name.startswith("trace:")}

    def status_of(name: str) -> SourceStatus:
        if name not in known:
            known[name] = tracer_class(name).status()
        return known[name]

    plan: dict[str, Any] = {}
    for key, backend in (("record", "auto"), ("record --job", job_backend("auto"))):
        try:
            name, lines = pick(backend, status_of)
        except SnumapError as exc:
            plan[key] = {"tracer": None, "why": [str(exc)], "approximate": False}
            continue
        plan[key] = {"tracer": name, "why": lines[:-1],
                     "approximate": tracer_class(name).approximate}
    plan["record"]["why"].insert(0, f"the first of {', '.join(ORDER)} that works here (one "
                                    "that then fails to start gives way to the next)")
    if plan["record --job"]["tracer"] != plan["record"]["tracer"]:
        plan["record --job"]["why"] = [
            ("a job's new tasks are forked by slurmd, outside the traced tree: perf filters "
             "after each scan for them, so it keeps their first events")]
    return plan


def render_plan(plan: dict[str, Any], width: int = 80) -> list[str]:
    """The "Recording" section of the text report: what each way of recording traces with."""
    from snumap_tui.topology.render import wrap_words

    lines = ["", "Recording"]
    for key, p in plan.items():
        said = f"{key} traces with {p['tracer']}" if p["tracer"] else f"{key} cannot trace"
        if p["approximate"]:
            said += " (approximate: CPU time per thread at each interval, not every switch)"
        lines.extend("  " + w for w in wrap_words(said, width - 2))
        for why in p["why"]:
            lines.extend(f"  {'- ' if i == 0 else '  '}{w}"
                         for i, w in enumerate(wrap_words(why, width - 4)))
    return lines


def _machine(args: argparse.Namespace) -> dict[str, Any]:
    fsroot = getattr(args, "fsroot", None)
    if fsroot:
        return {"machine": f"gathered tree {fsroot}"}
    return {"machine": "this machine", "kernel": platform.release(),
            "arch": platform.machine(), "hostname": platform.node()}


def _groups(statuses: list[SourceStatus]) -> list[tuple[str, SourceStatus]]:
    """Collapse consecutive checks that say the same thing ("perf:cycles", "perf:instructions"
    ... all "no hardware PMU") into one line labelled with all their names."""
    out: list[tuple[list[str], SourceStatus]] = []
    for s in statuses:
        prev = out[-1][1] if out else None
        if prev is not None and s.name.split(":")[0] == prev.name.split(":")[0] and \
                (s.available, s.reason, s.fix) == (prev.available, prev.reason, prev.fix) and \
                ":" in s.name and ":" in prev.name:
            out[-1][0].append(s.name)
        else:
            out.append(([s.name], s))
    labelled = []
    for names, s in out:
        if len(names) == 1:
            labelled.append((names[0], s))
        else:
            prefix = names[0].split(":")[0]
            labelled.append((f"{prefix}: " + ", ".join(n.split(":", 1)[1] for n in names), s))
    return labelled


def render(statuses: list[SourceStatus], machine: dict[str, Any], width: int = 80,
           plan: dict[str, Any] | None = None) -> str:
    """The text report: one line per check (or per group of checks saying the same), with
    the reason and the fix wrapped under it at spaces (a long path after a slash). A fix
    already printed is referred to, not repeated."""
    from snumap_tui.topology.render import wrap_words

    by_name: dict[str, list[SourceStatus]] = {}
    for s in statuses:
        key = "perf" if s.name.startswith("perf:") else s.name
        by_name.setdefault(key, []).append(s)
    head = machine["machine"]
    if "kernel" in machine:
        head += f" (Linux {machine['kernel']}, {machine['arch']})"
    lines = [f"snumap probe: {head}"]
    name_w = 22
    indent = " " * (name_w + 10)
    fixes_shown: dict[str, str] = {}
    for title, names in SECTIONS:
        lines.append("")
        lines.append(title)
        for n in names:
            for label, s in _groups(by_name.get(n, [])):
                mark = "yes" if s.available else " ? " if s.detail.get("unknown") else "NO "
                if s.available and s.detail.get("missing"):
                    # Usable, but without some of its events ("no hardware PMU: software
                    # events only"): a "yes" beside that read as a contradiction.
                    mark = "some"
                label = label if label != "perf" else "perf (per PU)"
                text = s.reason or ("available" if s.available else "unavailable")
                if len(label) > name_w:
                    wrapped_label = wrap_words(label, width - 8, width - 10)
                    lines.append(f"  {mark:<4}  {wrapped_label[0]}")
                    lines.extend(" " * 10 + w for w in wrapped_label[1:])
                    first = indent
                else:
                    first = f"  {mark:<4}  {label:<{name_w}}  "
                wrapped = wrap_words(text, width - len(indent)) or [""]
                lines.append(first + wrapped[0])
                lines.extend(indent + w for w in wrapped[1:])
                if not s.fix:
                    continue
                fix = s.fix
                if fix in fixes_shown:
                    fix = f"as for {fixes_shown[fix]} above"
                else:
                    fixes_shown[fix] = label
                for i, w in enumerate(wrap_words(fix, width - len(indent) - 5)):
                    lines.append(indent + ("fix: " if i == 0 else "     ") + w)
    if plan:
        lines.extend(render_plan(plan, width))
    n_ok = sum(1 for s in statuses if s.available)
    lines.append("")
    lines.append(f"{n_ok} of {len(statuses)} checks available.")
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    statuses = collect(args)
    machine = _machine(args)
    plan = None if getattr(args, "fsroot", None) else record_plan(statuses)
    if args.json:
        out = {**machine, "checks": [s.to_dict() for s in statuses]}
        if plan is not None:
            out["tracer"] = plan
        json.dump(out, sys.stdout, indent=1, default=str)
        sys.stdout.write("\n")
    else:
        from snumap_tui.textsafe import safe_lines

        # The machine's strings (model name, kernel, paths, reasons): escaped.
        sys.stdout.write(safe_lines(render(statuses, machine, plan=plan)))
    return 0
