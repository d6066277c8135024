"""Properties of term_fl.learning.models, checked against numbers computed by hand or in numpy."""

import numpy as np
import pytest
import torch

from term_fl.learning.models import (
    MLP,
    LinearSVM,
    LogisticRegression,
    build_model,
    get_weights,
    set_weights,
)


def _randomize(model, seed=0):
    gen = torch.Generator().manual_seed(seed)
    set_weights(model, {k: torch.randn(v.shape, generator=gen).numpy() for k, v in get_weights(model).items()})


def _set_linear(model, weight, bias):
    set_weights(model, {"linear.weight": np.asarray(weight, np.float32), "linear.bias": np.asarray(bias, np.float32)})


def test_svm_hinge_loss_and_prediction_match_hand_computation():
    """w = (1, -1), b = 0.5: scores (1.5, -0.5, 0.5); labels 1, 0, 0 -> y_pm (+1, -1, -1);
    hinge max(0, 1 - y_pm s) = (0, 0.5, 1.5); prediction s > 0 -> (1, 0, 1)."""
    model = build_model("linear_svm", 2, 2)
    _set_linear(model, [[1.0, -1.0]], [0.5])
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]])
    y = torch.tensor([1, 0, 0])
    scores = model(x)
    assert scores.shape == (3,)
    assert scores.tolist() == [1.5, -0.5, 0.5]
    assert model.per_sample_loss(scores, y).tolist() == [0.0, 0.5, 1.5]
    assert model.predict(scores).tolist() == [1, 0, 1]
    assert model.predict(scores).dtype == torch.int64


def test_svm_penalty_is_half_l2_times_squared_weight_norm_without_bias():
    """penalty = (l2 / 2) ||w||^2 = 0.05 * (1 + 4 + 9) = 0.7; the bias (100) does not count."""
    model = build_model("linear_svm", 3, 2, l2=0.1)
    _set_linear(model, [[1.0, -2.0, 3.0]], [100.0])
    assert model.penalty().item() == pytest.approx(0.7, rel=1e-6)


# Each model's own settings (its settings model); a setting of another model is an error.
SETTINGS = {"linear_svm": {}, "logreg": {}, "mlp": {"hidden": 6}}


def test_build_model_gives_l2_to_the_svm_only_default_1e_3():
    assert build_model("linear_svm", 4, 2).l2 == 1e-3
    assert build_model("linear_svm", 4, 2, l2=0.5).l2 == 0.5
    for name in ("logreg", "mlp"):
        model = build_model(name, 4, 3)
        _randomize(model)
        assert model.penalty().item() == 0.0
        with pytest.raises(ValueError, match=rf"model {name}: l2: not a setting of model {name}"):
            build_model(name, 4, 3, l2=0.5)


def test_mlp_penalty_sums_both_weight_matrices_and_skips_biases():
    model = MLP(5, 3, hidden=4, l2=0.2, seed=3)
    w = get_weights(model)
    expected = 0.1 * (np.sum(w["hidden.weight"].astype(np.float64) ** 2) + np.sum(w["output.weight"].astype(np.float64) ** 2))
    assert model.penalty().item() == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("name", ["logreg", "mlp"])
