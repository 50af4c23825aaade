"""Names from the traced machine never reach the terminal raw (issue 23, class 3).

A process names itself (comm, argv), writes marker lines, and a tree or a file names hosts,
devices and regions: escape sequences in them set the viewer's window title (OSC 0), clear
the screen (CSI 2J) or write the clipboard (OSC 52). Each output that prints them is run here
on such names -- ``report`` (text and JSON), ``top --batch`` on a fake tree, ``topo``, error
messages, the ``top`` and ``replay`` TUIs under a pilot -- and must carry no control
character, while the names stay visible (escaped as ``\\x1b``).
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from rich.segment import Segment
from textual.color import Color

from snumap_tui.analysis.synth import synthetic_topology, write_recording
from snumap_tui.cli import main
from snumap_tui.model.frame import TaskRow
from snumap_tui.textsafe import drop_controls, safe_lines, safe_text
from snumap_tui.trace.events import TaskInfo
from snumap_tui.trace.region_catalog import MARK, REGION_DTYPE, RegionNames
from tests.fakefs import FakeProcess, FakeRoot, FakeThread
from tests.test_analysis import SCENARIO, T0, T1, make_events

TITLE = "\x1b]0;pwned\x07"                         # OSC 0: the window title
CLEAR = "\x1b[2J"                                  # CSI 2J: clear the screen
CLIP = "\x1b]52;c;cm0gLXJmIH4K\x07"                # OSC 52: write the clipboard
C1 = "\x9b2J"                                      # the 8-bit CSI
EVIL_COMM = "ev" + TITLE + "il"
EVIL_ARG = "--x" + CLEAR + CLIP + C1 + "\u202e"
MARKUP = "[bold red]boom[/]"
EVIL_MARK = "ckpt" + CLIP + "[/]"

# What must never be written: C0 controls but newline and tab, DEL, C1 controls.
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def assert_clean(text: str) -> None:
    hit = RAW.search(text)
    assert hit is None, f"raw control {hit.group()!r} at {hit.start()}: {text[max(0, hit.start() - 40):hit.start() + 40]!r}"


# ---- the pure function ---------------------------------------------------------------
def test_safe_text_escapes_every_control_and_keeps_the_rest() -> None:
    assert safe_text(EVIL_COMM) == "ev\\x1b]0;pwned\\x07il"
    assert safe_text("a\tb\nc\rd\x7f\x9b") == "a\\tb\\nc\\rd\\x7f\\x9b"
    assert safe_text("bad\udcff byte") == "bad\\xff byte"        # surrogateescape
    assert safe_text("x\u202ey\u2066") == "x\\u202ey\\u2066"     # bidi override, isolate
    assert safe_text("\ud800") == "\\ud800"
    for ok in ("solver", "lmp_mpi", "é 日本 🚀", MARKUP, "kworker/0:1"):
        assert safe_text(ok) is ok or safe_text(ok) == ok
    assert safe_lines("one\n\ttwo" + TITLE) == "one\n\ttwo\\x1b]0;pwned\\x07"
    assert drop_controls("a" + CLEAR + "b\udcff") == "a[2Jb\ufffd"


def test_the_tui_line_filter_drops_controls_keeping_widths() -> None:
    from snumap_tui.ui.safe_screen import DropControls

    segs = [Segment("ok "), Segment("a" + TITLE + "b"), Segment(C1)]
    out = DropControls().apply(segs, Color(0, 0, 0))
    assert [s.text for s in out] == ["ok ", "a]0;pwnedb", "2J"]
    assert sum(s.cell_length for s in out) == sum(s.cell_length for s in segs)
    clean = [Segment("plain")]
    assert DropControls().apply(clean, Color(0, 0, 0)) is clean


# ---- a recording named by a hostile process -------------------------------------------
def _regions() -> tuple[np.ndarray, list]:
    names = RegionNames()
    mark = names.intern(EVIL_MARK, "marker", "marker")
    rows = np.array([(T0 + 1000, 0, 0, MARK, mark)],
                    dtype=[("t_ns", "<u8"), ("tid", "<i4"), ("pid", "<i4"), ("op", "u1"),
                           ("rid", "<u4")]).astype(REGION_DTYPE)
    return rows, names.items


@pytest.fixture()
def hostile_recording(tmp_path: Path) -> Path:
    topo = synthetic_topology(2, 1, 1, 1, host="node" + CLEAR)
    tasks = [TaskInfo(101, 100, EVIL_COMM), TaskInfo(102, 100, MARKUP),
             TaskInfo(201, 200, "io" + CLIP)]
    return write_recording(tmp_path / "hostile.rec", topo, make_events(SCENARIO), tasks=tasks,
                           markers=[(T0, "start" + CLEAR), (T1, "exit 0")],
                           header={"backend": "test", "command": ["./a.out", EVIL_ARG]},
                           regions=_regions())


def test_report_text_escapes_names(hostile_recording: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(hostile_recording)]) == 0
    out = capsys.readouterr()
    assert_clean(out.out)
    assert_clean(out.err)
    assert "ev\\x1b]0;pwned\\x07il" in out.out           # the name is still there, visible
    assert "\\x1b[2J" in out.out                          # the command line's, the host's
    assert MARKUP[:15] in out.out                         # plain text: shown as it is


def test_report_json_keeps_exact_names_escaped_as_json(hostile_recording: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    assert main(["report", str(hostile_recording), "--json"]) == 0
    out = capsys.readouterr().out
    assert_clean(out)                                     # json.dumps escapes controls
    data = json.loads(out)
    assert EVIL_COMM in {t["comm"] for t in data["tasks"]}
    assert data["command"] == ["./a.out", EVIL_ARG]


def test_error_messages_quote_names_escaped(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / ("no" + TITLE + ".rec")
    assert main(["report", str(bad)]) == 2
    err = capsys.readouterr().err
    assert_clean(err)
    assert "no\\x1b]0;pwned\\x07.rec" in err


# ---- top --batch on a tree whose processes and host are hostile ----------------------------
def test_top_batch_escapes_comm_user_and_host(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from tests.test_top_batch import run_while_busy

    fr = FakeRoot(tmp_path, cpus=2, nodes=1, packages=1)
    fr.processes.append(FakeProcess(4400, EVIL_COMM, ["./evil", EVIL_ARG], 1000, "/user.slice",
                                    [0], [FakeThread(4400, EVIL_COMM, 0, state="R",
                                                     utime=10_000)]))
    fr._write_tasks()
    (tmp_path / "proc/sys/kernel").mkdir(parents=True, exist_ok=True)
    (tmp_path / "proc/sys/kernel/hostname").write_text("host" + CLIP + "\n")
    out = run_while_busy(fr, ["top", "--fsroot", str(tmp_path), "--batch", "--count", "1",
                              "--interval", "0.2", "--tasks", "50"], capsys)
    assert_clean(out)
    # COMMAND shows the program's name and arguments (argv), escaped
    assert "evil --x\\x1b[2J\\x1b]52;c" in out


def test_topo_escapes_names_from_a_topology_file(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    d = synthetic_topology(1, 1, 1, 2).to_dict()
    d["meta"]["source"] = "src" + TITLE
    d["root"]["children"][0]["infos"] = [["CPUModel", "cpu" + CLEAR]]
    f = tmp_path / "t.json"
    f.write_text(json.dumps(d))
    assert main(["topo", "--topology", str(f)]) == 0
    out = capsys.readouterr().out
    assert_clean(out)
    assert "cpu\\x1b[2J" in out and "src\\x1b]0;pwned\\x07" in out


# ---- the top TUI --------------------------------------------------------------------
def _evil_rows(rows: list[TaskRow]) -> list[TaskRow]:
    first = replace(rows[0], pid=6666, tid=6666, comm=EVIL_COMM, user="u" + CLEAR,
                    cmdline="./evil " + EVIL_ARG, job="slurm:" + CLIP, cpu_pct=99.0)
    second = replace(rows[1], pid=6667, tid=6667, comm=MARKUP, cmdline=MARKUP, cpu_pct=98.0)
    return [first, second, *rows]


def _screen(app) -> str:                                  # type: ignore[no-untyped-def]
    return "\n".join(s.text for s in app.screen._compositor.render_strips())


def test_top_tui_shows_hostile_names_escaped() -> None:
    from snumap_tui.ui.app import TopApp
    from snumap_tui.ui.demo import demo_frame
    from snumap_tui.ui.demo import synthetic_topology as demo_topology
    from snumap_tui.ui.hostinfo import HostInfo

    topo = demo_topology(1, 1, 1, 2, 2)
    host = HostInfo("host" + TITLE, "6.1" + CLEAR, "CPU" + C1, 100.0, (0.0, 0.0, 0.0))

    async def go() -> None:
        app = TopApp(topo, host=lambda: host)
        async with app.run_test(size=(120, 30)) as pilot:
            for s in range(3):
                f = demo_frame(topo, s)
                app.push_frame(replace(f, tasks=_evil_rows(list(f.tasks))))
            await pilot.pause()
            await pilot.press("3")                       # the process list
            await pilot.pause()
            screen = _screen(app)
            assert_clean(screen)
            assert "evil --x\\x1b[2J\\x1b]52" in screen    # the list's command, escaped
            assert "u\\x1b[2J" in screen                   # the user column
            assert MARKUP in screen                       # shown as text, not as markup
            await pilot.press("down")                     # the hostile one's details
            await pilot.pause()
            screen = _screen(app)
            assert_clean(screen)
            assert "6666 ev\\x1b]0;pwned\\x07il" in screen
            await pilot.press("f")                        # the filter box, in the title
            await pilot.press(*"[/]")
            await pilot.press("enter")
            await pilot.pause()
            assert_clean(_screen(app))

    asyncio.run(go())


# ---- the replay TUI -------------------------------------------------------------------
def test_replay_tui_shows_hostile_names_escaped(hostile_recording: Path) -> None:
    from snumap_tui.store import open as open_recording
    from snumap_tui.ui.replay import ReplayApp
    from snumap_tui.ui.replay_data import load_replay

    async def go() -> None:
        rec = open_recording(hostile_recording)
        app = ReplayApp(load_replay(rec))
        async with app.run_test(size=(120, 30)) as pilot:
            await pilot.pause()
            screens = [_screen(app)]
            for key in ("p", "p", "right", "bracketright"):   # modes, cursor, next marker
                await pilot.press(key)
                await pilot.pause()
                screens.append(_screen(app))
            for s in screens:
                assert_clean(s)
            assert "node\\x1b[2J" in screens[0]            # the host, in the title line
            assert any("ev\\x1b]0;pwned\\x07" in s for s in screens)   # comm: legend, detail
            app.cursor_t = app.data.t0
            app.action_marker(1)                         # the marker's name in a notice
            await pilot.pause()
            assert_clean(_screen(app))
            said = [n.message for n in app._notifications]
            assert any("ckpt\\x1b]52;c;" in m and m.endswith("[/]") for m in said), said
        rec.close()

    asyncio.run(go())
