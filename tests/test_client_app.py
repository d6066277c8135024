"""The engines' client caches (term_fl.clientapp.cache) never change what a reply says.

The in-process engine hands one global-model record to every client of a
round, so the engines' ClientApp keeps the last loaded weights and each
device's tensors. These tests send messages straight to it and compare each
reply with an independent evaluation of the weights the message carried, and
with the plain ClientApp that builds everything for every message.
"""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import ConfigRecord, Message, MessageType, RecordDict

from conftest import small_scenario
from term_fl.clientapp.app import app as plain_app
from term_fl.clientapp.app import make_client_app
from term_fl.data import dataset_for
from term_fl.clientapp.cache import LastUsed, ClientCache
from term_fl.engines.inprocess import InProcessGrid
from term_fl.flower_internals import serverapp_identity, to_array_record
from term_fl.common.keys import EVAL_SPLITS, SCENARIO as SCENARIO_KEY
from term_fl.learning.models import get_weights, model_for, set_weights
from term_fl.strategies.replies import metrics_of
from term_fl.learning.training import evaluate

SCENARIO = small_scenario("run.engine=inprocess")
DATASET = dataset_for(SCENARIO)


# Grids over node ids 100 + partition id, delivering straight to a ClientApp with a cache, and to the plain one.
CACHE = ClientCache()
GRID = InProcessGrid(make_client_app(CACHE), DATASET.num_devices, node_ids=[100 + p for p in range(DATASET.num_devices)])
PLAIN = InProcessGrid(plain_app, DATASET.num_devices, node_ids=[100 + p for p in range(DATASET.num_devices)])


def _weights(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: rng.normal(size=v.shape).astype(np.float32) for k, v in get_weights(model_for(SCENARIO, DATASET)).items()}


def _send(kind: str, arrays, pid: int, grid: InProcessGrid = GRID) -> dict:
    content = RecordDict(
        {"arrays": arrays, "config": ConfigRecord({SCENARIO_KEY: SCENARIO.to_json(), "server-round": 1})}
    )
    with grid:
        (reply,) = grid.send_and_receive([Message(content, dst_node_id=100 + pid, message_type=kind)])
    assert not reply.has_error(), reply.error.reason if reply.has_error() else ""
    return dict(metrics_of(reply))


def _expected(weights: dict[str, np.ndarray], pid: int) -> dict:
    model = model_for(SCENARIO, DATASET)
    set_weights(model, weights)
    out = {}
    for split in EVAL_SPLITS:
        x, y = DATASET.device(pid).split(split)
        res = evaluate(model, x, y, device="cpu")
        out[f"{split}_loss"], out[f"{split}_correct"] = res.loss_mean, res.correct
    return out


def _check(metrics: dict, expected: dict) -> None:
    for key, value in expected.items():
        assert metrics[key] == pytest.approx(value, rel=1e-9), key


def test_evaluating_one_record_on_many_devices_evaluates_that_record_everywhere():
    weights = _weights(1)
    record = to_array_record(weights)
    for pid in range(DATASET.num_devices):
        _check(_send(MessageType.EVALUATE, record, pid), _expected(weights, pid))


def test_a_new_record_is_loaded_even_right_after_another_one():
    first, second = _weights(2), _weights(3)
    _send(MessageType.EVALUATE, to_array_record(first), 0)
    _check(_send(MessageType.EVALUATE, to_array_record(second), 0), _expected(second, 0))


def test_after_training_the_same_record_is_loaded_again_not_the_trained_model():
    weights = _weights(4)
    record = to_array_record(weights)
    _send(MessageType.EVALUATE, record, 1)  # the record is now the loaded one
    trained = _send(MessageType.TRAIN, record, 1)  # trains the worker model in place
    assert trained["train_loss_after"] != pytest.approx(trained["train_loss_before"])
    _check(_send(MessageType.EVALUATE, record, 2), _expected(weights, 2))
    again = _send(MessageType.TRAIN, record, 1)
    assert again == trained  # same incoming model, same seed: the same update


@pytest.mark.parametrize("kind", [MessageType.TRAIN, MessageType.EVALUATE])
def test_the_cached_replies_are_the_plain_clientapps_to_the_bit(kind):
    record = to_array_record(_weights(5))
    for pid in (0, 4, 0):  # the second visit of device 0 uses what the cache kept
        assert _send(kind, record, pid) == _send(kind, record, pid, grid=PLAIN)