def test_cross_entropy_equals_numpy_log_softmax(name):
    """per_sample_loss = -log softmax(scores)[y], computed independently in float64 numpy."""
    model = build_model(name, 6, 4, seed=1, **SETTINGS[name])
    _randomize(model)
    x = torch.randn(10, 6, generator=torch.Generator().manual_seed(1))
    y = torch.tensor([0, 1, 2, 3, 0, 1, 2, 3, 3, 3])
    scores = model(x)
    assert scores.shape == (10, 4)
    s = scores.detach().numpy().astype(np.float64)
    log_softmax = s - s.max(axis=1, keepdims=True)
    log_softmax -= np.log(np.exp(log_softmax).sum(axis=1, keepdims=True))
    expected = -log_softmax[np.arange(10), y.numpy()]
    np.testing.assert_allclose(model.per_sample_loss(scores, y).detach().numpy(), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(model.predict(scores).numpy(), s.argmax(axis=1))


def test_softmax_models_predict_the_first_of_tied_maxima_like_argmax():
    """Zero scores (a model at its zero start) tie every class: class 0 is predicted, as numpy's argmax does."""
    model = build_model("logreg", 6, 4)
    scores = torch.tensor([[0.0, 0.0, 0.0, 0.0], [1.0, 3.0, 3.0, 2.0], [-1.0, -2.0, -1.0, -5.0]])
    assert model.predict(scores).tolist() == np.argmax(scores.numpy(), axis=1).tolist() == [0, 1, 0]
    cube = torch.zeros(2, 4, 3).index_fill_(1, torch.tensor([2]), 1.0)  # (devices, classes, rows)
    assert model.predict(cube).tolist() == [[2, 2, 2], [2, 2, 2]]


def test_build_model_types_shapes_and_zero_init_of_linear_models():
    svm, logreg, mlp = build_model("linear_svm", 7, 2), build_model("logreg", 7, 3), build_model("mlp", 7, 3, hidden=5)
    assert isinstance(svm, LinearSVM) and isinstance(logreg, LogisticRegression) and isinstance(mlp, MLP)
    assert {k: v.shape for k, v in get_weights(svm).items()} == {"linear.weight": (1, 7), "linear.bias": (1,)}
    assert {k: v.shape for k, v in get_weights(mlp).items()} == {
        "hidden.weight": (5, 7),
        "hidden.bias": (5,),
        "output.weight": (3, 5),
        "output.bias": (3,),
    }
    for model in (svm, logreg):
        assert all(np.all(v == 0) for v in get_weights(model).values())
    assert all(p.dtype == torch.float32 for p in mlp.parameters())


def test_mlp_init_is_determined_by_seed_and_leaves_global_rng_untouched():
    state = torch.get_rng_state()
    a, b, c = (build_model("mlp", 10, 3, seed=s) for s in (4, 4, 5))
    assert torch.equal(torch.get_rng_state(), state)
    assert all(np.array_equal(v, get_weights(MLP(10, 3, seed=4))[k]) for k, v in get_weights(a).items())
    wa, wb, wc = get_weights(a), get_weights(b), get_weights(c)
    assert all(np.array_equal(wa[k], wb[k]) for k in wa)
    assert not np.array_equal(wa["hidden.weight"], wc["hidden.weight"])
    bound = 1.0 / np.sqrt(10)  # PyTorch's default nn.Linear range for fan_in = 10
    assert np.abs(wa["hidden.weight"]).max() <= bound and np.abs(wa["hidden.bias"]).max() <= bound


def test_build_model_rejects_unknown_name_listing_the_allowed_ones():
    with pytest.raises(ValueError, match="linear_svm, logreg, mlp"):
        build_model("cnn", 3, 2)


def test_build_model_rejects_multiclass_svm():
    with pytest.raises(ValueError, match="num_classes must be 2"):
        build_model("linear_svm", 3, 3)


def test_build_model_rejects_negative_l2():
    with pytest.raises(ValueError, match="l2"):
        build_model("linear_svm", 3, 2, l2=-1.0)


@pytest.mark.parametrize("name", ["linear_svm", "logreg", "mlp"])
def test_get_set_weights_round_trip_reproduces_the_model(name):
    """Weights of model A copied into model B (another seed) give B the same outputs."""
    num_classes = 2 if name == "linear_svm" else 3
    a = build_model(name, 5, num_classes, seed=1, **SETTINGS[name])
    b = build_model(name, 5, num_classes, seed=2, **SETTINGS[name])
    _randomize(a)
    weights = get_weights(a)
    assert list(weights) == list(a.state_dict())
    assert all(v.dtype == np.float32 for v in weights.values())
    set_weights(b, weights)
    x = torch.randn(8, 5, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a(x), b(x))
    assert all(np.array_equal(weights[k], v) for k, v in get_weights(b).items())


def test_get_weights_returns_copies_not_views():
    model = build_model("logreg", 3, 2)
    weights = get_weights(model)
    weights["linear.weight"][:] = 5.0
    assert np.all(get_weights(model)["linear.weight"] == 0.0)


def test_set_weights_casts_float64_arrays_to_the_model_dtype():
    model = build_model("logreg", 2, 2)
    set_weights(model, {"linear.weight": np.ones((2, 2)), "linear.bias": np.zeros(2)})
    assert model.linear.weight.dtype == torch.float32
    assert torch.equal(model.linear.weight, torch.ones(2, 2))


def test_set_weights_names_missing_extra_and_misshaped_keys():
    model = build_model("logreg", 3, 2)
    weights = get_weights(model)
    with pytest.raises(ValueError, match="missing keys \\['linear.bias'\\]"):
        set_weights(model, {"linear.weight": weights["linear.weight"]})
    with pytest.raises(ValueError, match="unexpected keys \\['extra'\\]"):
        set_weights(model, {**weights, "extra": np.zeros(1, np.float32)})
    with pytest.raises(ValueError, match="'linear.weight'.*\\(2, 3\\).*\\(3, 2\\)"):
        set_weights(model, {**weights, "linear.weight": np.zeros((3, 2), np.float32)})


@pytest.mark.parametrize("name", ["linear_svm", "logreg", "mlp"])
def test_each_model_penalises_exactly_its_parameters_named_weight(name):
    """The subclasses name their weight matrices directly (a per-step hot path): same set as the base rule."""
    model = build_model(name, 4, 2, **SETTINGS[name])
    expected = [p for n, p in model.named_parameters() if n.endswith("weight")]
    got = model._penalised()
    assert len(got) == len(expected) and all(a is b for a, b in zip(got, expected, strict=True))


@pytest.mark.parametrize("name", ["linear_svm", "logreg", "mlp"])
def test_building_any_model_leaves_the_global_rng_untouched(name):
    state = torch.get_rng_state()
    build_model(name, 9, 2, seed=1, **SETTINGS[name])
    assert torch.equal(torch.get_rng_state(), state)
