"""Where region probes set their breakpoints (``--probe-scope``): RegionTracer's part that
decides which of the traced tree's processes get their own uprobe_multi links
(trace/region_bpf.py ``BpfUprobes.add_process``) and says when the tree outgrew them.

A uprobe on a file's inode puts its breakpoint in every process of the node that maps the
file; a link made with a pid only in that process (the kernel's consumer filter, checked at
registration and at each later mmap of the file). So every process of the tree that may run
a probed runtime gets links: at its exec (held until they exist), at its fork from a linked
process, or when a rescan finds it mapped a probed file. Programs with no runtime (a shell,
``ls``) get none, and their execs are not held.
"""

from __future__ import annotations

import time
from typing import Any

from snumap_tui.trace import elfsyms as E


class ScopeMixin:
    """RegionTracer's probe scope: its probes, tree, lines and problems are the tracer's."""

    uprobes: Any
    family: set[int] | None
    lines: list[str]
    problems: list[str]
    notes: list[tuple[int, str]]

    def _init_scope(self) -> None:
        self.scope = "process"          # process | file: where the breakpoints are set
        self._needs: dict[str, bool] = {}           # program -> its processes need links
        self._links_for: dict[int, bool] = {}       # held pid -> whether to link it

    def _link_processes(self, children: list[int]) -> None:
        """Per-process probes for the tree's processes that need them without an exec: the
        children of linked processes (they inherit the breakpoints, whose hits are dropped
        until the child's own links exist: calls before its fork is decoded are not seen),
        a process that dlopen'd a probed runtime. Say it when the tree outgrew them."""
        add = getattr(self.uprobes, "add_process", None)
        if add is None or self.family is None:
            return
        for child in children:
            if child > 0 and child in self.family:
                add(child)
        self._say_widened()

    def _say_widened(self) -> None:
        """Say once that the tree outgrew per-process probes (``BpfUprobes.widen``)."""
        n = getattr(self.uprobes, "widened", 0)
        if not n or any(p.startswith("the tree reached") for p in self.problems):
            return
        note = (f"the tree reached {n} processes: probes set on the files from then on (every "
                f"process of the node mapping them takes their trap)")
        self.lines.append(f"regions: {note}")
        self.problems.append(note)
        self.notes.append((time.monotonic_ns(), f"regions: {note}"))

    def _needs_links(self, exe: str) -> bool:
        """Whether a process running EXE needs its own probe links (per-process scope): it
        was planned with regions, or it may have some (a runtime in its closure, or static).
        A program without (a shell, ls) runs unheld and unprobed; a runtime its process
        dlopens later gets the process its links at the rescan that finds it."""
        if exe not in self._needs:
            try:
                self._needs[exe] = exe in self.probed_files or (
                    exe.startswith("/") and E.is_elf(exe) and self._may_have(exe))
            except (OSError, ValueError):
                self._needs[exe] = True
        return self._needs[exe]

    def _may_have(self, exe: str) -> bool:
        """Whether program EXE may have regions (RegionTracer: its runtime closure)."""
        raise NotImplementedError

    @property
    def probed_files(self) -> set[str]:
        return {spec[0] for spec in getattr(self.uprobes, "specs", [])}
