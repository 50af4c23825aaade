"""PMNF model fits (snumap_tui.study.pmnf): known exponents and Amdahl curves come back."""

from fractions import Fraction

import numpy as np
import pytest

from snumap_tui.study import pmnf

P = np.array([1, 2, 4, 8, 16, 32, 64], dtype=float)


def _noisy(y, seed=7, rel=0.01):
    rng = np.random.default_rng(seed)
    return y * (1 + rng.normal(0, rel, len(y)))


@pytest.mark.parametrize("func, exponent, log_exponent", [
    (lambda p: 3 + 2 * p, Fraction(1), 0),
    (lambda p: 1 + 0.5 * p * np.log2(p), Fraction(1), 1),
    (lambda p: 2 + 4 * p ** 0.5, Fraction(1, 2), 0),
    (lambda p: 0.5 + 0.02 * p ** 2, Fraction(2), 0),
])
def test_known_exponents_are_recovered(func, exponent, log_exponent):
    # logarithmic terms only where every point is above 1 (Extra-P's rule: log2(1) = 0)
    p = P[1:] if log_exponent else P
    m = pmnf.fit({"p": p}, _noisy(func(p)))
    assert len(m.terms) == 1, m.formula
    (f,) = m.terms[0].factors
    assert (f.exponent, f.log_exponent) == (exponent, log_exponent), m.formula
    # and it extrapolates: 128 is outside the measured range
    assert m.predict(128) == pytest.approx(float(func(np.array([128.0]))[0]), rel=0.05)
    if log_exponent:        # with one thread among the points: no logarithm, as Extra-P
        assert all(f.log_exponent == 0 for t in pmnf.fit({"p": P}, _noisy(func(P))).terms
                   for f in t.factors)
    assert m.cv_smape < 5


@pytest.mark.parametrize("serial", [0.05, 0.3, 0.9])
def test_amdahl_curves(serial):
    t1 = 12.0
    ts = t1 * (serial + (1 - serial) / P)
    m = pmnf.fit({"threads": P}, _noisy(ts, rel=0.002))
    (f,) = m.terms[0].factors
    assert f.exponent == -1 and f.log_exponent == 0, m.formula
    assert m.constant == pytest.approx(t1 * serial, rel=0.05, abs=0.05)
    got_t1, got_s = pmnf.fit_amdahl(P, ts)
    assert got_t1 == pytest.approx(t1) and got_s == pytest.approx(serial)


def test_noise_alone_gives_the_constant():
    rng = np.random.default_rng(3)
    y = 5.0 + rng.normal(0, 0.01, len(P))
    m = pmnf.fit({"threads": P}, y)
    assert m.terms == () or abs(m.terms[0].coefficient) < 0.05, m.formula
    assert m.predict(1000) == pytest.approx(5.0, abs=0.1)


@pytest.mark.parametrize("seed", range(20))
def test_a_constant_with_noise_stays_constant(seed):
    """3 +- 1 % (issue 32 item 6: it got 2.996 + 0.040 * p^-1 * log2 p), with repeats and
    without; and a flat region 1.8 + 0.2/p +- 2 % keeps its term."""
    rng = np.random.default_rng(seed)
    x = np.repeat(P, 5)
    m = pmnf.fit({"threads": x}, 3.0 * (1 + rng.normal(0, 0.01, len(x))))
    assert m.terms == (), m.formula
    m = pmnf.fit({"threads": P}, 3.0 * (1 + rng.normal(0, 0.01, len(P))))
    assert m.terms == (), m.formula
    flat = pmnf.fit({"threads": x}, (1.8 + 0.2 / x) * (1 + rng.normal(0, 0.02, len(x))))
    assert len(flat.terms) == 1 and flat.terms[0].factors[0].exponent < 0, flat.formula


def test_f_survival_known_values():
    from snumap_tui.study.pmnf_select import f_survival

    # F tables: F(1, 3) at 5 % is 10.128, F(2, 10) at 5 % 4.1028, F(6, 28) at 0.1 % 5.24
    assert f_survival(10.128, 1, 3) == pytest.approx(0.05, abs=1e-4)
    assert f_survival(4.1028, 2, 10) == pytest.approx(0.05, abs=1e-4)
    assert f_survival(5.24, 6, 28) == pytest.approx(0.001, abs=2e-5)
    assert f_survival(0.0, 2, 10) == 1.0


def test_repeats_and_two_values():
    # two thread counts: too few for a hypothesis search; Amdahl's law, said so
    m = pmnf.fit({"threads": [1, 2, 1, 2]}, [1.0, 0.6, 1.02, 0.62])
    assert "Amdahl" in m.note and m.terms[0].factors[0].exponent == -1
    assert m.predict(2) == pytest.approx(0.61)
    with pytest.raises(ValueError):
        pmnf.fit_amdahl([2, 2], [1.0, 1.0])


