"""Per-device fairness statistics, and the table of every statistic term-fl reports.

The statistics of per-device test accuracies a_1..a_K are those reported by
"Fair Resource Allocation in Federated Learning" (T. Li, M. Sanjabi,
A. Beirami, V. Smith, ICLR 2020, q-FFL): the average (over devices and pooled
over samples), the worst / best 10 %, the spread (std, variance x 1e4),
Jain's index, entropy and Gini. The loss risks (VaR, CVaR, EVaR, TiVaR) live
in :mod:`term_fl.maths.risks`.

:data:`STATISTICS` lists every statistic once, with its label, its group
(the chart it is drawn in), whether higher is better and the lists it is in
(flags: ``headline``, ``primary``, ``tradeoff``, ``lift``): the console, the
sweep's comparison, the dashboard (its pages and scripts) and the reports
loop over it and keep no list of their own. A new statistic is a function
here, its entry in :func:`fairness_summary` and one line in the table.

The summary names match the ``test`` / ``validation`` objects of
summary.json (docs/contracts.md, 'summary.json'). No I/O, no Flower, no torch.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from term_fl.common.arrays import finite_vector

__all__ = [
    "GROUPS",
    "STATISTICS",
    "Statistic",
    "best_10",
    "entropy",
    "fairness_summary",
    "flagged",
    "gini",
    "jain_index",
    "mean_accuracy",
    "pooled_mean",
    "statistic",
    "statistics_table",
    "std",
    "variance_1e4",
    "worst_10",
]

Vector = NDArray[np.float64]


# --------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class Statistic:
    """One statistic of a round, as every table, chart and comparison shows it.

    Attributes
    ----------
    key : str
        Its name in summaries, the store's ``stats_json`` and comparisons.
    label : str
        How tables and charts name it.
    group : str
        What it measures, in one unit: the statistics of a group share a
        chart (:data:`GROUPS` names the chart).
    direction : int
        +1 when higher is better (accuracy, Jain's index), -1 when lower is
        better (spread, loss risks); the sweep's selection uses it.
    headline : bool
        Shown in compact tables: the sweep's table, the comparison page, the
        runs list.
    description : str
        One line for tooltips and the API's description.
    primary : bool
        One of the four statistics every comparison tests and marks (device
        mean, pooled, worst 10%, std): the paired-difference columns of the
        sweep's table, the dashboard and the report, Holm's family of a table
        (``term_fl.comparison.table``), the per-round curves.
    tradeoff : str
        Its axis in the fairness trade-off chart: ``"x"`` (the device mean),
        ``"y"`` (a chart each, against x) or ``""`` (not drawn there); the
        charts of a swept parameter show the x and y statistics.
    lift : bool
        The statistic a fair strategy lifts (worst 10%): the run's progress
        line beside the x statistic, and "ahead from round" of a comparison.
    """

    key: str
    label: str
    group: str
    direction: int
    headline: bool = False
    description: str = ""
    primary: bool = False
    tradeoff: str = ""
    lift: bool = False

    def __post_init__(self) -> None:
        if self.tradeoff not in ("", "x", "y"):
            raise ValueError(f"Statistic {self.key!r}: tradeoff must be '', 'x' or 'y', got {self.tradeoff!r}")


GROUPS: dict[str, tuple[str, str]] = {
    "accuracy": ("Accuracy across devices", "accuracy"),
    "spread": ("Spread of device accuracies", ""),
    "variance": ("Variance of device accuracies (x 1e4)", ""),
    "index": ("Jain's fairness index", ""),
    "entropy": ("Entropy of device accuracies", "nats"),
    "risk": ("Loss risks over devices", "loss"),
}
"""Group -> the title of its chart and the label of its y axis, in the order the charts appear."""

STATISTICS: tuple[Statistic, ...] = (
    Statistic("mean", "device mean", "accuracy", +1, True,
              "mean of the device accuracies, each device counting once (the papers' 'average')",
              primary=True, tradeoff="x"),
    Statistic("pooled_mean", "pooled", "accuracy", +1, True,
              "pooled accuracy: correct / examples over all devices (large devices count more)", primary=True),
    Statistic("worst_10", "worst 10%", "accuracy", +1, True, "mean accuracy of the worst 10% of devices",
              primary=True, tradeoff="y", lift=True),
    Statistic("best_10", "best 10%", "accuracy", +1, True, "mean accuracy of the best 10% of devices"),
    Statistic("std", "std", "spread", -1, True, "population standard deviation of the device accuracies",
              primary=True, tradeoff="y"),
    Statistic("variance_1e4", "variance x 1e4", "variance", -1, False, "population variance x 10^4 (q-FFL's unit)"),
    Statistic("jain", "Jain's index", "index", +1, False, "(sum a)^2 / (K sum a^2): 1 when all devices are equal"),
    Statistic("gini", "Gini", "spread", -1, False, "Gini coefficient of the device accuracies"),
    Statistic("entropy", "entropy", "entropy", +1, False, "entropy of a / sum a in nats: log K when all are equal"),
    Statistic("min", "min", "accuracy", +1, False, "lowest device accuracy"),
    Statistic("max", "max", "accuracy", +1, False, "highest device accuracy"),
    Statistic("var", "VaR", "risk", -1, False, "value-at-risk of the device losses at level alpha"),
    Statistic("cvar", "CVaR", "risk", -1, False, "conditional value-at-risk of the device losses"),
    Statistic("evar", "EVaR", "risk", -1, False, "entropic value-at-risk of the device losses"),
    Statistic("tivar", "TiVaR", "risk", -1, False, "tilted value-at-risk of the device losses"),
)
"""Every statistic of a round, in table order: :func:`fairness_summary` and
:func:`term_fl.maths.risks.loss_risks` compute them."""

_BY_KEY = {s.key: s for s in STATISTICS}


def flagged(flag: str, value: object = True) -> tuple[str, ...]:
    """The keys of the statistics whose ``flag`` is ``value``, in table order (``flagged("primary")``)."""
    if flag not in Statistic.__dataclass_fields__:
        raise ValueError(f"unknown flag {flag!r}; allowed: {', '.join(Statistic.__dataclass_fields__)}")
    return tuple(s.key for s in STATISTICS if getattr(s, flag) == value)


def statistic(key: str) -> Statistic:
    """The table entry of ``key`` (ValueError naming the allowed keys otherwise)."""
    try:
        return _BY_KEY[key]
    except KeyError:
        raise ValueError(f"unknown statistic {key!r}; allowed: {', '.join(_BY_KEY)}") from None


def statistics_table() -> list[dict[str, object]]:
    """The table as plain dicts (what the dashboard's pages hand to their scripts), with the group titles."""
    return [{**asdict(s), "group_title": GROUPS[s.group][0], "axis": GROUPS[s.group][1]} for s in STATISTICS]


# --------------------------------------------------------------------------- inputs


def _as_accuracies(accuracies: ArrayLike) -> Vector:
    """Return per-device accuracies, each in [0, 1]."""
    array = finite_vector(accuracies, "accuracies")
    if np.any((array < 0.0) | (array > 1.0)):
        raise ValueError(
            f"accuracies must lie in [0, 1] (fractions, not percentages), got {array.tolist()}."
        )
    return array


def _as_counts(values: ArrayLike, name: str, size: int) -> Vector:
    """Return per-device sample counts: non-negative whole numbers, one per device."""
    array = finite_vector(values, name)
    if array.size != size:
        raise ValueError(
            f"{name} must have one entry per device ({size} accuracies), got {array.size}."
        )
    if np.any(array < 0) or np.any(array != np.floor(array)):
        raise ValueError(f"{name} must be non-negative whole numbers, got {array.tolist()}.")
    return array


# --------------------------------------------------------------- accuracy statistics


def _tail_size(num_devices: int) -> int:
    """floor(0.1 K), at least one device (K = 23 gives 2)."""
    return max(1, num_devices // 10)


def _mean(values: Vector) -> float:
    """(1/K) sum_k v_k, kept within [min, max] (summation can round past them)."""
    return float(np.clip(np.mean(values), np.min(values), np.max(values)))


def mean_accuracy(accuracies: ArrayLike) -> float:
    """Unweighted average over devices: (1/K) sum_k a_k."""
    return _mean(_as_accuracies(accuracies))


def pooled_mean(
    accuracies: ArrayLike,
    num_examples: ArrayLike | None = None,
    correct: ArrayLike | None = None,
) -> float | None:
    """Average over test samples: sum_k c_k / sum_k n_k.

    With ``correct`` (c_k) and ``num_examples`` (n_k) it is the pooled
    accuracy; with ``num_examples`` only it is sum_k a_k n_k / sum_k n_k; with
    neither it is undefined and None is returned.

    Raises
    ------
    ValueError
        If the counts are not one non-negative whole number per device, if
        some c_k > n_k, if ``correct`` comes without ``num_examples``, or if
        every n_k is 0.
    """
    a = _as_accuracies(accuracies)
    if num_examples is None:
        if correct is not None:
            raise ValueError("correct needs num_examples (the per-device test set sizes) too.")
        return None
    n = _as_counts(num_examples, "num_examples", a.size)
    total = n.sum()
    if total <= 0:
        raise ValueError(f"num_examples must have a positive total, got {n.tolist()}.")
    if correct is None:
        return float(np.sum(a * n) / total)
    c = _as_counts(correct, "correct", a.size)
    if np.any(c > n):
        raise ValueError(
            f"correct must not exceed num_examples on any device, got correct={c.tolist()} "
            f"and num_examples={n.tolist()}."
        )
    return float(c.sum() / total)


def worst_10(accuracies: ArrayLike) -> float:
    """Mean of the floor(0.1 K) lowest accuracies (at least one device).

    Never above the mean of all devices (rounding excess is dropped).
    """
    a = np.sort(_as_accuracies(accuracies))
    return min(_mean(a[: _tail_size(a.size)]), _mean(a))


def worst_10_devices(accuracies: ArrayLike) -> list[int]:
    """The indices of the floor(0.1 K) lowest accuracies (at least one device): the devices :func:`worst_10` averages.

    Ties are broken by index (a stable sort), so the same accuracies always
    name the same devices.
    """
    a = _as_accuracies(accuracies)
    return [int(i) for i in np.argsort(a, kind="stable")[: _tail_size(a.size)]]


def best_10(accuracies: ArrayLike) -> float:
    """Mean of the floor(0.1 K) highest accuracies (at least one device).

    Never below the mean of all devices (rounding excess is dropped).
    """
    a = np.sort(_as_accuracies(accuracies))
    return max(_mean(a[-_tail_size(a.size) :]), _mean(a))


def std(accuracies: ArrayLike) -> float:
    """Population standard deviation: sqrt((1/K) sum_k (a_k - mean)^2)."""
    return float(np.std(_as_accuracies(accuracies)))


def variance_1e4(accuracies: ArrayLike) -> float:
    """Population variance times 10^4, the unit of the q-FFL paper's tables."""
    return float(1e4 * np.var(_as_accuracies(accuracies)))


def jain_index(accuracies: ArrayLike) -> float:
    """Jain's fairness index J = (sum_k a_k)^2 / (K sum_k a_k^2), in [1/K, 1].

    J = 1 exactly when all accuracies are equal.  When all are 0 the ratio is
    0/0; it is defined as 1.0 there, the value of every other all-equal vector
    (every device is served alike).
    """
    a = _as_accuracies(accuracies)
    squares = float(np.sum(a * a))
    if squares == 0.0:
        return 1.0
    return min(1.0, float(np.sum(a)) ** 2 / (a.size * squares))


def entropy(accuracies: ArrayLike) -> float:
    """Entropy in nats of p = a / sum_k a_k: H = -sum_k p_k log p_k, in [0, log K].

    Terms with p_k = 0 count as 0.  H = log K when all accuracies are equal;
    when all are 0, p is undefined and H is defined as log K, the value of
    every other all-equal vector.
    """
    a = _as_accuracies(accuracies)
    total = float(np.sum(a))
    if total == 0.0:
        return math.log(a.size)
    p = a / total
    p = p[p > 0]
    return min(math.log(a.size), float(-np.sum(p * np.log(p))))


def gini(accuracies: ArrayLike) -> float:
    """Gini coefficient G = sum_i sum_j |a_i - a_j| / (2 K^2 mean(a)), in [0, 1).

    Evaluated in O(K log K) from the sorted values a_(1) <= ... <= a_(K):
    sum_{i<j} (a_(j) - a_(i)) = sum_k (a_(k+1) - a_(k)) k (K - k), a sum of
    non-negative terms.  G = 0 when the mean is 0.
    """
    a = np.sort(_as_accuracies(accuracies))
    mean = _mean(a)
    if mean == 0.0:
        return 0.0
    k = np.arange(1, a.size, dtype=np.float64)
    pair_differences = float(np.sum(np.diff(a) * k * (a.size - k)))
    return pair_differences / (a.size**2 * mean)


def fairness_summary(
    accuracies: ArrayLike,
    num_examples: ArrayLike | None = None,
    correct: ArrayLike | None = None,
) -> dict[str, float | int | None]:
    """Every fairness statistic of one round's per-device accuracies.

    Parameters
    ----------
    accuracies : array-like of shape (K,)
        Per-device accuracies a_k in [0, 1].
    num_examples : array-like of shape (K,), optional
        Per-device test set sizes n_k (non-negative whole numbers); needed for
        ``pooled_mean``.
    correct : array-like of shape (K,), optional
        Per-device numbers of correct predictions c_k <= n_k; with
        ``num_examples`` the pooled mean is sum c_k / sum n_k.

    Returns
    -------
    dict
        The summary.json names, as plain Python numbers: ``mean``,
        ``pooled_mean`` (None without ``num_examples``), ``worst_10``,
        ``best_10``, ``std``, ``variance_1e4``, ``jain``, ``entropy``,
        ``gini``, ``min``, ``max`` and ``K``.

    Raises
    ------
    ValueError
        Naming the argument, for an empty input, NaN or inf, accuracies
        outside [0, 1], mismatched lengths, negative or fractional counts, or
        correct > num_examples.
    """
    a = _as_accuracies(accuracies)
    return {
        "mean": mean_accuracy(a),
        "pooled_mean": pooled_mean(a, num_examples, correct),
        "worst_10": worst_10(a),
        "best_10": best_10(a),
        "std": std(a),
        "variance_1e4": variance_1e4(a),
        "jain": jain_index(a),
        "entropy": entropy(a),
        "gini": gini(a),
        "min": float(np.min(a)),
        "max": float(np.max(a)),
        "K": int(a.size),
    }
