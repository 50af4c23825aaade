"""`snumap record`'s process memory: the traced tree's memory per NUMA node at every sample
(sources/procmem.py reads it, the store's process memory chunk keeps it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

PEAKS_INFO = "process peaks"


class MemoryRecorder:
    """Reads the watched processes' memory at each sample (at most every EVERY_S: at 1 ms a
    read a sample was a tenth of the recorder's CPU) and hands the rows to the writer. An
    unreadable process (another user's, without the capability) is said once."""

    def __init__(self, root: Path, say: Any, every_s: float = 0.0) -> None:
        from snumap_tui.sources.procmem import ProcessMemory

        self.source = ProcessMemory(root, peaks=True)     # VmHWM with each RSS read
        self.say = say
        self._said: set[int] = set()
        self._every_ns = int(every_s * 1e9)
        self._read_at = -(1 << 62)                        # sample time of the last read

    def watch(self, pids: set[int]) -> None:
        self.source.watch(pids)

    def sample(self, writer: Any, t_ns: int, last: bool = False) -> None:
        """The rows at sample time T_NS, when EVERY_S has passed since the last read or it is
        the LAST sample (whose read ``finish``'s peaks come from)."""
        from snumap_tui.store.procmem import rows_at
        from snumap_tui.textsafe import safe_text

        if not self.source.pids or (not last and t_ns - self._read_at < self._every_ns):
            return
        self._read_at = t_ns
        writer.add_process_memory(rows_at(t_ns, self.source.read()))
        for pid, why in self.source.errors.items():
            if pid not in self._said:
                self._said.add(pid)
                self.say(f"process memory of pid {pid} not recorded: {safe_text(why)}")

    def finish(self, writer: Any, t_ns: int) -> None:
        """The kernel's peak of each process, as last read (at the last sample it was still
        there: a process that exited has no VmHWM any more), as an info chunk ("process
        peaks", docs/format.md)."""
        peaks = self.source.peaks
        if peaks:
            writer.add_info(t_ns, PEAKS_INFO, {
                "source": "VmHWM of /proc/PID/status, read at every sample",
                "pids": [int(p) for p in peaks],
                "bytes": [int(b) for b in peaks.values()]})

    def header(self) -> dict[str, Any]:
        return {"source": self.source.describe(), "nodes": self.source.nodes}
