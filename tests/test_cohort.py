"""term_fl.learning.cohort_training: many devices trained at once equal train_tensors run device by device.

Every check compares with the sequential path (term_fl.learning.training), which is
itself checked against hand-written loops and torch.optim.SGD in
test_training.py, or with autograd on the model's own loss.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from term_fl.learning import training
from term_fl.learning.cohort_training import (
    _KERNELS,
    _cross_entropy_grad,
    _hinge_grad,
    _tilt_weights,
    evaluate_cohort,
    supports,
    train_cohort,
)
from term_fl.learning.compiled_training import compiler_available, train_compiled
from term_fl.learning.compiled_training import supports as compiled_supports
from term_fl.learning.models import TermModel, build_model, get_weights, set_weights
from term_fl.learning.training import as_tensors, evaluate_segments, tilted_mean, train_tensors

MODELS = [("linear_svm", 2), ("logreg", 4), ("mlp", 3)]
# uneven devices: one example, fewer than a batch, exactly a batch, a batch and one, several batches
SIZES = [1, 5, 8, 9, 30, 3, 17]
BATCH = 8
REL = 1e-5


def _model(name: str, classes: int, d: int = 6, seed: int = 0) -> TermModel:
    settings = {"linear_svm": {"l2": 0.02}, "logreg": {}, "mlp": {"hidden": 7}}[name]
    model = build_model(name, d, classes, seed=seed, **settings)
    if name == "mlp":
        model.l2 = 0.01  # the classes accept a penalty; build_model gives one to the SVM only
    gen = torch.Generator().manual_seed(seed + 1)
    set_weights(model, {k: 0.4 * torch.randn(v.shape, generator=gen).numpy() for k, v in get_weights(model).items()})
    return model


def _federation(model: TermModel, sizes, seed: int = 0):
    rng = np.random.default_rng(seed)
    n = sum(sizes)
    x = rng.normal(size=(n, model.num_features)).astype(np.float32)
    y = rng.integers(0, model.num_classes, size=n)
    x_t, y_t = as_tensors(model, x, y, torch.device("cpu"))
    starts = np.cumsum(sizes) - np.asarray(sizes)
    return x_t, y_t, starts


def _max_rel(want, got) -> float:
    """A device's weights as one vector (all tensors): max |got - want| relative to max |want|.

    Per tensor would be ill-posed: a bias that sums +-1 labels can cancel to near 0."""
    want = np.concatenate([np.ravel(w) for w in want])
    got = np.concatenate([np.ravel(g) for g in got])
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-12))


def _sequential_steps(monkeypatch, model, x, y, **kw):
    """train_tensors on one device, with the weights after every SGD step."""
    steps = []
    original = training._sgd_step

    def recording(params, lr, weight_decay):
        original(params, lr, weight_decay)
        steps.append([p.detach().clone().numpy() for p in params])

    monkeypatch.setattr(training, "_sgd_step", recording)
    result = train_tensors(model, x, y, **kw)
    monkeypatch.setattr(training, "_sgd_step", original)
    return result, steps


# --- the gradients -------------------------------------------------------------


@pytest.mark.parametrize("tau", [0.0, 0.8, -1.2])
@pytest.mark.parametrize("name,classes", MODELS)
def test_batched_gradients_equal_autograd_of_each_devices_own_tilted_loss(name, classes, tau):
    """The written-out gradients of each device's tilted batch loss + penalty equal autograd's,
    padded rows included (they must contribute nothing)."""
    counts = [6, 4, 1]
    models = [_model(name, classes, seed=s) for s in range(3)]
    kernel = _KERNELS[type(models[0])]
    x, y, _ = _federation(models[0], [6 * 3], seed=5)
    x, y = x.view(3, 6, -1), y.view(3, 6)
    mask = torch.arange(6).unsqueeze(0) < torch.tensor(counts).unsqueeze(1)
    count = mask.sum(1).float()
    states = [dict(m.named_parameters()) for m in models]
    p = [torch.stack([s[n].detach() for s in states]) for n in kernel.layers.names]

    scores, cache = kernel.layers.forward(p, x)
    if tau == 0.0:
        weight = mask / count.unsqueeze(1)
    else:
        flat = scores.squeeze(1) if kernel.binary else scores
        weight = _tilt_weights(models[0].per_sample_loss(flat, y), mask, count, tau)
    if kernel.binary:
        y_pm = 2.0 * y.float() - 1.0
        g = _hinge_grad(scores, y_pm, -(y_pm * weight))
    else:
        g = _cross_entropy_grad(scores, y, weight)
    grads = kernel.layers.backward(p, cache, g)
    for name_ in kernel.layers.penalised:
        i = kernel.layers.names.index(name_)
        grads[i] = grads[i] + models[0].l2 * p[i]

    for k, model in enumerate(models):
        n = counts[k]
        loss = tilted_mean(model.per_sample_loss(model(x[k, :n]), y[k, :n]), tau) + model.penalty()
        expected = torch.autograd.grad(loss, [states[k][n_] for n_ in kernel.layers.names])
        for got, want in zip(grads, expected):
            torch.testing.assert_close(got[k], want, rtol=1e-5, atol=1e-6)


def test_hinge_gradient_passes_at_a_margin_of_exactly_zero_like_clamp():
    scores = torch.tensor([[[1.0, -1.0, 0.5, 2.0]]])
    y_pm = torch.tensor([[1.0, -1.0, 1.0, 1.0]])
    s = scores.squeeze(1).clone().requires_grad_()
    torch.clamp(1.0 - y_pm * s, min=0.0).sum().backward()
    got = _hinge_grad(scores, y_pm, -y_pm).squeeze(1)
    assert torch.equal(got, s.grad)  # margins 0, 0, 0.5, -1: gradient -y, -y, -y, 0


# --- training ------------------------------------------------------------------


@pytest.mark.parametrize("tau,weight_decay,epochs", [(0.0, 0.0, 2), (0.7, 0.01, 3), (-1.5, 0.0, 2)])
@pytest.mark.parametrize("name,classes", MODELS)
def test_every_step_of_every_device_matches_train_tensors(monkeypatch, name, classes, tau, weight_decay, epochs):
    """Same batches, same tilted SGD with weight decay and penalty: weights within 1e-5 relative
    after each device's every step, uneven devices (1 example .. several batches)."""
    model = _model(name, classes)
    x, y, starts = _federation(model, SIZES)
    seeds = [100 + i for i in range(len(SIZES))]
    kw = dict(lr=0.1, epochs=epochs, batch_size=BATCH, weight_decay=weight_decay, tau=tau)
    cohort_steps: dict[int, list[list[np.ndarray]]] = {i: [] for i in range(len(SIZES))}

    def observe(step, devices, params):
        for j, i in enumerate(devices):
            assert len(cohort_steps[i]) == step  # a device takes its steps first, with no gap
            cohort_steps[i].append([t[j].clone().numpy() for t in params.values()])

    incoming = get_weights(model)
    results = train_cohort(model, x, y, starts, SIZES, seeds=seeds, on_step=observe, **kw)
    assert all(np.array_equal(v, get_weights(model)[k]) for k, v in incoming.items())  # model untouched

    for i, n in enumerate(SIZES):
        device_model = _model(name, classes)
        rows = slice(int(starts[i]), int(starts[i]) + n)
        expected, steps = _sequential_steps(monkeypatch, device_model, x[rows], y[rows], seed=seeds[i], **kw)
        assert len(cohort_steps[i]) == len(steps) == expected.steps == results[i].steps
        for got, want in zip(cohort_steps[i], steps):
            assert _max_rel(want, got) <= REL
        assert all(v.dtype == np.float32 for v in results[i].weights.values())
        assert list(results[i].weights) == list(expected.weights)
        assert _max_rel(expected.weights.values(), results[i].weights.values()) <= REL
        got = results[i]
        assert got.num_examples == expected.num_examples == n
        assert got.before.correct == expected.before.correct and got.before.examples == n
        for field in ("loss_mean", "loss_sum", "loss_tilted"):
            assert getattr(got.before, field) == pytest.approx(getattr(expected.before, field), rel=1e-6, abs=1e-9)
        assert got.loss_after == pytest.approx(expected.loss_after, rel=1e-5, abs=1e-8)


