"""The ClientApp's train and evaluate handlers for the linear models, without torch.

A deployed SuperNode starts a ClientApp process per message, and importing
torch is most of what such a process does. For a scenario whose model is a
linear SVM or softmax regression and whose clients train on the CPU
(``client.device`` ``cpu`` or ``auto``), these handlers answer with numpy
alone (:mod:`term_fl.learning.linear_numpy`): the same batches, objective,
step and report as the torch ClientApp (:mod:`term_fl.clientapp.app`), the
same reply keys, values equal to float32 rounding. :func:`answers` says
whether they take a message; ``client/app.py`` (the app of ``flwr run .``)
asks it first and imports the torch ClientApp only when they do not.

``client.device = "auto"`` trains on the CPU here without asking torch
whether a GPU is there (the torch ClientApp would take the GPU: the same
numbers to float32 rounding). ``TERM_FL_CLIENTAPP=torch`` turns this path
off (every message goes to the torch ClientApp, as before 0.3).
"""

from __future__ import annotations

import functools
import os

import numpy as np
from flwr.app import Context, Message

from term_fl.clientapp.answers import evaluate_reply, partition_of, train_reply
from term_fl.common.keys import ARRAYS, CONFIG, EVAL_SPLITS, SCENARIO, SERVER_ROUND
from term_fl.common.seeding import derive_seed
from term_fl.config import Scenario
from term_fl.config.scenario import COMPILED_MODELS
from term_fl.data import DeviceData, FederatedDataset, dataset_for
from term_fl.flower_internals import from_array_record
from term_fl.learning.linear_numpy import NAMES, evaluate_linear, train_linear

__all__ = ["CLIENTAPP_ENV", "answers", "evaluate", "train"]

CLIENTAPP_ENV = "TERM_FL_CLIENTAPP"
"""``torch``: every message to the torch ClientApp; ``auto`` (the default): the linear models without torch."""


@functools.lru_cache(maxsize=8)
def _setting(scenario_json: str) -> tuple[Scenario, FederatedDataset]:
    """The scenario a message carries and its dataset (devices built lazily, then kept), per process."""
    scenario = Scenario.from_json(scenario_json)
    return scenario, dataset_for(scenario)


def answers(msg: Message) -> bool:
    """Whether these handlers answer ``msg``: its scenario's model is linear and its clients train on the CPU.

    A message whose scenario does not parse goes to the torch ClientApp,
    which answers it with its own error.
    """
    if os.environ.get(CLIENTAPP_ENV, "auto").strip().lower() == "torch":
        return False
    try:
        scenario, _ = _setting(str(msg.content[CONFIG][SCENARIO]))
    except Exception:  # noqa: BLE001 - the torch ClientApp reports it
        return False
    return scenario.model.name in COMPILED_MODELS and scenario.client.device in ("cpu", "auto")


def _weights(msg: Message, scenario: Scenario, dataset: FederatedDataset) -> dict[str, np.ndarray]:
    """The global model a message carries, checked against the model the scenario builds (names and shapes)."""
    weights = from_array_record(msg.content[ARRAYS])
    outputs = 1 if scenario.model.name == "linear_svm" else dataset.num_classes
    expected = {NAMES[0]: (outputs, dataset.num_features), NAMES[1]: (outputs,)}
    got = {name: tuple(np.shape(value)) for name, value in weights.items()}
    if got != expected:
        raise ValueError(f"Weights do not match the model's parameters: expected {expected}, got {got}.")
    return weights


def _rows(dataset: FederatedDataset, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A device's rows as the torch ClientApp checks them: float32 features, int64 labels of the dataset's classes."""
    y = np.asarray(y)
    if len(y) == 0 or not np.issubdtype(y.dtype, np.integer) or y.min() < 0 or y.max() >= dataset.num_classes:
        raise ValueError(f"Labels must be class indices 0..{dataset.num_classes - 1} (at least one example).")
    return np.ascontiguousarray(x, dtype=np.float32), y.astype(np.int64)


def _penalty(scenario: Scenario) -> float:
    """The model's L2 penalty: the linear SVM's ``model.l2``; softmax regression has none."""
    return float(scenario.model.settings.l2) if scenario.model.name == "linear_svm" else 0.0


def _task(msg: Message, context: Context) -> tuple[Scenario, FederatedDataset, int, DeviceData]:
    """What a train or evaluate message asks of this node: the scenario, its dataset, the partition, its data."""
    scenario, dataset = _setting(str(msg.content[CONFIG][SCENARIO]))
    pid = partition_of(context, dataset)
    return scenario, dataset, pid, dataset.device(pid)


def train(msg: Message, context: Context) -> Message:
    """Report F_k (the incoming model's loss on the train split), train locally, reply: numpy only."""
    scenario, dataset, pid, data = _task(msg, context)
    c = scenario.client
    x, y = _rows(dataset, data.x_train, data.y_train)
    result = train_linear(
        _weights(msg, scenario, dataset), x, y, l2=_penalty(scenario), lr=c.lr, epochs=c.epochs,
        batch_size=c.batch_size, weight_decay=c.weight_decay, tau=c.tau,
        seed=derive_seed(scenario.run.seed, int(msg.content[CONFIG][SERVER_ROUND]), pid),
    )
    return train_reply(msg, pid, result)


def evaluate(msg: Message, context: Context) -> Message:
    """Evaluate the global model on this device's validation and test splits: numpy only."""
    scenario, dataset, pid, data = _task(msg, context)
    splits = [data.split(name) for name in EVAL_SPLITS]
    x, y = _rows(dataset, np.concatenate([x for x, _ in splits]), np.concatenate([y for _, y in splits]))
    ends = np.cumsum([len(labels) for _, labels in splits]).tolist()
    return evaluate_reply(msg, pid, evaluate_linear(_weights(msg, scenario, dataset), x, y, ends))
