"""Performance models in the Performance Model Normal Form (PMNF), fitted with numpy.

A PMNF model of one parameter p is

    f(p) = c0 + sum_k c_k * p^(i_k) * log2(p)^(j_k)

with exponents i_k from a small set of rationals and j_k integers (Calotoiu et al., the form
Extra-P fits). With one parameter, the model is chosen as Extra-P 4.2.5's default modeler
chooses it with ``allow_negative_exponents=True`` (`pmnf_select.select`: its hypotheses, one
term besides the constant, the constant's in-sample SMAPE against each term's leave-one-out
SMAPE), so the `--extrap` files give the same models in Extra-P; then a term is kept only
where an F test says noise is unlikely to have given it (`pmnf_select.noise_p_value`), so a
constant series stays constant. Thread counts shrink times, so falling terms are hypotheses
too (Amdahl's law is
c0 + c1 * p^-1).

With two parameters (threads and a numeric input size), the best single-parameter term of each
is found first, then the additive and multiplicative combinations compete by leave-one-out
cross-validation, a combination with more terms kept only where it cuts the error by
PARSIMONY, as Extra-P's multi-parameter modeler combines its parameters' terms.

Everything here is pure: lists of numbers in, `Model`s out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from snumap_tui.study.aggregate import MEASURES
from snumap_tui.study.pmnf_select import NOISE_ALPHA, POLY, noise_p_value, select, terms_p_value

# The exponents the two-parameter search combines (each parameter's best term first).
POLY_EXPONENTS: tuple[Fraction, ...] = tuple(
    [Fraction(0)] + [Fraction(e) for e in POLY] + [-Fraction(e) for e in POLY
                                                    if Fraction(e) <= 2])
LOG_EXPONENTS: tuple[int, ...] = (0, 1, 2)

PARSIMONY = 0.1       # a hypothesis with more factors must cut the CV error by 10 %
MIN_POINTS = 3          # distinct parameter values needed for a hypothesis search
_EPS = 1e-300


@dataclass(frozen=True)
class Factor:
    """p^i * log2(p)^j of one parameter."""

    param: str
    exponent: Fraction
    log_exponent: int

    def evaluate(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        out = np.ones_like(x)
        if self.exponent != 0:
            out = out * np.power(x, float(self.exponent))
        if self.log_exponent:
            out = out * np.power(np.log2(np.maximum(x, _EPS)), self.log_exponent)
        return out

    def text(self) -> str:
        parts = []
        if self.exponent != 0:
            e = self.exponent
            parts.append(f"{self.param}^({e})" if e.denominator != 1 or e < 0
                         else (self.param if e == 1 else f"{self.param}^{e}"))
        if self.log_exponent:
            lg = f"log2({self.param})"
            parts.append(lg if self.log_exponent == 1 else f"{lg}^{self.log_exponent}")
        return " * ".join(parts) if parts else "1"

    @property
    def is_constant(self) -> bool:
        return self.exponent == 0 and self.log_exponent == 0


@dataclass(frozen=True)
class Term:
    """A coefficient times a product of factors (one per parameter at most)."""

    coefficient: float
    factors: tuple[Factor, ...]

    def basis(self, values: Mapping[str, np.ndarray]) -> np.ndarray:
        out: np.ndarray | None = None
        for f in self.factors:
            col = f.evaluate(values[f.param])
            out = col if out is None else out * col
        assert out is not None
        return out


@dataclass(frozen=True)
class Model:
    """A fitted PMNF model with its quality figures."""

    params: tuple[str, ...]
    constant: float
    terms: tuple[Term, ...]
    rss: float = 0.0
    smape: float = 0.0           # in-sample symmetric mean absolute percentage error, %
    cv_smape: float = 0.0        # leave-one-out cross-validated SMAPE, %
    ar2: float = 1.0             # adjusted R^2
    points: int = 0
    note: str = ""               # e.g. why a simpler rule was used
    meta: dict = field(default_factory=dict, compare=False)

    @property
    def formula(self) -> str:
        s = _num(self.constant)
        for t in self.terms:
            sign = "-" if t.coefficient < 0 else "+"
            body = " * ".join(f.text() for f in t.factors if not f.is_constant)
            s += f" {sign} {_num(abs(t.coefficient))}" + (f" * {body}" if body else "")
        return s

    def predict(self, *args: float, **kwargs: float) -> float:
        """The model at one point: predict(64) for one parameter, or by name."""
        values = dict(zip(self.params, args))
        values.update(kwargs)
        missing = [p for p in self.params if p not in values]
        if missing:
            raise ValueError(f"predict needs {', '.join(missing)}")
        arrays = {k: np.asarray([float(v)]) for k, v in values.items()}
        return float(self._evaluate(arrays)[0])

    def predict_many(self, values: Mapping[str, Sequence[float]]) -> np.ndarray:
        return self._evaluate({k: np.asarray(v, dtype=np.float64) for k, v in values.items()})

    def _evaluate(self, values: Mapping[str, np.ndarray]) -> np.ndarray:
        n = len(next(iter(values.values()))) if values else 1
        out = np.full(n, self.constant, dtype=np.float64)
        for t in self.terms:
            out = out + t.coefficient * t.basis(values)
        return out

    @property
    def growth(self) -> str:
        """The dominant term's asymptotic class, e.g. 'p^(-1)' or 'constant'."""
        if not self.terms:
            return "constant"
        return " * ".join(f.text() for f in self.terms[-1].factors if not f.is_constant) \
            or "constant"

    def to_json(self) -> dict:
        return {"params": list(self.params), "formula": self.formula,
                "constant": self.constant,
                "terms": [{"coefficient": t.coefficient,
                           "factors": [{"param": f.param, "exponent": str(f.exponent),
                                        "log_exponent": f.log_exponent} for f in t.factors]}
                          for t in self.terms],
                "rss": self.rss, "smape": self.smape, "cv_smape": self.cv_smape,
                "ar2": self.ar2, "points": self.points, "note": self.note}


