"""The one keymap of `snumap top` and `snumap replay`: a key means one thing in both.

Each ``Key`` is a meaning (``what``) with the Textual key names that trigger it and the action
each app runs for it (``None``: the app has no such thing, and the key does nothing there).
Both apps build their ``BINDINGS`` from ``KEYMAP`` (``bindings("top")``), their help screens
list it (``help_rows``), and ``tests/test_keymap.py`` checks that no key name appears in two
entries, so the same key cannot drift to two meanings again (before this, ``/`` filtered in top
but ``f`` in replay, ``g`` grouped in top and went to a time in replay).

The keys follow htop where htop has the thing: F10 quits, F1 ``?`` ``h`` help, F3 searches,
F4 or ``/`` filter as you type (enter keeps the line's text, escape cancels it), F5 or ``t``
shows the process tree, F6 or ``<`` ``>`` choose the sort column, ``M`` ``P`` ``T`` sort by
memory, CPU and time, ``I`` inverts the order, F9 or ``k`` sends a signal, ``Z`` (and space)
pauses, ``+`` ``-`` show more or less (htop: unfold / fold the tree).

While a typed line (search, filter, go to) is open, printable keys are its text: the line is
an ``Input`` with the focus, which takes them before any binding here (only the priority
ones, ctrl+c and tab, and keys an Input has no use for, F-keys and escape, reach the app).

The table itself is data (no Textual here): ``bindings`` makes Textual's ``Binding`` objects
when an app asks, and ``markdown`` writes the README's key table (a test compares them).

To add a key (another view, another mode), append a ``Key`` to ``KEYMAP`` with the actions of
the apps that have it; the apps pick it up, the help lists it, the test guards it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from textual.binding import Binding

APPS = ("top", "replay", "job")
TITLES = {"top": "top", "replay": "replay", "job": "top --job"}


@dataclass(frozen=True)
class Key:
    keys: str                   # Textual key names, comma-separated
    shown: str                  # how the help writes them
    what: str                   # the meaning, the same in every app that binds it
    top: str | None = None      # the action in `snumap top` (None: not bound there)
    replay: str | None = None   # the action in `snumap replay`
    footer: str = ""            # the footer's label ("" : not in the footer)
    priority: bool = False      # before the focused widget's own bindings
    display: str | None = None  # the footer's key text, when not the first key
    footer_replay: str | None = None   # replay's footer label (None: as top's; "": none)
    job: str | None = None      # the action in `snumap top --job`'s job view (its footer: top's)

    def action(self, app: str) -> str | None:
        return {"top": self.top, "replay": self.replay, "job": self.job}.get(app)


KEYMAP: list[Key] = [
    Key("question_mark,f1,h", "? F1 h", "this help", "help", "help", "Help", display="?",
        job="help"),
    Key("q,f10", "q F10", "quit", "quit", "quit", "Quit", display="q", job="quit"),
    Key("ctrl+c", "ctrl+c", "quit", "quit", "quit", priority=True, job="quit"),
    Key("1", "1", "topology tree view", "view('topology')", "view('topology')"),
    Key("2", "2", "heatmap view", "view('heatmap')", "view('heatmap')"),
    Key("3", "3", "activity view: processes (top), core-vs-time (replay)",
        "view('processes')", "view('gantt')"),
    Key("tab", "tab", "next view", "next_view", "next_view", "View", priority=True),
    Key("space,Z", "space Z", "pause / go on (top: the live updates; replay: playback)",
        "pause", "play", footer_replay="Play", display="space", job="pause"),
    Key("left_square_bracket", "[", "slower (top: longer interval; replay: playback speed)",
        "slower", "slower"),
    Key("right_square_bracket", "]", "faster (top: shorter interval; replay: playback speed)",
        "faster", "faster"),
    Key("m", "m", "next metric with data here, in the view you are in",
        "metric(1)", "metric(1)", "Metric", footer_replay=""),
    Key("f2", "F2", "pick a metric (no data here: marked), in the view you are in",
        "pick_metric", "pick_metric"),
    Key("f3", "F3", "search as you type (top: selects; replay: to its next run)",
        "search", "search"),
    Key("slash,f4", "/ F4", "filter as you type: words, PID, user:NAME",
        "filter", "filter", footer_replay="Filter", display="/"),
    Key("escape", "esc", "cancel the open line; else clear the filter or selection",
        "clear_filter", "clear_filter"),
    # `snumap top` only: the process list, as in htop.
    Key("s", "s", "sort by the next column (job view: nodes by name, busy, job CPU)",
        "sort(1)", footer="Sort", job="sort"),
    Key("less_than_sign", "<", "sort by the column to the left", "sort(-1)"),
    Key("greater_than_sign", ">", "sort by the column to the right", "sort(1)"),
    Key("f6", "F6", "pick the sort column", "pick_sort"),
    Key("M", "M", "sort by memory (RSS)", "sort_by('mem')"),
    Key("P", "P", "sort by CPU %", "sort_by('cpu')"),
    Key("T", "T", "sort by CPU time", "sort_by('time')"),
    Key("I", "I", "invert the sort order", "invert_sort"),
    Key("t,f5", "t F5", "process tree (parent > children)", "tree", footer="Tree",
        display="t"),
    Key("g", "g", "group processes by user or job", "group"),
    Key("K", "K", "show / hide kernel threads (hidden at start, as in htop)", "kthreads"),
    Key("k,f9", "k F9", "send a signal to the selected process (asks first)", "signal",
        footer="Kill", display="k"),
    Key("i", "i", "sources: which are live, why not, the fix", "sources", footer="Sources"),
    # (replay: the topology tree's own o binding does the same in its view)
    Key("o", "o", "unfold / fold the I/O rows (NICs, disks, GPUs) under their NUMA nodes",
        "toggle_io"),
    # `snumap replay` only: the time cursor and the core-vs-time chart.
    Key("comma", ",", "time cursor one column left, in every view", replay="step(-1)"),
    Key("full_stop", ".", "time cursor one column right, in every view", replay="step(1)"),
    Key("left", "←", "time cursor one column left", replay="step(-1)", footer="Step",
        display="← →"),
    Key("right", "→", "time cursor one column right", replay="step(1)"),
    # Both apps (here for the footer's order, after replay's Step): htop's + and - unfold and
    # fold its tree; top's tree of the machine, replay's time when its view is a time view.
    Key("plus,equals_sign", "+", "topology tree: unfold a level (replay's chart: zoom in)",
        "detail(1)", "detail(1)", footer_replay="Zoom", display="+ -"),
    Key("minus", "-", "topology tree: fold a level (replay's chart: zoom out)",
        "detail(-1)", "detail(-1)"),
    Key("home", "home", "start of the recording", replay="jump(0)"),
    Key("end", "end", "end of the recording", replay="jump(1)"),
    Key("0", "0", "the whole recording", replay="zoom_all"),
    Key("shift+left,ctrl+left", "shift+← ctrl+←", "pan a quarter of a screen left",
        replay="pan(-0.25)"),
    Key("shift+right,ctrl+right", "shift+→ ctrl+→", "pan a quarter of a screen right",
        replay="pan(0.25)"),
    Key("up", "↑", "row up (a PU, a topology row; a node)", replay="row(-1)", job="row(-1)"),
    Key("down", "↓", "row down", replay="row(1)", job="row(1)"),
    Key("pageup", "pgup", "ten rows up", replay="row(-10)", job="row(-10)"),
    Key("pagedown", "pgdn", "ten rows down", replay="row(10)", job="row(10)"),
    Key("enter", "enter", "open the selected thing: core-vs-time: only its process (esc: "
        "all); job view: the node's full top view (q: back)", replay="only_selected",
        job="open_node"),
    Key("c", "c", "colour by process, thread, process group or region", replay="colour"),
    Key("b", "b", "cursor to the next marker (▼ on the time axis)", replay="marker(1)"),
    Key("B", "B", "cursor to the previous marker", replay="marker(-1)"),
    Key("n", "n", "a job's nodes: fold / open the selected row's node", replay="fold_node",
        job="fold_node"),
    Key("N", "N", "a job's nodes: fold / open every node", replay="fold_node(True)",
        job="fold_node(True)"),
    Key("colon", ":", "go to a time: 12.5, 250ms, 1:02.5 (wall clock: 10:42:07)",
        replay="goto", footer="Go to"),
    Key("w", "w", "axis and times: from the start / wall clock", replay="wall_clock"),
    Key("p", "p", "process view: the selected process's threads and their counters (top: "
        "live; replay: over time under the chart) and its memory per node", top="process_view",
        replay="process_view"),
    Key("x", "x", "core-vs-time by region: colour each region interval by a counter figure "
        "(IPC) / by its name", replay="figure_colour"),
    Key("X", "X", "next counter figure (IPC, each recorded event's rate) in the process view "
        "and the region colouring", replay="next_figure"),
]


def entries(app: str) -> list[Key]:
    """The keys ``app`` binds, in KEYMAP's order."""
    return [k for k in KEYMAP if k.action(app) is not None]


