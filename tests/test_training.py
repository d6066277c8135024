"""Properties of term_fl.learning.training, checked against independent (naive or hand-written) computations."""

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from term_fl.learning.models import build_model, get_weights, set_weights
from term_fl.learning.training import (
    EvalResult,
    as_tensors,
    evaluate,
    evaluate_segments,
    resolve_device,
    tilted_mean,
    train,
    train_tensors,
)

VEHICLE = Path(
    os.environ.get("TERM_FL_VEHICLE_DATA")
    or Path(__file__).resolve().parents[2] / "shared" / "data" / "vehicle" / "vehicle_fewshot.json"
)

losses_strategy = st.lists(st.floats(0.0, 50.0), min_size=1, max_size=30)


def _naive_tilted(values, tau):
    """(1/tau) log mean exp(tau l) straight from the definition, float64."""
    values = np.asarray(values, dtype=np.float64)
    return float(np.log(np.mean(np.exp(tau * values))) / tau)


def _binary_data(n=40, d=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype(np.float32)
    y = (x @ np.array([1.0, -2.0, 0.5][:d]) + 0.3 * rng.normal(size=n) > 0).astype(np.int64)
    return x, y


def _random_weights(model, seed):
    gen = torch.Generator().manual_seed(seed)
    set_weights(model, {k: 0.5 * torch.randn(v.shape, generator=gen).numpy() for k, v in get_weights(model).items()})


# --- tilted_mean -----------------------------------------------------------


def test_tilted_mean_at_tau_zero_is_exactly_the_mean():
    losses = torch.tensor([0.3, 1.7, 2.2, 0.0, 5.1])
    assert torch.equal(tilted_mean(losses, 0.0), losses.mean())


@settings(max_examples=50)
@given(losses_strategy, st.sampled_from([-3.0, -0.5, 0.01, 0.7, 2.0]))
def test_tilted_mean_equals_the_naive_formula(values, tau):
    result = tilted_mean(torch.tensor(values, dtype=torch.float64), tau).item()
    assert result == pytest.approx(_naive_tilted(values, tau), rel=1e-9, abs=1e-9)


@settings(max_examples=50)
@given(losses_strategy, st.floats(-20.0, 20.0), st.floats(-20.0, 20.0))
def test_tilted_mean_lies_between_min_and_max_and_is_non_decreasing_in_tau(values, t1, t2):
    losses = torch.tensor(values, dtype=torch.float64)
    low, high = sorted((t1, t2))
    r_low, r_high = tilted_mean(losses, low).item(), tilted_mean(losses, high).item()
    assert min(values) - 1e-9 <= r_low <= r_high + 1e-9 <= max(values) + 2e-9


def test_tilted_mean_tends_to_max_for_large_tau_and_min_for_large_negative_tau():
    losses = torch.tensor([0.5, 3.0, 1.0, 2.0], dtype=torch.float64)
    assert tilted_mean(losses, 1e4).item() == pytest.approx(3.0, abs=1e-3)
    assert tilted_mean(losses, -1e4).item() == pytest.approx(0.5, abs=1e-3)


def test_tilted_mean_stays_finite_for_tau_200_and_losses_in_the_thousands():
    losses = torch.tensor([1000.0, 3000.0, 2000.0])
    assert math.isfinite(tilted_mean(losses, 200.0).item())
    assert math.isfinite(tilted_mean(losses, -200.0).item())
    # the largest (smallest) loss dominates: l_max - log(3) / 200, l_min + log(3) / 200
    assert tilted_mean(losses, 200.0).item() == pytest.approx(3000.0 - math.log(3) / 200, rel=1e-6)
    assert tilted_mean(losses, -200.0).item() == pytest.approx(1000.0 + math.log(3) / 200, rel=1e-6)


@settings(max_examples=50)
@given(losses_strategy, st.floats(-1e-6, 1e-6))
def test_tilted_mean_near_tau_zero_is_mean_plus_half_tau_variance_even_in_float32(values, tau):
    """R(tau) = mean + tau var / 2 + O(tau^2) near 0, with no cancellation: the plain
    (logsumexp(tau l) - log n) / tau would be off by about eps / tau there."""
    exact = np.asarray(values, dtype=np.float64)
    expected = float(exact.mean() + tau * exact.var() / 2)
    assert tilted_mean(torch.tensor(values, dtype=torch.float64), tau).item() == pytest.approx(expected, rel=1e-9, abs=1e-8)
    assert tilted_mean(torch.tensor(values, dtype=torch.float32), tau).item() == pytest.approx(expected, rel=1e-5, abs=1e-5)


@pytest.mark.parametrize("tau", [-2.0, 0.0, 1.5])
def test_tilted_mean_gradient_is_the_tilted_weight_softmax_of_tau_times_loss(tau):
    """d/dl_i of (1/tau) log mean exp(tau l) = exp(tau l_i) / sum_j exp(tau l_j); negative tau
    gives the largest loss the smallest weight (this is what makes tau < 0 robust)."""
    values = np.array([0.2, 1.0, 4.0, 0.5])
    losses = torch.tensor(values, requires_grad=True)
    tilted_mean(losses, tau).backward()
    expected = np.exp(tau * values) / np.exp(tau * values).sum()
    np.testing.assert_allclose(losses.grad.numpy(), expected, rtol=1e-12)
    if tau < 0:
        assert losses.grad.argmin().item() == values.argmax()


def test_tilted_mean_rejects_empty_losses():
    with pytest.raises(ValueError, match="non-empty"):
        tilted_mean(torch.tensor([]), 1.0)


# --- evaluate --------------------------------------------------------------


def test_evaluate_svm_matches_numpy_hinge_loss_accuracy_and_tilt():
    x, y = _binary_data(n=50)
    model = build_model("linear_svm", 3, 2)
    _random_weights(model, 1)
    w = get_weights(model)
    scores = x.astype(np.float64) @ w["linear.weight"][0].astype(np.float64) + w["linear.bias"][0]
    hinge = np.maximum(0.0, 1.0 - (2 * y - 1) * scores)
    correct = int(np.sum((scores > 0).astype(np.int64) == y))

    result = evaluate(model, x, y, device="cpu", tau=0.0, batch_size=7)
    assert isinstance(result, EvalResult)
    assert result.loss_mean == pytest.approx(hinge.mean(), rel=1e-5)
    assert result.loss_sum == pytest.approx(hinge.sum(), rel=1e-5)
    assert result.loss_tilted == result.loss_mean
    assert (result.correct, result.examples) == (correct, 50)
    assert result.accuracy == correct / 50

    tilted = evaluate(model, x, y, device="cpu", tau=2.0)
    assert tilted.loss_tilted == pytest.approx(_naive_tilted(hinge, 2.0), rel=1e-5)
    assert tilted.loss_mean == pytest.approx(result.loss_mean, rel=1e-6)


def test_evaluate_excludes_the_penalty_and_keeps_the_model_mode():
    x, y = _binary_data()
    small = build_model("linear_svm", 3, 2, l2=0.0)
    large = build_model("linear_svm", 3, 2, l2=10.0)
    _random_weights(small, 2)
    set_weights(large, get_weights(small))
    large.train()
    assert evaluate(small, x, y, device="cpu") == evaluate(large, x, y, device="cpu")
    assert large.training


@pytest.mark.parametrize("tau", [0.0, 1.5])
def test_evaluate_segments_of_stacked_splits_equal_evaluating_each_split(tau):
    model = build_model("logreg", 3, 2)
    _random_weights(model, 5)
    splits = [_binary_data(n=n, seed=s) for n, s in ((13, 1), (1, 2), (21, 3))]
    x = np.concatenate([a for a, _ in splits])
    y = np.concatenate([b for _, b in splits])
    x_t, y_t = as_tensors(model, x, y, torch.device("cpu"))
    segments = evaluate_segments(model, x_t, y_t, [13, 14, 35], tau=tau, batch_size=4)
    for got, (xs, ys) in zip(segments, splits, strict=True):
        want = evaluate(model, xs, ys, device="cpu", tau=tau)
        assert (got.correct, got.examples, got.accuracy) == (want.correct, want.examples, want.accuracy)
        for field in ("loss_mean", "loss_sum", "loss_tilted"):
            assert getattr(got, field) == pytest.approx(getattr(want, field), rel=1e-12)


@pytest.mark.parametrize("ends", [[5, 5, 35], [36], [20, 10, 35], [0, 35]])
def test_evaluate_segments_rejects_ends_that_do_not_split_the_data(ends):
    model = build_model("logreg", 3, 2)
    x_t, y_t = as_tensors(model, *_binary_data(n=35), torch.device("cpu"))
    with pytest.raises(ValueError, match="segment ends must increase from 1 to 35"):
        evaluate_segments(model, x_t, y_t, ends)


@pytest.mark.parametrize("mode", [True, False])
def test_train_and_evaluate_leave_the_model_in_the_mode_it_had(mode):
    x, y = _binary_data()
    model = build_model("mlp", 3, 2, hidden=4)
    model.train(mode)
    x_t, y_t = as_tensors(model, x, y, torch.device("cpu"))
    train_tensors(model, x_t, y_t, lr=0.1, epochs=1, batch_size=8, seed=0)
    evaluate_segments(model, x_t, y_t, [len(y)])
    assert model.training is mode and all(m.training is mode for m in model.modules())


def test_evaluate_rejects_labels_outside_the_class_range():
    x, y = _binary_data()
    with pytest.raises(ValueError, match="0..1"):
        evaluate(build_model("linear_svm", 3, 2), x, 2 * y - 1, device="cpu")


# --- train -----------------------------------------------------------------


def _hand_sgd_svm(x, y, weights, *, l2, lr, epochs, batch_size, weight_decay, tau, seed):
    """Minibatch SGD on a linear SVM written out by hand in float64: the same permutation
    (torch.randperm from a generator seeded with `seed`, one per epoch), the hinge loss,
    the tilted batch mean from its definition, (l2/2)||w||^2, and w -= lr (grad + wd w)."""
    x, y_pm = torch.tensor(x, dtype=torch.float64), torch.tensor(2.0 * y - 1.0)
    w = torch.tensor(weights["linear.weight"][0], dtype=torch.float64, requires_grad=True)
    b = torch.tensor(weights["linear.bias"][0], dtype=torch.float64, requires_grad=True)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        order = torch.randperm(len(y), generator=generator)
        for start in range(0, len(y), batch_size):
            idx = order[start : start + batch_size]
            hinge = torch.clamp(1.0 - y_pm[idx] * (x[idx] @ w + b), min=0.0)
            data = hinge.mean() if tau == 0 else torch.log(torch.mean(torch.exp(tau * hinge))) / tau
            grad_w, grad_b = torch.autograd.grad(data + 0.5 * l2 * torch.sum(w * w), [w, b])
            with torch.no_grad():
                w -= lr * (grad_w + weight_decay * w)
                b -= lr * (grad_b + weight_decay * b)
    return w.detach().numpy(), b.detach().numpy()


@pytest.mark.parametrize("tau", [0.0, -1.0, 2.0])
def test_train_equals_a_hand_written_tilted_sgd_loop(tau):
    """tau = 0 is plain minibatch SGD; tau != 0 minimises the tilted batch loss (to float32 rounding)."""
    x, y = _binary_data(n=30)
    model = build_model("linear_svm", 3, 2, l2=0.05)
    _random_weights(model, 3)
    start = get_weights(model)
    hp = dict(lr=0.1, epochs=4, batch_size=7, weight_decay=0.01, tau=tau, seed=11)
    result = train(model, x, y, device="cpu", **hp)
    w, b = _hand_sgd_svm(x, y, start, l2=0.05, **hp)
    np.testing.assert_allclose(result.weights["linear.weight"][0], w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(result.weights["linear.bias"], [b], rtol=1e-5, atol=1e-6)
    assert result.steps == 4 * math.ceil(30 / 7)
    assert result.num_examples == 30


def test_train_before_is_evaluate_of_the_incoming_model_and_loss_after_of_the_trained_one():
    x, y = _binary_data()
    model = build_model("logreg", 3, 2)
    _random_weights(model, 4)
    incoming = evaluate(model, x, y, device="cpu", tau=-1.0)
    result = train(model, x, y, lr=0.5, epochs=3, batch_size=8, tau=-1.0, seed=0, device="cpu")
    assert result.before == incoming
    assert result.loss_after == evaluate(model, x, y, device="cpu").loss_mean
    assert result.loss_after < result.before.loss_mean
    assert all(np.array_equal(v, get_weights(model)[k]) for k, v in result.weights.items())
    assert all(isinstance(v, np.ndarray) and v.dtype == np.float32 for v in result.weights.values())


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_train_steps_are_bitwise_those_of_torch_optim_sgd(weight_decay):
    """train's hand-inlined SGD step is torch.optim.SGD(lr, weight_decay), bit for bit."""
    x, y = _binary_data(n=45)
    model = build_model("mlp", 3, 2, hidden=5, seed=3)
    twin = build_model("mlp", 3, 2, hidden=5, seed=3)
    result = train(model, x, y, lr=0.2, epochs=3, batch_size=8, weight_decay=weight_decay, tau=0.5, seed=11,
                   device="cpu")

    x_t, y_t = torch.from_numpy(x), torch.from_numpy(y)
    optimizer = torch.optim.SGD(twin.parameters(), lr=0.2, weight_decay=weight_decay)
    generator = torch.Generator().manual_seed(11)
    twin.train()
    for _ in range(3):
        for idx in torch.randperm(45, generator=generator).split(8):
            loss = tilted_mean(twin.per_sample_loss(twin(x_t[idx]), y_t[idx]), 0.5) + twin.penalty()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    expected = get_weights(twin)
    assert all(np.array_equal(result.weights[k], expected[k]) for k in expected)


@pytest.mark.parametrize("name", ["linear_svm", "mlp"])
def test_train_is_bitwise_deterministic_per_seed_and_seed_changes_the_batches(name):
    x, y = _binary_data(n=60)
    runs = {}
    for seed in (1, 1, 2):
        model = build_model(name, 3, 2, seed=0, **({"hidden": 8} if name == "mlp" else {}))
        runs.setdefault(seed, []).append(
            train(model, x, y, lr=0.1, epochs=3, batch_size=10, seed=seed, device="cpu").weights
        )
    first, again = runs[1]
    assert all(np.array_equal(first[k], again[k]) for k in first)
    assert any(not np.array_equal(first[k], runs[2][0][k]) for k in first)


def test_train_with_batch_size_above_n_is_full_batch_gradient_descent_independent_of_seed():
    x, y = _binary_data(n=20)
    results = [
        train(build_model("logreg", 3, 2), x, y, lr=0.3, epochs=5, batch_size=1000, seed=s, device="cpu")
        for s in (0, 1)
    ]
    assert results[0].steps == 5
    assert all(np.array_equal(results[0].weights[k], results[1].weights[k]) for k in results[0].weights)


def test_train_leaves_the_global_rng_untouched():
    x, y = _binary_data()
    state = torch.get_rng_state()
    train(build_model("mlp", 3, 2, hidden=4), x, y, lr=0.1, epochs=2, batch_size=8, seed=0, device="cpu")
    assert torch.equal(torch.get_rng_state(), state)


def test_negative_tau_resists_flipped_labels():
    """40% of class 1's training labels flipped to 0 pull the tau = 0 boundary into class 1;
    tau = -2 down-weights those high-loss samples and keeps clean test accuracy near Bayes (~0.93).
    Measured (logreg, lr 0.1, 30 full-batch epochs): tau = 0 -> 0.80, tau = -2 -> 0.92."""
    rng = np.random.default_rng(0)

    def sample(n):
        y = rng.integers(0, 2, n)
        x = rng.normal(size=(n, 2))
        x[:, 0] += np.where(y == 1, 1.5, -1.5)
        return x.astype(np.float32), y.astype(np.int64)

    x, y = sample(400)
    x_test, y_test = sample(2000)
    noisy = np.where((y == 1) & (rng.random(400) < 0.4), 0, y)
    accuracy = {}
    for tau in (0.0, -2.0):
        model = build_model("logreg", 2, 2)
        train(model, x, noisy, lr=0.1, epochs=30, batch_size=400, tau=tau, seed=0, device="cpu")
        accuracy[tau] = evaluate(model, x_test, y_test, device="cpu").accuracy
    assert accuracy[-2.0] >= accuracy[0.0] + 0.05
    assert accuracy[-2.0] >= 0.88


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"lr": 0.0}, "lr"),
        ({"lr": float("nan")}, "lr"),
        ({"epochs": 0}, "epochs"),
        ({"batch_size": 0}, "batch_size"),
        ({"tau": float("inf")}, "tau"),
        ({"weight_decay": -0.1}, "weight_decay"),
    ],
)
def test_train_rejects_bad_hyperparameters_naming_them(kwargs, name):
    x, y = _binary_data()
    hp = {"lr": 0.1, "epochs": 1, "batch_size": 4, "seed": 0, "device": "cpu", **kwargs}
    with pytest.raises(ValueError, match=name):
        train(build_model("logreg", 3, 2), x, y, **hp)


