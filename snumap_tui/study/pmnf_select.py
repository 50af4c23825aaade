"""How a one-parameter PMNF model is chosen (study/pmnf.py fits it): the rules of Extra-P
4.2.5's basic single-parameter modeler run with ``allow_negative_exponents=True`` -- its
hypotheses, costs and thresholds, taken from its modelers as facts -- so a study's `--extrap`
file gives the same models in Extra-P; and the F test that keeps a term only where the noise
is unlikely to have given it.

Pure numpy; no Extra-P code.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

# The single-parameter search space: Extra-P's building blocks (p^i * log2(p)^j) as its basic
# modeler builds them with allow_negative_exponents=True -- the growing terms of its default
# set, then the falling ones strong scaling needs (Amdahl's law is c0 + c1 * p^-1). In this
# order: among equal errors the first wins, as there.
_GROWING = ["0 1", "0 2", "1/4 0", "1/3 0", "1/4 1", "1/3 1", "1/4 2", "1/3 2", "1/2 0",
            "1/2 1", "1/2 2", "2/3 0", "3/4 0", "2/3 1", "3/4 1", "4/5 0", "2/3 2", "3/4 2",
            "1 0", "1 1", "1 2", "5/4 0", "5/4 1", "4/3 0", "4/3 1", "3/2 0", "3/2 1", "3/2 2",
            "5/3 0", "7/4 0", "2 0", "2 1", "2 2", "9/4 0", "7/3 0", "5/2 0", "5/2 1", "5/2 2",
            "8/3 0", "11/4 0", "3 0", "3 1"]
_FALLING_LOG = ["0 -1", "0 -2", "-1/4 -1", "-1/3 -1", "-1/4 -2", "-1/3 -2", "-1/2 -1",
                "-1/2 -2", "-2/3 -1", "-3/4 -1", "-2/3 -2", "-3/4 -2", "-1 -1", "-1 -2",
                "-5/4 -1", "-4/3 -1", "-3/2 -1", "-3/2 -2", "-2 -1", "-2 -2", "-5/2 -1",
                "-5/2 -2", "-3 -1"]
POLY = ["1/4", "1/3", "1/2", "2/3", "3/4", "4/5", "1", "5/4", "4/3", "3/2", "5/3", "7/4", "2",
         "9/4", "7/3", "5/2", "8/3", "11/4", "3"]
HYPOTHESES: tuple[tuple[Fraction, int], ...] = tuple(
    [(Fraction(a), int(b)) for a, b in (h.split() for h in _GROWING + _FALLING_LOG)]
    + [(-Fraction(e), 0) for e in POLY])

# A term the noise gives this rarely is kept (noise_p_value's F tests): of a series without
# repeats, and of one with repeats (more degrees of freedom: a stricter level, which kept no
# term of a constant with 1-5 % noise in 300 series at 2, 3 and 5 repeats and kept the term
# of 1.8 + 0.2/p with 2 % noise in 82, 98 and 100 % of them).
NOISE_ALPHA = 0.001
REPEATS_ALPHA = 0.0001
TERM_CONTRIBUTION = 0.0005   # a term smaller than this share of every value is no term
CLEAN_CONSTANT = 0.0005      # a fold's constant below this share of its smallest value is 0

def hypotheses(x: np.ndarray) -> list[tuple[Fraction, int]]:
    """The one-term hypotheses (i, j) for values X, in search order: logarithmic terms only
    where every value is above 1 (log2(1) = 0 has no power -1; Extra-P's rule with negative
    exponents on), falling terms only for positive values."""
    logs = bool(np.all(x > 1))
    positive = bool(np.all(x > 0))
    return [(i, j) for i, j in HYPOTHESES if (logs or j == 0) and (positive or i >= 0)]


def basis(x: np.ndarray, i: Fraction, j: int) -> np.ndarray:
    """x^i * log2(x)^j."""
    out = np.ones_like(x, dtype=np.float64)
    if i != 0:
        out = out * np.power(x, float(i))
    if j:
        out = out * np.power(np.log2(x), j)
    return out


def select(x: np.ndarray, y: np.ndarray) -> tuple[tuple[Fraction, int] | None, float]:
    """The model of one value per point Y at X, chosen by the rules of Extra-P's basic
    single-parameter modeler (facts from Extra-P 4.2.5's documentation and modelers):

    - the constant (the mean) is the first candidate, with its in-sample SMAPE; a series it
      fits exactly stays constant;
    - each one-term hypothesis c0 + c1 * b(p) gets its leave-one-out SMAPE: each point is
      predicted by the least-squares fit of the others (a fold's constant set to 0 where it
      is below CLEAN_CONSTANT of the fold's smallest value);
    - a hypothesis whose term is 0 or below TERM_CONTRIBUTION of every value is no candidate;
    - the lowest SMAPE wins, the earlier on a tie.

    Comparing a term's out-of-sample error with the constant's in-sample one is what keeps
    noise from buying a term: the term must predict points it did not see better than the
    mean describes the points it did. Returns the hypothesis (i, j), None for the constant,
    and its SMAPE."""
    n = len(y)
    c = float(np.mean(y))
    den = np.abs(y) + abs(c)
    const_smape = float(np.mean(np.where(den > 0, 2 * np.abs(c - y) / np.where(den > 0, den, 1),
                                         0.0)) * 100)
    if n < 3 or float(np.sum((y - c) ** 2)) == 0.0:
        return None, const_smape
    hyps = hypotheses(x)
    if not hyps:
        return None, const_smape
    with np.errstate(all="ignore"):
        b = np.stack([basis(x, i, j) for i, j in hyps])              # H x n
        ok = np.all(np.isfinite(b), axis=1)
        b = np.where(np.isfinite(b), b, 0.0)
        # each fold k leaves point k out: the sums of the others
        m = n - 1
        sb, sy = b.sum(1, keepdims=True) - b, y.sum() - y[None, :]
        sbb = (b * b).sum(1, keepdims=True) - b * b
        sby = (b * y).sum(1, keepdims=True) - b * y[None, :]
        mb, my = sb / m, sy / m
        sxx = sbb - m * mb * mb
        sxy = sby - m * mb * my
        scale = np.maximum(np.abs(b).max(1, keepdims=True), 1.0)
        flat = sxx <= scale * scale * m * 1e-12      # the others' basis is constant
        c1 = np.where(flat, 0.0, sxy / np.where(flat, 1.0, sxx))
        c0 = my - c1 * mb
        lo = np.array([np.min(np.delete(y, k)) for k in range(n)])[None, :]
        clean = np.where(lo == 0, np.abs(c0 - lo), np.abs(c0 / np.where(lo == 0, 1, lo)))
        c0 = np.where(clean < CLEAN_CONSTANT, 0.0, c0)
        pred = c0 + c1 * b
        d = np.abs(pred) + np.abs(y)[None, :]
        err = np.where(d > 0, 2 * np.abs(pred - y[None, :]) / np.where(d > 0, d, 1.0), 0.0)
        smape = err.mean(1) * 100
        rss = ((pred - y[None, :]) ** 2).sum(1)
        ok &= np.isfinite(smape) & np.isfinite(rss) & ~np.any(flat, axis=1)
        # the full fits, for the terms' contributions
        xm = b.mean(1, keepdims=True)
        dx = b - xm
        vxx = (dx * dx).sum(1)
        ok &= vxx > (scale[:, 0] ** 2) * n * 1e-12
        k1 = (dx @ (y - y.mean())) / np.where(ok, vxx, 1.0)
        contrib = np.max(np.abs(k1[:, None] * b / np.where(y == 0, np.nan, y)[None, :]), axis=1)
        ok &= (k1 != 0) & (np.nan_to_num(contrib, nan=np.inf) >= TERM_CONTRIBUTION)
    best: tuple[Fraction, int] | None = None
    best_smape = const_smape
    for k in np.flatnonzero(ok).tolist():
        if smape[k] < best_smape:
            best, best_smape = hyps[k], float(smape[k])
    return best, best_smape


def noise_p_value(x: np.ndarray, y: np.ndarray, xs: np.ndarray, ys: np.ndarray,
                  b: np.ndarray) -> tuple[float, float]:
    """How likely noise alone is to give the variation the chosen term describes, and the
    level under which the term is kept: with repeats at every point, the F test of the term
    (fitted to the points' means) against the noise the repeats show (their spread about
    their means, pooled with the means' spread about the term: the regression's lack of fit
    as pure error), at REPEATS_ALPHA; without, the F test of the term against the constant
    over the points, at NOISE_ALPHA. B: the term's basis at XS."""
    reps = np.array([int(np.sum(x == v)) for v in xs])
    if len(xs) < 3 or reps.min() < 2:
        return terms_p_value(np.column_stack([np.ones(len(ys)), b]), ys), NOISE_ALPHA
    means = np.array([float(np.mean(y[x == v])) for v in xs])
    a = np.column_stack([np.ones(len(xs)), b])
    if not np.all(np.isfinite(a)):
        return 1.0, REPEATS_ALPHA
    coef = np.linalg.lstsq(a * np.sqrt(reps)[:, None], means * np.sqrt(reps), rcond=None)[0]
    fitted = a @ coef
    explained = float(np.sum(reps * (fitted - np.average(means, weights=reps)) ** 2))
    within = float(sum(np.sum((y[x == v] - m) ** 2) for v, m in zip(xs, means)))
    lack = float(np.sum(reps * (means - fitted) ** 2))
    dof = len(y) - 2             # pure error (len(y) - len(xs)) and lack of fit (len(xs) - 2)
    if within + lack <= 0:
        return (0.0 if explained > 0 else 1.0), REPEATS_ALPHA
    return f_survival(explained / ((within + lack) / dof), 1, dof), REPEATS_ALPHA


def terms_p_value(a: np.ndarray, y: np.ndarray) -> float:
    """The F test of a linear model with design A (its first column the constant) against
    the constant alone: how likely noise is to make its terms cut the residuals as much."""
    n, k = a.shape[0], a.shape[1] - 1
    if k < 1 or n - k - 1 < 1 or not np.all(np.isfinite(a)):
        return 0.0 if k >= 1 and n - k - 1 < 1 else 1.0
    coef = np.linalg.lstsq(a, y, rcond=None)[0]
    rss1 = float(np.sum((a @ coef - y) ** 2))
    rss0 = float(np.sum((y - y.mean()) ** 2))
    if rss1 <= 0:
        return 0.0
    return f_survival((rss0 - rss1) / k / (rss1 / (n - k - 1)), k, n - k - 1)


def f_survival(f: float, d1: float, d2: float) -> float:
    """P(F > f) for Fisher's F distribution with D1 and D2 degrees of freedom: the regularized
    incomplete beta function I_x(d2/2, d1/2) at x = d2 / (d2 + d1 f)."""
    if not f > 0:
        return 1.0
    return _betai(d2 / 2.0, d1 / 2.0, d2 / (d2 + d1 * f))


def _betai(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), by its continued fraction (the
    standard Lentz evaluation), on the side where it converges fast."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(x) + b * math.log1p(-x))
    if x > (a + 1.0) / (a + b + 2.0):
        return 1.0 - _betai(b, a, 1.0 - x)
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return front * h / a


