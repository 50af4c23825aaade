"""`snumap top`'s process list: what it shows (filter, -p, -u, sort, tree) and the keys that
change it (htop's: < > F6 M P T I to sort, t F5 for the tree, k F9 to signal, / F4 to filter
and F3 to search, both as you type in one line over the list).

A mixin of ``TopApp`` (app.py holds the views and the frames; this, the list's state), so
neither module grows past what one reader holds in mind.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from rich.text import Text
from textual.app import App
from textual.widgets import DataTable, Input

from snumap_tui.model.frame import TaskRow
from snumap_tui.textsafe import safe_text
from snumap_tui.ui.choices import ChoiceScreen, ConfirmScreen
from snumap_tui.ui.metricspec import resolve
from snumap_tui.ui.panels import ProcessPanel
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
from snumap_tui.ui.task_column import CPU, CpuColumn, column_value, cpu_column

MAX_TASKS = 200
# The line over the list, by what it is open for (``line_mode``).
LINE_HINTS = {
    "filter": "filter as you type: words, PID, user:NAME, job:TEXT (enter keeps, esc cancels)",
    "search": "search as you type: a name or PID (F3: the next one; enter keeps, esc goes back)",
}


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
    line_mode: str | None          # the open line: "filter", "search", or None (closed)

    if TYPE_CHECKING:
        frame: Any
        view: str
        selected_pid: int | None
        origin: tuple[str, str] | None
        shown_tasks: Sequence[TaskRow]

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
        self.line_mode = None
        self._line_before: str | int | None = None     # what esc puts back

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
        # The CPU column may show another number (task_column.py): sorting by it, by that.
        other = self.sort_key == "cpu" and self.cpu_column().kind != "cpu"
        if (not narrowed and not self.tree_view and not self.sort_invert and top is not None
                and self.sort_key in ("cpu", "pid", "time") and not other):
            return cast("Sequence[TaskRow]", top(MAX_TASKS, self.sort_key))
        if self.only_pids is not None or self.only_user is not None:
            tasks = only(tasks, self.only_pids, self.only_user)
        if self.filter_text:
            tasks = [t for t in tasks if matches(t, self.filter_text)]
        ordered = (self._sort_by_column(tasks) if other
                   else sort_tasks(tasks, self.sort_key, self.sort_invert))
        if not self.tree_view:
            return ordered[:MAX_TASKS]
        # The tree shows every process (a cut tree would lose parents), siblings in the sort.
        pairs = tree_order(ordered)
        self.tree_prefixes = [p for _, p in pairs]
        return [t for t, _ in pairs]

    def cpu_column(self) -> CpuColumn:
        """What the CPU column shows for the chosen metric (m, F2)."""
        metric = getattr(self, "metric", None)
        return cpu_column(metric.key, metric.title) if metric is not None else CPU

    def mem_total(self) -> float | None:
        """The machine's memory (bytes), for the MEM% a memory metric puts in that column."""
        if not self.frame:
            return None
        name = resolve(self.frame.values, "mem_total")
        return self.frame.get(name, self.frame.topology.root.id) if name else None

    def _sort_by_column(self, tasks: Sequence[TaskRow], invert: bool | None = None
                        ) -> list[TaskRow]:
        """By the CPU column's number when it is not CPU % (biggest first, as CPU %; I
        inverts), shown rounding as the table does; unmeasured ones last, ties by PID."""
        kind, total = self.cpu_column().kind, self.mem_total()
        sign = 1.0 if (self.sort_invert if invert is None else invert) else -1.0

        def key(t: TaskRow) -> tuple[bool, float, int]:
            v = column_value(kind, t, total)
            return (v is None, sign * round(v or 0.0, 1), t.pid)
        return sorted(tasks, key=key)

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

    # ---- the typed line: filter (/ F4) and search (F3), both applied at each key ----------
    def _line(self) -> Input:
        return self._as_app.query_one("#proc-filter", Input)

    def _open_line(self, mode: str, value: str) -> None:
        self.view = "processes"
        self._as_app.query_one(ProcessPanel).add_class("-filtering")
        box = self._line()
        self.line_mode = mode
        box.placeholder = LINE_HINTS[mode]
        box.border_title = None
        box.value = value
        box.cursor_position = len(value)
        box.focus()

    def _close_line(self) -> None:
        self.line_mode = None
        self._as_app.query_one(ProcessPanel).remove_class("-filtering")
        if self.view == "processes":
            self._as_app.query_one("#proc-table", DataTable).focus()
        self._redraw()

    def action_filter(self) -> None:
        """/ F4: the filter line; the list follows each key (htop filters as you type)."""
        if self.line_mode != "filter":
            self._line_before = self.filter_text
            self._open_line("filter", self.filter_text)

    def action_search(self) -> None:
        """F3: the search line; each key selects the first process from the selected one on
        that matches, and F3 while the line is open the next one (htop's F3)."""
        if self.line_mode == "search":
            self._search(self._line().value, after=True)
            return
        self._line_before = self.selected_pid
        self._open_line("search", "")

    def on_input_changed(self, message: Input.Changed) -> None:
        if message.input.id != "proc-filter" or self.line_mode is None:
            return
        if self.line_mode == "filter":
            text = message.value.strip()
            if text != self.filter_text:
                self.filter_text = text
                self._redraw()
        else:
            self._search(message.value, after=False)

    def _search(self, text: str, after: bool) -> None:
        """Select the first listed process matching ``text``, from the selected one on (the
        one after it when ``after``), round to the top; the line says when none does."""
        query, box = text.strip(), self._line()
        if not query:
            box.border_title = None
            return
        tasks = list(self.shown_tasks)
        at = next((i for i, t in enumerate(tasks) if t.pid == self.selected_pid), 0)
        at += 1 if after and tasks else 0
        hit = next((t for t in (*tasks[at:], *tasks[:at]) if matches(t, query)), None)
        if hit is None:
            box.border_title = f"no listed process matches '{query}'"
            return
        box.border_title = None
        if hit.pid != self.selected_pid:
            self._select_pid(hit.pid)

    def _select_pid(self, pid: int | None) -> None:
        self.selected_pid = pid
        feed = getattr(self, "feed", None)
        if feed is not None and pid is not None:
            feed.watch_pid(pid)
        self._redraw()

    def on_input_submitted(self, message: Input.Submitted) -> None:
        """enter: the line closes, what it did stays (the filter, the selection)."""
        if message.input.id != "proc-filter":
            return
        if self.line_mode == "filter":
            self.filter_text = message.value.strip()
        self._close_line()

    def action_clear_filter(self) -> None:
        """esc: an open line is cancelled (the filter or the selection as before it was
        opened); else the filter is dropped."""
        mode, before = self.line_mode, self._line_before
        if mode is not None:
            if mode == "filter" and isinstance(before, str):
                self.filter_text = before
            elif mode == "search" and (before is None or isinstance(before, int)):
                self._select_pid(before)
            self._close_line()
            return
        if self.filter_text:
            self.filter_text = ""
            self._line().value = ""
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
