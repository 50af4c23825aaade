"""perf PMUs described in sysfs: a PMU's dynamic type, its named events encoded into
perf_event_attr config words through its format files, its cpumask; and the cpulist format.

Formats: Documentation/ABI/testing/sysfs-bus-event_source-devices-format (``format/TERM``:
"config:0-7", "config1:0-3,8"), ...-devices-events (``events/NAME``: "event=0x02,umask=0x1",
with ``NAME.scale`` and ``NAME.unit``), ...-devices (``type``, ``cpumask``);
Documentation/admin-guide/cputopology.rst (cpulist "0-3,8,10-11"). Pure file reading: no
syscall here (native/perf_event.py opens what these describe).
"""

from __future__ import annotations

from pathlib import Path

EVENT_SOURCE = "sys/bus/event_source/devices"


def pmu_type(name: str, root: Path = Path("/")) -> int | None:
    """The dynamic PMU type number (``type`` file) of a PMU like ``msr`` or ``power``."""
    try:
        return int((root / EVENT_SOURCE / name / "type").read_text().strip())
    except (OSError, ValueError):
        return None


def parse_format(text: str) -> list[tuple[str, int, int]]:
    """A ``format/FIELD`` file ("config:0-7", "config1:0-3,8") -> [(attr field, lo, hi)]."""
    field, _, spec = text.strip().partition(":")
    out = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out.append((field, int(lo), int(hi or lo)))
    return out


def encode_event(event_text: str, formats: dict[str, str]) -> dict[str, int]:
    """An ``events/NAME`` file ("event=0x02,umask=0x1") -> {"config": ..., "config1": ...},
    placing each term's bits where the PMU's ``format/TERM`` file says."""
    out: dict[str, int] = {"config": 0}
    for term in event_text.strip().split(","):
        if not term:
            continue
        key, _, val = term.partition("=")
        value = int(val, 0) if val else 1
        spec = formats.get(key.strip())
        if spec is None:
            raise ValueError(f"unknown format term {key!r}")
        shift = 0
        for field, lo, hi in parse_format(spec):
            width = hi - lo + 1
            out[field] = out.get(field, 0) | (((value >> shift) & ((1 << width) - 1)) << lo)
            shift += width
    return out


def pmu_event(pmu: str, event: str, root: Path = Path("/")
              ) -> tuple[int, dict[str, int], float, str | None] | None:
    """(type, {config...}, scale, unit) of a named event of a sysfs PMU, or None if absent."""
    d = root / EVENT_SOURCE / pmu
    typ = pmu_type(pmu, root)
    try:
        text = (d / "events" / event).read_text()
    except OSError:
        return None
    if typ is None:
        return None
    formats: dict[str, str] = {}
    fdir = d / "format"
    if fdir.is_dir():
        for f in fdir.iterdir():
            formats[f.name] = f.read_text()
    try:
        scale_ = float((d / "events" / f"{event}.scale").read_text().strip())
    except (OSError, ValueError):
        scale_ = 1.0
    try:
        unit: str | None = (d / "events" / f"{event}.unit").read_text().strip()
    except OSError:
        unit = None
    return typ, encode_event(text, formats), scale_, unit


def pmu_cpumask(pmu: str, root: Path = Path("/")) -> list[int] | None:
    """The PUs an uncore-style PMU (power, msr...) must be opened on (``cpumask``), if given."""
    try:
        text = (root / EVENT_SOURCE / pmu / "cpumask").read_text()
    except OSError:
        return None
    return parse_cpulist(text)


# Linux numbers at most 8192 CPUs (NR_CPUS); a cpulist naming more is not the kernel's
# ("0-4000000000" in a gathered tree asked for 32 GB).
MAX_CPU = (1 << 16) - 1


def parse_cpulist(text: str) -> list[int]:
    """The kernel's cpulist format ("0-3,8,10-11") -> sorted OS indexes; ValueError for a
    CPU number beyond MAX_CPU or a backward range."""
    out: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        a, b = int(lo), int(hi or lo)
        if not 0 <= a <= b <= MAX_CPU:
            raise ValueError(f"cpulist range {part.strip()[:40]!r} is not within 0..{MAX_CPU}")
        out.extend(range(a, b + 1))
        if len(out) > MAX_CPU + 1:
            raise ValueError(f"cpulist names more than {MAX_CPU + 1} CPUs")
    return out


