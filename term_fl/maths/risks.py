"""Loss-quantile risks of per-device losses, and the minimiser over the tilt that EVaR and TiVaR need.

The risks of per-device losses l_1..l_K at level alpha in (0, 1) are the
empirical forms of section 4 of "On Tilted Losses in Machine Learning: Theory
and Applications" (T. Li, A. Beirami, M. Sanjabi, V. Smith, JMLR 24, 2023):

    VaR   = min { g : (1/K) #{i : l_i >= g} <= alpha }
    CVaR  = min_g  g + (1/alpha) mean_i (l_i - g)_+
    EVaR  = min_{t > 0}  R(t) - (1/t) log alpha,   R(t) = (1/t) log mean_i exp(t l_i)
    TiVaR = min_{t real}  l_min + (1/t) log([mean_i exp(t (l_i - l_min))
                                             - (1 - alpha)]_+ / alpha)

with VaR <= TiVaR <= EVaR and VaR <= CVaR <= EVaR. EVaR and TiVaR are
minimised over t by a vectorised grid-and-bracket search in log |t|
(:func:`_minimise_over_tau`). Their names in :data:`term_fl.maths.fairness.STATISTICS`
are ``var``, ``cvar``, ``evar``, ``tivar``. No I/O, no Flower, no torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np
from numpy.typing import ArrayLike, NDArray

from term_fl.common.arrays import finite_vector

__all__ = [
    "conditional_value_at_risk",
    "entropic_value_at_risk",
    "loss_risks",
    "tilted_value_at_risk",
    "value_at_risk",
]

Vector = NDArray[np.float64]

# alpha * K within this distance of an integer counts as that integer, so that
# alpha = 0.29 with K = 100 keeps 29 losses in the tail although 0.29 * 100 is
# 28.999999999999996 in binary floating point.
_COUNT_TOLERANCE = 1e-9

# EVaR and TiVaR minimise over the tilt in the dimensionless tau = t (l_max - l_min):
# a grid of log10 |tau| (24 points a decade), then a refinement between the
# grid neighbours of the lowest few local minima of the grid: each step
# evaluates _REFINE_POINTS equally spaced points of every bracket in one
# vectorised call and keeps the neighbours of the best point, so a bracket
# shrinks by 2 / (_REFINE_POINTS + 1) per step (4 steps: from 1/12 of a decade
# to 8e-8 of one, about the precision of a 30-step golden-section search, in 4
# numpy calls instead of 30).
_LOG10_TAU_GRID = np.linspace(-6.0, 12.0, 18 * 24 + 1)
_REFINED_MINIMA = 4
_REFINE_POINTS = 63
_REFINE_STEPS = 4

# Above this tau, mean_i exp(tau z_i) with z_i in [0, 1] is taken in the log
# domain (below it, mean_i expm1(tau z_i) keeps full accuracy near tau = 0).
_LOG_DOMAIN_TAU = 500.0


def _as_alpha(alpha: float) -> float:
    """Return the tail level alpha, a float strictly between 0 and 1."""
    try:
        level = float(alpha)
    except (TypeError, ValueError) as err:
        raise ValueError(f"alpha must be a real number in (0, 1), got {alpha!r}.") from err
    if not 0.0 < level < 1.0:
        raise ValueError(f"alpha must lie strictly between 0 and 1, got {level}.")
    return level


# ------------------------------------------------------------------ loss risks


def _tail_mass(alpha: float, size: int) -> tuple[float, float]:
    """alpha K as an unevaluated sum hi + lo (lo the rounding error of hi).

    An alpha K within 1e-9 of an integer is that integer (lo = 0), so alpha is
    read as the decimal the user wrote: 0.29 * 100 counts 29 losses, although
    it is 28.999999999999996 in binary.
    """
    mass = Fraction(alpha) * size
    nearest = round(mass)
    if abs(mass - nearest) <= _COUNT_TOLERANCE:
        return float(nearest), 0.0
    hi = float(mass)
    return hi, float(mass - Fraction(hi))


def _var(losses: Vector, alpha: float) -> float:
    """VaR of validated losses: the (m+1)-th largest loss, m = floor(alpha K)."""
    tail = math.floor(_tail_mass(alpha, losses.size)[0])
    return float(np.sort(losses)[::-1][min(tail, losses.size - 1)])


def _cvar(losses: Vector, alpha: float, var: float) -> float:
    """CVaR of validated losses, given their VaR (a minimising g)."""
    return var + float(np.sum(np.maximum(losses - var, 0.0))) / (alpha * losses.size)


def _evar_objective(z: Vector, alpha: float, tau: Vector) -> Vector:
    """(EVaR objective at t = tau / s - l_max) / s, for z = (l - l_min) / s and tau > 0.

    R(t) - (1/t) log alpha = l_max + s (log mean exp(tau (z - 1)) - log alpha) / tau,
    with every exponent <= 0.
    """
    log_mean = np.log1p(np.mean(np.expm1(tau[:, None] * (z[None, :] - 1.0)), axis=1))
    return (log_mean - math.log(alpha)) / tau


def _log_ratio_negative_tilt(exponents: Vector, mass: tuple[float, float]) -> Vector:
    """log(B / alpha), B = M - (1 - alpha), for rows of tau z with tau < 0; -inf where B <= 0.

    K B = alpha K + sum_i expm1(tau z_i) is evaluated as
    (alpha K - #big) + sum_big exp(tau z_i) + sum_small expm1(tau z_i), where
    the "big" terms have exp(tau z_i) < 1/2: the integer part is exact and
    the two sums keep full relative accuracy.  Without big terms (small
    |tau|) the ratio is log1p(sum_small / (alpha K)); when the first two
    parts cancel exactly, log B stays in the log domain (so the limit
    t -> -inf is not lost to underflow).  A B within rounding noise of 0
    counts as <= 0.
    """
    alpha_k = mass[0] + mass[1]
    big = exponents < -math.log(2.0)
    constant = (mass[0] - np.count_nonzero(big, axis=1)) + mass[1]
    small_sum = np.sum(np.where(big, 0.0, np.expm1(exponents)), axis=1)
    big_exponents = np.where(big, exponents, -np.inf)
    shift = np.max(big_exponents, axis=1)
    has_big = np.isfinite(shift)
    log_big = np.full(shift.shape, -np.inf)
    log_big[has_big] = shift[has_big] + np.log(
        np.sum(np.exp(big_exponents[has_big] - shift[has_big, None]), axis=1)
    )
    big_sum = np.exp(log_big)
    bracket = constant + big_sum + small_sum
    noise = 16.0 * np.finfo(np.float64).eps * (np.abs(constant) + big_sum - small_sum)
    log_ratio = np.full(shift.shape, -np.inf)
    inside = bracket > noise
    log_ratio[inside] = np.log(bracket[inside]) - math.log(alpha_k)
    near_one = inside & ~has_big
    log_ratio[near_one] = np.log1p(small_sum[near_one] / alpha_k)
    pure = has_big & (constant == 0.0) & (small_sum == 0.0)
    log_ratio[pure] = log_big[pure] - math.log(alpha_k)
    return log_ratio


def _tivar_objective(
    z: Vector, alpha: float, mass: tuple[float, float], tau: Vector
) -> Vector:
    """(TiVaR objective at t = tau / s - l_min) / s, for z = (l - l_min) / s and tau != 0.

    ``mass`` is alpha K from _tail_mass.

    The objective is l_min + s (1/tau) log(B / alpha) with the bracket
    B = [M - (1 - alpha)]_+ and M = mean exp(tau z).  A bracket <= 0 (only
    possible for tau < 0) gives +inf, the limit of log(B) / tau there.  Regimes:

    - 0 < tau <= 500: B / alpha = 1 + mean(expm1(tau z)) / alpha, all terms >= 0;
    - tau > 500: log B = log M + log1p(-(1 - alpha) / M), log M max-shifted;
    - tau < 0: see _log_ratio_negative_tilt.
    """
    value = np.full(tau.shape, np.inf)

    middle = (tau > 0.0) & (tau <= _LOG_DOMAIN_TAU)
    if np.any(middle):
        t = tau[middle]
        excess = np.mean(np.expm1(t[:, None] * z[None, :]), axis=1) / alpha
        value[middle] = np.log1p(excess) / t

    large = tau > _LOG_DOMAIN_TAU
    if np.any(large):
        t = tau[large]
        log_m = t + np.log(np.mean(np.exp(t[:, None] * (z[None, :] - 1.0)), axis=1))
        log_bracket = log_m + np.log1p(-(1.0 - alpha) * np.exp(-log_m))
        value[large] = (log_bracket - math.log(alpha)) / t

    negative = tau < 0.0
    if np.any(negative):
        t = tau[negative]
        log_ratio = _log_ratio_negative_tilt(t[:, None] * z[None, :], mass)
        inside = np.isfinite(log_ratio)
        rows = np.flatnonzero(negative)[inside]
        value[rows] = log_ratio[inside] / t[inside]
    return value


def _minimise_over_tau(objective: Callable[[Vector], Vector], sign: float) -> tuple[float, float]:
    """Minimise ``objective`` over tau = sign 10^u, u in the grid range.

    Grid search in u, then a vectorised bracket refinement between the
    neighbours of the lowest few grid minima (for a function unimodal on a
    bracket, the minimum stays between the neighbours of the best point).
    Returns the lowest value seen and its tau ((inf, nan) when the objective
    is +inf on the whole grid).
    """

    def at(u: Vector) -> Vector:
        return objective(sign * np.power(10.0, u))

    grid = _LOG10_TAU_GRID
    values = at(grid)
    best = int(np.argmin(values))
    best_value, best_u = float(values[best]), float(grid[best])
    if not math.isfinite(best_value):
        return math.inf, math.nan
    left = np.concatenate(([np.inf], values[:-1]))
    right = np.concatenate((values[1:], [np.inf]))
    minima = np.flatnonzero((values <= left) & (values <= right) & np.isfinite(values))
    minima = minima[np.argsort(values[minima], kind="stable")][:_REFINED_MINIMA]
    low = grid[np.maximum(minima - 1, 0)]
    high = grid[np.minimum(minima + 1, grid.size - 1)]
    fractions = np.arange(1, _REFINE_POINTS + 1) / (_REFINE_POINTS + 1)
    rows = np.arange(low.size)
    for _ in range(_REFINE_STEPS):
        width = high - low
        points = low[:, None] + width[:, None] * fractions[None, :]
        f = at(points.ravel()).reshape(points.shape)
        i = np.argmin(f, axis=1)
        row = int(np.argmin(f[rows, i]))
        if f[row, i[row]] < best_value:
            best_value, best_u = float(f[row, i[row]]), float(points[row, i[row]])
        step = width / (_REFINE_POINTS + 1)
        low, high = points[rows, i] - step, points[rows, i] + step
    return best_value, sign * 10.0**best_u


def _evar(losses: Vector, alpha: float, cvar: float) -> tuple[float, float]:
    """EVaR and its minimising t for validated losses, given their CVaR."""
    l_min, l_max = float(np.min(losses)), float(np.max(losses))
    spread = l_max - l_min
    if spread == 0.0:
        return l_max, math.inf
    z = (losses - l_min) / spread
    value, tau = _minimise_over_tau(lambda t: _evar_objective(z, alpha, t), 1.0)
    # t -> +inf gives l_max - (1/t) log alpha -> l_max: the infimum is never above it.
    candidates = [(l_max, math.inf), (l_max + spread * value, tau / spread)]
    evar, t_star = min(candidates, key=lambda c: c[0])
    # EVaR >= CVaR (the paper): a lower value can only be rounding.
    return max(evar, cvar), t_star


def _tivar(
    losses: Vector, alpha: float, var: float, evar: float, evar_t: float
) -> tuple[float, float]:
    """TiVaR and its minimising t for validated losses, given VaR and EVaR (with its t)."""
    l_min, l_max = float(np.min(losses)), float(np.max(losses))
    spread = l_max - l_min
    if spread == 0.0:
        # The bracket is alpha for every t: each t attains l_min; report t = 0.
        return l_min, 0.0
    z = (losses - l_min) / spread
    mass = _tail_mass(alpha, losses.size)

    def objective(tau: Vector) -> Vector:
        return _tivar_objective(z, alpha, mass, tau)

    candidates = [
        # t -> +inf: the objective tends to l_max.
        (l_max, math.inf),
        # t -> 0: log(1 + t mean(l - l_min) / alpha) / t -> mean(l - l_min) / alpha.
        (l_min + spread * float(np.mean(z)) / alpha, 0.0),
    ]
    if (mass[0] - np.count_nonzero(z > 0)) + mass[1] > 0.0:
        # More than (1 - alpha) K losses equal l_min: as t -> -inf the bracket
        # tends to #{l_i = l_min} / K - (1 - alpha) > 0 and the objective to
        # l_min, which is also VaR, the lower bound.
        candidates.append((l_min, -math.inf))
    for sign in (1.0, -1.0):
        value, tau = _minimise_over_tau(objective, sign)
        candidates.append((l_min + spread * value, tau / spread))
    if math.isfinite(evar_t):
        # For t > 0 the TiVaR objective is pointwise at most the EVaR one.
        value = float(objective(np.array([evar_t * spread]))[0])
        candidates.append((l_min + spread * value, evar_t))
    tivar, t_star = min(candidates, key=lambda c: c[0])
    # VaR <= TiVaR <= EVaR (the paper): a value outside can only be rounding.
    return min(max(tivar, var), evar), t_star


def value_at_risk(losses: ArrayLike, alpha: float) -> float:
    """Value-at-risk VaR(1 - alpha) = min { g : (1/K) #{i : l_i >= g} <= alpha }.

    The bound is the (m+1)-th largest loss with m = floor(alpha K) (an
    alpha K within 1e-9 of an integer counts as that integer).

    Raises
    ------
    ValueError
        For empty, non-finite or non-1-D losses, or alpha outside (0, 1).
    """
    return _var(finite_vector(losses, "losses"), _as_alpha(alpha))


def conditional_value_at_risk(losses: ArrayLike, alpha: float) -> float:
    """Conditional value-at-risk CVaR(1 - alpha) = min_g g + (1/alpha) mean_i (l_i - g)_+.

    The objective is piecewise linear and convex in g and VaR minimises it
    (Rockafellar and Uryasev, 2000), so CVaR = VaR + (1/alpha) mean_i (l_i - VaR)_+
    exactly.  When alpha K is an integer it is the mean of the alpha K largest
    losses.
    """
    array = finite_vector(losses, "losses")
    level = _as_alpha(alpha)
    return _cvar(array, level, _var(array, level))


def entropic_value_at_risk(losses: ArrayLike, alpha: float) -> tuple[float, float]:
    """Entropic value-at-risk EVaR(1 - alpha) = min_{t > 0} R(t) - (1/t) log alpha.

    R(t) = (1/t) log mean_i exp(t l_i) is the tilted objective.  The function
    of t is unimodal (convex in 1/t); it is minimised over t = tau / (l_max -
    l_min) with log10 tau in [-6, 12] by a grid and a bracket refinement,
    in the log domain, and compared with the limit t -> +inf, l_max (so
    EVaR <= max l_i).  All losses equal gives that value with t = inf.
    CVaR <= EVaR holds exactly: a found value below CVaR (rounding) is
    raised to it.

    Returns
    -------
    (float, float)
        EVaR and the minimising t (math.inf when the infimum is the limit).
    """
    array = finite_vector(losses, "losses")
    level = _as_alpha(alpha)
    return _evar(array, level, _cvar(array, level, _var(array, level)))


def tilted_value_at_risk(losses: ArrayLike, alpha: float) -> tuple[float, float]:
    """Tilted value-at-risk TiVaR(1 - alpha), minimised over real t.

    TiVaR = min_t l_min + (1/t) log([mean_i exp(t (l_i - l_min)) - (1 - alpha)]_+ / alpha),

    where a bracket <= 0 (possible only for t < 0) counts as +inf.  Both signs
    of t are searched as for EVaR, together with the limits t -> 0
    (l_min + mean_i (l_i - l_min) / alpha), t -> +inf (l_max) and, when more
    than (1 - alpha) K losses equal l_min, t -> -inf (l_min), and with EVaR's
    minimiser (where the TiVaR objective is below EVaR).  All losses equal
    gives that value, attained at every t; t = 0 is reported.
    VaR <= TiVaR <= EVaR holds exactly: a found value outside (rounding) is
    moved onto the bound.

    Returns
    -------
    (float, float)
        TiVaR and the minimising t (0.0 or +-math.inf for the limits).
    """
    array = finite_vector(losses, "losses")
    level = _as_alpha(alpha)
    var = _var(array, level)
    evar, evar_t = _evar(array, level, _cvar(array, level, var))
    return _tivar(array, level, var, evar, evar_t)


def loss_risks(losses: ArrayLike, alpha: float = 0.1) -> dict[str, float]:
    """VaR, CVaR, EVaR and TiVaR of per-device losses at level alpha.

    Parameters
    ----------
    losses : array-like of shape (K,)
        Finite per-device losses l_k.
    alpha : float, default 0.1
        Tail level in (0, 1): the risks look at the worst alpha fraction.

    Returns
    -------
    dict
        ``alpha``, ``var``, ``cvar``, ``evar``, ``evar_t`` (its minimising t),
        ``tivar`` and ``tivar_t``, as Python floats, with
        var <= tivar <= evar and var <= cvar <= evar.  The t values may be
        +-inf (or 0.0 for TiVaR) when the optimum is a limit.
    """
    array = finite_vector(losses, "losses")
    level = _as_alpha(alpha)
    var = _var(array, level)
    cvar = _cvar(array, level, var)
    evar, evar_t = _evar(array, level, cvar)
    tivar, tivar_t = _tivar(array, level, var, evar, evar_t)
    return {
        "alpha": level,
        "var": var,
        "cvar": cvar,
        "evar": evar,
        "evar_t": evar_t,
        "tivar": tivar,
        "tivar_t": tivar_t,
    }
