"""The formula language: what it computes, and everything it refuses."""

from __future__ import annotations

import math

import numpy as np
import pytest

from snumap_tui.errors import SnumapError
from snumap_tui.model.expr import ExprError, parse, tokenize


def test_precedence_and_unary_minus() -> None:
    e = parse("1 + 2 * 3 - -4 / 2")
    assert e.evaluate({}, 1)[0] == pytest.approx(1 + 6 + 2)
    assert parse("(1 + 2) * 3").evaluate({}, 1)[0] == 9
    assert parse("2 * -(3 - 1)").evaluate({}, 1)[0] == -4
    assert parse("1.5e3 + .5").evaluate({}, 1)[0] == 1500.5


def test_names_and_needs() -> None:
    e = parse("1000 * cache_misses / instructions", known={"cache_misses", "instructions"})
    assert e.needs == {"cache_misses", "instructions"}
    out = e.evaluate({"cache_misses": np.array([20.0, 5.0]),
                      "instructions": np.array([1e6, 1e3])})
    assert out.tolist() == [pytest.approx(0.02), pytest.approx(5.0)]


def test_division_by_zero_is_nan_not_inf() -> None:
    e = parse("a / b")
    out = e.evaluate({"a": np.array([1.0, 0.0, 3.0]), "b": np.array([0.0, 0.0, 2.0])})
    assert math.isnan(out[0]) and math.isnan(out[1]) and out[2] == 1.5


def test_bare_name_does_not_mutate_the_input() -> None:
    arr = np.array([1.0, np.inf])
    out = parse("a").evaluate({"a": arr})
    assert math.isnan(out[1]) and arr[1] == np.inf


def test_constant_broadcasts() -> None:
    assert parse("3").evaluate({}, 4).tolist() == [3.0] * 4


@pytest.mark.parametrize("text, words", [
    ("a.__class__", "attribute access"),
    ("__import__('os')", "calls are not allowed"),
    ("open(x)", "calls are not allowed"),
    ("a[0]", "indexing"),
    ("a ** 2", "no powers"),
    ("a ^ 2", "no powers"),
    ("a == b", "comparison"),
    ("a < b", "comparison"),
    ("'x'", "strings"),
    ("lambda: 1", "allowed"),
    ("a; b", "only one expression"),
    ("a b", "unexpected token"),
    ("(a + b", "expected ')'"),
    ("a +", "expected a number"),
    ("", "empty formula"),
    ("1 +* 2", "expected a number"),
])
def test_refused(text: str, words: str) -> None:
    with pytest.raises(ExprError) as ei:
        parse(text)
    msg = str(ei.value)
    assert words in msg
    assert "\n" not in msg
    assert isinstance(ei.value, SnumapError)


def test_unknown_counter_is_named() -> None:
    with pytest.raises(ExprError, match="unknown counter 'cylces'"):
        parse("instructions / cylces", known={"instructions", "cycles"})


def test_python_builtins_are_just_unknown_names() -> None:
    with pytest.raises(ExprError, match="unknown counter '__builtins__'"):
        parse("__builtins__", known={"cycles"})


def test_tokens_carry_columns() -> None:
    toks = tokenize("ab + 12")
    assert [(t.kind, t.text, t.col) for t in toks] == [
        ("name", "ab", 1), ("op", "+", 4), ("num", "12", 6), ("end", "", 8)]


def test_non_string_formula() -> None:
    with pytest.raises(ExprError, match="must be a string"):
        parse(42)  # type: ignore[arg-type]