def _num(x: float) -> str:
    if x == 0:
        return "0"
    return f"{x:.4g}"


# ---------------------------------------------------------------- fitting


def _smape(pred: np.ndarray, y: np.ndarray) -> float:
    den = np.abs(pred) + np.abs(y)
    ok = den > 0
    if not ok.any():
        return 0.0
    return float(np.mean(2.0 * np.abs(pred[ok] - y[ok]) / den[ok]) * 100.0)


def _lstsq(a: np.ndarray, y: np.ndarray) -> np.ndarray | None:
    if not np.all(np.isfinite(a)):
        return None
    coef, *_ = np.linalg.lstsq(a, y, rcond=None)
    if not np.all(np.isfinite(coef)):
        return None
    return coef


def _design(columns: list[np.ndarray], n: int) -> np.ndarray:
    return np.column_stack([np.ones(n)] + columns) if columns else np.ones((n, 1))


def _cross_validate(columns: list[np.ndarray], y: np.ndarray) -> float:
    """Leave-one-out SMAPE (%) of the linear model with these basis columns.

    Each left-out point's prediction comes from the one full fit, as least squares allows:
    y_k - e_k / (1 - h_kk), with e the residuals and h the diagonal of the hat matrix (from
    the design's thin SVD). Refitting once per point was 80 % of `scale report` on a study of
    20 regions (40,000 fits). Where a point carries the whole fit of some direction (h_kk near
    1) or the design is rank-deficient, the refits are done as before."""
    n = len(y)
    a = _design(columns, n)
    if n <= a.shape[1] or not np.all(np.isfinite(a)):
        return math.inf
    try:
        u, sv, vt = np.linalg.svd(a, full_matrices=False)
    except np.linalg.LinAlgError:
        return _cross_validate_refit(a, y)
    if sv.min() <= sv.max() * max(a.shape) * np.finfo(float).eps:
        return _cross_validate_refit(a, y)
    h = np.einsum("ij,ij->i", u, u)
    if np.any(h > 1.0 - 1e-8):
        return _cross_validate_refit(a, y)
    coef = vt.T @ ((u.T @ y) / sv)
    if not np.all(np.isfinite(coef)):
        return math.inf
    pred = y - (y - a @ coef) / (1.0 - h)
    den = np.abs(pred) + np.abs(y)
    errs = np.where(den == 0, 0.0, 2.0 * np.abs(pred - y) / np.where(den == 0, 1.0, den))
    return float(np.mean(errs) * 100.0)


