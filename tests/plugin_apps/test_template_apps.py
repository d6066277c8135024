"""Flower's template apps with term-fl's loss helpers, 3 rounds under every strategy, in the Simulation Engine.

Each app (README.md beside this file) is run once with ``flwr run`` on 4
virtual SuperNodes (tests/flwr_local.py); its ServerApp runs the template's
``main()`` once per strategy of :data:`CONFIGS` from the same initial model,
each leaving the template's own saved model and term-fl's round reports in a
folder of its own. The tests then compare the runs: term-fl's ``FedAvg`` and
``TermFedAvg(t=0)`` against Flower's ``FedAvg``, ``QFFL`` against Flower's
``QFedAvg``, and check that every strategy trained every round with every
reply, kept the model's dtypes and shapes, and weighted as it should.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: flwr_local

from flwr_local import LocalFlower  # noqa: E402

from term_fl.strategies import STRATEGIES  # noqa: E402

HERE = Path(__file__).resolve().parent
NODES = 4
ROUNDS = 3
FEDERATION = f"num-supernodes={NODES} client-resources-num-cpus=1 client-resources-num-gpus=0.0"
QFFL_ARGS = {"client_learning_rate": 0.1, "q": 0.1}
FLOWER_QFEDAVG_ARGS = {**QFFL_ARGS, "train_loss_key": "train_loss_before"}
# (label, strategy: a registry name or "flower:" and Flower's class, its arguments, rounds)
CONFIGS: list[tuple[str, str, dict, int]] = [
    ("flower-fedavg", "flower:FedAvg", {}, ROUNDS),
    ("fedavg", "fedavg", {}, ROUNDS),
    ("term-t0", "term", {"t": 0.0}, ROUNDS),
    ("term", "term", {"t": 1.0}, ROUNDS),
    ("qffl", "qffl", QFFL_ARGS, ROUNDS),
    ("flower-qfedavg", "flower:QFedAvg", FLOWER_QFEDAVG_ARGS, ROUNDS),
    ("afl", "afl", {}, ROUNDS),
]
CONFIGS += [(name, name, {}, ROUNDS) for name in STRATEGIES if name not in {c[1] for c in CONFIGS}]  # newer ones
# The same after one round: identical replies, so the models differ by the aggregation's rounding alone
PAIRS = {"fedavg": "flower-fedavg", "term-t0": "flower-fedavg", "qffl": "flower-qfedavg"}
CONFIGS += [(f"{label}-1", name, kwargs, 1) for label, name, kwargs, _ in CONFIGS
            if label in PAIRS or label in PAIRS.values()]

# app -> (the framework it imports, how the template saves its final model, the template's run config)
APPS = {
    "numpyapp": ("numpy", "final_model.npz", ""),
    "sklearnapp": ("sklearn", "logreg_model.pkl", ""),
    "jaxapp": ("jax", "final_model.npz", ""),
    "pytorchapp": ("torch", "final_model.pt", "fraction-train=1.0"),  # every node trains: Flower samples at random
}
# Equivalence (max |a - b| / max(1, |b|)) by the model's float type. After one round only the order of the
# sums differs (Flower's in arrival order, term-fl's in partition order) and QFedAvg's float64 result:
# a few float32 ulps. After 3 rounds local training has carried that rounding on, differently from run to
# run (the arrival order varies); the PyTorch template's Adam amplifies it most (docs/plugin.md).
TOLERANCE = {1: {"float64": 1e-12, "float32": 1e-6}, ROUNDS: {"float64": 1e-12, "float32": 1e-2}}


def final_model(folder: Path, app: str) -> dict[str, np.ndarray]:
    """The final model the template saved, as name -> array."""
    path = folder / APPS[app][1]
    if path.suffix == ".npz":
        with np.load(path) as saved:
            return {k: saved[k] for k in saved.files}
    if path.suffix == ".pt":
        import torch

        return {k: v.numpy() for k, v in torch.load(path).items()}
    import joblib

    model = joblib.load(path)
    return {"coef_": model.coef_, "intercept_": model.intercept_}


def initial_model(app: str) -> dict[str, np.ndarray]:
    """The model the template's ServerApp starts from, under the names the template saves it with."""
    sys.path.insert(0, str(HERE / app))
    try:
        task = __import__(f"{app}.task", fromlist=["task"])
    finally:
        sys.path.remove(str(HERE / app))
    if app == "numpyapp":
        return {f"arr_{i}": a for i, a in enumerate(task.get_dummy_model())}
    if app == "jaxapp":
        return {f"arr_{i}": a for i, a in enumerate(task.get_params(task.load_model((3,))))}
    if app == "pytorchapp":
        import torch

        torch.manual_seed(0)  # as the app's ServerApp does
        return {k: v.numpy() for k, v in task.Net().state_dict().items()}
    model = task.get_model("l2", 1)
    task.set_initial_params(model)
    return {"coef_": model.coef_, "intercept_": model.intercept_}


