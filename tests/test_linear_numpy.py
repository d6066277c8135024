"""The linear models without torch: torch's batches, train_tensors' numbers to float32 rounding, the ClientApp's replies.

The references are torch itself (``torch.randperm``, ``train_tensors``,
``evaluate_segments``) and the torch ClientApp (``term_fl.clientapp.app``),
message by message.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict

from conftest import small_scenario, vehicle_path
from term_fl.clientapp import linear_app
from term_fl.clientapp.app import Workspace
from term_fl.clientapp.app import evaluate as torch_evaluate
from term_fl.clientapp.app import train as torch_train
from term_fl.common.keys import ARRAYS, CONFIG, METRICS, SCENARIO, SERVER_ROUND
from term_fl.config import load_scenario
from term_fl.data import dataset_for
from term_fl.flower_internals import from_array_record, serverapp_identity, to_array_record
from term_fl.learning.linear_numpy import evaluate_linear, train_linear
from term_fl.learning.models import build_model, get_weights, model_for, set_weights
from term_fl.learning.permutations import randperms
from term_fl.learning.training import as_tensors, evaluate_segments, train_tensors


@pytest.mark.parametrize("seed", [0, 1, 2**31 - 1, 2**32 + 5, 2**62 + 12345, 8_111_222_333_444_555_666])
@pytest.mark.parametrize("n", [1, 2, 3, 10, 97, 534])
def test_randperms_are_the_permutations_torch_draws_on_the_cpu(seed, n):
    generator = torch.Generator().manual_seed(seed)
    want = [torch.randperm(n, generator=generator).numpy() for _ in range(3)]
    assert [p.tolist() for p in randperms(n, seed, 3)] == [p.tolist() for p in want]


def test_randperms_refuses_what_torch_draws_otherwise():
    with pytest.raises(ValueError, match="randperms"):
        randperms(0, 1, 1)


def _case(name: str, classes: int, n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    model = build_model(name, 7, classes, **({"l2": 0.02} if name == "linear_svm" else {}))
    weights = {k: (0.4 * rng.normal(size=v.shape)).astype(np.float32) for k, v in get_weights(model).items()}
    set_weights(model, weights)
    x = rng.normal(size=(n, 7)).astype(np.float32)
    y = rng.integers(0, classes, size=n).astype(np.int64)
    return model, weights, x, y


def _close(got, want, rel: float = 1e-5) -> bool:
    got, want = np.ravel(got), np.ravel(want)
    return float(np.abs(got - want).max()) <= rel * max(float(np.abs(want).max()), 1e-6)


@pytest.mark.parametrize("name, classes, l2", [("logreg", 4, 0.0), ("linear_svm", 2, 0.02)])
@pytest.mark.parametrize("n, batch_size, epochs", [(5, 8, 2), (8, 8, 1), (9, 8, 3), (61, 10, 2)])
@pytest.mark.parametrize("tau, weight_decay", [(0.0, 0.0), (0.7, 0.01), (-1.0, 0.001)])
def test_training_equals_train_tensors_to_float32_rounding(name, classes, l2, n, batch_size, epochs, tau, weight_decay):
    model, weights, x, y = _case(name, classes, n)
    incoming = {k: v.copy() for k, v in weights.items()}
    x_t, y_t = as_tensors(model, x, y, torch.device("cpu"))
    want = train_tensors(model, x_t, y_t, lr=0.1, epochs=epochs, batch_size=batch_size, weight_decay=weight_decay,
                         tau=tau, seed=987_654_321_012)
    got = train_linear(weights, x, y, l2=l2, lr=0.1, epochs=epochs, batch_size=batch_size,
                       weight_decay=weight_decay, tau=tau, seed=987_654_321_012)
    assert got.steps == want.steps and got.num_examples == want.num_examples
    assert all(_close(got.weights[k], want.weights[k]) for k in want.weights)
    assert got.before.correct == want.before.correct and got.before.examples == want.before.examples
    for field in ("loss_mean", "loss_sum", "loss_tilted"):
        assert getattr(got.before, field) == pytest.approx(getattr(want.before, field), rel=1e-6, abs=1e-9)
    assert got.loss_after == pytest.approx(want.loss_after, rel=1e-5, abs=1e-7)
    assert all(np.array_equal(weights[k], incoming[k]) for k in weights)  # the incoming weights are left alone


@pytest.mark.parametrize("name, classes", [("logreg", 5), ("linear_svm", 2)])
def test_evaluation_equals_evaluate_segments(name, classes):
    model, weights, x, y = _case(name, classes, 40, seed=3)
    x_t, y_t = as_tensors(model, x, y, torch.device("cpu"))
    want = evaluate_segments(model, x_t, y_t, [13, 40])
    got = evaluate_linear(weights, x, y, [13, 40])
    for g, w in zip(got, want, strict=True):
        assert (g.correct, g.examples) == (w.correct, w.examples)
        assert g.loss_mean == pytest.approx(w.loss_mean, rel=1e-6) and g.accuracy == w.accuracy


def _scenarios():
    cases = {"logreg": small_scenario("client.tau=0.5", "client.epochs=2")}
    path = vehicle_path()
    if path is not None:
        cases["svm"] = load_scenario(None, ["data.name=vehicle", "model.name=linear_svm", "client.tau=-1.0",
                                            "client.weight_decay=0.001", "client.batch_size=32"],
                                     environ={"TERM_FL_VEHICLE_DATA": str(path)})
    return cases


def _message(scenario, kind: str, seed: int = 4) -> Message:
    dataset = dataset_for(scenario)
    rng = np.random.default_rng(seed)
    weights = {k: (0.3 * rng.normal(size=v.shape)).astype(np.float32)
               for k, v in get_weights(model_for(scenario, dataset)).items()}
    content = RecordDict({ARRAYS: to_array_record(weights),
                          CONFIG: ConfigRecord({SCENARIO: scenario.to_json(), SERVER_ROUND: 7})})
    with serverapp_identity(run_id=1):
        return Message(content, dst_node_id=1, message_type=kind)


def _context(pid: int, num: int) -> Context:
    return Context(run_id=1, node_id=1, node_config={"partition-id": pid, "num-partitions": num},
                   state=RecordDict(), run_config={})


@pytest.mark.parametrize("name", list(_scenarios()))
@pytest.mark.parametrize("kind", [MessageType.TRAIN, MessageType.EVALUATE])
def test_the_torch_free_clientapp_replies_as_the_torch_one(name, kind):
    scenario = _scenarios()[name]
    num = dataset_for(scenario).num_devices
    assert linear_app.answers(_message(scenario, kind))
    for pid in (0, num - 1):
        msg = _message(scenario, kind, seed=pid)
        got = linear_app.train(msg, _context(pid, num)) if kind == MessageType.TRAIN else \
            linear_app.evaluate(msg, _context(pid, num))
        handler = torch_train if kind == MessageType.TRAIN else torch_evaluate
        want = handler(msg, _context(pid, num), Workspace())
        got_metrics, want_metrics = dict(got.content[METRICS]), dict(want.content[METRICS])
        assert list(got_metrics) == list(want_metrics)
        assert got_metrics == pytest.approx(want_metrics, rel=1e-5, abs=1e-7)
        if kind == MessageType.TRAIN:
            g, w = from_array_record(got.content[ARRAYS]), from_array_record(want.content[ARRAYS])
            assert list(g) == list(w) and all(g[k].dtype == w[k].dtype and _close(g[k], w[k]) for k in w)


@pytest.mark.parametrize("overrides, env", [(("model.name=mlp",), "auto"), (("client.device=cuda",), "auto"),
                                            ((), "torch")])
def test_other_models_devices_or_the_setting_go_to_the_torch_clientapp(monkeypatch, overrides, env):
    monkeypatch.setenv(linear_app.CLIENTAPP_ENV, env)
    assert not linear_app.answers(_message(small_scenario(*overrides), MessageType.TRAIN))


def test_a_bad_partition_or_model_is_the_torch_clientapps_error():
    scenario = small_scenario()
    msg = _message(scenario, MessageType.TRAIN)
    with pytest.raises(ValueError, match="partition-id=9 num-partitions=6"):
        linear_app.train(msg, _context(9, 6))
    bad = _message(scenario, MessageType.TRAIN)
    bad.content[ARRAYS] = to_array_record({"linear.weight": np.zeros((3, 2), np.float32),
                                           "linear.bias": np.zeros(3, np.float32)})
    with pytest.raises(ValueError, match="Weights do not match"):
        linear_app.train(bad, _context(0, 6))
