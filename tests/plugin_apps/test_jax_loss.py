"""term_fl.plugin.jax_loss: a JAX or Flax model's loss on the training data, against the same sums in NumPy."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax", reason="JAX: run scripts/plugin_apps.sh")

import jax.numpy as jnp  # noqa: E402

from term_fl.plugin.jax_loss import pre_training_loss  # noqa: E402


def regression(n: int = 23, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3)).astype(np.float32)
    return X, (X @ np.array([1.0, -2.0, 0.5], dtype=np.float32) + 0.3).astype(np.float32)


def params():
    """Flower's JAX template's model: a 0-d float32 bias and a weight vector."""
    key = jax.random.PRNGKey(0)
    return {"b": jax.random.uniform(key), "w": jax.random.uniform(key, (3,))}


def template_loss(p, X, y):
    """Flower's JAX template's loss_fn: the batch's mean squared error."""
    err = jnp.dot(X, p["w"]) + p["b"] - y
    return jnp.mean(jnp.square(err))


def numpy_mse(p, X, y) -> float:
    err = X.astype(np.float64) @ np.asarray(p["w"], np.float64) + float(p["b"]) - y
    return float(np.mean(err ** 2))


def test_the_template_s_mean_loss_over_batches_of_any_size_is_the_mean_over_samples():
    X, y = regression()
    p = params()
    batches = [(X[:10], y[:10]), (X[10:20], y[10:20]), (X[20:], y[20:])]
    assert pre_training_loss(p, batches, template_loss) == pytest.approx(numpy_mse(p, X, y), rel=1e-6)
    assert pre_training_loss(p, [(X, y)], template_loss) == pytest.approx(numpy_mse(p, X, y), rel=1e-6)


def test_a_jitted_per_sample_loss_and_with_sum():
    X, y = regression(17)
    p = params()
    per_sample = jax.jit(lambda q, xb, yb: jnp.square(jnp.dot(xb, q["w"]) + q["b"] - yb))
    result = pre_training_loss(p, [(X[:8], y[:8]), (X[8:], y[8:])], per_sample, with_sum=True)
    assert result.num_examples == 17
    assert result.total == pytest.approx(17 * numpy_mse(p, X, y), rel=1e-6)
    assert result.mean == pytest.approx(numpy_mse(p, X, y), rel=1e-6)


def test_a_summed_loss_and_dict_batches_with_keys():
    X, y = regression(12)
    p = params()
    summed = lambda q, xb, yb: jnp.sum(jnp.square(jnp.dot(xb, q["w"]) + q["b"] - yb))  # noqa: E731
    batches = [{"x": X[:5], "y": y[:5]}, {"x": X[5:], "y": y[5:]}]
    value = pre_training_loss(p, batches, summed, keys=("x", "y"), reduction="sum")
    assert value == pytest.approx(numpy_mse(p, X, y), rel=1e-6)


def test_the_parameters_are_left_as_they_were():
    X, y = regression()
    p = params()
    before = {k: np.asarray(v).copy() for k, v in p.items()}
    pre_training_loss(p, [(X, y)], template_loss)
    for k, v in before.items():
        np.testing.assert_array_equal(np.asarray(p[k]), v)


def test_bad_results_and_empty_data_are_clear_errors():
    X, y = regression(6)
    p = params()
    with pytest.raises(ValueError, match=r"shape \(3,\) for a batch of 6 samples"):
        pre_training_loss(p, [(X, y)], lambda q, xb, yb: q["w"])
    with pytest.raises(ValueError, match="no sample"):
        pre_training_loss(p, [], template_loss)


def test_a_flax_linen_model_with_optax_cross_entropy():
    flax_linen = pytest.importorskip("flax.linen")
    optax = pytest.importorskip("optax")
    model = flax_linen.Dense(4)
    rng = np.random.default_rng(1)
    X = rng.normal(size=(9, 3)).astype(np.float32)
    y = rng.integers(0, 4, size=9)
    variables = model.init(jax.random.PRNGKey(1), X[:1])

    def loss_fn(v, xb, yb):  # one loss per sample
        return optax.softmax_cross_entropy_with_integer_labels(model.apply(v, xb), yb)

    logits = np.asarray(model.apply(variables, X), dtype=np.float64)
    shifted = logits - logits.max(axis=1, keepdims=True)
    by_hand = -np.mean(shifted[np.arange(9), y] - np.log(np.exp(shifted).sum(axis=1)))
    assert pre_training_loss(variables, [(X[:4], y[:4]), (X[4:], y[4:])], loss_fn) == pytest.approx(by_hand, rel=1e-5)


def test_a_flax_nnx_module_in_eval_mode():
    nnx = pytest.importorskip("flax.nnx")
    model = nnx.Sequential(nnx.Linear(3, 8, rngs=nnx.Rngs(0)), nnx.Dropout(0.5, rngs=nnx.Rngs(1)),
                           nnx.Linear(8, 1, rngs=nnx.Rngs(2)))
    X, y = regression(10)
    model.eval()  # dropout off: the loss of the received model, deterministic

    def loss_fn(m, xb, yb):
        return jnp.square(m(xb)[:, 0] - yb)

    first = pre_training_loss(model, [(X, y)], loss_fn)
    assert pre_training_loss(model, [(X[:3], y[:3]), (X[3:], y[3:])], loss_fn) == pytest.approx(first, rel=1e-6)
    expected = float(np.mean((np.asarray(model(X))[:, 0].astype(np.float64) - y) ** 2))
    assert first == pytest.approx(expected, rel=1e-6)
