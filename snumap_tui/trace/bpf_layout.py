"""The eBPF record layout, read from bpf/sched_event.h so that C and numpy share one description.

The header declares ``struct snumap_sched_event`` with one fixed-width field per line; this
module turns it into a numpy dtype with the C compiler's natural alignment (which is what
``align=True`` reproduces for these types) and checks the size against ``SNUMAP_EVENT_SIZE``.
Pure functions over the header's text; the file is located next to the package.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from snumap_tui.trace import events as ev

BPF_DIR = Path(__file__).resolve().parents[2] / "bpf"

_C_TYPES = {"__u64": "<u8", "__s64": "<i8", "__u32": "<u4", "__s32": "<i4",
            "__u16": "<u2", "__s16": "<i2", "__u8": "u1", "__s8": "i1", "char": "S1"}
_FIELD = re.compile(r"^\s*(\w+)\s+(\w+)\s*(?:\[(\d+)\])?\s*;")
_DEFINE = re.compile(r"^#define\s+(SNUMAP_\w+)\s+(\d+)\s*$", re.MULTILINE)


def bpf_dir() -> Path:
    """bpf/ in a source checkout, or snumap_tui/bpf once installed (same files)."""
    if (BPF_DIR / "sched.c").exists():
        return BPF_DIR
    import importlib

    # The installed wheel's layout; imported by name, so the type checker does not depend on
    # how an editable install maps the package (it finds it or not, by pip's version).
    pkg = importlib.import_module("snumap_tui.bpf")
    return Path(str(pkg.__file__)).resolve().parent


def struct_dtype(header: str, name: str) -> np.dtype:
    """The numpy dtype of ``struct NAME { ... };`` in HEADER (C natural alignment)."""
    m = re.search(rf"struct\s+{re.escape(name)}\s*\{{(.*?)\}};", header, re.DOTALL)
    if not m:
        raise ValueError(f"struct {name} not found in the header")
    fields: list[tuple] = []
    for line in m.group(1).splitlines():
        line = re.sub(r"/\*.*?\*/", "", line)
        fm = _FIELD.match(line)
        if not fm:
            if line.strip():
                raise ValueError(f"cannot parse field line {line.strip()!r} of struct {name}")
            continue
        ctype, fname, count = fm.groups()
        if ctype not in _C_TYPES:
            raise ValueError(f"unsupported type {ctype} in struct {name}")
        if count:
            fields.append((fname, _C_TYPES[ctype], (int(count),)) if ctype != "char"
                          else (fname, f"S{int(count)}"))
        else:
            fields.append((fname, _C_TYPES[ctype]))
    return np.dtype(fields, align=True)


def defines(header: str) -> dict[str, int]:
    """The integer ``#define SNUMAP_*`` constants of the header."""
    return {k: int(v) for k, v in _DEFINE.findall(header)}


def load_layout(path: Path | None = None) -> tuple[np.dtype, np.dtype, dict[str, int]]:
    """(event record dtype, task name dtype, constants), checked against events.py."""
    text = (path or bpf_dir() / "sched_event.h").read_text()
    consts = defines(text)
    rec = struct_dtype(text, "snumap_sched_event")
    names = struct_dtype(text, "snumap_task_name")
    if rec.itemsize != consts.get("SNUMAP_EVENT_SIZE"):
        raise ValueError(f"struct snumap_sched_event is {rec.itemsize} bytes, header says "
                         f"{consts.get('SNUMAP_EVENT_SIZE')}")
    for kind, label in [*ev.KIND_NAMES.items(), (ev.COMM, "comm")]:
        key = f"SNUMAP_{label.upper()}"
        if key in consts and consts[key] != kind:
            raise ValueError(f"{key} = {consts[key]} in the header but {kind} in events.py")
    return rec, names, consts


def to_events(records: np.ndarray) -> np.ndarray:
    """Copy decoded records into EVENT_DTYPE (vectorised, one pass per field)."""
    out = np.empty(len(records), dtype=ev.EVENT_DTYPE)
    for name in ev.EVENT_DTYPE.names or ():
        out[name] = records[name]
    return out