@pytest.fixture(scope="module")
def flower(tmp_path_factory):
    local = LocalFlower(tmp_path_factory.mktemp("flwr-local"))
    try:
        local.start()
        yield local
    finally:
        local.close()


@pytest.fixture(scope="module", params=list(APPS))
def app_run(request, flower, tmp_path_factory):
    """One `flwr run` of the app: every strategy of CONFIGS in turn; name -> (folder, history)."""
    app = request.param
    pytest.importorskip(APPS[app][0], reason=f"{app} needs {APPS[app][0]}: run scripts/plugin_apps.sh")
    out = tmp_path_factory.mktemp(app)
    strategies = json.dumps([list(c) for c in CONFIGS])
    config = f"strategies='{strategies}' report-dir=\"{out}\" num-partitions={NODES} {APPS[app][2]}"
    result = flower.run(HERE / app, FEDERATION, config, timeout=1200)
    assert result.returncode == 0, result.stdout[-6000:]
    runs = {}
    for label, *_ in CONFIGS:
        folder = out / label
        assert (folder / "history.json").is_file(), f"{app}: no run of {label}\n{result.stdout[-6000:]}"
        runs[label] = (final_model(folder, app), json.loads((folder / "history.json").read_text()))
    return app, runs


def relative_gap(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    """max |a - b| / max(1, |b|) over every array."""
    assert a.keys() == b.keys()
    return max(float(np.max(np.abs(a[k].astype(np.float64) - b[k].astype(np.float64)) /
                        np.maximum(1.0, np.abs(b[k].astype(np.float64))), initial=0.0)) for k in a)


def float_type(model: dict[str, np.ndarray]) -> str:
    return "float32" if any(v.dtype == np.float32 for v in model.values()) else "float64"


@pytest.mark.slow
def test_every_strategy_trains_every_round_with_every_reply_and_keeps_dtypes_and_shapes(app_run):
    app, runs = app_run
    start = initial_model(app)
    for label, (model, history) in runs.items():
        assert relative_gap(model, start) > 0, f"{app} {label}: the model never changed"
        if not label.startswith("flower-"):  # Flower's QFedAvg returns float64 (README, deliberate differences)
            for key, value in start.items():
                assert (model[key].dtype, model[key].shape) == (value.dtype, value.shape), (app, label, key)
            rounds = 1 if label.endswith("-1") else ROUNDS
            assert [r["server_round"] for r in history] == list(range(1, rounds + 1)), (app, label)
            for r in history:
                assert len(r["node_ids"]) == NODES and r["excluded"] == [], (app, label, r["excluded"])


@pytest.mark.slow
@pytest.mark.parametrize("rounds", [1, ROUNDS])
@pytest.mark.parametrize("label", list(PAIRS))
def test_fedavg_and_term_at_t0_equal_flowers_fedavg_and_qffl_flowers_qfedavg(app_run, label, rounds):
    app, runs = app_run
    suffix = "-1" if rounds == 1 else ""
    model, reference = runs[label + suffix][0], runs[PAIRS[label] + suffix][0]
    gap = relative_gap(model, reference)
    print(f"\n{app}: {label} vs {PAIRS[label]}, {rounds} round(s): {gap:.3g} ({float_type(model)})")
    assert gap <= TOLERANCE[rounds][float_type(model)]


@pytest.mark.slow
def test_term_tilts_by_the_loss_before_training_and_afl_keeps_a_weight_per_partition(app_run):
    app, runs = app_run
    spreads = []
    for r in runs["term"][1]:  # t = 1 and the same n_k on every node: p_k = softmax(F_k)
        losses, weights = np.array(r["losses"]), np.array(r["weights"])
        assert np.all(np.isfinite(losses)), (app, r["losses"])
        spreads.append(np.ptp(losses))
        expected = np.exp(losses - losses.max()) / np.exp(losses - losses.max()).sum()
        np.testing.assert_allclose(weights, expected, rtol=1e-9)
        assert [m["train_loss_before"] for m in r["metrics"]] == r["losses"]
    assert max(spreads) > 0, f"{app}: the clients' losses never differ, TERM is not tested"  # sklearn: equal in round 1
    for r in runs["afl"][1]:
        mixture = np.array(r["diagnostics"]["mixture_weights"])
        assert mixture.shape == (NODES,) and mixture.sum() == pytest.approx(1.0)
        assert sorted(r["partition_ids"]) == list(range(NODES))
    for r in runs["fedavg"][1]:
        np.testing.assert_allclose(r["weights"], np.full(NODES, 1 / NODES), rtol=1e-12)