@pytest.mark.skipif(not VEHICLE.is_file(), reason=f"vehicle data not found at {VEHICLE} (set TERM_FL_VEHICLE_DATA)")
def test_centralized_linear_svm_on_real_vehicle_data_reaches_measured_accuracy():
    """All 23 devices pooled, seeded 70/30 split, linear SVM (l2 1e-3), SGD lr 0.05,
    batch 32, 20 epochs. Measured test accuracy 0.876 (train 0.925) on split seed 0;
    splits 1 and 2 give 0.894 and 0.882. Asserted with a margin."""
    data = json.loads(VEHICLE.read_text())
    users = data["users"]
    x = np.concatenate([np.asarray(data["user_data"][u]["x"], dtype=np.float32) for u in users])
    y = np.concatenate([(np.asarray(data["user_data"][u]["y"]).reshape(-1) > 0).astype(np.int64) for u in users])
    assert x.shape == (1860, 100)
    order = np.random.default_rng(0).permutation(len(y))
    train_idx, test_idx = order[: int(0.7 * len(y))], order[int(0.7 * len(y)) :]

    model = build_model("linear_svm", 100, 2)
    result = train(model, x[train_idx], y[train_idx], lr=0.05, epochs=20, batch_size=32, seed=0, device="cpu")
    test = evaluate(model, x[test_idx], y[test_idx], device="cpu")
    assert result.before.accuracy < 0.6  # the zero model predicts one class
    assert test.accuracy >= 0.82


