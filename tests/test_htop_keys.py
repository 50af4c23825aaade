"""Issue 22, htop's habits in `snumap top` and `snumap replay` (one keymap, keymap.py): F3
searches and `/` filters as you type, the letters typed going to the line and never to a
command (F3 then `s` re-sorted); escape cancels a line, enter keeps it; `h` is help in both
apps (it panned in replay); `+`/`-` unfold and fold the topology tree a level; choosing a
metric (F2, m) keeps the view (it jumped to the heatmap); the README's key table is the
keymap's."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from test_replay import make_recording, run_pilot
from test_top_keys import TOPO, family_frame, loaded, make_app, shown_pids
from test_ui_app import sync

from snumap_tui.model.taskrows import derive_tasks
from snumap_tui.ui.choices import ChoiceScreen
from snumap_tui.ui.process_table import ProcessTable
from snumap_tui.ui.replay import ReplayApp
from snumap_tui.ui.replay_data import matching_tids
from snumap_tui.ui.replay_help import ReplayHelpScreen
from snumap_tui.ui.screens import HelpScreen
from snumap_tui.ui.table_lines import widths
from snumap_tui.ui.topology_view import TopologyTable
from snumap_tui.ui.tree_rows import default_collapsed, visible_rows

README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_recording(tmp_path_factory.mktemp("htop_keys") / "r.rec")


def line_value(app) -> str:  # type: ignore[no-untyped-def]
    return app.query_one("#proc-filter").value


def selected_row_pid(app) -> int | None:  # type: ignore[no-untyped-def]
    table = app.query_one("#proc-table", ProcessTable)
    return table.lines[table.row_cursor].pid if table.lines else None


# ---- snumap top -----------------------------------------------------------------------------
@sync
async def test_top_f3_search_takes_the_letters_and_selects_as_you_type() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot, app)
        await pilot.press("f3", "s")                 # s: was "sort by the next column"
        await pilot.pause()
        assert app.sort_key == "cpu"                 # not re-sorted
        assert line_value(app) == "s" and app.line_mode == "search"
        assert app.view == "processes"
        await pilot.press("backspace", *"chro")      # chronyd, selected at once
        await pilot.pause()
        assert app.selected_pid == 5068 == selected_row_pid(app)
        assert app.filter_text == ""                 # a search selects, it does not filter
        assert len(shown_pids(app)) > 1
        await pilot.press("enter")                   # keeps the selection, closes the line
        await pilot.pause()
        assert app.line_mode is None and app.selected_pid == 5068
        assert app.focused is app.query_one("#proc-table")


@sync
async def test_top_f3_again_finds_the_next_match_and_escape_goes_back() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot, app)
        await pilot.press("3")
        await pilot.pause()
        assert app.selected_pid == 4242              # the busiest, selected at first
        await pilot.press("f3", *"sh")               # ./solver --mesh (the selected one)
        await pilot.pause()
        assert app.selected_pid == 4242
        await pilot.press("f3")                      # htop's F3 in the line: the next one
        await pilot.pause()
        assert app.selected_pid == 5034 == selected_row_pid(app)       # sshd
        await pilot.press("f3", "f3")                # bash (5085), then round to the top
        await pilot.pause()
        assert app.selected_pid == 4242
        await pilot.press("f3")
        await pilot.pause()
        assert app.selected_pid == 5034
        await pilot.press("escape")                  # cancel: the selection as before
        await pilot.pause()
        assert app.selected_pid == 4242 == selected_row_pid(app)
        assert app.line_mode is None and app.sort_key == "cpu"


@sync
async def test_top_search_says_when_nothing_matches() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot, app)
        await pilot.press("f3", *"zzqx")
        await pilot.pause()
        assert "no listed process matches 'zzqx'" in str(app.query_one("#proc-filter")
                                                         .border_title)


@sync
async def test_top_slash_filters_as_you_type_escape_cancels_enter_keeps() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot, app)
        await pilot.press("slash", *"solv")          # no enter: the list follows each key
        await pilot.pause()
        assert app.filter_text == "solv" and shown_pids(app) == [4242]
        assert app.sort_key == "cpu" and not app.tree_view     # s, t: not commands here
        await pilot.press("escape")                  # cancel: the filter as before (none)
        await pilot.pause()
        assert app.filter_text == "" and len(shown_pids(app)) > 1
        assert app.line_mode is None
        await pilot.press("f4", *"solv", "enter")    # F4 as /; enter keeps it
        await pilot.pause()
        assert app.filter_text == "solv" and shown_pids(app) == [4242]
        await pilot.press("slash", "backspace")      # editing it: escape puts "solv" back
        await pilot.pause()
        assert app.filter_text == "sol"
        await pilot.press("escape")
        await pilot.pause()
        assert app.filter_text == "solv"
        await pilot.press("escape")                  # the line closed: escape clears
        await pilot.pause()
        assert app.filter_text == ""


@pytest.mark.parametrize("key", ["h", "question_mark", "f1"])
@sync
async def test_top_h_is_help_as_in_htop(key: str) -> None:
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await loaded(pilot, app)
        await pilot.press(key)
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        await pilot.press(key)                       # the same key closes it
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)


@sync
async def test_top_plus_and_minus_unfold_and_fold_the_tree_a_level() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot, app)
        tree = app.query_one(TopologyTable)
        start = len(tree.rows)
        await pilot.press("plus")                    # the cores open: their PUs show
        await pilot.pause()
        assert len(tree.rows) == start + len(TOPO.pus)
        await pilot.press("minus")
        assert len(tree.rows) == start
        await pilot.press("minus")                   # a level up: fewer rows again
        assert len(tree.rows) < start
        await pilot.press("3", "plus")               # from another view: the tree is shown
        await pilot.pause()
        assert app.view == "topology" and len(tree.rows) == start


def test_refold_level_steps_one_level_each_way() -> None:
    from snumap_tui.ui.tree_rows import refold_level

    coll = default_collapsed(TOPO)
    depth = [len(visible_rows(TOPO, coll))]
    c = coll
    for _ in range(6):
        c = refold_level(TOPO, c, -1)
        depth.append(len(visible_rows(TOPO, c)))
    assert depth == sorted(depth, reverse=True) and depth[1] < depth[0]
    assert depth[-1] == 1 + len(TOPO.by_type("Package"))     # the machine's row stays open
    for _ in range(8):
        c = refold_level(TOPO, c, 1)
    rows = visible_rows(TOPO, c)
    assert sum(1 for r in rows if r.label.startswith("PU")) == len(TOPO.pus)   # all open
    assert refold_level(TOPO, c, 1) == c             # nothing left to unfold


@sync
async def test_top_f2_in_the_tree_view_keeps_the_view() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await loaded(pilot, app)
        assert app.view == "topology"
        await pilot.press("f2")
        await pilot.pause()
        assert isinstance(app.screen, ChoiceScreen)
        ids = [oid for oid, _, ok in app.screen.options]
        await pilot.press("home", *["down"] * ids.index("mem_used_pct"), "enter")
        await pilot.pause()
        assert app.metric.key == "mem_used_pct"
        assert app.view == "topology"                # was: the heatmap
        spark = app.query_one("#spark")
        assert "mem used+cache" in spark.render_line(0).text
        await pilot.press("m")
        assert app.view == "topology"


# ---- the CPU column follows the metric -------------------------------------------------------
SYS_SHARE = {5034: 0.9, 5085: 0.5}          # sshd and bash mostly in the kernel, others 5 %


def sys_frame(step: int):  # type: ignore[no-untyped-def]
    f = family_frame(step)
    f.values["system_pct"] = f.values["util_pct"] * 0.1
    f.values["user_pct"] = f.values["util_pct"] * 0.9
    f.tasks = [dataclasses.replace(t, sys_pct=None if t.cpu_pct is None else
                                   t.cpu_pct * SYS_SHARE.get(t.pid, 0.05)) for t in f.tasks]
    return f


def cpu_cells(app) -> dict[int, str]:  # type: ignore[no-untyped-def]
    table = app.query_one("#proc-table", ProcessTable)
    i = [c.label for c in table.cols].index("CPU%")
    return {ln.pid: ln.cells[i] for ln in table.lines}


def head(app) -> str:  # type: ignore[no-untyped-def]
    table = app.query_one("#proc-table", ProcessTable)
    return table.header_text(widths(table.cols, 120)).plain


async def choose(pilot, app, key: str) -> None:  # type: ignore[no-untyped-def]
    for _ in range(len(app.metric_views())):
        if app.metric.key == key:
            break
        await pilot.press("m")
    await pilot.pause()
    assert app.metric.key == key


@sync
async def test_cpu_column_follows_the_metric_where_a_process_has_it() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        for s in range(3):
            app.push_frame(sys_frame(s))
        await pilot.press("3")
        await pilot.pause()
        rows = {t.pid: t for t in app.frame.tasks}
        assert "CPU%▼" in head(app)
        await choose(pilot, app, "system_pct")
        assert app.view == "processes"
        assert "SYS%▼" in head(app) and "CPU%" not in head(app)
        cells = cpu_cells(app)
        for pid, cell in cells.items():
            assert cell == f"{rows[pid].sys_pct:.1f}"
        order = shown_pids(app)                      # sorted by what the column shows
        assert order.index(5034) < order.index(5000)          # sshd's 12.3 > postproc's 2.9
        assert "sorted by SYS%" in app.query_one("#proc-table", ProcessTable).title.plain
        await pilot.press("1")                       # the tree's busiest processes too
        await pilot.pause()
        busiest = app.query_one("#topo-procs", ProcessTable)
        assert "SYS%▼" in busiest.header_text(widths(busiest.cols, 120)).plain
        listed = [ln.pid for ln in busiest.lines]
        assert listed.index(5034) < listed.index(5000)
        assert "by SYS%" in busiest.title.plain
        await pilot.press("3")
        await choose(pilot, app, "user_pct")
        assert "USR%▼" in head(app)
        assert cpu_cells(app)[4242] == f"{1520.0 * 0.95:.1f}"
        await choose(pilot, app, "mem_used_pct")     # memory: RSS as % of the machine's
        total = app.frame.get("mem_total_bytes", TOPO.root.id)
        assert "MEM%▼" in head(app)
        assert cpu_cells(app)[4242] == f"{100 * rows[4242].rss_bytes / total:.1f}"
        await choose(pilot, app, "ipc")              # only the selected process has one
        assert "CPU%▼" in head(app)
        assert cpu_cells(app)[4242] == "1520.0"
        title = app.query_one("#proc-table", ProcessTable).title.plain
        assert "IPC: per process for the selected one only" in title
        await choose(pilot, app, "ghz")              # no per-process value at all
        assert "has no per-process value" in \
            app.query_one("#proc-table", ProcessTable).title.plain


def test_tasks_carry_their_system_share() -> None:
    """The kernel's part of a process's CPU %, from the threads' stime (model/taskrows.py)."""
    def reading(ut: list[int], st: list[int]) -> dict:  # type: ignore[type-arg]
        return {"hz": 100.0, "threads": {
            "pid": [10, 10, 20], "tid": [10, 11, 20], "ppid": [1, 1, 1], "uid": [0, 0, 0],
            "comm": ["a", "a", "b"], "state": ["R", "S", "S"], "last_cpu": [0, 1, 2],
            "utime": ut, "stime": st, "nice": [0, 0, 0]}, "processes": {}}
    rows = derive_tasks(reading([100, 50, 10], [10, 5, 10]),
                        reading([150, 70, 12], [30, 15, 28]), 1.0)
    by = {t.pid: t for t in rows}
    assert by[10].cpu_pct == 100.0 and by[10].sys_pct == 30.0      # (50+20) + (20+10)
    assert by[20].cpu_pct == 20.0 and by[20].sys_pct == 18.0
    first = derive_tasks(None, reading([1, 1, 1], [1, 1, 1]), 1.0)
    assert all(t.sys_pct is None for t in first)                     # no interval yet