def _cross_validate_many(xs: np.ndarray, y: np.ndarray) -> list[float]:
    """``_cross_validate([x], y)`` for each row x of XS (models y = b0 + b1 x), at once: a
    point's leverage is 1/n + (x - mean)^2 / sum((x - mean)^2); rows where the closed form
    does not hold (a constant x, a leverage near 1) are done one by one."""
    h_rows, n = xs.shape
    if h_rows == 0:
        return []
    if n <= 2:
        return [math.inf] * h_rows
    dx = xs - xs.mean(axis=1, keepdims=True)
    sxx = np.einsum("ij,ij->i", dx, dx)
    scale = np.maximum(np.abs(xs).max(axis=1), 1.0)
    ok = sxx > (scale * scale) * n * 1e-12
    with np.errstate(divide="ignore", invalid="ignore"):
        b1 = (dx @ (y - y.mean())) / np.where(ok, sxx, 1.0)
        resid = (y - y.mean())[None, :] - b1[:, None] * dx
        h = 1.0 / n + dx * dx / np.where(ok, sxx, 1.0)[:, None]
        ok &= np.all(h < 1.0 - 1e-8, axis=1) & np.isfinite(b1) & np.all(np.isfinite(dx), axis=1)
        pred = y[None, :] - resid / np.where(ok[:, None], 1.0 - h, 1.0)
        den = np.abs(pred) + np.abs(y)[None, :]
        errs = np.where(den == 0, 0.0, 2.0 * np.abs(pred - y[None, :]) /
                        np.where(den == 0, 1.0, den))
    out = (errs.mean(axis=1) * 100.0).tolist()
    for i in np.flatnonzero(~ok).tolist():
        out[i] = _cross_validate([xs[i]], y)
    return [float(v) for v in out]


def _cross_validate_refit(a: np.ndarray, y: np.ndarray) -> float:
    """Leave-one-out SMAPE (%) by refitting without each point in turn."""
    n = len(y)
    errs = np.empty(n)
    for k in range(n):
        keep = np.ones(n, dtype=bool)
        keep[k] = False
        coef = _lstsq(a[keep], y[keep])
        if coef is None:
            return math.inf
        pred = float(a[k] @ coef)
        den = abs(pred) + abs(y[k])
        errs[k] = 0.0 if den == 0 else 2.0 * abs(pred - y[k]) / den
    return float(np.mean(errs) * 100.0)


def _finish(params: tuple[str, ...], termfactors: list[tuple[Factor, ...]],
            values: Mapping[str, np.ndarray], y: np.ndarray, cv: float,
            note: str = "") -> Model:
    n = len(y)
    columns = [Term(1.0, fs).basis(values) for fs in termfactors]
    coef = _lstsq(_design(columns, n), y)
    if coef is None:           # cannot happen for hypotheses that passed cross-validation
        coef = np.array([float(np.mean(y))] + [0.0] * len(columns))
    pred = _design(columns, n) @ coef
    rss = float(np.sum((pred - y) ** 2))
    tss = float(np.sum((y - y.mean()) ** 2))
    k = len(columns)
    if tss > 0 and n - k - 1 > 0:
        ar2 = 1.0 - (rss / (n - k - 1)) / (tss / (n - 1))
    else:
        ar2 = 1.0 if rss <= 1e-24 else 0.0
    terms = tuple(Term(float(c), fs) for c, fs in zip(coef[1:], termfactors))
    return Model(params=params, constant=float(coef[0]), terms=terms, rss=rss,
                 smape=_smape(pred, y), cv_smape=cv, ar2=ar2, points=n, note=note)


def _complexity(fs: tuple[Factor, ...]) -> float:
    return sum(abs(float(f.exponent)) + f.log_exponent for f in fs)


def _single_hypotheses(param: str, x: np.ndarray) -> list[tuple[Factor, ...]]:
    hyps: list[tuple[Factor, ...]] = []
    positive = bool(np.all(x > 0))
    for i in POLY_EXPONENTS:
        for j in LOG_EXPONENTS:
            if i == 0 and j == 0:
                continue
            if (i < 0 or j > 0) and not positive:
                continue
            hyps.append((Factor(param, i, j),))
    return hyps


def _best(hyps: Iterable[tuple[tuple[Factor, ...], ...]], values: Mapping[str, np.ndarray],
          y: np.ndarray) -> tuple[tuple[tuple[Factor, ...], ...], float]:
    """The hypothesis (a tuple of terms) with the lowest cross-validated SMAPE; the constant
    model is always a candidate. Among hypotheses with as many terms, the lowest error wins
    (ties to the simpler exponents); one with more terms must cut the error of the best with
    fewer by PARSIMONY (relative), so noise does not buy a term."""
    per_size: dict[int, tuple[tuple[tuple[Factor, ...], ...], float, float]] = {
        0: ((), _cross_validate([], y), 0.0)}
    cands = []
    for terms in hyps:
        cols = [Term(1.0, fs).basis(values) for fs in terms]
        if any(not np.all(np.isfinite(c)) for c in cols):
            continue
        cands.append((terms, cols))
    # The one-term hypotheses (most of them) all at once: a loop of small fits per hypothesis
    # was most of `scale report`'s time.
    single = [i for i, (_t, cols) in enumerate(cands) if len(cols) == 1]
    cvs: dict[int, float] = dict(zip(single, _cross_validate_many(
        np.array([cands[i][1][0] for i in single]).reshape(len(single), len(y)), y)))
    for i, (terms, cols) in enumerate(cands):
        cv = cvs[i] if i in cvs else _cross_validate(cols, y)
        cx = sum(_complexity(fs) for fs in terms)
        size = sum(len(fs) for fs in terms)
        cur = per_size.get(size)
        if cur is None or cv < cur[1] - 1e-9 or (abs(cv - cur[1]) <= 1e-9 and cx < cur[2]):
            per_size[size] = (terms, cv, cx)
    best, best_cv, _ = per_size[0]
    for size in sorted(per_size)[1:]:
        terms, cv, _ = per_size[size]
        if cv < best_cv * (1.0 - PARSIMONY) - 1e-12:
            best, best_cv = terms, cv
    return best, best_cv


