"""`snumap record` at a terminal: the live status line, the note on better backends, and one
duration: the summary's is the file's span, the one `snumap report` prints."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from snumap_tui.recording.status import LiveStatus, better_backends_note, status_text


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_status_text_says_what_the_issue_asks() -> None:
    line = status_text(12.34, 48210, 3, 5 * 2**20, "perf", command=False)
    assert line == "● rec 12.3 s │ 48,210 events │ 3 lost (!) │ 5.0 MiB │ perf │ Ctrl-C to stop"
    assert "stops the command" in status_text(1, 0, 0, 0, "bcc", command=True)


def test_live_line_is_rewritten_in_place_and_cleared_before_messages() -> None:
    out = Tty()
    st = LiveStatus(out, command=False)
    st.backend = "bcc"
    w = SimpleNamespace(events_written=10, lost_total=0, bytes_written=2048)
    st.update(1.0, w)
    st.update(1.1, w)                          # within REFRESH_S: not drawn again
    assert out.getvalue().count("\r● rec") == 1
    w.events_written = 20
    st.update(2.0, w, force=True)
    st.say("tracing stopped")
    text = out.getvalue()
    assert "20 events" in text
    # the message starts on a cleared line, never after the status text
    assert re.search(r"\r\x1b\[2Ksnumap: tracing stopped\n$", text)


def _screen(text: str) -> list[str]:
    """The lines a terminal shows for ``text``: carriage return, newline, ERASE LINE."""
    lines, col = [[]], 0
    for part in re.split(r"(\r|\n|\x1b\[2K)", text):
        if part == "\r":
            col = 0
        elif part == "\n":
            lines.append([])
            col = 0
        elif part == "\x1b[2K":
            lines[-1] = []
        elif part:
            cur = lines[-1]
            cur.extend(" " * (col - len(cur)))
            cur[col:col + len(part)] = list(part)
            col += len(part)
    return ["".join(x).rstrip() for x in lines]


def test_ctrl_c_leaves_nothing_after_the_summary() -> None:
    """The terminal echoes Ctrl-C as ``^C`` after the status line; the summary that replaces
    the line must not keep it (a stray ``C`` after a summary as long as the line)."""
    out = Tty()
    st = LiveStatus(out, command=False)
    st.backend = "libbpf"
    st.update(7.5, SimpleNamespace(events_written=15711, lost_total=0, bytes_written=151_000),
              force=True)
    shown = len(out.getvalue()) - 1
    out.write("^C")                             # the terminal's echo
    summary = "recorded 7.837 s, 16425 events, 0 lost, 161.4 KiB to x.rec, backend libbpf"
    st.say(summary[:shown - len("snumap: ") + 1])
    assert _screen(out.getvalue())[-2] == "snumap: " + summary[:shown - len("snumap: ") + 1]


def test_no_live_line_without_a_terminal() -> None:
    out = io.StringIO()
    st = LiveStatus(out)
    st.update(1.0, SimpleNamespace(events_written=1, lost_total=0, bytes_written=1), force=True)
    st.say("hello")
    assert out.getvalue() == "snumap: hello\n"


def test_better_backends_note() -> None:
    assert better_backends_note("bcc", "auto") is None
    assert better_backends_note("libbpf", "libbpf") is None         # nothing better than libbpf
    note = better_backends_note("bcc", "bcc")
    assert note is not None and note.startswith("--backend bcc: libbpf ") and "perf" not in note
    note = better_backends_note("proc", "proc")
    assert note is not None and note.startswith("--backend proc: ")
    assert "libbpf" in note and "bcc" in note and "perf" in note


def test_record_and_report_say_the_same_duration(tmp_path: Path) -> None:
    out = tmp_path / "d.rec"
    rec = subprocess.run([sys.executable, "-m", "snumap_tui.cli", "record", "--backend", "proc",
                          "--duration", "1", "-o", str(out)], capture_output=True, text=True,
                         timeout=120, check=True)
    said = re.search(r"recorded ([0-9.]+) s", rec.stderr)
    assert said, rec.stderr
    rep = subprocess.run([sys.executable, "-m", "snumap_tui.cli", "report", str(out), "--json"],
                         capture_output=True, text=True, timeout=120, check=True)
    dur = json.loads(rep.stdout)["duration_s"]
    assert f"{dur:.3f}" == said.group(1)
    assert "● rec" not in rec.stderr                    # stderr was a pipe: no live line
