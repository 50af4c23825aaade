"""tracefs: where it is, and the record layout of a tracepoint from its ``format`` file.

Documentation/trace/events.rst ("Event formats"): each event directory holds ``id`` (the
tracepoint id perf_event_open takes as ``config``) and ``format``, a list of lines
``field:TYPE NAME;  offset:N;  size:N;  signed:0|1;``. Records are parsed by field name and
offset from that file, never from hardcoded offsets: they change between kernels (e.g.
sched_process_fork's comms became ``__data_loc`` strings in 6.x).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from snumap_tui.sources.base import SourceStatus

CANDIDATES = (Path("/sys/kernel/tracing"), Path("/sys/kernel/debug/tracing"))

_FIELD = re.compile(r"field:(?P<decl>[^;]+);\s*offset:(?P<off>\d+);\s*size:(?P<size>\d+);"
                    r"(?:\s*signed:(?P<signed>\d);)?")


def tracefs_root(candidates: tuple[Path, ...] = CANDIDATES) -> Path | None:
    """The mounted tracefs (a directory with events/), or None."""
    for c in candidates:
        try:
            if (c / "events").is_dir():
                return c
        except PermissionError:
            # tracefs is root-only (mode 700) on most distributions: for an unprivileged
            # user it is as good as absent, and the tracers say so in their status.
            continue
    return None


def tracefs_missing(name: str, candidates: tuple[Path, ...] = CANDIDATES) -> SourceStatus:
    """Why a tracer that needs tracefs cannot run: not mounted, or mounted but root-only."""
    for c in candidates:
        try:
            (c / "events").is_dir()
        except PermissionError:
            return SourceStatus(name, False, f"cannot read {c} (tracefs is root-only here)",
                                "run as root (the /proc backend needs no privilege)")
    return SourceStatus(name, False, "tracefs is not mounted",
                        "mount -t tracefs nodev /sys/kernel/tracing (as root)")


def mount_tracefs() -> Path | None:
    """Mount tracefs at /sys/kernel/tracing if it is not (as perf's tracefs__mount does);
    needs root. Returns the root, or None if that did not work."""
    import subprocess

    root = tracefs_root()
    if root is not None:
        return root
    try:
        subprocess.run(["mount", "-t", "tracefs", "nodev", str(CANDIDATES[0])],
                       check=True, capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return tracefs_root()


@dataclass(frozen=True)
class Field:
    name: str
    ctype: str
    offset: int
    size: int
    signed: bool
    data_loc: bool      # __data_loc: a u32 (len << 16 | offset) pointing into the record
    array: int | None   # char comm[16] -> 16


@dataclass(frozen=True)
class EventFormat:
    system: str
    name: str
    id: int
    fields: dict[str, Field]

    def numpy_dtype(self, names: list[str] | None = None) -> np.dtype:
        """A dtype placing the wanted fields at their offsets (the record's fixed part)."""
        wanted = [f for f in self.fields.values() if names is None or f.name in names]
        size = max((f.offset + f.size for f in self.fields.values()), default=0)
        return np.dtype({"names": [f.name for f in wanted],
                         "formats": [_np_type(f) for f in wanted],
                         "offsets": [f.offset for f in wanted], "itemsize": size})


def _np_type(f: Field) -> str:
    if f.data_loc:
        return "<u4"
    if f.array is not None and f.ctype.startswith("char"):
        return f"S{f.size}"
    if f.size in (1, 2, 4, 8) and f.array is None:
        return f"{'<i' if f.signed else '<u'}{f.size}"
    return f"V{f.size}"


def parse_format(text: str, system: str = "", name: str = "") -> EventFormat:
    """Parse a tracefs ``format`` file."""
    ev_id = -1
    fields: dict[str, Field] = {}
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("ID:"):
            ev_id = int(s[3:])
        elif s.startswith("name:") and not name:
            name = s[5:].strip()
        m = _FIELD.search(s)
        if not m:
            continue
        decl = m.group("decl").strip()
        data_loc = decl.startswith("__data_loc")
        arr = re.search(r"\[(\d*)\]\s*$", decl)
        base = re.sub(r"\[\d*\]\s*$", "", decl).strip()
        fname = base.split()[-1]
        ctype = " ".join(base.split()[:-1]).replace("__data_loc", "").strip()
        size = int(m.group("size"))
        fields[fname] = Field(fname, ctype, int(m.group("off")), size,
                              m.group("signed") == "1", data_loc,
                              (int(arr.group(1)) if arr.group(1) else 0) if arr else None)
    return EventFormat(system, name, ev_id, fields)


def read_format(system: str, name: str, root: Path | None = None) -> EventFormat:
    """The format of tracepoint SYSTEM:NAME from the live tracefs (or ROOT)."""
    base = root or tracefs_root()
    if base is None:
        raise FileNotFoundError("tracefs is not mounted (mount -t tracefs nodev /sys/kernel/tracing)")
    return parse_format((base / "events" / system / name / "format").read_text(), system, name)