def test_a_devices_result_does_not_depend_on_its_cohort():
    """Devices are independent: trained alone or among others, in any order, a device gets the same bits."""
    model = _model("mlp", 3)
    x, y, starts = _federation(model, SIZES)
    seeds = list(range(len(SIZES)))
    kw = dict(lr=0.2, epochs=2, batch_size=BATCH, tau=0.3)
    together = train_cohort(model, x, y, starts, SIZES, seeds=seeds, **kw)
    order = [4, 0, 6, 2]
    subset = train_cohort(model, x, y, starts[order], [SIZES[i] for i in order], seeds=[seeds[i] for i in order], **kw)
    for got, i in zip(subset, order):
        for key, value in together[i].weights.items():
            np.testing.assert_allclose(got.weights[key], value, rtol=1e-6, atol=1e-7)
        assert got.before == together[i].before


def test_train_cohort_is_deterministic_and_the_seed_picks_the_batches():
    model = _model("logreg", 4)
    x, y, starts = _federation(model, SIZES)
    kw = dict(lr=0.1, epochs=2, batch_size=BATCH)
    first = train_cohort(model, x, y, starts, SIZES, seeds=range(7), **kw)
    again = train_cohort(model, x, y, starts, SIZES, seeds=range(7), **kw)
    other = train_cohort(model, x, y, starts, SIZES, seeds=range(10, 17), **kw)
    for a, b, c, n in zip(first, again, other, SIZES):
        assert all(np.array_equal(a.weights[k], b.weights[k]) for k in a.weights)
        # one batch per epoch (n <= batch) is the data in order, whatever the seed
        assert all(np.array_equal(a.weights[k], c.weights[k]) for k in a.weights) == (n <= BATCH)


