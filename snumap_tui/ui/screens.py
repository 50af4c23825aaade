"""Modal screens: the key help, and the sources with ``snumap probe``'s reasons and fixes.

Why a sources screen: on a VM the PMU and RAPL are missing; a column of zeros would be a lie, a
column of n/a is a question. This screen is the answer (the same SourceStatus probe prints).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from snumap_tui.sources.base import SourceStatus
from snumap_tui.ui.choices import ChoiceScreen
from snumap_tui.ui.keymap import help_rows
from snumap_tui.ui.metricspec import metric_choices

# The keys are keymap.KEYMAP's (one map for top and replay); the help lists them.
HELP = [("up/down", "move the cursor (topology row, process)"),
        ("enter, ← →", "fold / unfold a topology row; choose a process")]

# What the keymap's one-line meanings leave out.
LINES_NOTE = ("F3 and / open a line: what you type goes into it, never to a command; the view "
              "follows each key. enter keeps it, esc cancels it; F3 again: the next match.")

NOTES = [
    ("m, F2: the process list's CPU column follows the metric where every process has it "
     "(SYS% USR% MEM%); else its title says why not"),
    "● on a row: it holds PUs or memory of the process selected in view 3",
    "memory used/total: used without page cache (MemUsed − FilePages)",
    "n/a: cannot be measured here (i says why); never shown as 0",
]

MODAL_CSS = """
{name} {{ align: center middle; }}
{name} > VerticalScroll {{ width: 100%; max-width: 100; height: auto; max-height: 100%;
    border: round $accent; background: $surface; padding: 0 1; scrollbar-size: 0 0; }}
"""


class HelpScreen(ModalScreen[None]):
    """Every key of `snumap top`, closed by any of escape, q, ?, h or F1."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,question_mark,f1,h", "app.pop_screen", "Close")]
    DEFAULT_CSS = MODAL_CSS.format(name="HelpScreen")

    def compose(self) -> ComposeResult:
        t = Table(show_header=False, box=None, padding=(0, 1))
        t.add_column(style="bold cyan", no_wrap=True)
        t.add_column()
        for k, v in [*help_rows("top"), *HELP]:
            t.add_row(k, v)
        with VerticalScroll():
            yield Static(Text("snumap top — keys (↑ ↓ scroll; the same keys mean the same "
                              "in snumap replay)", style="bold"))
            yield Static(t)
            yield Static(Text("\n".join([LINES_NOTE, *NOTES]), style="italic"))


def metric_picker(values: Mapping[str, Any], current: str) -> ChoiceScreen:
    """F2's list: every metric of the frame, those with no data here greyed and marked."""
    opts: list[tuple[str, str | Text, bool]] = []
    for view, ok in metric_choices(dict(values)):
        unit = view.unit or ("bytes" if view.is_bytes else "")
        label = Text(f"{view.label:<16} {unit:<8}")
        if not ok:
            label.append("n/a here (i: why)", style="italic")
        opts.append((view.key, label, ok))
    return ChoiceScreen("Metric (heatmap colour, history line)", opts, current,
                        "m cycles through those with data")


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
