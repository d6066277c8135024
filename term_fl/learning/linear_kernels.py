"""The local SGD of the linear models as numba kernels: a whole cohort's training in one compiled call.

Imported only through :mod:`term_fl.learning.compiled_training`, which
falls back to the batched torch path when numba is missing. The two entry
points, :func:`train_linear` and :func:`linear_losses`, are compiled when
this module is imported (``cache=True``: once per machine, into numba's
cache beside this file or in ``NUMBA_CACHE_DIR``; later imports load them).

The arithmetic is :func:`term_fl.learning.training.train_tensors`' for a
linear model, written out per row: scores ``W x + b``, the gradient of the
batch objective in the scores (cross-entropy: ``softmax(s) - onehot(y)``;
hinge: ``-y_pm`` where ``y_pm s <= 1``), weighted by ``1/n`` or by the
tilted weights of the batch's losses, then ``g_W = sum_i g_i x_i^T``,
``g_b = sum_i g_i``, the model's L2 penalty on ``W``, weight decay on both
and ``p -= lr g``, all in float32 as torch computes them; only the order of
the sums differs from torch's (float32 rounding, not bit for bit). Every
sum runs in a fixed order (a score over the features in order, a gradient
over the batch's rows in order), so the results do not depend on the CPU.

Layout: a device's weights are held transposed and padded, ``(d, P)`` with
``P`` the classes rounded up to a multiple of :data:`LANES` (the padding
stays 0), so that the classes are independent lanes. Each sum keeps
:data:`LANES` classes in local variables (registers) while it runs over the
features or rows, and LLVM's SLP vectorizer turns the lanes into one vector
operation each: numba leaves that vectorizer off (``NUMBA_SLP_VECTORIZE``),
so it is switched on while this module's kernels compile
(:func:`_slp_vectorized`) and restored after. It reorders no sum.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import numpy as np
from numba import njit
from numba.core import config as numba_config

__all__ = ["LANES", "linear_losses", "padded_classes", "train_linear"]

LANES = 8
"""Classes summed side by side in registers (one vector operation per step of a sum)."""


@njit(cache=True)
def padded_classes(classes: int) -> int:
    """The padded width ``P`` of a model with ``classes`` outputs: a multiple of :data:`LANES`."""
    return -(-classes // LANES) * LANES


@contextlib.contextmanager
def _slp_vectorized() -> Iterator[None]:
    """numba's SLP vectorizer on while the kernels compile (numba reads the setting per compilation)."""
    before = numba_config.SLP_VECTORIZE
    numba_config.SLP_VECTORIZE = 1
    try:
        yield
    finally:
        numba_config.SLP_VECTORIZE = before


# The helpers compile with the entry points that call them (below, inside _slp_vectorized).


@njit(cache=True)
def _lanes(values):  # noqa: ANN001, ANN202
    """The :data:`LANES` numbers of a chunk as a tuple (locals, kept in registers)."""
    return (values[0], values[1], values[2], values[3], values[4], values[5], values[6], values[7])


@njit(cache=True)
def _add_scaled(acc, values, v):  # noqa: ANN001, ANN202
    """``acc + values * v`` lane by lane (``acc`` a tuple, ``values`` a chunk): one vector multiply and add."""
    return (acc[0] + values[0] * v, acc[1] + values[1] * v, acc[2] + values[2] * v, acc[3] + values[3] * v,
            acc[4] + values[4] * v, acc[5] + values[5] * v, acc[6] + values[6] * v, acc[7] + values[7] * v)


@njit(cache=True)
def _store(out, acc):  # noqa: ANN001, ANN202
    """Write a tuple of :data:`LANES` numbers into a chunk."""
    out[0], out[1], out[2], out[3], out[4], out[5], out[6], out[7] = acc


@njit(cache=True)
def _scores(x, row, other, w, b, out, other_out):  # noqa: ANN001, ANN202, PLR0913 - numba types them
    """``out = W^T x[row] + b`` and ``other_out`` for ``other``: each score ``b_c`` plus the features' terms in order.

    ``w`` is ``(d, chunks, LANES)``, ``b`` and the outputs ``(chunks, LANES)``:
    the padded classes in chunks, the lanes addressed by constants so that
    each chunk's sums become vector operations. Two rows side by side keep two
    independent chains of additions going (the same row twice for one).
    """
    d, chunks = w.shape[0], w.shape[1]
    for c in range(chunks):
        s, t = _lanes(b[c]), _lanes(b[c])
        for j in range(d):
            s = _add_scaled(s, w[j, c], x[row, j])
            t = _add_scaled(t, w[j, c], x[other, j])
        _store(out[c], s)
        _store(other_out[c], t)