def _select_single(param: str, x: np.ndarray, y: np.ndarray
                   ) -> tuple[tuple[tuple[Factor, ...], ...], float]:
    """The one-term (or constant) model of one value per point, as pmnf_select chooses."""
    h, smape = select(x, y)
    return (((Factor(param, *h),),) if h is not None else ()), smape


def _per_point(x: np.ndarray, y: np.ndarray, measure: str) -> tuple[np.ndarray, np.ndarray]:
    """One value per distinct X: the MEASURE (median or mean) of its repeats."""
    if measure not in MEASURES:
        raise ValueError(f"measure {measure!r}: choose from {', '.join(MEASURES)}")
    xs = np.unique(x)
    if len(xs) == len(x):
        o = np.argsort(x, kind="stable")
        return x[o], y[o]
    agg = np.median if measure == "median" else np.mean
    return xs, np.array([float(agg(y[x == v])) for v in xs])


def _best_slice_term(name: str, values: Mapping[str, np.ndarray],
                     y: np.ndarray) -> Factor | None:
    """The one-parameter term of `name` that predicts best with the other parameters held
    still: each hypothesis is cross-validated on every slice where the others are constant
    (and have enough points), and the lowest summed SMAPE wins; None when the constant does."""
    others = [k for k in values if k != name]
    keys = np.stack([values[k] for k in others], axis=1) if others else np.zeros((len(y), 0))
    slices = []
    for key in np.unique(keys, axis=0):
        sel = np.all(keys == key, axis=1)
        if len(np.unique(values[name][sel])) >= MIN_POINTS:
            slices.append(sel)
    if not slices:
        return None
    best: Factor | None = None
    best_cv = sum(_cross_validate([], y[sel]) for sel in slices)
    for (h,) in _single_hypotheses(name, values[name]):
        total = 0.0
        for sel in slices:
            total += _cross_validate([h.evaluate(values[name][sel])], y[sel])
        if total < best_cv - 1e-9:
            best, best_cv = h, total
    return best


def fit_amdahl(threads: Sequence[float], times: Sequence[float]) -> tuple[float, float]:
    """Amdahl's law T(p) = T1 * (s + (1 - s) / p) fitted by least squares: (T1, s).

    s is the serial fraction (clipped to [0, 1]); exactly determined by two thread counts."""
    p = np.asarray(threads, dtype=np.float64)
    t = np.asarray(times, dtype=np.float64)
    if len(p) < 2 or len(set(p.tolist())) < 2:
        raise ValueError("Amdahl's law needs times at two thread counts at least")
    coef = _lstsq(np.column_stack([np.ones_like(p), 1.0 / p]), t)
    if coef is None:
        raise ValueError("Amdahl's law could not be fitted to these times")
    a, b = float(coef[0]), float(coef[1])       # T = a + b/p, T1 = a + b, s = a / T1
    t1 = a + b
    s = 0.0 if t1 <= 0 else min(1.0, max(0.0, a / t1))
    return t1, s


