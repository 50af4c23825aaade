"""Issue 15, item 8: the words. Machine options only where a machine is looked at; help
without internals; the header never cuts a word; probe's partial "some"."""

from __future__ import annotations

import pytest

from snumap_tui.cli import build_parser, main
from snumap_tui.ui.hostinfo import HostInfo
from snumap_tui.ui.metricspec import view_for
from snumap_tui.ui.panels import header_lines
from snumap_tui.ui.textfit import cut_words


@pytest.mark.parametrize("cmd", ["report", "export", "replay"])
def test_recording_commands_take_no_machine_options(cmd: str,
                                                    capsys: pytest.CaptureFixture) -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert "--fsroot" not in sub.choices[cmd].format_help()     # type: ignore[union-attr]
    with pytest.raises(SystemExit) as e:
        main([cmd, "x.rec", "--format", "csv", "--fsroot", "/"])
    assert e.value.code == 2
    assert "--fsroot" in capsys.readouterr().err


def test_machine_commands_keep_them_and_help_speaks_plainly() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for cmd in ("top", "record", "topo", "probe"):
        assert "--fsroot" in sub.choices[cmd].format_help()    # type: ignore[union-attr]
    top_help = sub.choices["top"].format_help()                # type: ignore[union-attr]
    assert "to_dict" not in top_help and "Frame" not in top_help


# Every whole word the two header lines below may show.
_ALL = ("snumap top login01.cluster Linux 6.1.0-27-amd64 Intel(R) Xeon(R) Gold 6248 CPU @ "
        "2.50GHz up 3d 0h load 1.00 2.00 3.00 live 1s topology CPU % sources: waiting for "
        "the first sample of AMD-19h-Zen3-2xEpyc-7763.xml no live data: not this machine (i)")
WORDS = set(_ALL.split())


@pytest.mark.parametrize("width", [60, 80, 100, 120])
def test_header_never_cuts_a_word(width: int) -> None:
    host = HostInfo("login01.cluster", "6.1.0-27-amd64",
                    "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz", 3 * 86400, (1.0, 2.0, 3.0))
    for origin in (None, ("topology", "AMD-19h-Zen3-2xEpyc-7763.xml")):
        text = header_lines(host, {}, paused=False, interval_s=1, metric=view_for("util"),
                            view="topology", width=width, origin=origin).plain
        for line in text.splitlines():
            assert len(line) <= width
            for word in line.replace("…", " ").split():
                assert word in ("│", "■", "▶", "—") or word in WORDS, (word, line)


def test_cut_words() -> None:
    assert cut_words("Intel(R) Xeon(R) Gold", 15) == "Intel(R)…"
    assert cut_words("short", 10) == "short"
    assert cut_words("unbreakable", 5) == ""
