"""Which file a loaded shared library came from (proc(5): /proc/self/maps), so that `snumap
probe` can say which libhwloc or libbpf it uses, and from where."""

from __future__ import annotations

from pathlib import Path


def mapped_file(fragment: str, maps: Path = Path("/proc/self/maps")) -> str | None:
    """The path of the first file mapped into this process whose path contains FRAGMENT."""
    try:
        text = maps.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and fragment in parts[5]:
            return parts[5].strip()
    return None