# --- resolve_device --------------------------------------------------------


def test_resolve_device_cpu_and_auto_without_cuda(monkeypatch):
    assert resolve_device("cpu") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == torch.device("cuda")


def test_resolve_device_asking_for_cuda_without_cuda_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for spec in ("cuda", "cuda:0"):
        with pytest.raises(RuntimeError, match="no CUDA device"):
            resolve_device(spec)


@pytest.mark.parametrize("spec", ["gpu", "cuda:", "cuda:x", "cuda:-1", "", "mps"])
def test_resolve_device_rejects_unknown_strings_listing_allowed_forms(spec):
    with pytest.raises(ValueError, match='"auto", "cpu", "cuda", "cuda:<index>"'):
        resolve_device(spec)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_train_on_cuda_matches_cpu_and_returns_cpu_weights():
    x, y = _binary_data(n=64)
    cpu = train(build_model("mlp", 3, 2, hidden=8), x, y, lr=0.1, epochs=3, batch_size=16, seed=0, device="cpu")
    gpu = train(build_model("mlp", 3, 2, hidden=8), x, y, lr=0.1, epochs=3, batch_size=16, seed=0, device="cuda")
    assert resolve_device("cuda:0") == torch.device("cuda", 0)
    for key, value in cpu.weights.items():
        assert isinstance(gpu.weights[key], np.ndarray) and gpu.weights[key].dtype == np.float32
        np.testing.assert_allclose(gpu.weights[key], value, rtol=1e-4, atol=1e-5)
    assert gpu.before.loss_mean == pytest.approx(cpu.before.loss_mean, rel=1e-5)
    assert gpu.loss_after == pytest.approx(cpu.loss_after, rel=1e-4)
