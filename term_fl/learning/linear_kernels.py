"""The local SGD of the linear models as numba kernels: a whole cohort's training in one compiled call.

Imported only through :mod:`term_fl.learning.compiled_training`, which
falls back to the batched torch path when numba is missing. Every function
is compiled on first use (``cache=True``: once per machine, into numba's
cache beside this file or in ``NUMBA_CACHE_DIR``).

The arithmetic is :func:`term_fl.learning.training.train_tensors`' for a
linear model, written out per row: scores ``W x + b``, the gradient of the
batch objective in the scores (cross-entropy: ``softmax(s) - onehot(y)``;
hinge: ``-y_pm`` where ``y_pm s <= 1``), weighted by ``1/n`` or by the
tilted weights of the batch's losses, then ``g_W = sum_i g_i x_i^T``,
``g_b = sum_i g_i``, the model's L2 penalty on ``W``, weight decay on both
and ``p -= lr g``, all in float32 as torch computes them; only the order of
the sums differs (float32 rounding, not bit for bit). A device's weights
are held transposed, ``(d, C)``, so that the innermost loops run over the
classes: independent lanes a compiler vectorises without reordering any sum.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = ["linear_losses", "train_linear"]


@njit(cache=True)
def _scores(x, batch, n, w, b, out):  # noqa: ANN001, ANN202 - numba types them
    """``out[i] = W^T x[batch[i]] + b`` for the first ``n`` rows of ``batch`` (``w`` is ``(d, C)``)."""
    d, classes = w.shape
    for i in range(n):
        row = batch[i]
        for c in range(classes):
            out[i, c] = b[c]
        for j in range(d):
            value = x[row, j]
            for c in range(classes):
                out[i, c] += w[j, c] * value


@njit(cache=True)
def _row_loss(s, label, binary):  # noqa: ANN001, ANN202
    """One row's data loss from its scores: hinge ``max(0, 1 - y_pm s)`` or cross-entropy."""
    if binary:
        y_pm = np.float32(2.0) * np.float32(label) - np.float32(1.0)
        return max(np.float32(0.0), np.float32(1.0) - y_pm * s[0])
    top = s[0]
    for c in range(1, s.shape[0]):
        top = max(top, s[c])
    total = np.float32(0.0)
    for c in range(s.shape[0]):
        total += np.exp(s[c] - top)
    return np.log(total) - (s[label] - top)  # -log_softmax, in torch's order


@njit(cache=True)
def _row_hit(s, label, binary):  # noqa: ANN001, ANN202
    """Whether the row's prediction is its label: ``s > 0`` (binary) or the first of the largest scores."""
    if binary:
        return (1 if s[0] > 0 else 0) == label
    best = 0
    for c in range(1, s.shape[0]):
        if s[c] > s[best]:
            best = c
    return best == label


@njit(cache=True)
def _row_weights(scores, y, batch, n, tau, tilt, out):  # noqa: ANN001, ANN202
    """Each row's weight in the batch objective: ``1/n``, or with ``tilt`` the gradient of the tilted mean.

    The tilted weights ``(expm1(tau (l_i - c)) + 1) / (n + sum_j expm1(tau (l_j - c)))``
    with ``c`` the loss with the largest ``tau l``, as autograd computes them
    for :func:`term_fl.learning.training.tilted_mean`.
    """
    if not tilt:
        for i in range(n):
            out[i] = np.float32(1.0) / np.float32(n)
        return
    binary = scores.shape[1] == 1
    for i in range(n):
        out[i] = _row_loss(scores[i], y[batch[i]], binary)
    shift = out[0]
    for i in range(1, n):
        shift = max(shift, out[i]) if tau > 0 else min(shift, out[i])
    tau32 = np.float32(tau)
    total = np.float32(n)
    for i in range(n):
        out[i] = np.float32(math.expm1(tau32 * (out[i] - shift)))
        total += out[i]
    for i in range(n):
        out[i] = (out[i] + np.float32(1.0)) / total