class _Custom(TermModel):
    def __init__(self) -> None:
        super().__init__(3, 2, 0.0)
        self.linear = nn.Linear(3, 2)

    def forward(self, x):
        return self.linear(x)


def test_other_models_are_refused_by_name():
    custom = _Custom()
    assert not supports(custom) and all(supports(build_model(n, 6, c)) for n, c in MODELS)
    x, y, starts = _federation(custom, [4])
    with pytest.raises(TypeError, match="LinearSVM, LogisticRegression, MLP; got _Custom"):
        train_cohort(custom, x, y, starts, [4], lr=0.1, epochs=1, batch_size=2, seeds=[0])


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(lr=0.0), "lr must be > 0"),
        (dict(epochs=0), "epochs must be >= 1"),
        (dict(batch_size=0), "batch_size must be >= 1"),
        (dict(weight_decay=-1.0), "weight_decay must be >= 0"),
        (dict(tau=float("nan")), "tau must be finite"),
        (dict(sizes=[4, 0]), "every device needs >= 1 example"),
        (dict(sizes=[4, 40]), "every device needs >= 1 example"),
        (dict(seeds=[0]), "one entry per device"),
    ],
)
def test_bad_arguments_are_refused_naming_them(kwargs, match):
    model = _model("logreg", 4)
    x, y, _ = _federation(model, [4, 6])
    args = dict(starts=[0, 4], sizes=[4, 6], lr=0.1, epochs=1, batch_size=2, seeds=[0, 1]) | kwargs
    with pytest.raises(ValueError, match=match):
        train_cohort(model, x, y, **args)


# --- evaluation -----------------------------------------------------------------


@pytest.mark.parametrize("tau", [0.0, -0.5])
@pytest.mark.parametrize("name,classes", MODELS)
def test_evaluate_cohort_equals_evaluate_segments(name, classes, tau):
    model = _model(name, classes)
    x, y, _ = _federation(model, [200])
    ends = [3, 50, 51, 120, 200]
    got = evaluate_cohort(model, x, y, ends, tau)
    want = evaluate_segments(model, x, y, ends, tau)
    for g, w in zip(got, want, strict=True):
        assert (g.correct, g.examples) == (w.correct, w.examples)
        for field in ("loss_mean", "loss_sum", "loss_tilted", "accuracy"):
            assert getattr(g, field) == pytest.approx(getattr(w, field), rel=1e-6, abs=1e-9)


