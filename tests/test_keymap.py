"""One keymap for `snumap top` and `snumap replay` (keymap.py): no key with two meanings,
both apps bound from it, and the keys the issue named mean what htop users expect."""

from __future__ import annotations

from collections import Counter

from snumap_tui.ui.app import TopApp
from snumap_tui.ui.keymap import KEYMAP, bindings, entries, help_rows, key_names
from snumap_tui.ui.replay import ReplayApp


def test_no_key_has_two_meanings() -> None:
    twice = [k for k, n in Counter(key_names()).items() if n > 1]
    assert not twice, twice


def test_both_apps_take_their_bindings_from_the_keymap() -> None:
    for app, cls in (("top", TopApp), ("replay", ReplayApp)):
        want = [(b.key, b.action) for b in bindings(app)]
        assert [(b.key, b.action) for b in cls.BINDINGS] == want  # type: ignore[union-attr]
        for k in entries(app):                       # the app implements every action
            name = "action_" + (k.action(app) or "").split("(")[0]
            assert hasattr(cls, name), (app, name)


def test_the_keys_the_issue_named() -> None:
    by_key = {name.strip(): k for k in KEYMAP for name in k.keys.split(",")}
    assert by_key["f10"].top == by_key["f10"].replay == "quit"
    assert by_key["slash"].top == by_key["slash"].replay == "filter"       # / in both
    assert by_key["space"].what == by_key["Z"].what                       # one meaning
    assert by_key["g"].replay is None                   # go-to moved to ':' (g: group)
    assert by_key["colon"].replay == "goto"
    assert by_key["f9"].top == by_key["k"].top == "signal"
    assert by_key["f5"].top == by_key["t"].top == "tree"
    assert by_key["M"].top == "sort_by('mem')" and by_key["P"].top == "sort_by('cpu')"
    assert by_key["T"].top == "sort_by('time')"


def test_help_lists_each_meaning_once() -> None:
    for app in ("top", "replay"):
        rows = help_rows(app)
        assert len({w for _, w in rows}) == len(rows)
        assert any("F10" in k for k, _ in rows)
