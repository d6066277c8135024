"""One device's local training and evaluation of a linear model (linear SVM, softmax regression) in numpy alone.

The arithmetic of :func:`term_fl.learning.training.train_tensors` for the
two linear models, written with numpy on float32 arrays, for a ClientApp
that answers without importing torch (:mod:`term_fl.clientapp.linear_app`):
the same batches (each epoch's permutation is the one ``torch.randperm``
draws with the device's seed, :func:`term_fl.learning.permutations.randperms`;
a device of at most ``batch_size`` examples takes one batch in order),
the same objective per batch (the sample-level tilted loss, the model's L2
penalty ``(l2 / 2) ||W||^2``, weight decay on both parameters) and the same
SGD step, and the same report (the incoming model's loss on the training
rows, mean, sum and tau-tilted, and accuracy; the trained model's mean
loss). Products and sums run in numpy's order, not torch's: the results
agree to float32 rounding (``tests/test_linear_numpy.py``).

A model is its two arrays as the global model's record holds them:
``linear.weight`` ``(C, d)`` and ``linear.bias`` ``(C,)``, with ``C = 1``
for the linear SVM (one score, labels 0/1 as -1/+1, hinge loss) and ``C``
classes for softmax regression (cross-entropy).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from term_fl.learning.permutations import randperms
from term_fl.learning.results import EvalResult, TrainResult, check_train_args

__all__ = ["NAMES", "evaluate_linear", "train_linear"]

NAMES = ("linear.weight", "linear.bias")
"""The parameters of both linear models, in ``state_dict`` order."""

_TINY = {np.dtype(np.float32): np.finfo(np.float32).tiny, np.dtype(np.float64): np.finfo(np.float64).tiny}


def _scores(weight: np.ndarray, bias: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``x W^T + b``: ``(n, C)`` float32."""
    return x @ weight.T + bias


