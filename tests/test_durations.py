"""One duration parser (snumap_tui/durations.py) behind every option that takes a time: units
everywhere (`top --interval 100ms` was refused while `record --interval 100ms` worked), and
nothing negative, not a number, infinite or absurd gets through any of them."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from snumap_tui.cli import build_parser, main
from snumap_tui.durations import MAX_S, parse_duration
from snumap_tui.errors import SnumapError
from snumap_tui.ui.replay import parse_time

# (command, option, what else it needs): every option of the CLI that takes a duration.
DURATION_OPTIONS = [
    ("top", "--interval", ["--batch", "--count", "1"]),
    ("record", "--interval", ["-o", "never-written.rec", "--duration", "1"]),
    ("record", "--duration", ["-o", "never-written.rec"]),
    ("exporter", "--interval", ["--once"]),
    ("replay", "--at", ["no-such-file.rec"]),
    ("scale", "--interval", ["-o", "never-made"]),
]


def test_forms_and_ranges() -> None:
    assert parse_duration("100ms") == pytest.approx(0.1)
    assert parse_duration("2s") == 2.0 and parse_duration("1.5") == 1.5
    assert parse_duration(" 250us ") == pytest.approx(250e-6)
    assert parse_duration("1m") == parse_duration("1min") == 60.0
    assert parse_duration("2h") == 7200.0 and parse_duration("1d") == 86400.0
    assert parse_duration("1:02.5") == 62.5 and parse_duration("1:00:00") == 3600.0
    assert parse_duration("0", positive=False) == 0.0
    for bad in ("", "fast", "-1s", "-1", "0", "nan", "inf", "1e3", "1e300", "3 parsecs",
                "1:xx", "1:2:3:4", "+5", "0x10", f"{MAX_S + 1:.0f}", "9999d"):
        with pytest.raises(SnumapError):
            parse_duration(bad)
    # the replay's go-to prompt and --at read times the same way
    assert parse_time("250ms") == 0.25 and parse_time("1:02.5") == 62.5
    with pytest.raises(ValueError):
        parse_time("nan")


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_every_duration_option_is_listed() -> None:
    """Any option whose value is a time (by its name or metavar) is in DURATION_OPTIONS, so
    the checks below cover it."""
    timeish = {"interval", "duration", "at", "timeout", "every", "delay", "period"}
    found = set()
    for name, p in _options(build_parser()).items():
        for a in p._actions:
            if a.option_strings and (a.dest in timeish or
                                     a.metavar in ("DURATION", "TIME", "S", "SECONDS")):
                found.add((name, max(a.option_strings, key=len)))
                assert a.type is None, (name, a.option_strings)   # a string: parsed by us
    assert found == {(c, o) for c, o, _ in DURATION_OPTIONS}


@pytest.mark.parametrize("command, option, rest", DURATION_OPTIONS)
@pytest.mark.parametrize("bad", ["nan", "inf", "-1", "1e9", "99999h"])
def test_every_duration_option_refuses_non_times(command: str, option: str, rest: list[str],
                                                 bad: str, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)         # where a recording would go, were one accepted
    assert main([command, *rest, option, bad]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith(f"snumap: {option} {bad}:"), err


def test_top_interval_takes_units(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["top", "--batch", "--count", "1", "--interval", "100ms"]) == 0
    assert "interval" in capsys.readouterr().out


def test_replay_speed_is_a_finite_positive_factor(capsys: pytest.CaptureFixture[str]) -> None:
    for bad in ("nan", "inf", "0", "-2", "1e9"):
        assert main(["replay", "no-such-file.rec", "--speed", bad]) == 2
        assert "--speed" in capsys.readouterr().err