# ---- snumap replay --------------------------------------------------------------------------
def test_replay_h_is_help_and_does_not_pan(recording: Path) -> None:
    async def steps(app: ReplayApp, pilot) -> None:
        await pilot.press("plus", "plus")            # zoomed in: a pan would move t0
        t0 = app.state.t0
        await pilot.press("h")
        await pilot.pause()
        assert isinstance(app.screen, ReplayHelpScreen)
        assert app.state.t0 == t0
        await pilot.press("h")
        await pilot.pause()
        assert not isinstance(app.screen, ReplayHelpScreen)
        await pilot.press("shift+right")             # panning: shift+arrows (or ctrl+)
        assert app.state.t0 > t0
        await pilot.press("ctrl+left")
        assert app.state.t0 == t0
    run_pilot(recording, (100, 30), steps)


def test_replay_slash_filters_as_you_type(recording: Path) -> None:
    async def steps(app: ReplayApp, pilot) -> None:
        await pilot.press("slash", *"app2")          # no enter
        await pilot.pause()
        assert app.state.filter_text == "app2"
        assert set(app.state.only_tids.tolist()) == {1008, 1009, 1010, 1011}
        await pilot.press("escape")                  # cancel: no filter, as before
        await pilot.pause()
        assert app.state.filter_text == "" and app.state.only_tids is None
        assert not app.query_one("#filter").display
        await pilot.press("slash", *"app1", "enter")
        await pilot.pause()
        assert app.state.filter_text == "app1"
    run_pilot(recording, (100, 30), steps)


