"""Modal screens: the key help, and the sources with ``snumap probe``'s reasons and fixes.

Why a sources screen: on a VM the PMU and RAPL are missing; a column of zeros would be a lie, a
column of n/a is a question. This screen is the answer (the same SourceStatus probe prints).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from snumap_tui.sources.base import SourceStatus

HELP = [
    ("1 2 3, tab", "topology / heatmap / processes view"),
    ("m, M", "next / previous metric (heatmap colour, history line)"),
    ("space", "pause / resume (sampling goes on meanwhile)"),
    ("+ -", "interval 0.1 s .. 60 s (--interval takes 0.01 .. 3600 s)"),
    ("s  g  /", "processes: sort; group by user or job; filter"),
    ("up/down", "move the cursor (topology row, process)"),
    ("enter, ← →", "fold / unfold a topology row"),
    ("i", "sources: which are live, why not, the fix"),
    ("o", "I/O rows (NICs, disks, GPUs) under their NUMA nodes: unfold / fold"),
    ("? F1 / q", "this help / quit"),
]

NOTES = [
    "● on a row: it holds PUs or memory of the process selected in view 3",
    "memory used/total: used without page cache (MemUsed − FilePages)",
    "n/a: cannot be measured here (i says why); never shown as 0",
]

MODAL_CSS = """
{name} {{ align: center middle; }}
{name} > VerticalScroll {{ width: 100%; max-width: 100; height: auto; max-height: 100%;
    border: round $accent; background: $surface; padding: 0 1; }}
"""


class HelpScreen(ModalScreen[None]):
    """Every key of `snumap top`, closed by any of escape, q, ? or F1."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q,question_mark,f1", "app.pop_screen", "Close")]
    DEFAULT_CSS = MODAL_CSS.format(name="HelpScreen")

    def compose(self) -> ComposeResult:
        t = Table(show_header=False, box=None, padding=(0, 1))
        t.add_column(style="bold cyan", no_wrap=True)
        t.add_column()
        for k, v in HELP:
            t.add_row(k, v)
        with VerticalScroll():
            yield Static(Text("snumap top — keys", style="bold"))
            yield Static(t)
            yield Static(Text("\n".join(NOTES), style="italic"))


def sources_table(sources: Mapping[str, SourceStatus]) -> Table:
    t = Table(box=None, padding=(0, 1), expand=True)
    t.add_column("source", style="bold", no_wrap=True)
    t.add_column("state", no_wrap=True)
    t.add_column("why / how to fix", ratio=1)
    if not sources:
        t.add_row("-", "-", "no sample yet")
    for name, s in sources.items():
        state = Text("live", style="green") if s.available else Text("unavailable", style="red")
        why = Text(s.reason or ("" if s.available else "unknown"))
        if s.fix:
            why.append(f"\nfix: {s.fix}", style="italic")
        t.add_row(name, state, why)
    return t


class SourcesScreen(ModalScreen[None]):
    """The state of every source, as `snumap probe` reports it."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q,i", "app.pop_screen", "Close")]
    DEFAULT_CSS = MODAL_CSS.format(name="SourcesScreen")

    def __init__(self, sources: Mapping[str, SourceStatus]) -> None:
        super().__init__()
        self.sources = dict(sources)

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(Text("Sources (as `snumap probe` reports them)", style="bold"))
            yield Static(sources_table(self.sources))
