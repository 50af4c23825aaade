"""Formula fuzzing for tests/fuzz_harness.py: random formulas from the grammar, mutated ones,
pathological ones (deep nesting, long sums, unary chains, huge numbers and names) and metrics
files (random TOML around them, and a huge one), through ``expr.parse`` + evaluation and
``usermetrics.parse_metrics``. Each must end with a value or one ``SnumapError`` line."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from fuzz_harness import Tally


NAMES = ("instructions", "cycles", "cache_misses", "busy_ticks", "total_ticks", "dt")


def random_formula(r: random.Random, depth: int = 0) -> str:
    p = r.random()
    if depth > 6 or p < 0.3:
        return r.choice([*NAMES, "1", "0", "1e308", "0.5", ".5e-3", "nope", "x_1"])
    if p < 0.4:
        return f"({random_formula(r, depth + 1)})"
    if p < 0.5:
        return f"-{random_formula(r, depth + 1)}"
    op = r.choice(["+", "-", "*", "/", "**", "%", ",", "==", "."])
    return f"{random_formula(r, depth + 1)} {op} {random_formula(r, depth + 1)}"


def pathological(r: random.Random) -> str:
    n = r.choice([10, 100, 300, 1000, 10_000, 100_000])
    return r.choice([
        "(" * n + "cycles" + ")" * n,
        " + ".join(["cycles"] * n),
        "-" * n + "cycles",
        "*".join(["2"] * n),
        "cycles" + "/cycles" * n,
        "9" * n,
        "a" * n,
        "(" * n,
        " " * n,
        "__import__('os').system('id')",
        "cycles(" + ")" * n,
    ])


def mutate_text(s: str, r: random.Random) -> str:
    chars = list(s)
    for _ in range(r.randint(1, 4)):
        op = r.random()
        i = r.randrange(len(chars) + 1)
        if op < 0.4:
            chars.insert(i, r.choice("()+-*/ .,[]=<>!%^@&|~'\";:#\\\x00\u00e9\u202e0123456789abc"))
        elif op < 0.7 and chars:
            del chars[min(i, len(chars) - 1)]
        elif chars:
            chars[min(i, len(chars) - 1)] = r.choice("()+-*/ 1x")
    return "".join(chars)


def toml_metrics(r: random.Random) -> str:
    lines = []
    if r.random() < 0.3:
        events = r.choice(['["LLC-load-misses"]', "[1]", '"x"', "[]"])
        lines.append(f"events = {events}")
    for i in range(r.randint(0, 5)):
        lines.append(f"[metric.{r.choice(['m', 'bad name', 'x-y', 'ok'])}{i}]")
        lines.append(f"formula = {json.dumps(random_formula(r))}")
        for k, v in (("object", '"Package"'), ("min", "0"), ("max", "100"),
                     ("scale", '"log"'), ("rule", '"sum"'), ("warn_above", "5")):
            if r.random() < 0.4:
                lines.append(f"{k} = {r.choice([v, '-1', 'true', '[]', '{}', '1e999'])}")
    text = "\n".join(lines)
    return mutate_text(text, r) if text and r.random() < 0.4 else text


def fuzz_formulas(seconds: float, seed: int, t: Tally,
                  run_one: Callable[[Tally, str, Callable[[], str | None], str], None],
                  rss_mib: Callable[[], float]) -> None:
    """Formula cases for ``seconds``, each through ``run_one`` (the harness's, so that its
    time bound and counting apply)."""
    from snumap_tui.model.expr import parse
    from snumap_tui.model.usermetrics import parse_metrics

    rng = random.Random(seed)
    env = {n: np.linspace(0, 5, 8) for n in NAMES}
    end = time.monotonic() + seconds
    t.base_rss_mib = rss_mib()

    def formula(text: str) -> Callable[[], None]:
        def go() -> None:
            e = parse(text, known=NAMES)
            e.evaluate(env, size=8)
        return go

    while time.monotonic() < end:
        t.cases += 1
        p = rng.random()
        if p < 0.35:
            text = random_formula(rng)
        elif p < 0.6:
            text = mutate_text(random_formula(rng), rng)
        elif p < 0.8:
            text = pathological(rng)
        else:
            doc = toml_metrics(rng) if rng.random() < 0.9 else "[metric.m]\n" * 200_000
            run_one(t, "metrics file", lambda d=doc: (parse_metrics(d), None)[1],  # type: ignore[misc]
                    f"formula case {t.cases}")
            continue
        run_one(t, "formula", formula(text), f"formula case {t.cases} ({text[:60]!r})")
    t.peak_rss_mib = max(t.peak_rss_mib, rss_mib())