def test_replay_f3_takes_the_cursor_to_the_next_run(recording: Path) -> None:
    async def steps(app: ReplayApp, pilot) -> None:
        d = app.data
        start = app.cursor_t
        await pilot.press("colon", *"0.5", "enter")
        at = app.cursor_t
        await pilot.press("f3", *"app3")
        await pilot.pause()
        tids = set(matching_tids(d, "app3").tolist())
        assert app.state.filter_text == "" and app.state.mode == "process"   # c not pressed
        t1 = app.cursor_t
        assert t1 >= at
        # app3 runs at the cursor on the selected row
        r = int(d.row_iv[app.state.sel_row])
        i = int(np.searchsorted(d.intervals.end[r], t1, "right"))
        assert d.intervals.start[r][i] <= t1 and int(d.intervals.tid[r][i]) in tids
        await pilot.press("f3")                      # the next run, later
        await pilot.pause()
        assert app.cursor_t > t1
        await pilot.press("escape")                  # back to where the search began
        await pilot.pause()
        assert app.cursor_t == at and app.line_mode is None
        assert start <= at
    run_pilot(recording, (100, 30), steps)


def test_next_run_finds_the_earliest_run_on_any_row(recording: Path) -> None:
    from snumap_tui.store import open as open_recording
    from snumap_tui.ui.replay_data import load_replay, next_run

    with open_recording(recording) as rec:
        d = load_replay(rec)
    tids = matching_tids(d, "app1")
    t, row = next_run(d, tids, d.t0 + 500_000_000)
    every = [(int(s), n) for n, _ in enumerate(d.labels)
             for s, tid in zip(d.intervals.start[int(d.row_iv[n])],
                               d.intervals.tid[int(d.row_iv[n])])
             if tid in set(tids.tolist()) and s >= d.t0 + 500_000_000]
    assert (t, row) == min(every)
    assert next_run(d, np.array([], dtype=np.int64), d.t0) is None
    assert next_run(d, tids, d.t1 + 1) is None


