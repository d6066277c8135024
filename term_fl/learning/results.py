"""What local training takes and reports, without torch: its checked arguments, :class:`EvalResult`, :class:`TrainResult`.

:mod:`term_fl.learning.training` (torch) and :mod:`term_fl.learning.linear_numpy`
(numpy alone) both report in these forms; the ClientApp turns them into a reply.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["EvalResult", "TrainResult", "check_finite", "check_train_args"]


@dataclass(frozen=True)
class EvalResult:
    """Data loss (without the penalty) and accuracy of a model on a set of examples.

    ``loss_tilted`` is the tau-tilted mean loss (equal to ``loss_mean`` when tau = 0).
    """

    loss_mean: float
    loss_sum: float
    loss_tilted: float
    accuracy: float
    correct: int
    examples: int


@dataclass(frozen=True)
class TrainResult:
    """Outcome of local training (:func:`term_fl.learning.training.train`).

    ``before`` evaluates the incoming model on the training data (before any
    step); ``loss_after`` is the mean training loss of the trained model;
    ``weights`` are CPU float32 copies in ``state_dict`` order.
    """

    weights: dict[str, np.ndarray]
    before: EvalResult
    loss_after: float
    num_examples: int
    steps: int


def check_train_args(
    lr: float, epochs: int, batch_size: int, weight_decay: float, tau: float
) -> tuple[float, int, int, float, float]:
    """Validate the training hyperparameters (errors name the argument); return them as float / int."""
    lr = check_finite("lr", lr)
    if lr <= 0.0:
        raise ValueError(f"lr must be > 0, got {lr}.")
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}.")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
    weight_decay = check_finite("weight_decay", weight_decay)
    if weight_decay < 0.0:
        raise ValueError(f"weight_decay must be >= 0, got {weight_decay}.")
    return lr, int(epochs), int(batch_size), weight_decay, check_finite("tau", tau)


def check_finite(name: str, value: float) -> float:
    """``value`` as a float; ValueError naming ``name`` unless it is finite."""
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}.")
    return value
