"""What every source shares: its availability, and the root it reads from.

A source reads one kernel interface (one module per interface), is constructed on a root path
(``/`` live, ``--fsroot DIR`` or a test's fake tree otherwise) and returns raw *cumulative*
values from ``read()``: the dict that goes into ``Sample.readings[source.name]`` (the fields of
each source are listed in ``snumap_tui.model.sample``). ``status()`` says whether it works here,
why not, and how to fix it; ``snumap probe`` prints exactly these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol


@dataclass(frozen=True)
class SourceStatus:
    name: str                     # "procstat", "perf:cycles", "rapl", ...
    available: bool
    reason: str | None = None     # why not (or a caveat when available): "no hardware PMU (virtual machine)"
    fix: str | None = None        # how to make it work: "run as root or sysctl kernel.perf_event_paranoid=1"
    detail: dict[str, Any] = field(default_factory=dict)  # errno, paths, counts... for --json

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "available": self.available, "reason": self.reason,
                "fix": self.fix, "detail": dict(self.detail)}


class Source(Protocol):
    name: str
    root: Path

    def status(self) -> SourceStatus: ...

    def read(self) -> dict[str, Any]: ...

    def close(self) -> None: ...
