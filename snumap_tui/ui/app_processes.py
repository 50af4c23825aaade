"""`snumap top`'s process list: what it shows (filter, -p, -u, sort, tree) and the keys that
change it (htop's: < > F6 M P T I to sort, t F5 for the tree, k F9 to signal).

A mixin of ``TopApp`` (app.py holds the views and the frames; this, the list's state), so
neither module grows past what one reader holds in mind.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from rich.text import Text
from textual.app import App

from snumap_tui.model.frame import TaskRow
from snumap_tui.textsafe import safe_text
from snumap_tui.ui.choices import ChoiceScreen, ConfirmScreen
from snumap_tui.ui.process_table import SORT_COLUMN, SORT_NAME
from snumap_tui.ui.processes import (
    DESCENDING,
    SORT_KEYS,
    matches,
    only,
    sort_tasks,
    tree_order,
)
from snumap_tui.ui.signals import SIGNALS, send, why_not

MAX_TASKS = 200


class ProcessListMixin:
    """State: ``sort_key``, ``sort_invert``, ``tree``, ``filter_text``, ``only_pids`` (-p),
    ``only_user`` (-u). Needs the app's ``frame``, ``view``, ``selected_pid``, ``origin``,
    ``_redraw``, ``_selected_task``, ``push_screen`` and ``notify``."""

    sort_key: str
    sort_invert: bool
    tree_view: bool
    filter_text: str
    only_pids: frozenset[int] | None
    only_user: str | None
    tree_prefixes: Sequence[str] | None
    show_kthreads: bool

    if TYPE_CHECKING:
        frame: Any
        view: str
        selected_pid: int | None
        origin: tuple[str, str] | None

        def _redraw(self) -> None: ...

        def _selected_task(self) -> TaskRow | None: ...


    def _init_process_list(self, sort_key: str = "cpu", pids: frozenset[int] | None = None,
                           user: str | None = None) -> None:
        self.sort_key = sort_key
        self.sort_invert = False
        self.tree_view = False
        self.filter_text = ""
        self.only_pids = pids
        self.only_user = user
        self.tree_prefixes = None
        self.show_kthreads = False

    @property
    def _as_app(self) -> App[Any]:
        return cast("App[Any]", self)

    @property
    def descending(self) -> bool:
        return (self.sort_key in DESCENDING) != self.sort_invert

    def _tasks(self) -> Sequence[TaskRow]:
        """The rows the list shows. Unfiltered by CPU %, PID or time, the lazy rows of the
        frame pick them with numpy (``TaskRows.top``) and build only the rows the table
        draws; a filter, another column or the tree needs every row built."""
        tasks = self.frame.tasks if self.frame else []
        top = getattr(tasks, "top", None)
        narrowed = self.filter_text or self.only_pids is not None or self.only_user is not None
        self.tree_prefixes = None
        if (not narrowed and not self.tree_view and not self.sort_invert and top is not None
                and self.sort_key in ("cpu", "pid", "time")):
            return cast("Sequence[TaskRow]", top(MAX_TASKS, self.sort_key))
        if self.only_pids is not None or self.only_user is not None:
            tasks = only(tasks, self.only_pids, self.only_user)
        if self.filter_text:
            tasks = [t for t in tasks if matches(t, self.filter_text)]
        ordered = sort_tasks(tasks, self.sort_key, self.sort_invert)
        if not self.tree_view:
            return ordered[:MAX_TASKS]
        # The tree shows every process (a cut tree would lose parents), siblings in the sort.
        pairs = tree_order(ordered)
        self.tree_prefixes = [p for _, p in pairs]
        return [t for t, _ in pairs]

    def narrowing_note(self) -> str:
        """What -p / -u leave out, for the list's title."""
        parts = []
        if self.only_pids is not None:
            parts.append("PID " + ",".join(str(p) for p in sorted(self.only_pids)))
        if self.only_user is not None:
            parts.append(f"user {self.only_user}")
        note = " · only " + ", ".join(parts) if parts else ""
        kt = getattr(getattr(self, "feed", None), "show_kthreads", None)
        if callable(kt) and not self.show_kthreads:
            note += " · no kernel threads (K)"
        return note

    # ---- sorting ---------------------------------------------------------------------------
    def _set_sort(self, key: str) -> None:
        self.sort_key = key
        self.sort_invert = False
        self.view = "processes"
        self._redraw()

    def action_sort(self, step: int = 1) -> None:
        """The next column to the right (``>``, ``s``) or left (``<``)."""
        i = SORT_KEYS.index(self.sort_key) if self.sort_key in SORT_KEYS else 0
        self._set_sort(SORT_KEYS[(i + step) % len(SORT_KEYS)])

    def action_sort_by(self, key: str) -> None:
        self._set_sort(key)

    def action_invert_sort(self) -> None:
        self.sort_invert = not self.sort_invert
        self.view = "processes"
        self._redraw()

    def action_pick_sort(self) -> None:
        options = [(k, f"{SORT_COLUMN[k]:<9} {SORT_NAME[k]}", True) for k in SORT_KEYS]
        self._as_app.push_screen(ChoiceScreen("Sort by", options, self.sort_key,
                                      "I inverts the order"), self._picked_sort)

    def _picked_sort(self, key: str | None) -> None:
        if key:
            self._set_sort(key)

    def action_kthreads(self) -> None:
        """K: kernel threads in the lists or not; the feed reads them only when shown."""
        self.show_kthreads = not self.show_kthreads
        self._tell_feed_kthreads()
        self.view = "processes"
        self._redraw()

    def _tell_feed_kthreads(self) -> None:
        tell = getattr(getattr(self, "feed", None), "show_kthreads", None)
        if callable(tell):
            tell(self.show_kthreads)

    def action_tree(self) -> None:
        self.tree_view = not self.tree_view
        self.view = "processes"
        self._redraw()

    # ---- signals -----------------------------------------------------------------------------
    def action_signal(self) -> None:
        """htop's F9: the selected process, a signal from the list, then a confirmation."""
        if self.origin is not None:
            self._as_app.notify("signals only go to this machine's processes (this view shows "
                        "another machine's)", severity="warning")
            return
        t = self._selected_task()
        if t is None:
            self._as_app.notify("select a process first (view 3)", severity="warning")
            return
        reason = why_not(t.pid)
        if reason is not None:
            self._as_app.notify(reason, severity="warning")
            return
        options = [(str(num), Text(f"{num:>2} {name:<8} {what}"), True)
                   for name, num, what in SIGNALS]
        pid, comm = t.pid, safe_text(t.comm)
        self._as_app.push_screen(ChoiceScreen(f"Send a signal to {pid} {comm}", options, "15"),
                         lambda num: self._confirm_signal(pid, comm, num))

    def _confirm_signal(self, pid: int, comm: str, num: str | None) -> None:
        if not num:
            return
        name = next(n for n, k, _ in SIGNALS if str(k) == num)
        self._as_app.push_screen(ConfirmScreen(f"Send {name} to {pid} {comm}?"),
                         lambda yes: self._send(pid, int(num)) if yes else None)

    def _send(self, pid: int, num: int) -> None:
        said = send(pid, num)
        self._as_app.notify(said, severity="information" if said.startswith("sent") else "warning")
