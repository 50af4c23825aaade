"""What the kernel lets this process use, beyond the data sources: perf_event_paranoid,
capabilities, tracepoints/tracefs, eBPF (bcc, kernel headers, BTF), the msr PMU and numa_maps.

These are the lines of ``snumap probe`` that are not a source's own ``status()``; each check
is a function returning SourceStatus with the reason and the fix, so ``snumap top`` can show
the same words. Facts come from: Documentation/admin-guide/sysctl/kernel.rst
(perf_event_paranoid), capabilities(7) (CapEff in /proc/PID/status), Documentation/trace/
ftrace.rst (tracefs), bcc's INSTALL.md (kernel headers), Documentation/bpf/btf.rst.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

from snumap_tui.native import perf_pmu as pmus
from snumap_tui.sources._io import Reader, is_live, read_optional, read_text, reason_of
from snumap_tui.sources.base import SourceStatus
from snumap_tui.sources.perf import is_virtual_machine
from snumap_tui.sources.privileges import CAPS, parse_capeff

NOT_THIS_MACHINE = "not this machine (--fsroot)"
PARANOID_MEANING = {
    -1: "no restrictions",
    0: "per-CPU (system-wide) counting allowed, no raw tracepoint data",
    1: "per-process user and kernel counting only",
    2: "per-process user-space counting only",
    3: "no perf_event_open for unprivileged users (Debian/Android default)",
}


def interpreter_cap_fix(caps: str) -> str:
    """How to give capabilities to snumap without running it as root. ``setcap`` on the
    snumap script does nothing: for a "#!" script the kernel executes the interpreter and
    only the interpreter file's capabilities count (capabilities(7), "File capabilities").
    A capability on the system python would go to every Python program, hence a dedicated
    copy; next to the venv's pyvenv.cfg it still uses the venv's packages."""
    return ("run as root; or give the capabilities to a dedicated copy of the Python "
            "interpreter (setcap on the snumap script has no effect: the kernel runs the "
            "interpreter): cp \"$(readlink -f .venv/bin/python)\" .venv/bin/python-caps && "
            f"setcap {caps}+ep .venv/bin/python-caps, then run .venv/bin/python-caps "
            ".venv/bin/snumap ... (anyone allowed to execute that copy gets the capabilities: "
            "chmod 750 it to a trusted group)")


PERF_CAPS = "cap_perfmon,cap_bpf"
PARANOID_FIX = ("as root: sysctl kernel.perf_event_paranoid=0 (per-CPU counting for every "
                "user until reboot; -1 also allows raw tracepoint samples; persist it in "
                "/etc/sysctl.d/), or run snumap as root or with CAP_PERFMON (see "
                "cap:CAP_PERFMON)")


def kernel_at_least(release: str, major: int, minor: int) -> bool:
    """``uname -r`` compared with a version: '6.18.44-fc' >= 5.8."""
    parts = release.split("-", 1)[0].split(".")
    try:
        return (int(parts[0]), int(parts[1]) if len(parts) > 1 else 0) >= (major, minor)
    except ValueError:
        return False


def capabilities(root: Path = Path("/"), reader: Reader = read_text) -> int | None:
    text = read_optional(reader, root / "proc" / "self" / "status")
    return parse_capeff(text) if text else None


def _has(mask: int | None, cap: str) -> bool:
    return bool(mask is not None and mask >> CAPS[cap] & 1)


def privileged_for_perf(root: Path = Path("/"), reader: Reader = read_text) -> bool:
    mask = capabilities(root, reader)
    return _has(mask, "CAP_PERFMON") or _has(mask, "CAP_SYS_ADMIN")


def paranoid_status(root: Path = Path("/"), reader: Reader = read_text) -> SourceStatus:
    name = "perf_event_paranoid"
    if not is_live(root):
        return SourceStatus(name, False, NOT_THIS_MACHINE, None)
    text = read_optional(reader, root / "proc/sys/kernel/perf_event_paranoid")
    if text is None:
        return SourceStatus(name, False, "no /proc/sys/kernel/perf_event_paranoid: kernel "
                            "without perf events (CONFIG_PERF_EVENTS)", None)
    try:
        value = int(text.strip())
    except ValueError:
        return SourceStatus(name, False, f"/proc/sys/kernel/perf_event_paranoid is not a "
                            f"number: {text.strip()[:40]!r}", None)
    meaning = PARANOID_MEANING.get(min(value, 3), "")
    detail = {"value": value}
    if is_live(root) and privileged_for_perf(root, reader):
        return SourceStatus(name, True, f"{value} ({meaning}); not limiting: this process has "
                            "CAP_PERFMON/CAP_SYS_ADMIN", None, detail)
    if value <= 0:
        return SourceStatus(name, True, f"{value} ({meaning})", None, detail)
    return SourceStatus(name, False, f"{value} ({meaning}): per-PU counters need less",
                        PARANOID_FIX, detail)


def capability_statuses(root: Path = Path("/"), reader: Reader = read_text) -> list[SourceStatus]:
    if not is_live(root):
        return [SourceStatus(f"cap:{c}", False, NOT_THIS_MACHINE, None) for c in CAPS]
    mask = capabilities(root, reader)
    uses = {"CAP_PERFMON": "system-wide perf counters and tracepoints",
            "CAP_BPF": "loading eBPF programs (with CAP_PERFMON)",
            "CAP_SYS_ADMIN": "everything above on kernels < 5.8"}
    # CAP_PERFMON and CAP_BPF exist since Linux 5.8 and replace CAP_SYS_ADMIN for perf/eBPF.
    split_caps = kernel_at_least(platform.release(), 5, 8)
    out = []
    for cap in ("CAP_PERFMON", "CAP_BPF", "CAP_SYS_ADMIN"):
        ok = _has(mask, cap)
        detail = {"bit": CAPS[cap], "capeff": None if mask is None else f"{mask:016x}"}
        if ok:
            out.append(SourceStatus(f"cap:{cap}", True, uses[cap], None, detail))
        elif cap == "CAP_SYS_ADMIN" and split_caps:
            out.append(SourceStatus(f"cap:{cap}", False, "not held; needed only on kernels < "
                                    f"5.8 (this is {platform.release()}: CAP_PERFMON and "
                                    "CAP_BPF are enough)", None, detail))
        else:
            caps = PERF_CAPS if split_caps else "cap_sys_admin"
            out.append(SourceStatus(f"cap:{cap}", False, f"needed for {uses[cap]}",
                                    interpreter_cap_fix(caps), detail))
    return out


def tracepoint_status(root: Path = Path("/"), reader: Reader = read_text) -> SourceStatus:
    """sched tracepoints: the kernel's tracepoint PMU and a readable sched_switch format."""
    name = "tracepoints"
    if not is_live(root):
        return SourceStatus(name, False, NOT_THIS_MACHINE, None)
    if pmus.pmu_type("tracepoint", root) is None:
        return SourceStatus(name, False, "no tracepoint PMU: kernel without CONFIG_TRACEPOINTS "
                            "/ CONFIG_PERF_EVENTS", None)
    for base in (root / "sys/kernel/tracing", root / "sys/kernel/debug/tracing"):
        fmt = base / "events/sched/sched_switch/format"
        try:
            reader(fmt)
        except FileNotFoundError:
            continue
        except OSError as exc:
            return SourceStatus(name, False, reason_of(exc),
                                "run as root (tracefs is root-only by default)")
        return SourceStatus(name, True, None, None, {"tracefs": str(base)})
    fs = read_optional(reader, root / "proc/filesystems") or ""
    if "tracefs" not in fs:
        return SourceStatus(name, False, "kernel without tracefs (CONFIG_TRACING)", None)
    if os.geteuid() == 0:
        return SourceStatus(name, True, "tracefs is not mounted; snumap record mounts it "
                            "(root)", "mount -t tracefs nodev /sys/kernel/tracing",
                            {"tracefs": None})
    return SourceStatus(name, False, "tracefs is not mounted",
                        "as root: mount -t tracefs nodev /sys/kernel/tracing")