def bindings(app: str) -> list[Binding]:
    """``app``'s BINDINGS, built from KEYMAP."""
    from textual.binding import Binding

    out = []
    for k in entries(app):
        action = k.action(app)
        assert action is not None
        label = (k.footer_replay if app == "replay" and k.footer_replay is not None
                 else k.footer)
        out.append(Binding(k.keys, action, label or k.what, show=bool(label),
                           priority=k.priority, key_display=k.display))
    return out


def help_rows(app: str) -> list[tuple[str, str]]:
    """(keys, meaning) for ``app``'s help screen, one line per meaning (entries in a row
    with the same meaning share a line)."""
    rows: list[tuple[str, str]] = []
    for k in entries(app):
        if rows and rows[-1][1] == k.what:          # q F10 and ctrl+c: one line
            rows[-1] = (f"{rows[-1][0]} {k.shown}", k.what)
        else:
            rows.append((k.shown, k.what))
    return rows


def key_names() -> list[str]:
    """Every key name of KEYMAP, once per entry that uses it (the test wants no repeats)."""
    return [name.strip() for k in KEYMAP for name in k.keys.split(",")]


def markdown() -> str:
    """The README's key table: one row per meaning, and which app has it."""
    rows: list[tuple[str, str, set[str]]] = []
    for k in KEYMAP:
        apps = {a for a in APPS if k.action(a) is not None}
        if rows and rows[-1][1] == k.what:
            rows[-1] = (f"{rows[-1][0]} {k.shown}", k.what, rows[-1][2] | apps)
        else:
            rows.append((k.shown, k.what, apps))
    out = ["| keys | what | " + " | ".join(TITLES[a] for a in APPS) + " |",
           "|---|---|" + ":-:|" * len(APPS)]
    for shown, what, apps in rows:
        keys = " ".join(f"`{name}`" for name in shown.split())
        marks = " | ".join("✓" if a in apps else "" for a in APPS)
        out.append(f"| {keys} | {what} | {marks} |")
    return "\n".join(out) + "\n"
