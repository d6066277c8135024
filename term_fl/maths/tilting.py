"""Tilted empirical risk: the objects of TERM as plain numpy functions.

Li, Beirami, Sanjabi, Smith, "On Tilted Losses in Machine Learning: Theory and
Applications", JMLR 24 (2023).  Notation follows the paper and docs/maths.md:

- tilted objective  R(t) = (1/t) log sum_i a_i exp(t l_i), with R(0) the mean;
- tilted weights    p_i = a_i exp(t l_i) / sum_j a_j exp(t l_j);
- running estimate  Rt <- (1/t) log((1 - lam) exp(t Rt) + lam exp(t R_S))
  of the stochastic (hierarchical) TERM algorithm, and its weights
  a_k exp(t F_k - t Rt);
- hierarchical tilt J(t, tau) = (1/t) log sum_g a_g exp(t R_g(tau)).

t > 0 magnifies large values (fairness: R -> max as t -> +inf), t < 0
suppresses them (robustness: R -> min as t -> -inf).  Every function works in
the log domain, so t = +-1000 with values up to 1e4 stays finite, and t = 0 is
the exact linear limit.  No I/O, no Flower, no torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from term_fl.common.arrays import finite_vector

__all__ = [
    "TermRound",
    "hierarchical_objective",
    "running_tilted_weights",
    "term_round",
    "tilted_objective",
    "tilted_weights",
    "update_running_estimate",
]

# Below this bound on |t (l_i - mean)| the objective is evaluated as
# mean + log1p(sum_i a_i expm1(t c_i)) / t, which keeps full relative accuracy
# as t -> 0; above it, as a max-shifted log-sum-exp.
_SMALL_EXPONENT = 1.0
# Below this |t c_i|, R(t) = mean + (t/2) sum_i a_i c_i^2 to machine precision
# (the next term is t^2 c^3 / 6): no division of rounded t c_i by t.
_SERIES_EXPONENT = 1e-8


def _as_tilt(t: float, name: str = "t") -> float:
    """Return the tilt ``t`` as a finite float."""
    try:
        tilt = float(t)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a real number, got {t!r}.") from err
    if not math.isfinite(tilt):
        raise ValueError(f"{name} must be finite, got {tilt}.")
    return tilt


def _normalised_weights(
    weights: ArrayLike | None, size: int, name: str = "weights"
) -> NDArray[np.float64]:
    """Return a_i = w_i / sum_j w_j (uniform 1/size when ``weights`` is None)."""
    if weights is None:
        return np.full(size, 1.0 / size)
    try:
        array = np.asarray(weights, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a 1-D sequence of real numbers: {err}") from err
    if array.ndim != 1 or array.size != size:
        raise ValueError(
            f"{name} must be 1-D with one entry per value ({size}), "
            f"got shape {array.shape}."
        )
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must be finite (no NaN or inf), got {array.tolist()}.")
    if np.any(array < 0):
        raise ValueError(f"{name} must be non-negative, got {array.tolist()}.")
    total = array.sum()
    if total <= 0:
        raise ValueError(f"{name} must have a positive sum, got {total}.")
    return array / total


def _tilted_objective(values: NDArray[np.float64], t: float, a: NDArray[np.float64]) -> float:
    """R(t) for validated values and normalised weights a (the shared kernel)."""
    support = a > 0
    values, a = values[support], a[support]
    mean = float(np.sum(a * values))
    if t == 0.0:
        return mean
    # Centre on the mean: R(t) = mean + (1/t) log sum_i a_i exp(t c_i).
    exponents = t * (values - mean)
    largest = float(np.max(exponents))
    extent = max(largest, -float(np.min(exponents)))
    if extent <= _SERIES_EXPONENT:
        # (1/t) log sum_i a_i exp(t c_i) = (t/2) sum_i a_i c_i^2 + O(t^2 c^3), sum_i a_i c_i = 0: a tiny
        # (even subnormal) t would otherwise divide the rounding of t c_i by t.
        return mean + 0.5 * t * float(np.sum(a * np.square(values - mean)))
    if extent <= _SMALL_EXPONENT:
        # sum_i a_i exp(x_i) = 1 + sum_i a_i expm1(x_i) since sum_i a_i = 1.
        log_sum = math.log1p(float(np.sum(a * np.expm1(exponents))))
    else:
        log_sum = largest + math.log(float(np.sum(a * np.exp(exponents - largest))))
    return mean + log_sum / t


def tilted_objective(values: ArrayLike, t: float, weights: ArrayLike | None = None) -> float:
    """Tilted objective R(t) of ``values`` l_1..l_N.

    R(t) = (1/t) log sum_i a_i exp(t l_i),   a_i = w_i / sum_j w_j,

    with R(0) = sum_i a_i l_i, the weighted mean (the limit t -> 0).  R is
    non-decreasing in t, tends to max_i l_i as t -> +inf and to min_i l_i as
    t -> -inf (over the values with a_i > 0), and R(t; l + c) = R(t; l) + c.

    Parameters
    ----------
    values : array-like of shape (N,)
        Finite values l_i (losses).
    t : float
        Tilt. t > 0 emphasises large values, t < 0 small ones.
    weights : array-like of shape (N,), optional
        Non-negative weights w_i with a positive sum; uniform when None.

    Returns
    -------
    float
        R(t), evaluated in the log domain: stable for |t| up to 1e3 and values up
        to 1e4, and accurate to about machine precision for tiny |t|.
    """
    values = finite_vector(values)
    return _tilted_objective(values, _as_tilt(t), _normalised_weights(weights, values.size))


def tilted_weights(
    values: ArrayLike, t: float, weights: ArrayLike | None = None
) -> NDArray[np.float64]:
    """Tilted weights p_i = a_i exp(t l_i) / sum_j a_j exp(t l_j).

    They sum to 1, equal a_i at t = 0 exactly, and satisfy
    p_i = a_i exp(t (l_i - R(t))).  Computed with a max shift of t l_i.

    Parameters
    ----------
    values : array-like of shape (N,)
        Finite values l_i.
    t : float
        Tilt.
    weights : array-like of shape (N,), optional
        Non-negative base weights with a positive sum; uniform when None.

    Returns
    -------
    numpy.ndarray of shape (N,)
        The weights p_i (0 where a_i = 0).
    """
    values = finite_vector(values)
    t = _as_tilt(t)
    a = _normalised_weights(weights, values.size)
    if t == 0.0:
        return a
    support = a > 0
    exponents = t * values[support]
    unnormalised = a[support] * np.exp(exponents - np.max(exponents))
    p = np.zeros_like(a)
    p[support] = unnormalised / np.sum(unnormalised)
    return p


def update_running_estimate(
    previous: float | None, batch_objective: float, t: float, lam: float
) -> float:
    """Running estimate of the tilted objective across rounds.

    Rt <- (1/t) log((1 - lam) exp(t Rt) + lam exp(t R_S)),

    with R_S the tilted objective of this round's sample.  That is the tilted
    objective of the two values (Rt, R_S) with weights (1 - lam, lam), so it is
    evaluated by the same log-domain kernel; t = 0 gives the linear mix
    (1 - lam) Rt + lam R_S, and lam = 1 (no memory) gives R_S.

    Parameters
    ----------
    previous : float or None
        Rt of the previous round; None in the first round, which returns R_S.
    batch_objective : float
        R_S, the tilted objective of this round's sample.
    t : float
        Tilt.
    lam : float
        Mixing rate lambda in (0, 1].

    Returns
    -------
    float
        The updated Rt.
    """
    batch = finite_vector([batch_objective], "batch_objective")
    t = _as_tilt(t)
    lam = _as_tilt(lam, "lam")
    if not 0.0 < lam <= 1.0:
        raise ValueError(f"lam must be in (0, 1], got {lam}.")
    if previous is None:
        return float(batch[0])
    estimate = finite_vector([previous], "previous")[0]
    return _tilted_objective(np.array([estimate, batch[0]]), t, np.array([1.0 - lam, lam]))


def running_tilted_weights(
    values: ArrayLike,
    t: float,
    running_estimate: float,
    weights: ArrayLike | None = None,
) -> NDArray[np.float64]:
    """Weights of the stochastic TERM algorithm, p_k = a_k exp(t F_k - t Rt).

    Computed as exp(log a_k + t (F_k - Rt)).  They sum to 1 only when Rt is the
    tilted objective of these values (lam = 1); with a running estimate
    (lam < 1) they need not.  At t = 0 they are a_k exactly.

    Parameters
    ----------
    values : array-like of shape (N,)
        Finite values F_k.
    t : float
        Tilt.
    running_estimate : float
        Rt, e.g. from :func:`update_running_estimate`.
    weights : array-like of shape (N,), optional
        Non-negative base weights with a positive sum (normalised to a_k);
        uniform when None.

    Returns
    -------
    numpy.ndarray of shape (N,)
        The weights p_k.

    Raises
    ------
    ValueError
        On invalid inputs, or when a weight overflows (Rt far below the values
        for t > 0, or far above them for t < 0).
    """
    values = finite_vector(values)
    t = _as_tilt(t)
    estimate = finite_vector([running_estimate], "running_estimate")[0]
    a = _normalised_weights(weights, values.size)
    if t == 0.0:
        return a
    support = a > 0
    p = np.zeros_like(a)
    with np.errstate(over="ignore"):
        p[support] = np.exp(np.log(a[support]) + t * (values[support] - estimate))
    if not np.all(np.isfinite(p)):
        raise ValueError(
            f"running_estimate {estimate} is too far from the values for t = {t}: "
            "exp(t F_k - t Rt) overflows."
        )
    return p


@dataclass(frozen=True)
class TermRound:
    """Result of one round of device-level TERM aggregation.

    Attributes
    ----------
    weights : numpy.ndarray
        p_k = a_k exp(t F_k - t Rt) per sampled device (sum to 1 when lam = 1).
    batch_objective : float
        R_S, the tilted objective of this round's sample.
    running_estimate : float
        Rt after this round.
    """

    weights: NDArray[np.float64]
    batch_objective: float
    running_estimate: float


def term_round(
    losses: ArrayLike,
    base_weights: ArrayLike | None,
    t: float,
    lam: float,
    previous_estimate: float | None,
) -> TermRound:
    """One round of TERM over the sampled devices S (docs/maths.md, in this order).

    1. a_k = n_k / sum_{j in S} n_j (normalise the base weights over S);
    2. R_S = (1/t) log sum_k a_k exp(t F_k);
    3. Rt = R_S in the first round, else
       Rt <- (1/t) log((1 - lam) exp(t Rt) + lam exp(t R_S));
    4. p_k = a_k exp(t F_k - t Rt).

    With lam = 1, Rt = R_S and p_k are the tilted weights (they sum to 1; they
    are computed by :func:`tilted_weights`); at t = 0, p_k = a_k (FedAvg).

    Parameters
    ----------
    losses : array-like of shape (m,)
        F_k, the loss of the global model on each sampled device.
    base_weights : array-like of shape (m,) or None
        Non-negative base weights (e.g. n_k); uniform when None.
    t : float
        Tilt.
    lam : float
        Mixing rate lambda in (0, 1].
    previous_estimate : float or None
        Rt of the previous round; None in the first round.

    Returns
    -------
    TermRound
    """
    values = finite_vector(losses, "losses")
    t = _as_tilt(t)
    a = _normalised_weights(base_weights, values.size, "base_weights")
    batch_objective = _tilted_objective(values, t, a)
    estimate = update_running_estimate(previous_estimate, batch_objective, t, lam)
    if lam == 1.0:
        weights = tilted_weights(values, t, base_weights)
    else:
        weights = running_tilted_weights(values, t, estimate, base_weights)
    return TermRound(weights=weights, batch_objective=batch_objective, running_estimate=estimate)


def hierarchical_objective(
    group_values: Sequence[ArrayLike],
    t: float,
    tau: float,
    group_weights: ArrayLike | None = None,
) -> float:
    """Hierarchical tilted objective J(t, tau) of the paper.

    J(t, tau) = (1/t) log sum_g a_g exp(t R_g(tau)),
    R_g(tau) = (1/tau) log (1/|g|) sum_{x in g} exp(tau l(x)),

    a tilt tau over the samples inside each group (device) and a tilt t across
    groups.  a_g is proportional to the group sizes by default, so that
    J(t, t) is the t-tilted objective of all samples pooled (uniform);
    t = 0 and tau = 0 are the exact linear limits.

    Parameters
    ----------
    group_values : sequence of array-like
        One non-empty 1-D array of finite sample values per group.
    t : float
        Tilt across groups.
    tau : float
        Tilt within each group.
    group_weights : array-like of shape (G,), optional
        Non-negative group weights with a positive sum; group sizes when None.

    Returns
    -------
    float
        J(t, tau).
    """
    if isinstance(group_values, np.ndarray) and group_values.ndim < 2:
        raise ValueError("group_values must be a sequence of 1-D arrays, one per group.")
    if len(group_values) == 0:
        raise ValueError("group_values must hold at least one group, got none.")
    groups = [finite_vector(v, f"group_values[{g}]") for g, v in enumerate(group_values)]
    t = _as_tilt(t)
    tau = _as_tilt(tau, "tau")
    sizes = np.array([g.size for g in groups], dtype=np.float64)
    raw_weights = sizes if group_weights is None else group_weights
    a = _normalised_weights(raw_weights, len(groups), "group_weights")
    group_objectives = np.array(
        [_tilted_objective(g, tau, np.full(g.size, 1.0 / g.size)) for g in groups]
    )
    return _tilted_objective(group_objectives, t, a)
