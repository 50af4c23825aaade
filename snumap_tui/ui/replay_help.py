"""The keys of `snumap replay`, in one list: the help screen (? or F1) shows it, and a test
checks every binding of the app appears in it, so a key cannot exist only in the code.

The modal's look is `snumap top`'s (``MODAL_CSS``); its content is replay's own.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from snumap_tui.ui.keymap import help_rows
from snumap_tui.ui.screens import LINES_NOTE, MODAL_CSS

# keymap.KEYMAP's entries for replay (one map for top and replay), and what the widgets add.
KEYS: list[tuple[str, str]] = [*help_rows("replay"),
                               ("enter, ← →", "topology: fold / unfold the row"),
                               ("o", "topology: unfold / fold the I/O rows (NICs, disks, GPUs)")]

NOTES = ("Cells: █▓▒░ busy ≥75/50/25/>0 %, blank idle, colour: who ran most; a blank column "
         "is a synchronisation point; by region, ┄ is time waiting (a barrier, a critical section's "
         "entry, an MPI wait, a region's closing barrier); a region open at the recording's start "
         "(<) or end (>) is drawn clipped to it, the mark at the chart's edge and after its name "
         "in the legend. Strips: mem N<n> is a node's memory used without the page "
         "cache, as in the tree. Tree and heatmap: the samples at the cursor.")


class ReplayHelpScreen(ModalScreen[None]):
    """Every key of `snumap replay`, closed by escape, q, ?, h or F1."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,question_mark,f1,h", "app.pop_screen", "Close")]
    DEFAULT_CSS = MODAL_CSS.format(name="ReplayHelpScreen")

    def compose(self) -> ComposeResult:
        width = max(len(k) for k, _ in KEYS) + 2
        body = Text("snumap replay — keys (↑ ↓ scroll; the same keys mean the same in "
                    "snumap top)\n", style="bold")
        for k, what in KEYS:
            body.append(f" {k:<{width}}", style="bold cyan")
            body.append(f"{what}\n")
        body.append(f"{LINES_NOTE}\n{NOTES}", style="italic")
        with VerticalScroll():
            yield Static(body)