def test_evaluate_cohort_counts_ties_as_the_first_class_like_argmax():
    """A zero model scores every class equally: only class-0 samples count as correct, as in predict."""
    model = build_model("logreg", 6, 4)
    x, y, _ = _federation(model, [40])
    (got,) = evaluate_cohort(model, x, y, [40])
    assert got.correct == int((y == 0).sum()) == evaluate_segments(model, x, y, [40])[0].correct


def test_evaluate_cohort_rejects_bad_segment_ends():
    model = _model("logreg", 4)
    x, y, _ = _federation(model, [10])
    with pytest.raises(ValueError, match="segment ends must increase from 1 to 10"):
        evaluate_cohort(model, x, y, [5, 5, 10])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("name,classes", MODELS)
def test_cohort_on_cuda_matches_the_sequential_path_on_the_cpu(name, classes):
    """On the GPU: the same results as train_tensors on the CPU (float32, other kernels: 1e-4)."""
    model = _model(name, classes)
    x, y, starts = _federation(model, SIZES)
    kw = dict(lr=0.1, epochs=2, batch_size=BATCH, weight_decay=0.01, tau=0.5)
    gpu_model = _model(name, classes).cuda()
    results = train_cohort(gpu_model, x.cuda(), y.cuda(), starts, SIZES, seeds=range(len(SIZES)), **kw)
    for i, n in enumerate(SIZES):
        rows = slice(int(starts[i]), int(starts[i]) + n)
        want = train_tensors(_model(name, classes), x[rows], y[rows], seed=i, **kw)
        for key, value in want.weights.items():
            assert isinstance(results[i].weights[key], np.ndarray)
            np.testing.assert_allclose(results[i].weights[key], value, rtol=1e-4, atol=1e-5)
        assert results[i].before.loss_tilted == pytest.approx(want.before.loss_tilted, rel=1e-5)
        assert results[i].loss_after == pytest.approx(want.loss_after, rel=1e-4)
    evaluated = evaluate_cohort(gpu_model, x.cuda(), y.cuda(), np.cumsum(SIZES).tolist())
    for got, want in zip(evaluated, evaluate_segments(_model(name, classes), x, y, np.cumsum(SIZES).tolist())):
        assert got.loss_mean == pytest.approx(want.loss_mean, rel=1e-5)


# --- the compiled kernel (numba) ------------------------------------------------

LINEAR = [(n, c) for n, c in MODELS if n != "mlp"]
needs_numba = pytest.mark.skipif(not compiler_available(), reason="numba is not installed (the fast extra)")


@needs_numba
@pytest.mark.parametrize("tau,weight_decay,epochs", [(0.0, 0.0, 2), (0.7, 0.01, 3), (-1.5, 0.0, 2), (1e-30, 0.0, 1)])
@pytest.mark.parametrize("name,classes", LINEAR)
def test_compiled_training_of_every_device_matches_train_tensors(monkeypatch, name, classes, tau, weight_decay, epochs):
    """The whole cohort in one compiled call: each device's weights within 1e-5 relative of its own
    train_tensors (same batches, tilt, penalty, weight decay), the same report and steps."""
    model = _model(name, classes)
    x, y, starts = _federation(model, SIZES)
    seeds = [100 + i for i in range(len(SIZES))]
    kw = dict(lr=0.1, epochs=epochs, batch_size=BATCH, weight_decay=weight_decay, tau=tau)
    incoming = get_weights(model)
    stacked = train_compiled(model, x.numpy(), y.numpy(), starts, SIZES, seeds=seeds, **kw)
    assert all(np.array_equal(v, get_weights(model)[k]) for k, v in incoming.items())  # model untouched
    assert {k: v.shape for k, v in stacked.weights.items()} == {k: (len(SIZES), *v.shape) for k, v in incoming.items()}
    for i, (n, got) in enumerate(zip(SIZES, stacked.results())):
        rows = slice(int(starts[i]), int(starts[i]) + n)
        expected = train_tensors(_model(name, classes), x[rows], y[rows], seed=seeds[i], **kw)
        assert list(got.weights) == list(expected.weights)
        assert all(v.dtype == np.float32 for v in got.weights.values())
        assert _max_rel(expected.weights.values(), got.weights.values()) <= REL
        assert (got.steps, got.num_examples) == (expected.steps, expected.num_examples)
        assert got.before.correct == expected.before.correct and got.before.examples == n
        for field in ("loss_mean", "loss_sum", "loss_tilted"):
            assert getattr(got.before, field) == pytest.approx(getattr(expected.before, field), rel=1e-6, abs=1e-9)
        assert got.loss_after == pytest.approx(expected.loss_after, rel=1e-5, abs=1e-8)


