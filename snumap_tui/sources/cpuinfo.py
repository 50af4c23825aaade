"""The CPU's model name from /proc/cpuinfo, for headers and host lines (record, the UI).

/proc/cpuinfo is architecture-specific text, ``key<TAB>: value`` per line (proc(5)): x86 says
``model name``; 32-bit ARM kernels before 3.8 said ``Processor``; MIPS says ``cpu model``;
Raspberry Pi kernels add ``Model`` (the board); arm64 has only ``CPU implementer``/``CPU part``
(hex ids), the last resort. x86's ``model`` (a number) is not a name.
"""

from __future__ import annotations

from pathlib import Path

from snumap_tui.sources._io import Reader, read_optional, read_text

# In order of preference: the first key found anywhere in the file wins.
MODEL_KEYS = ("model name", "Processor", "cpu model", "Model", "CPU part")


def parse_cpu_model(cpuinfo: str) -> str | None:
    """The CPU model of /proc/cpuinfo text (whitespace runs folded), or None."""
    found: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, sep, val = line.partition(":")
        key = key.strip()
        if sep and key in MODEL_KEYS and key not in found and val.strip():
            found[key] = " ".join(val.split())
    return next((found[k] for k in MODEL_KEYS if k in found), None)


def cpu_model(root: Path = Path("/"), reader: Reader = read_text) -> str | None:
    """The model of the machine at ``root`` (None when its cpuinfo is missing or says none)."""
    try:
        text = read_optional(reader, Path(root) / "proc" / "cpuinfo")
    except OSError:
        return None
    return parse_cpu_model(text) if text else None
