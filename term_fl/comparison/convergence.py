"""A run's curve of an evaluated statistic: its tail average and its change over the last fifth.

Two readings of the per-round statistics that a run records, used where a
single last round says too little:

- :func:`tail_mean`, the mean over the last N evaluated rounds: what the
  sweep's selection of t and q reads on the validation split, so that a
  choice does not rest on one round of a few validation samples (on the
  vehicle data the smallest devices hold 1-2 validation samples, and a
  device's accuracy jumps by 0.5 from one round to the next);
- :func:`last_fifth_change`, the change of a statistic over the last fifth
  of the rounds (least-squares slope over the evaluated rounds there, times
  the length of that fifth): whether a run is converged, e.g. FedAvg's
  validation device mean, before any claim is made against it.

Pure functions over ``(round, value)`` pairs; no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["FLAT", "last_fifth_change", "tail_mean", "tail_means"]

FLAT = 0.01
"""A change over the last fifth of the rounds within +-FLAT (accuracy) counts as flat (converged)."""


def tail_mean(values: Sequence[float], tail: int) -> float:
    """Mean of the last ``tail`` values (all of them when fewer); NaN for none.

    ``tail`` must be >= 1; None and NaN values are skipped.
    """
    if isinstance(tail, bool) or not isinstance(tail, int) or tail < 1:
        raise ValueError(f"tail must be an integer >= 1, got {tail!r}")
    finite = [float(v) for v in values[-tail:] if v is not None and not math.isnan(float(v))]
    return float(np.mean(finite)) if finite else float("nan")


def tail_means(stats: Sequence[Mapping[str, Any]], tail: int) -> dict[str, float]:
    """Per statistic, the mean over the last ``tail`` entries of a run's evaluated rounds.

    ``stats`` holds one mapping of statistics per evaluated round, in round
    order (e.g. the validation statistics); a statistic is averaged over the
    tail rounds that report it as a number (loss risks are computed on the
    validation split only in the last round: their mean is that round's).
    """
    if isinstance(tail, bool) or not isinstance(tail, int) or tail < 1:
        raise ValueError(f"tail must be an integer >= 1, got {tail!r}")
    window = list(stats)[-tail:]
    keys = dict.fromkeys(k for s in window for k, v in s.items() if _is_number(v))
    return {k: tail_mean([s.get(k) for s in window if _is_number(s.get(k))], tail) for k in keys}


def last_fifth_change(rounds: Sequence[int], values: Sequence[float], total_rounds: int) -> float | None:
    """Change of a statistic over the last fifth of ``total_rounds``: slope x length of that fifth.

    The slope is the least-squares line through the ``(round, value)`` pairs
    with round > 4/5 of ``total_rounds`` (evaluated rounds only; None and NaN
    values skipped). None when fewer than two such rounds exist (evaluate
    more often than every fifth of the rounds to have one).
    """
    if total_rounds < 1:
        raise ValueError(f"total_rounds must be >= 1, got {total_rounds}")
    start = 0.8 * total_rounds
    points = [
        (float(r), float(v))
        for r, v in zip(rounds, values, strict=True)
        if r > start and v is not None and not math.isnan(float(v))
    ]
    if len(points) < 2:
        return None
    x, y = np.array(points).T
    if np.ptp(x) == 0:
        return None
    slope = float(np.polyfit(x, y, 1)[0])
    return slope * (total_rounds - start)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