@njit(cache=True)
def _batch_scores(x, batch, n, w, b, out):  # noqa: ANN001, ANN202
    """:func:`_scores` of the first ``n`` rows of ``batch``, two at a time, into ``out`` ``(B, chunks, LANES)``."""
    for i in range(0, n - 1, 2):
        _scores(x, batch[i], batch[i + 1], w, b, out[i], out[i + 1])
    if n % 2:
        _scores(x, batch[n - 1], batch[n - 1], w, b, out[n - 1], out[n - 1])


@njit(cache=True)
def _row_loss(s, classes, label):  # noqa: ANN001, ANN202
    """One row's data loss from its scores: hinge ``max(0, 1 - y_pm s)`` (one class) or cross-entropy."""
    if classes == 1:
        y_pm = np.float32(2.0) * np.float32(label) - np.float32(1.0)
        return max(np.float32(0.0), np.float32(1.0) - y_pm * s[0])
    top = s[0]
    for c in range(1, classes):
        top = max(top, s[c])
    total = np.float32(0.0)
    for c in range(classes):
        total += np.exp(s[c] - top)
    return np.log(total) - (s[label] - top)  # -log_softmax, in torch's order


@njit(cache=True)
def _row_loss_and_hit(s, classes, label):  # noqa: ANN001, ANN202
    """:func:`_row_loss` and whether the prediction is the label (``s > 0``, or the first of the largest scores),
    in one pass over the scores."""
    if classes == 1:
        return _row_loss(s, classes, label), (1 if s[0] > 0 else 0) == label
    top, best = s[0], 0
    for c in range(1, classes):
        if s[c] > top:
            top, best = s[c], c
    total = np.float32(0.0)
    for c in range(classes):
        total += np.exp(s[c] - top)
    return np.log(total) - (s[label] - top), best == label


@njit(cache=True)
def _row_weights(scores, classes, y, batch, n, tau, tilt, out):  # noqa: ANN001, ANN202, PLR0913
    """Each row's weight in the batch objective: ``1/n``, or with ``tilt`` the gradient of the tilted mean.

    The tilted weights ``(expm1(tau (l_i - c)) + 1) / (n + sum_j expm1(tau (l_j - c)))``
    with ``c`` the loss with the largest ``tau l``, as autograd computes them
    for :func:`term_fl.learning.training.tilted_mean`.
    """
    if not tilt:
        for i in range(n):
            out[i] = np.float32(1.0) / np.float32(n)
        return
    for i in range(n):
        out[i] = _row_loss(scores[i], classes, y[batch[i]])
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
def _score_gradient(scores, classes, y, batch, n, weights):  # noqa: ANN001, ANN202
    """Replace the first ``n`` rows of ``scores`` by d(objective)/d(scores): the weighted loss gradient."""
    for i in range(n):
        label = y[batch[i]]
        if classes == 1:
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
def _descend(p, grad, lr, penalty, decay, penalised, decayed):  # noqa: ANN001, ANN202, PLR0913
    """A chunk's SGD step in torch's order, in place: the penalty's and weight decay's terms, then ``p -= lr g``."""
    for lane in range(LANES):
        g = grad[lane]
        if penalised:
            g += penalty * p[lane]
        if decayed:
            g += decay * p[lane]
        p[lane] -= lr * g


@njit(cache=True)
def _sgd_step(x, batch, n, g, w, b, lr, weight_decay, l2):  # noqa: ANN001, ANN202, PLR0913
    """Back to the parameters and the step: ``g_W[j] = sum_i g_i x_ij`` (rows in order), ``p -= lr g``.

    ``g`` is ``(B, chunks, LANES)``, ``w`` and ``b`` as for :func:`_scores`.
    Two features side by side keep two chains of additions going. Each
    feature's gradient is finished before its weights move; this step's
    scores were computed before, so the order of the updates does not matter.
    """
    d, chunks = w.shape[0], w.shape[1]
    lr32, decay, penalty = np.float32(lr), np.float32(weight_decay), np.float32(l2)
    penalised, decayed = l2 != 0.0, weight_decay != 0.0
    z = np.float32(0.0)
    zero = (z, z, z, z, z, z, z, z)  # LANES of them
    for c in range(chunks):
        # The bias: its gradient is the sum of the rows' score gradients
        acc = zero
        for i in range(n):
            acc = _add_scaled(acc, g[i, c], np.float32(1.0))
        _descend(b[c], acc, lr32, penalty, decay, False, decayed)
        # Each feature's weights (two at a time): the rows' score gradients times the feature, summed
        for j in range(0, d, 2):
            other = min(j + 1, d - 1)
            acc, acc_other = zero, zero
            for i in range(n):
                acc = _add_scaled(acc, g[i, c], x[batch[i], j])
                acc_other = _add_scaled(acc_other, g[i, c], x[batch[i], other])
            _descend(w[j, c], acc, lr32, penalty, decay, penalised, decayed)
            if other != j:
                _descend(w[other, c], acc_other, lr32, penalty, decay, penalised, decayed)


