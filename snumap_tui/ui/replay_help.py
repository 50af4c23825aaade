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

from snumap_tui.ui.screens import MODAL_CSS

KEYS: list[tuple[str, str]] = [          # one line each in the 80x24 help
    ("1 2 3, tab", "topology / heatmap / core-vs-time; next view"),
    ("left right", "time cursor one column (core-vs-time, heat)"),
    (", .", "time cursor one column, in every view"),
    ("home end", "start / end of the recording"),
    ("space  [ ]", "play / pause; slower / faster (0.01-60x)"),
    ("g", "go to a time: 12.5, 250ms, 1:02.5"),
    ("+ -  0", "zoom in / out at the cursor; whole recording"),
    ("h l, shift+← →", "pan a quarter of a screen"),
    ("up down pgup pgdn", "select a PU row, or a topology row"),
    ("enter, left right", "topology: fold / unfold the row"),
    ("o", "topology: unfold / fold the I/O rows (NICs, disks, GPUs)"),
    ("c", "colour by process, thread, process group or region"),
    ("m M", "cursor to the next / previous marker (▼ on the axis)"),
    ("f", "only the selected cell's process (thread..)"),
    ("F, escape", "everyone again; close the go-to line"),
    ("n N", "a job's nodes: fold / open the selected node, or all"),
    ("? F1", "this help"),
    ("q, ctrl+c", "quit"),
]

NOTES = ("Cells: █▓▒░ busy ≥75/50/25/>0 %, blank idle, colour: who ran most; a blank column "
         "is a synchronisation point; by region, ┄ is time inside a barrier or MPI wait. Strips: mem N<n> is a node's memory used without the page "
         "cache, as in the tree. Tree and heatmap: the samples at the cursor.")


class ReplayHelpScreen(ModalScreen[None]):
    """Every key of `snumap replay`, closed by escape, q, ? or F1."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,question_mark,f1", "app.pop_screen", "Close")]
    DEFAULT_CSS = MODAL_CSS.format(name="ReplayHelpScreen")

    def compose(self) -> ComposeResult:
        width = max(len(k) for k, _ in KEYS) + 2
        body = Text("snumap replay — keys\n", style="bold")
        for k, what in KEYS:
            body.append(f" {k:<{width}}", style="bold cyan")
            body.append(f"{what}\n")
        body.append(NOTES, style="italic")
        with VerticalScroll():
            yield Static(body)
