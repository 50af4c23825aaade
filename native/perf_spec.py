"""Event names as users write them for perf(1), turned into perf_event_attr fields.

Accepted, with perf's own rules (tools/perf/Documentation/perf-list.txt):

- generic hardware and software events and their aliases: ``cycles``, ``cpu-cycles``,
  ``instructions``, ``branches``, ``task-clock``, ``faults``, ``cs``, ``migrations`` ...;
- generic cache events ``<cache>-<op>-<result>``: ``L1-dcache-load-misses``,
  ``LLC-load-misses``, ``dTLB-load-misses``, ``branch-loads``, ``node-stores`` ... encoded as
  PERF_TYPE_HW_CACHE with config = cache | op << 8 | result << 16 (the op defaults to load, the
  result to accesses);
- raw codes ``rNNNN`` (hex, PERF_TYPE_RAW);
- events a PMU lists in sysfs (``/sys/bus/event_source/devices/PMU/events/NAME``, with its
  ``.scale`` and ``.unit``), written ``PMU/NAME/`` or, for the core PMU, ``NAME`` alone;
- perf's term syntax ``PMU/event=0x3c,umask=0x1,cmask=1/``: each term's bits placed where the
  PMU's ``format/TERM`` file says, ``config``/``config1``/``config2`` set directly, an event
  alias among the terms expanded, a value wider than its field refused as perf refuses it;
- modifiers ``:u`` ``:k`` ``:h`` (or after the closing slash): count only user, kernel or
  hypervisor mode; the modes not named are excluded.

Parsing is pure (sysfs text in, `EventSpec` out); nothing here opens a counter. Errors are
`EventSpecError`, one line naming the event and what is wrong with it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from .perf_pmu import EVENT_SOURCE, parse_format, pmu_type

PERF_TYPE_HARDWARE = 0
PERF_TYPE_SOFTWARE = 1
PERF_TYPE_HW_CACHE = 3
PERF_TYPE_RAW = 4

HARDWARE = {
    "cycles": 0, "cpu-cycles": 0, "instructions": 1, "cache-references": 2,
    "cache-misses": 3, "branch-instructions": 4, "branches": 4, "branch-misses": 5,
    "bus-cycles": 6, "stalled-cycles-frontend": 7, "idle-cycles-frontend": 7,
    "stalled-cycles-backend": 8, "idle-cycles-backend": 8, "ref-cycles": 9,
}
SOFTWARE = {
    "cpu-clock": 0, "task-clock": 1, "page-faults": 2, "faults": 2, "context-switches": 3,
    "cs": 3, "cpu-migrations": 4, "migrations": 4, "minor-faults": 5, "major-faults": 6,
    "alignment-faults": 7, "emulation-faults": 8, "dummy": 9, "bpf-output": 10,
    "cgroup-switches": 11,
}
# perf's spellings of the generic cache ids, operations and results (lower-cased).
CACHES = {"l1-dcache": 0, "l1-d": 0, "l1d": 0, "l1-data": 0,
          "l1-icache": 1, "l1-i": 1, "l1i": 1, "l1-instruction": 1,
          "llc": 2, "l2": 2, "dtlb": 3, "d-tlb": 3, "data-tlb": 3,
          "itlb": 4, "i-tlb": 4, "instruction-tlb": 4,
          "branch": 5, "branches": 5, "bpu": 5, "btb": 5, "bpc": 5, "node": 6}
OPS = {"load": 0, "loads": 0, "read": 0, "store": 1, "stores": 1, "write": 1,
       "prefetch": 2, "prefetches": 2, "speculative-read": 2, "speculative-load": 2}
RESULTS = {"refs": 0, "reference": 0, "ops": 0, "access": 0, "misses": 1, "miss": 1}
# Terms of perf's syntax that configure sampling or recording, not a counter's value.
SAMPLING_TERMS = {"period", "freq", "branch_type", "time", "call-graph", "stack-size",
                  "max-stack", "inherit", "no-inherit", "overwrite", "no-overwrite",
                  "percore", "aux-output", "aux-sample-size"}
DIRECT = ("config", "config1", "config2", "config3")
MAX_SPEC = 256
_WORD = re.compile(r"^[\w.+-]{1,64}$")


class EventSpecError(ValueError):
    """An event the user named that cannot be understood (one line)."""


@dataclass(frozen=True)
class EventSpec:
    """What perf_event_open needs for one named event, and how to show its value."""

    name: str                    # as the user wrote it (or its name= term)
    type: int
    config: int = 0
    config1: int = 0
    config2: int = 0
    exclude_user: bool = False
    exclude_kernel: bool = False
    exclude_hv: bool = False
    scale: float = 1.0           # multiply the count by this (sysfs NAME.scale)
    unit: str | None = None      # sysfs NAME.unit, e.g. "Joules"
    pmu: str | None = None       # the sysfs PMU, for PMU events
    kind: str = "hardware"       # hardware | software | cache | raw | pmu

    @property
    def needs_pmu(self) -> bool:
        """True when only a hardware PMU can count it (everything but software events)."""
        return self.type != PERF_TYPE_SOFTWARE


def _modifiers(mods: str, spec: str) -> tuple[bool, bool, bool] | None:
    """(exclude_user, exclude_kernel, exclude_hv) of perf's u/k/h modifiers; None if none."""
    if not mods:
        return None
    bad = sorted(set(mods) - set("ukh"))
    if bad:
        raise EventSpecError(f"event {spec!r}: modifier {''.join(bad)!r} is not supported "
                             f"here (u: user, k: kernel, h: hypervisor)")
    return "u" not in mods, "k" not in mods, "h" not in mods