def fit(points: Mapping[str, Sequence[float]], times: Sequence[float],
        measure: str = "median") -> Model:
    """Fit a PMNF model of one or two parameters.

    points: parameter name -> its value at each measurement (same length as times); several
    measurements may share a point (repeats): with one parameter, as Extra-P does, each point
    is its repeats' MEASURE (median or mean) and the model is chosen on those.
    """
    params = tuple(points)
    if not 1 <= len(params) <= 2:
        raise ValueError("PMNF fits here take one or two parameters")
    y = np.asarray(times, dtype=np.float64)
    values = {k: np.asarray(v, dtype=np.float64) for k, v in points.items()}
    if any(len(v) != len(y) for v in values.values()):
        raise ValueError("every parameter needs one value per measurement")
    finite = np.isfinite(y)
    for v in values.values():
        finite &= np.isfinite(v)
    y = y[finite]
    values = {k: v[finite] for k, v in values.items()}
    if len(y) == 0:
        raise ValueError("no finite measurements to fit")
    distinct = {k: len(np.unique(v)) for k, v in values.items()}

    if len(params) == 1:
        (p,) = params
        x = values[p]
        if distinct[p] < MIN_POINTS:
            if distinct[p] == 2 and bool(np.all(x > 0)):
                fs = ((Factor(p, Fraction(-1), 0),),)
                return _finish(params, list(fs), values, y, math.nan,
                               note=f"Amdahl's law: {distinct[p]} values of {p}, too few "
                                    f"for a PMNF search (needs {MIN_POINTS})")
            return _finish(params, [], values, y, math.nan,
                           note=f"constant: {distinct[p]} value(s) of {p}")
        xs, ys = _per_point(x, y, measure)
        terms, cv = _select_single(p, xs, ys)
        note = ""
        if terms:
            pv, alpha = noise_p_value(x, y, xs, ys, terms[0][0].evaluate(xs))
            if pv > alpha:
                terms, cv = (), math.nan
                note = (f"constant: the term the search found is within the noise (F test, "
                        f"p = {pv:.2g})")
        return _finish(params, list(terms), {p: xs}, ys, cv, note=note)

    p, q = params
    singles: dict[str, Factor | None] = {}
    for name in params:
        if distinct[name] < MIN_POINTS:
            singles[name] = None
            continue
        singles[name] = _best_slice_term(name, values, y)
    fp, fq = singles[p], singles[q]
    hyps: list[tuple[tuple[Factor, ...], ...]] = []
    if fp is not None:
        hyps.append(((fp,),))
    if fq is not None:
        hyps.append(((fq,),))
    if fp is not None and fq is not None:
        hyps += [((fp,), (fq,)), ((fp, fq),), ((fp,), (fq,), (fp, fq)),
                 ((fp,), (fp, fq)), ((fq,), (fp, fq))]
    if not hyps:
        return _finish(params, [], values, y, math.nan,
                       note=f"constant: fewer than {MIN_POINTS} values of {p} and {q}")
    terms, cv = _best(hyps, values, y)
    note = ""
    if terms:
        cols = [Term(1.0, fs).basis(values) for fs in terms]
        pv = terms_p_value(_design(cols, len(y)), y)
        if pv > NOISE_ALPHA:
            terms, cv = (), math.nan
            note = f"constant: the terms the search found are within the noise (F test, p = {pv:.2g})"
    return _finish(params, list(terms), values, y, cv, note=note)


def fit_models(rows: Sequence[Mapping], params: Sequence[str] = ("threads",),
               value: str = "time_median_s") -> dict[str, Model]:
    """One model per region from a study's aggregated rows (one row per region and
    configuration, as `snumap scale report` computes them).

    With params=("threads",), the series of each region is the one at its most common other
    settings (placement, input, frequency): the first in sorted order when several are equal.
    With ("threads", "input_value"), every numeric input joins the fit.
    """
    out: dict[str, Model] = {}
    for region, _fixed, model in fit_series(rows, tuple(params), value):
        out.setdefault(region, model)
    return out


SERIES_KEYS = ("places", "input", "freq")


def fit_series(rows: Sequence[Mapping], params: Sequence[str] = ("threads",),
               value: str = "time_median_s", measure: str = "median"
               ) -> list[tuple[str, dict, Model]]:
    """One model per region and per setting of the dimensions not in params (placement,
    input, frequency): [(region, {places, input, freq}, Model)], ordered by region. ROWS
    may hold several repeats of a point (a study's runs): each point is then their MEASURE,
    and the repeats tell the noise a term must stand out of (fit)."""
    params = tuple(params)
    fixed_keys = tuple(k for k in SERIES_KEYS
                       if not (k == "input" and "input_value" in params))
    groups: dict[tuple, list[Mapping]] = {}
    for r in rows:
        v = r.get(value)
        if v is None or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
            continue
        if any(not isinstance(r.get(p), (int, float)) for p in params):
            continue
        key = (str(r["region"]),) + tuple(_key(r.get(k)) for k in fixed_keys)
        groups.setdefault(key, []).append(r)
    out = []
    for key in sorted(groups, key=lambda k: (k[0], -len(groups[k]), k[1:])):
        rs = groups[key]
        pts = {p: [float(r[p]) for r in rs] for p in params}
        model = fit(pts, [float(r[value]) for r in rs], measure)
        out.append((key[0], dict(zip(fixed_keys, key[1:])), model))
    return out


def _key(v) -> str:
    return "" if v is None else str(v)