def test_replay_metric_keeps_the_view(recording: Path) -> None:
    async def steps(app: ReplayApp, pilot) -> None:
        await pilot.press("1")
        await pilot.pause()
        before = app.metric_view().key
        await pilot.press("m")
        await pilot.pause()
        assert app.view == "topology"                # was: the heatmap
        assert app.metric_view().key != before
        assert app.metric_view().title in str(app.query_one("#header").render())
    run_pilot(recording, (120, 30), steps)


def test_replay_plus_in_the_tree_view_unfolds_it(recording: Path) -> None:
    async def steps(app: ReplayApp, pilot) -> None:
        span = app.state.span
        await pilot.press("1")
        await pilot.pause()
        tree = app.query_one(TopologyTable)
        n = len(tree.rows)
        await pilot.press("minus")
        assert len(tree.rows) < n and app.state.span == span      # the tree, not the zoom
        await pilot.press("3", "plus")
        assert app.state.span == span // 2
    run_pilot(recording, (100, 30), steps)


# ---- the README ---------------------------------------------------------------------------------
def test_the_keymap_is_data_without_textual() -> None:
    """One definition every reader can load: importing it brings no Textual in."""
    import subprocess
    import sys

    code = ("import sys, snumap_tui.ui.keymap as k; k.markdown(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout.strip()
    assert out == "[]"


def test_readme_key_table_is_the_keymap() -> None:
    from snumap_tui.ui.keymap import markdown

    assert markdown() in README.read_text(encoding="utf-8")
