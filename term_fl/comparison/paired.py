"""Statistics over seeds: mean ± standard error, the paired t-test, the exact sign-flip test and Holm's correction.

Pure functions over plain numbers (no store, no I/O); the formulas are in
docs/maths.md, "Comparisons over seeds". Two cells that ran the same seeds
are compared seed by seed: d_s = x_s - y_s (same data split, initial model
and sampled devices), and the test is on the n differences:

- :func:`mean_se`: mean, standard error s / sqrt(n) (sample standard
  deviation s, n - 1 in its denominator) and n of the finite values;
- :func:`paired_difference`: the differences of two cells over the seeds both
  have, their mean and standard error, the two-sided paired t-test (t = mean
  / se with n - 1 degrees of freedom, scipy's t distribution) with its
  p-value and 95% confidence interval, and the exact sign-flip test's p-value;
- :func:`sign_flip_p`: the exact sign-flip (permutation) test of the mean
  difference, every one of the 2^n sign patterns counted; an extra column,
  it never marks anything;
- :func:`holm`: Holm's step-down adjustment of a family of p-values;
- :func:`is_significant`: the one rule every mark follows, ``p_holm`` <
  :data:`ALPHA` with at least :data:`MIN_SEEDS` paired seeds.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["ALPHA", "MIN_SEEDS", "holm", "is_significant", "mean_se", "paired_difference", "sign_flip_p",
           "t_test"]

ALPHA = 0.05
"""A paired difference is significant when its Holm-adjusted p-value is below this."""

MIN_SEEDS = 3
"""Nothing is marked with fewer paired seeds (with 2, one degree of freedom: no test a reader can trust)."""

_TIE = 1e-12  # relative tolerance: a sign pattern whose |sum| equals the observed one (rounding aside) counts


def _finite(value: float | None) -> bool:
    return value is not None and not isinstance(value, bool) and math.isfinite(value)


def mean_se(values: Iterable[float | None]) -> dict[str, Any]:
    """Mean, standard error of the mean (sample std / sqrt(n); None for n < 2) and n of the finite values.

    None, NaN and ±inf are left out; the mean is None when nothing is left.
    """
    arr = np.asarray([v for v in values if _finite(v)], dtype=np.float64)
    if arr.size == 0:
        return {"mean": None, "se": None, "n": 0}
    se = float(arr.std(ddof=1) / math.sqrt(arr.size)) if arr.size > 1 else None
    return {"mean": float(arr.mean()), "se": se, "n": int(arr.size)}


def t_test(differences: Sequence[float]) -> dict[str, Any]:
    """The two-sided one-sample t-test of mean(differences) = 0, with its 95% confidence interval.

    t = mean / se with ``df`` = n - 1 degrees of freedom, ``p_value`` =
    2 P(T_df >= |t|) and ``ci95`` = [lo, hi] = mean ± t_{0.975, df} se: the
    paired test of ``scipy.stats.ttest_rel`` on the differences, from
    scipy's t distribution (``scipy.special.stdtr`` and its inverse
    ``stdtrit``, without the per-call overhead of ``scipy.stats``' wrappers:
    a comparison page runs hundreds of tests). All None (``ci95`` [None,
    None]) when no test is defined: fewer than 2 differences, or all equal
    (se = 0; equal to rounding, 1e-12 of their size, counts as equal).
    """
    d = np.asarray(differences, dtype=np.float64)
    none = {"t": None, "df": None, "p_value": None, "ci95": [None, None]}
    if d.size < 2 or not np.all(np.isfinite(d)) or float(np.ptp(d)) <= _TIE * float(np.max(np.abs(d))):
        return none
    from scipy import special  # imported where a test is computed: `term-fl runs` starts without it

    df = d.size - 1
    mean, se = float(d.mean()), float(d.std(ddof=1) / math.sqrt(d.size))
    t = mean / se
    half = float(special.stdtrit(df, 0.975)) * se
    return {"t": t, "df": df, "p_value": float(2.0 * special.stdtr(df, -abs(t))), "ci95": [mean - half, mean + half]}


def sign_flip_p(differences: Sequence[float]) -> float | None:
    """Exact two-sided p-value of the sign-flip test: the share of the 2^n sign patterns s whose
    |sum_i s_i |d_i|| is at least the observed |sum_i d_i|.

    Under the null hypothesis each difference is as likely positive as
    negative; every pattern is counted (the smallest p-value is 2 / 2^n:
    0.25 at n = 3, 0.002 at n = 10). The 2^n sums are split into two halves
    of 2^(n/2) each, sorted, and the pairs counted by bisection, so n = 20
    costs 2 x 1,024 sums. None for no differences.
    """
    d = np.abs(np.asarray(differences, dtype=np.float64))
    if d.size == 0 or not np.all(np.isfinite(d)):
        return None
    observed = abs(float(np.sum(differences)))
    if observed == 0.0:
        return 1.0
    threshold = observed * (1.0 - _TIE)
    half = d.size // 2
    left, right = _signed_sums(d[:half]), sorted(_signed_sums(d[half:]))
    # the distribution is symmetric: count sum >= threshold and sum <= -threshold (disjoint, threshold > 0)
    count = 0
    for a in left:
        count += len(right) - bisect.bisect_left(right, threshold - a)
        count += bisect.bisect_right(right, -threshold - a)
    return count / 2.0**d.size


def _signed_sums(values: np.ndarray) -> list[float]:
    """sum_i s_i v_i for every sign pattern s in {-1, +1}^len(values) (one sum, 0, for no values)."""
    sums = np.zeros(1)
    for v in values.tolist():
        sums = np.concatenate((sums + v, sums - v))
    return sums.tolist()


def paired_difference(values: Mapping[int, float | None], reference: Mapping[int, float | None]) -> dict[str, Any]:
    """``values[seed] - reference[seed]`` over the seeds both have (finite), tested against 0.

    Returns the mean, standard error and n of the differences (:func:`mean_se`),
    ``seeds`` (sorted), the t-test's ``t``, ``df``, ``p_value`` and ``ci95``
    (:func:`t_test`) and ``p_signflip`` (:func:`sign_flip_p`).
    """
    seeds = sorted(s for s in values.keys() & reference.keys() if _finite(values[s]) and _finite(reference[s]))
    differences = [float(values[s]) - float(reference[s]) for s in seeds]  # type: ignore[arg-type]
    return {**mean_se(differences), "seeds": seeds, **t_test(differences), "p_signflip": sign_flip_p(differences)}


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjustment of a family of p-values (None: not in the family, stays None).

    With the m p-values sorted, p_(1) <= ... <= p_(m): adjusted p_(i) =
    max_{j <= i} min(1, (m - j + 1) p_(j)). Rejecting where the adjusted
    value is below alpha controls the chance of any false mark in the family
    at alpha, whatever the dependence between the tests.
    """
    order = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    m = len(order)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted


def is_significant(p_holm: float | None, n: int) -> bool:
    """The rule of every mark: ``p_holm`` < :data:`ALPHA` and at least :data:`MIN_SEEDS` paired seeds."""
    return p_holm is not None and n >= MIN_SEEDS and p_holm < ALPHA