def _train_linear(x, y, rows, steps, weights, biases, model_of, lr, weight_decay, l2, tau, tilt):  # noqa: ANN001, ANN202, PLR0913
    """Every device's local SGD from its incoming model ``(weights[m], biases[m])``, ``m = model_of[k]``.

    ``weights`` is ``(R, C, d)`` and ``biases`` ``(R, C)``: the incoming
    models of one or several runs (a group's). ``rows[k]`` holds device k's
    batches one after another (``steps[k]`` of ``rows.shape[1] // max(steps)``
    rows each; -1 pads a short batch at its end). Returns the trained weights
    ``(K, d, P)`` (transposed, padded with zeros to :func:`padded_classes`)
    and biases ``(K, P)``.
    """
    devices = rows.shape[0]
    classes, d = weights.shape[1], weights.shape[2]
    width = padded_classes(classes)
    batch_size = rows.shape[1] // max(1, steps.max())
    trained_w = np.zeros((devices, d, width), np.float32)
    trained_b = np.zeros((devices, width), np.float32)
    chunks = width // LANES
    scores = np.zeros((batch_size, width), np.float32)
    chunked = scores.reshape(batch_size, chunks, LANES)
    row_weights = np.empty(batch_size, np.float32)
    for k in range(devices):
        trained_w[k, :, :classes] = weights[model_of[k]].T
        trained_b[k, :classes] = biases[model_of[k]]
        w, b = trained_w[k].reshape(d, chunks, LANES), trained_b[k].reshape(chunks, LANES)
        for step in range(steps[k]):
            batch = rows[k, step * batch_size : (step + 1) * batch_size]
            n = batch_size
            while batch[n - 1] < 0:
                n -= 1
            _batch_scores(x, batch, n, w, b, chunked)
            _row_weights(scores, classes, y, batch, n, tau, tilt, row_weights)
            _score_gradient(scores, classes, y, batch, n, row_weights)
            _sgd_step(x, batch, n, chunked, w, b, lr, weight_decay, l2)
    return trained_w, trained_b


def _linear_losses(x, y, starts, sizes, weights, biases, model_of, classes):  # noqa: ANN001, ANN202, PLR0913
    """Per-row data losses (float32) and hits of device k's model ``(weights[m], biases[m])``, ``m = model_of[k]``.

    ``weights`` is ``(M, d, P)`` (transposed, padded), ``biases`` ``(M, P)``;
    ``classes`` are the real ones. The rows of device k are
    ``starts[k] : starts[k] + sizes[k]``; the results are laid out device
    after device.
    """
    total = sizes.sum()
    losses = np.empty(total, np.float32)
    hits = np.empty(total, np.bool_)
    d, width = weights.shape[1], weights.shape[2]
    chunks = width // LANES
    scores = np.empty((2, width), np.float32)
    chunked = scores.reshape(2, chunks, LANES)
    out = 0
    for k in range(starts.shape[0]):
        w, b = weights[model_of[k]].reshape(d, chunks, LANES), biases[model_of[k]].reshape(chunks, LANES)
        end = starts[k] + sizes[k]
        for row in range(starts[k], end, 2):
            # Two rows at a time (the last one twice when the device's count is odd)
            other = min(row + 1, end - 1)
            _scores(x, row, other, w, b, chunked[0], chunked[1])
            for i in range(1 + other - row):
                losses[out], hits[out] = _row_loss_and_hit(scores[i], classes, y[row + i])
                out += 1
    return losses, hits


# The entry points, compiled (or loaded from numba's cache) now, with the SLP vectorizer on
_F32_2D, _F32_3D, _I64_1D, _I64_2D = "float32[:, ::1]", "float32[:, :, ::1]", "int64[::1]", "int64[:, ::1]"
with _slp_vectorized():
    train_linear = njit(
        f"({_F32_2D}, {_I64_1D}, {_I64_2D}, {_I64_1D}, {_F32_3D}, {_F32_2D}, {_I64_1D}, "
        "float64, float64, float64, float64, boolean)", cache=True)(_train_linear)
    linear_losses = njit(f"({_F32_2D}, {_I64_1D}, {_I64_1D}, {_I64_1D}, {_F32_3D}, {_F32_2D}, {_I64_1D}, int64)",
                         cache=True)(_linear_losses)
