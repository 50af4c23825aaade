"""`top`'s process view (key ``p`` in the processes view): under the selected process's details,
each of its threads over the last interval -- on-CPU time and share, task-clock, IPC, GHz,
MPKI, faults, migrations and every ``--events`` event, "n/a (why)" where an event is not
counted -- and its memory per NUMA node (with the kind hwloc names) and the high-water mark
since the view opened on it.

The figures and their text are analysis/live_threads.py's (the same as ``top --batch -p PID``);
this module only styles the lines and keeps the view's state. A mixin of ``TopApp``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.text import Text

from snumap_tui.analysis.live_threads import MemoryWatch, detail_lines, process_detail
from snumap_tui.analysis.memory import node_kinds
from snumap_tui.model.frame import TaskRow
from snumap_tui.ui.metricspec import fmt_bytes
from snumap_tui.ui.palette import NA_STYLE

# Thread rows the view shows at most (the rest are counted in a "+N more threads" line): the
# list above keeps its room on a 24-line terminal.
THREAD_ROWS = 8


def thread_view_text(detail: dict[str, Any] | None, width: int, limit: int = THREAD_ROWS
                     ) -> Text:
    """The view's lines: the title bold, the column head reversed, the process's sums bold,
    the notes (why a figure is n/a, multiplexing) and every n/a cell dimmed."""
    if detail is None:
        return Text(" process view: no process selected", style=NA_STYLE)
    lines = detail_lines(detail, fmt_bytes, max(20, width - 1), limit)
    out = Text()
    for i, line in enumerate(lines):
        if i:
            out.append("\n")
        # Notes are indented two cells; thread rows start with a right-aligned TID.
        note = line[:2] == "  " and line[2:3] not in (" ", "") and not line[2].isdigit()
        style = ("bold" if i == 0 else "reverse" if i == 2 and detail["threads"] else
                 NA_STYLE if note else "bold" if line.lstrip().startswith("all ") else "")
        out.append(" " + line, style=style)
    out.highlight_words([" n/a"], NA_STYLE)
    return out


class ThreadViewMixin:
    """State: ``thread_view`` (shown or not) and the MemoryWatch of the shown process. Needs
    the app's ``topology``, ``origin``, ``view``, ``size``, ``query_one`` and ``_redraw``."""

    thread_view: bool
    _memory_watch: MemoryWatch

    if TYPE_CHECKING:
        topology: Any
        origin: tuple[str, str] | None
        view: str
        size: Any

        def query_one(self, selector: Any, expect_type: Any = None) -> Any: ...

        def _redraw(self) -> None: ...

    def _init_thread_view(self, shown: bool = False) -> None:
        self.thread_view = shown
        self._memory_watch = MemoryWatch(node_kinds(self.topology))

    def action_process_view(self) -> None:
        """``p``: show / hide the selected process's threads and memory per node; the
        high-water marks start again each time it opens."""
        self.thread_view = not self.thread_view
        self._memory_watch.start(None)
        from snumap_tui.ui.panels import ProcessPanel

        self.query_one(ProcessPanel).set_class(self.thread_view, "-threads")
        self._redraw()

    def _draw_thread_view(self, selected: TaskRow | None) -> None:
        if not self.thread_view:
            return
        from snumap_tui.ui.panels import ProcessPanel

        detail = None if selected is None else process_detail(selected, self._memory_watch)
        if detail is not None and detail["threads"] is None and self.origin is not None:
            detail["why"] = ("perf counts this machine's running threads: not those of "
                             f"{self.origin[1]}")
        self.query_one(ProcessPanel).show_threads(thread_view_text(detail, self.size.width))