def btf_status(root: Path = Path("/")) -> SourceStatus:
    p = root / "sys/kernel/btf/vmlinux"
    if not is_live(root):
        return SourceStatus("btf", False, NOT_THIS_MACHINE, None)
    if p.exists():
        return SourceStatus("btf", True, None, None, {"path": str(p)})
    return SourceStatus("btf", False, "no /sys/kernel/btf/vmlinux (CONFIG_DEBUG_INFO_BTF)",
                        "a kernel built with BTF (most distribution kernels since 2021)")


def kernel_headers_status(root: Path = Path("/")) -> SourceStatus:
    name = "kernel-headers"
    if not is_live(root):
        return SourceStatus(name, False, NOT_THIS_MACHINE, None)
    build = root / "lib/modules" / platform.release() / "build"
    if build.exists():
        target = os.path.realpath(build)
        caveat = None
        if platform.release() not in target:
            caveat = f"headers of another kernel ({Path(target).name}): tracepoint programs " \
                     "only"
        return SourceStatus(name, True, caveat, None, {"path": str(build), "target": target})
    return SourceStatus(name, False, f"no kernel headers for bcc ({build} is missing)",
                        "apt install linux-headers-$(uname -r) (or kernel-devel); on a custom "
                        "kernel: ln -s /usr/src/linux-headers-<ver> " + str(build))


def msr_status(root: Path = Path("/"), reader: Reader = read_text) -> SourceStatus:
    name = "msr-pmu"
    if pmus.pmu_type("msr", root) is None:
        return SourceStatus(name, False, "no msr PMU (not x86, or CONFIG_PERF_EVENTS_MSR off)",
                            None)
    d = root / pmus.EVENT_SOURCE / "msr/events"
    events = sorted(p.name for p in d.iterdir()) if d.is_dir() else []
    detail = {"events": events}
    if "aperf" in events and "mperf" in events:
        return SourceStatus(name, True, None, None, detail)
    # Present but useless for GHz: frequency needs the aperf/mperf pair (tsc alone only
    # counts at the nominal rate), so this is "unavailable" for what snumap reads it for.
    vm = " (a virtual machine: the hypervisor does not expose APERF/MPERF)" \
        if is_virtual_machine(root, reader) else ""
    return SourceStatus(name, False, f"no frequency from it: the msr PMU has only "
                        f"{', '.join(events) or 'no events'}, no aperf/mperf{vm}", None,
                        {**detail, "partial": bool(events)})


def numa_maps_status(root: Path = Path("/"), reader: Reader = read_text) -> SourceStatus:
    name = "numa_maps"
    path = root / "proc/self/numa_maps" if is_live(root) else None
    if path is None:
        procs = sorted((p for p in (root / "proc").glob("[0-9]*/numa_maps")), key=str)
        if not procs:
            return SourceStatus(name, False, f"no /proc/PID/numa_maps under {root}", None)
        path = procs[0]
    try:
        reader(path)
    except FileNotFoundError:
        return SourceStatus(name, False, "no /proc/PID/numa_maps: kernel without CONFIG_NUMA",
                            None)
    except OSError as exc:
        return SourceStatus(name, False, reason_of(exc),
                            "other users' numa_maps need root or CAP_SYS_PTRACE")
    caveat = None
    if is_live(root) and os.geteuid() != 0:
        caveat = "own processes only (other users' need root or CAP_SYS_PTRACE)"
    return SourceStatus(name, True, caveat, None)