def _apply(spec: EventSpec, flags: tuple[bool, bool, bool] | None) -> EventSpec:
    if flags is None:
        return spec
    return replace(spec, exclude_user=flags[0], exclude_kernel=flags[1], exclude_hv=flags[2])


def _split_modifiers(text: str) -> tuple[str, str]:
    name, sep, mods = text.rpartition(":")
    if sep and name and mods.isalpha() and len(mods) <= 8:
        return name, mods
    return text, ""


def _cache(name: str) -> int | None:
    low = name.lower()
    for cache in sorted(CACHES, key=len, reverse=True):
        if low != cache and not low.startswith(cache + "-"):
            continue
        rest = low[len(cache) + 1:]
        op, result = 0, 0
        for o in sorted(OPS, key=len, reverse=True):
            if rest == o or rest.startswith(o + "-"):
                op = OPS[o]
                rest = rest[len(o) + 1:]
                break
        if rest:
            if rest not in RESULTS:
                return None
            result = RESULTS[rest]
        return CACHES[cache] | (op << 8) | (result << 16)
    return None


def core_pmu_names(root: Path) -> list[str]:
    """The core PMUs in sysfs: ``cpu`` on most machines, ``cpu_core``/``cpu_atom`` on hybrids,
    ``armv8_*`` on Arm."""
    try:
        names = sorted(p.name for p in (root / EVENT_SOURCE).iterdir())
    except OSError:
        return []
    return [n for n in names if n in ("cpu", "cpu_core", "cpu_atom") or n.startswith("armv")]


def _read_small(path: Path) -> str | None:
    """A sysfs attribute: a regular file, at most 4 KiB read."""
    try:
        if not path.is_file():
            return None
        with open(path, "rb") as f:
            return f.read(4096).decode("ascii", "replace")
    except OSError:
        return None


def _formats(root: Path, pmu: str) -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        entries = sorted((root / EVENT_SOURCE / pmu / "format").iterdir())
    except OSError:
        return out
    for f in entries[:256]:
        text = _read_small(f)
        if text is not None:
            out[f.name] = text
    return out


