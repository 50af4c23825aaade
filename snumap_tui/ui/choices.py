"""Small modal screens that ask one thing: pick from a list (the sort column F6, the metric
F2, the signal F9), or confirm (send SIGTERM to 1234?). Each returns its answer through
``dismiss``; the caller passes a callback to ``push_screen``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

CHOICE_CSS = """
{name} {{ align: center middle; }}
{name} > Vertical {{ width: auto; min-width: 40; max-width: 90; height: auto;
    max-height: 90%; border: round $accent; background: $surface; padding: 0 1; }}
{name} OptionList {{ height: auto; max-height: 20; border: none; }}
"""


class ChoiceScreen(ModalScreen[str | None]):
    """A titled list; enter picks (the option's id comes back), escape or q gives None.
    Options given as (id, label, enabled): a disabled one is listed, greyed, not pickable
    (a metric with no data here is shown, marked, so the user knows it exists)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,f10", "cancel", "Close")]
    DEFAULT_CSS = CHOICE_CSS.format(name="ChoiceScreen")

    def __init__(self, title: str, options: Sequence[tuple[str, str | Text, bool]],
                 current: str | None = None, note: str = "") -> None:
        super().__init__()
        self.title_text = title
        self.options = list(options)
        self.current = current
        self.note = note

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(Text(self.title_text, style="bold"))
            yield OptionList(*(Option(label, id=oid, disabled=not ok)
                               for oid, label, ok in self.options), id="choices")
            if self.note:
                yield Static(Text(self.note, style="italic"))

    def on_mount(self) -> None:
        ol = self.query_one(OptionList)
        ids = [oid for oid, _, _ in self.options]
        if self.current in ids:
            ol.highlighted = ids.index(self.current)
        ol.focus()

    def on_option_list_option_selected(self, message: OptionList.OptionSelected) -> None:
        self.dismiss(message.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)


class ConfirmScreen(ModalScreen[bool]):
    """A question answered by y (or enter) / n (or escape)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y,enter", "answer(True)", "Yes"),
        Binding("n,escape,q", "answer(False)", "No")]
    DEFAULT_CSS = CHOICE_CSS.format(name="ConfirmScreen")

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(Text(self.question, style="bold"))
            yield Static(Text("y / enter: yes    n / esc: no", style="italic"))

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
