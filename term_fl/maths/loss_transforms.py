"""Reported losses bounded relative to their round, or replaced by ranks: pure functions of one round's F_k.

TERM tilts each client by exp(t F_k), q-FFL by F_k^q and AFL moves its
mixture weights by gamma F_k: each trusts the loss a client reports, in the
loss's own units. A loss transform makes every reported loss relative to the
round's other losses before a strategy reads it (docs/maths.md, 'Loss
transforms'):

- ``"none"``: the reported losses as they are.
- ``"median_mad"``: each loss bounded to the round's median +- c robust
  standard deviations, sigma = 1.4826 x the median absolute deviation
  (MAD; 1.4826 makes sigma the standard deviation of normal losses):
  ``F'_k = clip(F_k, median - c sigma, median + c sigma)``, in the loss's
  units (what q-FFL and AFL read), and the score
  ``z_k = (F'_k - median) / sigma`` in [-c, c], without units (what TERM
  tilts by: t is then per robust standard deviation, whatever the loss).
  When half or more of the losses equal the median (MAD = 0) every loss is
  bounded to the median and every score is 0.
- ``"rank"``: ``r_k = (1 + rank of F_k) / m`` in (0, 1] (ties share their
  mean rank), as loss and as score.

Whatever one client reports, its transformed value stays within the range
the others set: the bounds on its weight that follow are in docs/maths.md
and the README's security section.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["LOSS_TRANSFORMS", "MAD_SCALE", "TransformedLosses", "median_mad", "ranks", "transform_losses"]

LOSS_TRANSFORMS = ("none", "median_mad", "rank")
"""The transforms a strategy can apply to a round's reported losses."""

MAD_SCALE = 1.482602218505602
"""1 / Phi^-1(3/4): sigma = MAD_SCALE x MAD estimates the standard deviation of normally distributed values."""


@dataclass(frozen=True)
class TransformedLosses:
    """One round's losses after a transform.

    Attributes
    ----------
    losses : numpy.ndarray
        What q-FFL and AFL read: the reported losses ("none"), bounded to
        median +- c sigma ("median_mad", the loss's units), or the ranks.
    scores : numpy.ndarray
        What TERM tilts by: the reported losses ("none"), z = (F' - median) /
        sigma in [-c, c] ("median_mad", no units), or the ranks.
    bounded : numpy.ndarray of bool
        Which reported losses "median_mad" moved to a bound.
    median, scale : float
        The round's median loss and sigma ("median_mad"; NaN otherwise).
    """

    losses: NDArray[np.float64]
    scores: NDArray[np.float64]
    bounded: NDArray[np.bool_]
    median: float = float("nan")
    scale: float = float("nan")


def median_mad(losses: ArrayLike, clip: float) -> TransformedLosses:
    """Losses bounded to median +- ``clip`` sigma and their scores z in [-clip, clip] (sigma = 1.4826 MAD).

    Parameters
    ----------
    losses : array-like of shape (m,)
        The round's reported losses, finite (any sign, any magnitude).
    clip : float
        c > 0, in robust standard deviations.
    """
    values = np.asarray(losses, dtype=np.float64)
    median = float(np.median(values))
    with np.errstate(over="ignore", invalid="ignore"):
        scale = MAD_SCALE * float(np.median(np.abs(values - median)))
    if not (np.isfinite(scale) and scale > 0.0):
        # Half or more of the losses equal the median (or half overflow): all bounded to it, no score
        return TransformedLosses(np.full(values.shape, median), np.zeros(values.shape), values != median,
                                 median, scale)
    bounded = np.clip(values, median - clip * scale, median + clip * scale)
    return TransformedLosses(bounded, (bounded - median) / scale, bounded != values, median, scale)


def ranks(losses: ArrayLike) -> NDArray[np.float64]:
    """r_k = (1 + rank of F_k) / m in (0, 1], the lowest loss 1/m and the highest 1; ties share their mean rank."""
    values = np.asarray(losses, dtype=np.float64)
    order = np.argsort(values, kind="stable")
    position = np.empty(values.size)
    position[order] = np.arange(values.size, dtype=np.float64)
    _, tie_group = np.unique(values, return_inverse=True)
    mean_position = np.bincount(tie_group, weights=position) / np.bincount(tie_group)
    return (1.0 + mean_position[tie_group]) / values.size


def transform_losses(losses: ArrayLike, transform: str, clip: float) -> TransformedLosses:
    """The round's losses after ``transform`` (one of :data:`LOSS_TRANSFORMS`); ``clip`` is median_mad's c."""
    values = np.asarray(losses, dtype=np.float64)
    if transform == "none":
        return TransformedLosses(values, values, np.zeros(values.shape, dtype=bool))
    if transform == "median_mad":
        return median_mad(values, clip)
    if transform == "rank":
        r = ranks(values)
        return TransformedLosses(r, r, np.zeros(values.shape, dtype=bool))
    raise ValueError(f"unknown loss transform {transform!r}; allowed: {', '.join(LOSS_TRANSFORMS)}")