def _alias(root: Path, pmu: str, name: str) -> tuple[str, float, str | None] | None:
    """(terms, scale, unit) of a sysfs event of the PMU, or None."""
    if not _WORD.match(name) or name.startswith("."):
        return None
    d = root / EVENT_SOURCE / pmu / "events"
    text = _read_small(d / name)
    if text is None:
        return None
    scale = 1.0
    s = _read_small(d / f"{name}.scale")
    if s is not None:
        try:
            scale = float(s.strip())
        except ValueError:
            scale = 1.0
    unit = _read_small(d / f"{name}.unit")
    return text.strip(), scale, (unit.strip() if unit is not None else None)


def _place(out: dict[str, int], term: str, value: int, fmt: str, full: str) -> None:
    try:
        ranges = parse_format(fmt)
    except ValueError:
        raise EventSpecError(f"event {full!r}: the PMU's format {term!r} is unreadable") \
            from None
    width = sum(hi - lo + 1 for _, lo, hi in ranges)
    if value < 0 or value >> width:
        raise EventSpecError(f"event {full!r}: value {value:#x} too big for format {term!r} "
                             f"({width} bits: at most {(1 << width) - 1:#x})")
    shift = 0
    for field, lo, hi in ranges:
        if field not in DIRECT or not 0 <= lo <= hi < 64:
            raise EventSpecError(f"event {full!r}: the PMU's format {term!r} is unreadable")
        w = hi - lo + 1
        out[field] = out.get(field, 0) | (((value >> shift) & ((1 << w) - 1)) << lo)
        shift += w


def _terms(root: Path, pmu: str, text: str, full: str, depth: int = 0
           ) -> tuple[dict[str, int], str | None, float, str | None]:
    """The config words of a term list (``event=0x3c,umask=1`` or an alias name); the name=
    term, and the scale and unit of an alias among them. As in perf, a later term replaces
    an earlier one (``cpu/mem-loads,ldlat=30/`` replaces the alias's ldlat)."""
    formats = _formats(root, pmu)
    values, name, scale, unit = _term_values(root, pmu, formats, text, full, depth)
    out: dict[str, int] = {}
    for key, value in values.items():
        if key in DIRECT:
            out[key] = out.get(key, 0) | value
        else:
            _place(out, key, value, formats[key], full)
    return out, name, scale, unit


def _term_values(root: Path, pmu: str, formats: dict[str, str], text: str, full: str,
                 depth: int) -> tuple[dict[str, int], str | None, float, str | None]:
    values: dict[str, int] = {}
    name = None
    scale, unit = 1.0, None
    for raw in text.split(","):
        term = raw.strip()
        if not term:
            continue
        key, eq, val = term.partition("=")
        key, val = key.strip(), val.strip()
        if key == "name":
            if not _WORD.match(val):
                raise EventSpecError(f"event {full!r}: name= wants a word, not {val!r}")
            name = val
            continue
        if key in SAMPLING_TERMS:
            raise EventSpecError(f"event {full!r}: term {key!r} configures sampling; "
                                 f"snumap counts")
        if not eq and key not in formats and key not in DIRECT:
            alias = _alias(root, pmu, key)
            if alias is None:
                known = ", ".join(sorted(formats)) or "none"
                raise EventSpecError(f"event {full!r}: PMU {pmu!r} has no term or event "
                                     f"{key!r} (its format terms: {known})")
            if depth >= 2:
                raise EventSpecError(f"event {full!r}: aliases nested too deep")
            sub, _, _, _ = _term_values(root, pmu, formats, alias[0], full, depth + 1)
            scale, unit = alias[1], alias[2]
            values.update(sub)
            continue
        try:
            value = int(val, 0) if eq else 1
        except ValueError:
            raise EventSpecError(f"event {full!r}: term {key!r} wants a number, "
                                 f"not {val!r}") from None
        if key in DIRECT:
            if value < 0 or value >> 64:
                raise EventSpecError(f"event {full!r}: {key} {value:#x} is not a 64-bit value")
        elif key not in formats:
            known = ", ".join(sorted(formats)) or "none"
            raise EventSpecError(f"event {full!r}: PMU {pmu!r} has no term {key!r} "
                                 f"(its format terms: {known})")
        values[key] = value
    return values, name, scale, unit