def _losses_and_hits(scores: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-row data losses (float32) and whether the prediction is the label.

    One score: hinge ``max(0, 1 - y_pm s)`` and class 1 where ``s > 0``;
    else cross-entropy ``log sum exp(s) - s_y`` (max-shifted) and the first
    of the largest scores.
    """
    if scores.shape[1] == 1:
        s = scores[:, 0]
        y_pm = 2.0 * y.astype(np.float32) - 1.0
        return np.maximum(np.float32(0.0), np.float32(1.0) - y_pm * s), (s > 0).astype(np.int64) == y
    top = scores.max(axis=1, keepdims=True)
    shifted = scores - top
    log_total = np.log(np.exp(shifted).sum(axis=1))
    return log_total - shifted[np.arange(len(y)), y], scores.argmax(axis=1) == y


def _negligible(tau: float, dtype: np.dtype) -> bool:
    """:func:`term_fl.learning.training.negligible_tilt` for numpy dtypes."""
    return abs(tau) < math.sqrt(_TINY[np.dtype(dtype)])


def _tilted_mean(losses: np.ndarray, tau: float) -> float:
    """:func:`term_fl.learning.training.tilted_mean` of float64 losses: ``c + log1p(mean expm1(tau (l - c))) / tau``."""
    if _negligible(tau, losses.dtype):
        return float(losses.mean())
    shift = losses.max() if tau > 0 else losses.min()
    return float(shift + np.log1p(np.expm1(tau * (losses - shift)).mean()) / tau)


def _report(losses: np.ndarray, hits: np.ndarray, tau: float) -> EvalResult:
    """An :class:`EvalResult` from per-row losses and hits (losses summed in float64)."""
    loss = losses.astype(np.float64)
    loss_sum = float(loss.sum())
    correct = int(np.count_nonzero(hits))
    mean = loss_sum / loss.size
    return EvalResult(loss_mean=mean, loss_sum=loss_sum, loss_tilted=mean if tau == 0.0 else _tilted_mean(loss, tau),
                      accuracy=correct / loss.size, correct=correct, examples=int(loss.size))


def _score_gradient(scores: np.ndarray, y: np.ndarray, tau: float | None) -> np.ndarray:
    """d(batch objective)/d(scores): the mean loss's, or with ``tau`` the tilted mean's (the shift held constant)."""
    n = len(y)
    if tau is None:
        row_weight = np.full(n, np.float32(1.0) / np.float32(n), dtype=np.float32)
    else:
        losses, _ = _losses_and_hits(scores, y)
        shift = losses.max() if tau > 0 else losses.min()
        e = np.expm1(np.float32(tau) * (losses - shift))
        row_weight = (e + np.float32(1.0)) / (np.float32(n) + e.sum())
    if scores.shape[1] == 1:
        y_pm = 2.0 * y.astype(np.float32) - 1.0
        return np.where(y_pm * scores[:, 0] <= 1.0, -(y_pm * row_weight), np.float32(0.0))[:, None]
    g = np.exp(scores - scores.max(axis=1, keepdims=True))
    g /= g.sum(axis=1, keepdims=True)
    g[np.arange(n), y] -= np.float32(1.0)
    return g * row_weight[:, None]


def _batches(n: int, batch_size: int, epochs: int, seed: int) -> list[np.ndarray]:
    """Each step's rows: one batch in order per epoch when ``n <= batch_size``, else torch's permutations cut up."""
    if n <= batch_size:
        return [np.arange(n)] * epochs
    return [order[i:i + batch_size] for order in randperms(n, seed, epochs) for i in range(0, n, batch_size)]


def train_linear(
    weights: Mapping[str, np.ndarray],
    x: np.ndarray,
    y: np.ndarray,
    *,
    l2: float,
    lr: float,
    epochs: int,
    batch_size: int,
    weight_decay: float = 0.0,
    tau: float = 0.0,
    seed: int,
) -> TrainResult:
    """Train a linear model on one device's ``(x, y)`` from ``weights``; the report of ``train_tensors``.

    Parameters
    ----------
    weights : mapping
        ``linear.weight`` ``(C, d)`` and ``linear.bias`` ``(C,)`` (not changed).
    x, y : np.ndarray
        The device's training rows, float32 ``(n, d)``, and labels, int64 ``(n,)``.
    l2 : float
        The model's penalty ``(l2 / 2) ||W||^2`` (the linear SVM's ``model.l2``; 0 for softmax regression).
    lr, epochs, batch_size, weight_decay, tau, seed
        As for :func:`term_fl.learning.training.train`.
    """
    lr, epochs, batch_size, weight_decay, tau = check_train_args(lr, epochs, batch_size, weight_decay, tau)
    weight = np.array(weights[NAMES[0]], dtype=np.float32)
    bias = np.array(weights[NAMES[1]], dtype=np.float32)
    before = _report(*_losses_and_hits(_scores(weight, bias, x), y), tau)
    tilt = None if _negligible(tau, np.dtype(np.float32)) else tau
    lr32, decay, penalty = np.float32(lr), np.float32(weight_decay), np.float32(l2)
    steps = _batches(len(y), batch_size, epochs, seed)
    for rows in steps:
        # Forward, the gradient in the scores, back to the parameters
        xb, yb = x[rows], y[rows]
        g = _score_gradient(_scores(weight, bias, xb), yb, tilt)
        grad_w, grad_b = g.T @ xb, g.sum(axis=0)
        # The model's penalty, weight decay, and the step, in torch.optim.SGD's order
        if l2 != 0.0:
            grad_w += penalty * weight
        if weight_decay != 0.0:
            grad_w += decay * weight
            grad_b += decay * bias
        weight -= lr32 * grad_w
        bias -= lr32 * grad_b
    after, _ = _losses_and_hits(_scores(weight, bias, x), y)
    return TrainResult(weights={NAMES[0]: weight, NAMES[1]: bias}, before=before,
                       loss_after=float(after.astype(np.float64).sum()) / len(y), num_examples=len(y),
                       steps=len(steps))


def evaluate_linear(
    weights: Mapping[str, np.ndarray], x: np.ndarray, y: np.ndarray, ends: Sequence[int]
) -> list[EvalResult]:
    """:func:`term_fl.learning.training.evaluate_segments` of a linear model: one result per segment of ``(x, y)``."""
    weight = np.asarray(weights[NAMES[0]], dtype=np.float32)
    bias = np.asarray(weights[NAMES[1]], dtype=np.float32)
    losses, hits = _losses_and_hits(_scores(weight, bias, x), y)
    bounds = [0, *(int(end) for end in ends)]
    return [_report(losses[a:b], hits[a:b], 0.0) for a, b in zip(bounds[:-1], bounds[1:])]