@needs_numba
def test_compiled_training_is_deterministic_and_a_device_does_not_depend_on_its_cohort():
    model = _model("logreg", 4)
    x, y, starts = _federation(model, SIZES)
    kw = dict(lr=0.1, epochs=2, batch_size=BATCH, tau=0.4)
    first = train_compiled(model, x.numpy(), y.numpy(), starts, SIZES, seeds=range(7), **kw)
    again = train_compiled(model, x.numpy(), y.numpy(), starts, SIZES, seeds=range(7), **kw)
    order = [4, 0, 6]
    subset = train_compiled(model, x.numpy(), y.numpy(), starts[order], [SIZES[i] for i in order],
                            seeds=order, **kw)
    for name, values in first.weights.items():
        assert np.array_equal(values, again.weights[name])
        assert np.array_equal(values[order], subset.weights[name])  # bit for bit: each device alone in the kernel
    assert first.before == again.before and np.array_equal(first.loss_after, again.loss_after)


@needs_numba
def test_compiled_hinge_gradient_passes_at_a_margin_of_exactly_zero_like_clamp():
    """y s = 1 exactly: clamp(min=0) passes the gradient there, and so does the kernel (one step, w = b = 0.5)."""
    model = build_model("linear_svm", 1, 2, l2=0.0)
    set_weights(model, {"linear.weight": np.full((1, 1), 0.5, np.float32), "linear.bias": np.full(1, 0.5, np.float32)})
    x, y = np.ones((1, 1), np.float32), np.ones(1, np.int64)  # s = 1, y_pm = +1
    got = train_compiled(model, x, y, [0], [1], lr=1.0, epochs=1, batch_size=1, seeds=[0]).results()[0]
    want = train_tensors(model, torch.from_numpy(x), torch.from_numpy(y), lr=1.0, epochs=1, batch_size=1, seed=0)
    assert got.weights["linear.weight"][0, 0] == want.weights["linear.weight"][0, 0] == 1.5


def test_the_compiled_kernel_takes_the_linear_models_on_the_cpu_only():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert [compiled_supports(build_model(n, 6, c), cpu) for n, c in MODELS] == [True, True, False]
    assert not compiled_supports(build_model("logreg", 6, 3), cuda) and not compiled_supports(_Custom(), cpu)


@needs_numba
@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(lr=0.0), "lr must be > 0"),
        (dict(tau=float("inf")), "tau must be finite"),
        (dict(sizes=[4, 40]), "every device needs >= 1 example"),
        (dict(seeds=[0]), "one entry per device"),
        (dict(x=np.zeros((10, 6))), "x must be float32"),
    ],
)
def test_compiled_bad_arguments_are_refused_naming_them(kwargs, match):
    model = _model("logreg", 4)
    x, y, _ = _federation(model, [4, 6])
    args = dict(x=x.numpy(), y=y.numpy(), starts=[0, 4], sizes=[4, 6], lr=0.1, epochs=1, batch_size=2,
                seeds=[0, 1]) | kwargs
    with pytest.raises(ValueError, match=match):
        train_compiled(model, **args)
    with pytest.raises(TypeError, match="trains LinearSVM and LogisticRegression; got MLP"):
        train_compiled(_model("mlp", 3), x.numpy(), y.numpy(), [0], [4], lr=0.1, epochs=1, batch_size=2, seeds=[0])
