"""`snumap` alone starts `top`, as htop does (and as `setup.sh run` does); `--help` and
`--version` stay snumap's own, and options without a command are top's."""

from __future__ import annotations

import argparse

import pytest

from snumap_tui import cli
from snumap_tui.commands import top


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch) -> list[argparse.Namespace]:
    """top's run() replaced by one that keeps the arguments it was given."""
    calls: list[argparse.Namespace] = []
    monkeypatch.setattr(top, "run", lambda args: calls.append(args) or 0)
    return calls


def test_no_command_is_top(ran: list[argparse.Namespace]) -> None:
    assert cli.main([]) == 0
    assert [a.command for a in ran] == ["top"]
    assert ran[0].batch is False


def test_options_without_a_command_are_tops(ran: list[argparse.Namespace]) -> None:
    assert cli.main(["--batch", "--count", "1", "--synthetic", "pack:1 pu:2"]) == 0
    (args,) = ran
    assert args.command == "top" and args.batch and args.count == 1
    assert args.synthetic == "pack:1 pu:2"


def test_help_and_version_stay_snumaps(ran: list[argparse.Namespace],
                                       capsys: pytest.CaptureFixture[str]) -> None:
    for flag in ("--help", "-h"):
        with pytest.raises(SystemExit) as done:
            cli.main([flag])
        assert done.value.code == 0
        out = capsys.readouterr().out
        assert out.startswith("usage: snumap [-h]") and "record" in out and "probe" in out
    with pytest.raises(SystemExit):
        cli.main(["--version"])
    assert capsys.readouterr().out.startswith("snumap ")
    assert ran == []


def test_parser_level() -> None:
    assert cli.with_default_command([]) == ["top"]
    assert cli.with_default_command(["-b"]) == ["top", "-b"]
    assert cli.with_default_command(["record", "--", "ls"]) == ["record", "--", "ls"]
    assert cli.with_default_command(["--help"]) == ["--help"]
    args = cli.build_parser("top").parse_args(cli.with_default_command([]))
    assert args.command == "top" and args._module is top
