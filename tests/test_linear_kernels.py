"""The numba kernels of the linear models: padded class lanes, per-row losses, and numba's settings left alone.

Whole-cohort training is compared with ``train_tensors`` in test_cohort.py;
here the kernels' own layout is checked against a naive numpy computation.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("numba")

from numba.core import config as numba_config  # noqa: E402

from term_fl.learning import linear_kernels  # noqa: E402
from term_fl.learning.cohort_batches import device_rows  # noqa: E402


def _data(classes: int, d: int = 9, sizes=(1, 4, 13, 30)):
    rng = np.random.default_rng(classes)
    n = sum(sizes)
    x = rng.normal(size=(n, d)).astype(np.float32)
    y = rng.integers(0, max(classes, 2), size=n).astype(np.int64)
    starts = (np.cumsum(sizes) - np.asarray(sizes)).astype(np.int64)
    return x, y, starts, np.asarray(sizes, dtype=np.int64)


def _naive_losses(x, y, weight, bias):
    """Per-row hinge (one class, labels 0/1 as -1/+1) or cross-entropy, and hits, in float64."""
    scores = x.astype(np.float64) @ weight.T.astype(np.float64) + bias
    if weight.shape[0] == 1:
        y_pm = 2.0 * y - 1.0
        return np.maximum(0.0, 1.0 - y_pm * scores[:, 0]), (scores[:, 0] > 0).astype(np.int64) == y
    shifted = scores - scores.max(axis=1, keepdims=True)
    log_softmax = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return -log_softmax[np.arange(len(y)), y], scores.argmax(axis=1) == y


@pytest.mark.parametrize("classes", [1, 3, 8, 10, 17])
def test_per_row_losses_and_hits_equal_a_naive_computation(classes):
    x, y, starts, sizes = _data(classes)
    rng = np.random.default_rng(1)
    weight = rng.normal(size=(classes, x.shape[1])).astype(np.float32)
    bias = rng.normal(size=classes).astype(np.float32)
    width = linear_kernels.padded_classes(classes)
    padded_w = np.zeros((1, x.shape[1], width), np.float32)
    padded_w[0, :, :classes] = weight.T
    padded_b = np.zeros((1, width), np.float32)
    padded_b[0, :classes] = bias
    losses, hits = linear_kernels.linear_losses(x, y, starts, sizes, padded_w, padded_b,
                                                np.zeros(len(sizes), dtype=np.int64), classes)
    want_losses, want_hits = _naive_losses(x, y, weight, bias)
    np.testing.assert_allclose(losses, want_losses, rtol=2e-5, atol=2e-6)
    assert hits.tolist() == want_hits.tolist()


@pytest.mark.parametrize("classes", [1, 3, 8, 10])
def test_training_keeps_the_padding_lanes_at_zero(classes):
    x, y, starts, sizes = _data(classes)
    rows, steps = device_rows(starts, sizes, epochs=2, batch_size=4, seeds=range(len(sizes)))
    weight = np.full((classes, x.shape[1]), 0.1, np.float32)
    bias = np.full(classes, 0.2, np.float32)
    trained_w, trained_b = linear_kernels.train_linear(x, y, rows, steps, weight[None], bias[None],
                                                       np.zeros(len(sizes), dtype=np.int64), 0.1, 0.01, 0.02, 0.5, True)
    width = linear_kernels.padded_classes(classes)
    assert width % linear_kernels.LANES == 0 and classes <= width < classes + linear_kernels.LANES
    assert trained_w.shape == (len(sizes), x.shape[1], width) and trained_b.shape == (len(sizes), width)
    assert not trained_w[:, :, classes:].any() and not trained_b[:, classes:].any()
    assert np.isfinite(trained_w).all() and (trained_w[:, :, :classes] != 0.1).any()


def test_the_slp_vectorizer_is_on_only_while_the_kernels_compile():
    before = numba_config.SLP_VECTORIZE
    with pytest.raises(RuntimeError), linear_kernels._slp_vectorized():
        assert numba_config.SLP_VECTORIZE == 1
        raise RuntimeError("a failed compilation")
    assert numba_config.SLP_VECTORIZE == before