def test_two_parameters_threads_and_input():
    t, n = np.meshgrid([1, 2, 4, 8, 16], [10, 20, 40, 80, 160])
    t, n = t.ravel().astype(float), n.ravel().astype(float)
    y = _noisy(1 + 0.01 * n * np.log2(n) / t, rel=0.002)
    m = pmnf.fit({"threads": t, "input": n}, y)
    assert len(m.terms) == 1 and len(m.terms[0].factors) == 2, m.formula
    ft, fn = m.terms[0].factors
    assert (ft.param, ft.exponent, ft.log_exponent) == ("threads", -1, 0)
    assert (fn.param, fn.exponent, fn.log_exponent) == ("input", 1, 1)
    assert m.predict(threads=32, input=320) == pytest.approx(1 + 0.01 * 320 * np.log2(320) / 32,
                                                            rel=0.02)


def test_fit_models_from_aggregated_rows():
    rows = []
    for region, f in (("scales", lambda p: 2.0 / p), ("serial", lambda p: 1.0 + 0 * p)):
        for places in ("compact", "spread"):
            for p in (1, 2, 4, 8):
                rows.append({"region": region, "threads": p, "places": places, "input": "s",
                             "freq": None, "time_median_s": float(f(p)) * (1.01 if
                                                                           places == "spread"
                                                                           else 1.0)})
    rows.append({"region": "broken", "threads": 1, "time_median_s": float("nan")})
    models = pmnf.fit_models(rows)
    assert set(models) == {"scales", "serial"}
    assert models["scales"].predict(16) == pytest.approx(2 / 16, abs=1e-6)
    assert models["serial"].terms == () or abs(models["serial"].predict(64) - 1) < 1e-6
    series = pmnf.fit_series(rows)
    assert {(r, fx["places"]) for r, fx, _ in series} == {
        ("scales", "compact"), ("scales", "spread"), ("serial", "compact"),
        ("serial", "spread")}
    js = models["scales"].to_json()
    assert js["formula"] == models["scales"].formula and js["points"] == 4


def test_bad_input():
    with pytest.raises(ValueError):
        pmnf.fit({"p": [1, 2]}, [1.0])
    with pytest.raises(ValueError):
        pmnf.fit({}, [])
    with pytest.raises(ValueError):
        pmnf.fit({"p": [float("nan")]}, [1.0])


def test_leave_one_out_from_one_fit_equals_refitting() -> None:
    """The cross-validation's closed form (each left-out prediction from the full fit and the
    hat matrix) gives the refits' SMAPE, on random designs of 1-3 columns and 4-9 points, and
    falls back to refitting where a point carries the fit alone (leverage 1)."""
    import numpy as np

    from snumap_tui.study import pmnf

    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(4, 10))
        k = int(rng.integers(0, 3))
        cols = [rng.uniform(0.5, 20.0, n) ** rng.uniform(-1.5, 2.0) for _ in range(k)]
        y = rng.uniform(0.1, 10.0, n)
        a = pmnf._design(cols, n)
        assert pmnf._cross_validate(cols, y) == pytest.approx(
            pmnf._cross_validate_refit(a, y), rel=1e-9, abs=1e-9)
    # a column that is non-zero at one point only: that point has leverage 1
    x = np.array([0.0, 0.0, 0.0, 0.0, 5.0])
    y = np.array([1.0, 1.1, 0.9, 1.0, 7.0])
    assert pmnf._cross_validate([x], y) == pmnf._cross_validate_refit(pmnf._design([x], 5), y)


def test_one_term_hypotheses_cross_validated_at_once_as_one_by_one() -> None:
    """The batch of one-term hypotheses gives each row's own cross-validation, constant rows
    and rows with a leverage-1 point included (those are done one by one)."""
    import numpy as np

    from snumap_tui.study import pmnf

    rng = np.random.default_rng(11)
    for n in (3, 5, 8):
        xs = rng.uniform(0.5, 30.0, (40, n)) ** rng.uniform(-2.0, 2.0, (40, 1))
        xs[3] = 2.0                                   # constant: no slope to fit
        xs[5] = 0.0
        xs[5, -1] = 4.0                               # one point carries the slope
        y = rng.uniform(0.1, 5.0, n)
        many = pmnf._cross_validate_many(xs, y)
        one = [pmnf._cross_validate([x], y) for x in xs]
        assert many == pytest.approx(one, rel=1e-9, abs=1e-9)
    assert pmnf._cross_validate_many(np.zeros((0, 4)), np.ones(4)) == []


@pytest.mark.parametrize("seed", range(5))
def test_two_parameter_noise_stays_constant(seed):
    rng = np.random.default_rng(seed)
    t, n = np.meshgrid([1, 2, 4, 8, 16], [10, 20, 40, 80, 160])
    t, n = t.ravel().astype(float), n.ravel().astype(float)
    m = pmnf.fit({"threads": t, "input": n}, 3.0 * (1 + rng.normal(0, 0.02, len(t))))
    assert m.terms == (), m.formula