def _pmus(root: Path) -> str:
    try:
        return ", ".join(sorted(p.name for p in (root / EVENT_SOURCE).iterdir())) or "none"
    except OSError:
        return "none"


def parse_event(spec: str, root: Path = Path("/")) -> EventSpec:
    """The EventSpec of one event as perf(1) writes it, resolved against the machine's sysfs
    PMUs under root (a fake tree in tests)."""
    full = _checked(spec)
    root = Path(root)

    if "/" in full:                                   # PMU/terms/[mods]
        pmu, _, rest = full.partition("/")
        terms, _, mods = rest.rpartition("/")
        mods = mods.lstrip(":")
        if not _WORD.match(pmu):
            raise EventSpecError(f"event {full!r}: {pmu!r} is not a PMU name")
        typ = pmu_type(pmu, root)
        if typ is None:
            raise EventSpecError(f"event {full!r}: no PMU {pmu!r} on this machine "
                                 f"(its PMUs: {_pmus(root)})")
        flags = _modifiers(mods, full)
        words, name, scale, unit = _terms(root, pmu, terms, full)
        return _apply(EventSpec(name=name or full, type=typ, config=words.get("config", 0),
                                config1=words.get("config1", 0),
                                config2=words.get("config2", 0), scale=scale, unit=unit,
                                pmu=pmu, kind="pmu"), flags)

    base, mods = _split_modifiers(full)
    flags = _modifiers(mods, full)
    low = base.lower()
    if low in HARDWARE:
        return _apply(EventSpec(full, PERF_TYPE_HARDWARE, HARDWARE[low]), flags)
    if low in SOFTWARE:
        return _apply(EventSpec(full, PERF_TYPE_SOFTWARE, SOFTWARE[low], kind="software"),
                      flags)
    if re.match(r"^r[0-9a-fA-F]{1,16}$", base):
        return _apply(EventSpec(full, PERF_TYPE_RAW, int(base[1:], 16), kind="raw"), flags)
    cache = _cache(base)
    if cache is not None:
        return _apply(EventSpec(full, PERF_TYPE_HW_CACHE, cache, kind="cache"), flags)
    for pmu in core_pmu_names(root):                 # a core PMU's sysfs event by name
        alias = _alias(root, pmu, base)
        typ = pmu_type(pmu, root)
        if alias is not None and typ is not None:
            words, _, _, _ = _terms(root, pmu, alias[0], full)
            return _apply(EventSpec(full, typ, words.get("config", 0), words.get("config1", 0),
                                    words.get("config2", 0), scale=alias[1], unit=alias[2],
                                    pmu=pmu, kind="pmu"), flags)
    raise EventSpecError(f"unknown event {full!r}: not a generic perf event (cycles, "
                         f"task-clock ...), a cache event (LLC-load-misses ...), rNNNN, "
                         f"PMU/terms/ or a sysfs event of the core PMU here")


def _checked(spec: object) -> str:
    if not isinstance(spec, str) or not spec.strip():
        raise EventSpecError("an event name is empty")
    full = spec.strip()
    if len(full) > MAX_SPEC or not full.isprintable():
        raise EventSpecError(f"event {full[:40]!r}: not an event name")
    return full


def check_syntax(spec: str) -> str:
    """The event's text if it can be an event on some machine, else EventSpecError. Used where
    a file names events before the machine is known; a PMU's own terms are checked when the
    event is opened there."""
    full = _checked(spec)
    if "/" in full:
        pmu, _, rest = full.partition("/")
        if "/" not in rest or not _WORD.match(pmu):
            raise EventSpecError(f"event {full!r}: expected PMU/terms/")
        _modifiers(rest.rpartition("/")[2].lstrip(":"), full)
        return full
    base, mods = _split_modifiers(full)
    _modifiers(mods, full)
    if not _WORD.match(base):
        raise EventSpecError(f"event {full!r}: not an event name")
    return full