@njit(cache=True)
def _score_gradient(scores, y, batch, n, weights, binary):  # noqa: ANN001, ANN202
    """Replace the first ``n`` rows of ``scores`` by d(objective)/d(scores): the weighted loss gradient."""
    classes = scores.shape[1]
    for i in range(n):
        label = y[batch[i]]
        if binary:
            y_pm = np.float32(2.0) * np.float32(label) - np.float32(1.0)
            scores[i, 0] = -(y_pm * weights[i]) if y_pm * scores[i, 0] <= np.float32(1.0) else np.float32(0.0)
            continue
        top = scores[i, 0]
        for c in range(1, classes):
            top = max(top, scores[i, c])
        total = np.float32(0.0)
        for c in range(classes):
            scores[i, c] = np.exp(scores[i, c] - top)
            total += scores[i, c]
        for c in range(classes):
            scores[i, c] = scores[i, c] / total
        scores[i, label] -= np.float32(1.0)
        for c in range(classes):
            scores[i, c] *= weights[i]


@njit(cache=True)
def _sgd_step(x, batch, n, grad_scores, w, b, g_w, g_b, lr, weight_decay, l2):  # noqa: ANN001, ANN202
    """Back to the parameters, the L2 penalty on ``W``, weight decay, and ``p -= lr g``, in torch's order."""
    d, classes = w.shape
    g_w[:, :] = 0.0
    g_b[:] = 0.0
    for i in range(n):
        row = batch[i]
        for c in range(classes):
            g_b[c] += grad_scores[i, c]
        for j in range(d):
            value = x[row, j]
            for c in range(classes):
                g_w[j, c] += grad_scores[i, c] * value
    lr32, decay, penalty = np.float32(lr), np.float32(weight_decay), np.float32(l2)
    for j in range(d):
        for c in range(classes):
            g = g_w[j, c]
            if l2 != 0.0:
                g += penalty * w[j, c]
            if weight_decay != 0.0:
                g += decay * w[j, c]
            w[j, c] -= lr32 * g
    for c in range(classes):
        g = g_b[c]
        if weight_decay != 0.0:
            g += decay * b[c]
        b[c] -= lr32 * g


@njit(cache=True)
def train_linear(x, y, rows, steps, weight, bias, lr, weight_decay, l2, tau, tilt):  # noqa: ANN001, ANN201
    """Every device's local SGD from the global ``weight`` ``(C, d)`` and ``bias`` ``(C,)``.

    ``rows[k]`` holds device k's batches one after another (``steps[k]`` of
    ``rows.shape[1] // max(steps)`` rows each; -1 pads a short batch at its
    end). Returns the trained weights ``(K, d, C)`` (transposed) and biases
    ``(K, C)``.
    """
    devices = rows.shape[0]
    classes, d = weight.shape
    batch_size = rows.shape[1] // max(1, steps.max())
    binary = classes == 1
    weights = np.empty((devices, d, classes), np.float32)
    biases = np.empty((devices, classes), np.float32)
    scores = np.empty((batch_size, classes), np.float32)
    row_weights = np.empty(batch_size, np.float32)
    g_w = np.empty((d, classes), np.float32)
    g_b = np.empty(classes, np.float32)
    for k in range(devices):
        w, b = weights[k], biases[k]
        w[:, :] = weight.T
        b[:] = bias
        for step in range(steps[k]):
            batch = rows[k, step * batch_size : (step + 1) * batch_size]
            n = batch_size
            while batch[n - 1] < 0:
                n -= 1
            _scores(x, batch, n, w, b, scores)
            _row_weights(scores, y, batch, n, tau, tilt, row_weights)
            _score_gradient(scores, y, batch, n, row_weights, binary)
            _sgd_step(x, batch, n, scores, w, b, g_w, g_b, lr, weight_decay, l2)
    return weights, biases


@njit(cache=True)
def linear_losses(x, y, starts, sizes, weights, biases):  # noqa: ANN001, ANN201
    """Per-row data losses (float32) and hits of device k's model ``(weights[k], biases[k])`` on its rows.

    ``weights`` is ``(K, d, C)`` (transposed) or ``(1, d, C)``: one model for
    every device. The rows of device k are ``starts[k] : starts[k] + sizes[k]``;
    the results are laid out device after device.
    """
    classes = weights.shape[2]
    binary = classes == 1
    total = sizes.sum()
    losses = np.empty(total, np.float32)
    hits = np.empty(total, np.bool_)
    scores = np.empty((1, classes), np.float32)
    rows = np.empty(1, np.int64)
    out = 0
    for k in range(starts.shape[0]):
        m = min(k, weights.shape[0] - 1)
        for row in range(starts[k], starts[k] + sizes[k]):
            rows[0] = row
            _scores(x, rows, 1, weights[m], biases[m], scores)
            losses[out] = _row_loss(scores[0], y[row], binary)
            hits[out] = _row_hit(scores[0], y[row], binary)
            out += 1
    return losses, hits