def test_device_tensors_stack_validation_then_test_and_share_the_training_arrays():
    setting = CACHE.setting(SCENARIO.to_json())
    model = model_for(SCENARIO, setting.dataset)
    data = setting.dataset.device(3)
    tensors = CACHE.tensors(setting, model, 3)
    assert tensors.eval_ends == (len(data.y_val), len(data.y_val) + len(data.y_test))
    assert np.array_equal(tensors.x_eval.numpy(), np.concatenate([data.x_val, data.x_test]))
    assert np.array_equal(tensors.y_eval.numpy(), np.concatenate([data.y_val, data.y_test]))
    assert np.shares_memory(tensors.x_train.numpy(), data.x_train)
    assert CACHE.tensors(setting, model, 3) is tensors
    assert CACHE.setting(SCENARIO.to_json()) is setting


def test_the_caches_keep_only_the_entries_used_last():
    kept = LastUsed(2)
    for key in ("a", "b", "a", "c"):
        kept.get(key, lambda key=key: key.upper())
    assert len(kept) == 2 and kept.get("a", lambda: "new") == "A" and kept.get("b", lambda: "new") == "new"


def test_a_client_cache_pickles_as_its_process_cache():
    """Flower's engine pickles the ClientApp with every message: the cache must not travel with it."""
    import pickle

    from term_fl.clientapp.cache import app, process_cache

    assert pickle.loads(pickle.dumps(CACHE)) is process_cache()
    assert pickle.loads(pickle.dumps(app))._registered_funcs["train.default"].keywords["workspace"] is process_cache()


# --------------------------------------------------------------------------
# What a fresh ClientApp process imports (the Deployment Engine starts one per
# message): the property, not a time.
# --------------------------------------------------------------------------

_FRESH = r"""
import json, pickle, sys
sys.path.insert(0, sys.argv[1])
from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.supercore.task_identity import TaskIdentity
TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 1
from client.app import app
context = Context(run_id=1, node_id=1, node_config={"partition-id": 2, "num-partitions": 6},
                  state=RecordDict(), run_config={})
kind = sys.argv[2]
if kind == "query":
    msg = Message(RecordDict({"config": ConfigRecord({})}), dst_node_id=1, message_type=MessageType.QUERY)
else:
    with open(sys.argv[3], "rb") as fh:
        msg = pickle.load(fh)
msg.metadata.__dict__["_message_id"] = "m"
reply = app(msg, context)
assert not reply.has_error(), reply.error.reason
print(json.dumps({"metrics": {k: v for k, v in reply.content["metrics"].items()},
                  "modules": sorted(m for m in ("torch", "sympy", "pydantic", "term_fl.config", "term_fl.data")
                                    if m in sys.modules)}))
"""


def _fresh_process(kind: str, tmp_path, clientapp: str = "auto") -> dict:
    import json
    import os
    import pickle
    import subprocess
    import sys
    from pathlib import Path

    message = tmp_path / "msg.pkl"
    if kind != "query":
        content = RecordDict({"arrays": to_array_record(_weights(3)),
                              "config": ConfigRecord({SCENARIO_KEY: SCENARIO.to_json(), "server-round": 1})})
        with serverapp_identity(run_id=1):
            message.write_bytes(pickle.dumps(Message(content, dst_node_id=1, message_type=kind)))
    repo = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", _FRESH, str(repo), kind, str(message)],
                         capture_output=True, text=True, timeout=300, check=True,
                         env={**os.environ, "TERM_FL_CLIENTAPP": clientapp})
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_discovery_query_in_a_fresh_process_imports_neither_torch_nor_the_scenario(tmp_path):
    result = _fresh_process("query", tmp_path)
    assert result["metrics"] == {"partition-id": 2, "num-partitions": 6}
    assert result["modules"] == []


@pytest.mark.parametrize("kind", ["train", "evaluate"])
def test_train_and_evaluate_in_a_fresh_process_import_no_sympy_and_answer_as_in_process(kind, tmp_path):
    """With TERM_FL_CLIENTAPP=torch, client.app (the FAB's ClientApp) imports the torch handlers lazily and
    replies exactly as term_fl.clientapp.app.app; building the model does not pull in sympy (torch's symbolic shapes)."""
    result = _fresh_process(kind, tmp_path, clientapp="torch")
    assert "sympy" not in result["modules"] and "torch" in result["modules"]
    expected = _send(kind, to_array_record(_weights(3)), 2)
    assert result["metrics"] == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("kind", ["train", "evaluate"])
def test_a_linear_models_message_in_a_fresh_process_imports_no_torch_and_answers_as_torch_does(kind, tmp_path):
    """By default client.app answers a softmax regression's train and evaluate messages without torch
    (term_fl.clientapp.linear_app): the torch ClientApp's metrics to float32 rounding."""
    result = _fresh_process(kind, tmp_path)
    assert "torch" not in result["modules"] and "term_fl.data" in result["modules"]
    expected = _send(kind, to_array_record(_weights(3)), 2)
    assert result["metrics"].keys() == expected.keys()
    assert result["metrics"] == pytest.approx(expected, rel=1e-5)
