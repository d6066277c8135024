"""The Flower ClientApp: one device's partition -> local training -> reply.

The server sends the resolved scenario (one JSON string, paths absolute) in
every message's ConfigRecord, so the ClientApp needs nothing else: the same
code runs in Flower's Simulation Engine, in the Deployment Engine and in the
in-process engine. A message's dataset, model and tensors come from a
:class:`Workspace`: this one builds them for every message, from (scenario,
partition-id). The engines hand the ClientApp a workspace that keeps them
between messages (:mod:`term_fl.clientapp.cache`), which changes no
reply, only the time.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from flwr.app import ArrayRecord, Context, Message
from flwr.clientapp import ClientApp

from term_fl.config import Scenario
from term_fl.data import DeviceData, FederatedDataset, dataset_for
from term_fl.flower_internals import from_array_record
from term_fl.common.keys import (
    ARRAYS,
    CONFIG,
    EVAL_SPLITS,
    NUM_EXAMPLES,
    PARTITION_ID,
    SCENARIO,
    SERVER_ROUND,
    TRAIN_LOSS_BEFORE,
    TRAIN_LOSS_AFTER,
    TRAIN_LOSS_BEFORE_SUM,
)
from term_fl.learning.models import TermModel, model_for, set_weights
from term_fl.clientapp.answers import (
    evaluate_metrics,
    evaluate_reply,
    partition_of,
    train_metrics,
    train_reply,
)
from term_fl.clientapp.node_query import partition_reply
from term_fl.common.seeding import derive_seed
from term_fl.learning.compiled_training import CohortTraining
from term_fl.learning.threads import single_threaded
from term_fl.learning.results import EvalResult
from term_fl.learning.training import (
    as_tensors,
    evaluate_segments,
    move_model,
    resolve_device,
    train_tensors,
)

__all__ = [
    "DeviceTensors", "Setting", "Workspace", "app", "device_tensors", "evaluate_metric_columns", "evaluate_metrics",
    "evaluate_reply", "make_client_app", "train_metric_columns", "train_metrics", "train_reply",
]


@dataclass(frozen=True, eq=False)
class Setting:
    """What a scenario fixes for every message of a run: the scenario, its dataset, the torch device.

    Compared (and hashed) by identity: a workspace may key what it keeps by it.
    """

    scenario: Scenario
    dataset: FederatedDataset
    device: torch.device


@dataclass(frozen=True)
class DeviceTensors:
    """One device's splits as checked tensors on a torch device.

    ``x_eval`` / ``y_eval`` stack the validation and the test split (in
    :data:`EVAL_SPLITS` order) so one forward pass evaluates both;
    ``eval_ends`` are the split boundaries for
    :func:`term_fl.learning.training.evaluate_segments`.
    """

    device: torch.device
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_eval: torch.Tensor
    y_eval: torch.Tensor
    eval_ends: tuple[int, ...]


def device_tensors(data: DeviceData, model: TermModel, device: torch.device) -> DeviceTensors:
    """A device's data checked against the model and converted for ``device`` (training arrays shared on the CPU)."""
    x_train, y_train = as_tensors(model, data.x_train, data.y_train, device)
    splits = [data.split(name) for name in EVAL_SPLITS]
    x_eval, y_eval = as_tensors(
        model, np.concatenate([x for x, _ in splits]), np.concatenate([y for _, y in splits]), device
    )
    ends = tuple(int(n) for n in np.cumsum([len(y) for _, y in splits]))
    return DeviceTensors(device, x_train, y_train, x_eval, y_eval, ends)


class Workspace:
    """Where the ClientApp gets what a message needs: built anew for every message.

    Subclasses may keep what they build (:class:`term_fl.clientapp.cache.ClientCache`);
    every method returns what this one would.
    """

    def setting(self, scenario_json: str) -> Setting:
        """The scenario a message carries, its dataset (devices built lazily) and the torch device."""
        scenario = Scenario.from_json(scenario_json)
        return Setting(scenario, dataset_for(scenario), resolve_device(scenario.client.device))

    def model(self, setting: Setting, arrays: ArrayRecord, *, training: bool) -> TermModel:
        """A model of the scenario holding ``arrays``, on the setting's device, in eval mode.

        ``training``: the caller trains it in place (no one else may see it afterwards).
        """
        model = model_for(setting.scenario, setting.dataset)
        model.eval()
        move_model(model, setting.device)
        set_weights(model, from_array_record(arrays))
        return model

    def tensors(self, setting: Setting, model: TermModel, partition_id: int) -> DeviceTensors:
        """Device ``partition_id``'s splits as tensors for ``model`` on the setting's device."""
        return device_tensors(setting.dataset.device(partition_id), model, setting.device)


def query(msg: Message, context: Context) -> Message:
    """Tell the server which partition this node holds (node discovery)."""
    return partition_reply(msg, context)


def _task(
    msg: Message, context: Context, workspace: Workspace, *, training: bool
) -> tuple[Setting, int, TermModel, DeviceTensors]:
    """What a train or evaluate message asks of this node: the setting, the partition, the model, the tensors."""
    setting = workspace.setting(str(msg.content[CONFIG][SCENARIO]))
    pid = partition_of(context, setting.dataset)
    model = workspace.model(setting, msg.content[ARRAYS], training=training)
    return setting, pid, model, workspace.tensors(setting, model, pid)


def train(msg: Message, context: Context, workspace: Workspace) -> Message:
    """Report F_k (the incoming model's loss on the train split), train locally (one thread), reply."""
    with single_threaded():
        setting, pid, model, data = _task(msg, context, workspace, training=True)
        scenario, c = setting.scenario, setting.scenario.client
        result = train_tensors(
            model,
            data.x_train,
            data.y_train,
            lr=c.lr,
            epochs=c.epochs,
            batch_size=c.batch_size,
            weight_decay=c.weight_decay,
            tau=c.tau,
            seed=derive_seed(scenario.run.seed, int(msg.content[CONFIG][SERVER_ROUND]), pid),
        )
    return train_reply(msg, pid, result)


def train_metric_columns(partition_ids: Sequence[int], training: CohortTraining) -> dict[str, np.ndarray]:
    """:func:`train_metrics` of a cohort as one table: a column per key (int64 or float64), the same order."""
    return {
        NUM_EXAMPLES: training.num_examples.astype(np.int64),
        PARTITION_ID: np.asarray(partition_ids, dtype=np.int64),
        TRAIN_LOSS_BEFORE: np.array([b.loss_tilted for b in training.before], dtype=np.float64),
        TRAIN_LOSS_BEFORE_SUM: np.array([b.loss_sum for b in training.before], dtype=np.float64),
        TRAIN_LOSS_AFTER: training.loss_after.astype(np.float64),
    }


def evaluate(msg: Message, context: Context, workspace: Workspace) -> Message:
    """Evaluate the global model on this device's validation and test splits (one forward pass, one thread)."""
    with single_threaded():
        _, pid, model, data = _task(msg, context, workspace, training=False)
        results = evaluate_segments(model, data.x_eval, data.y_eval, data.eval_ends)
    return evaluate_reply(msg, pid, results)


def evaluate_metric_columns(
    partition_ids: Sequence[int], results: Sequence[Sequence[EvalResult]]
) -> dict[str, np.ndarray]:
    """:func:`evaluate_metrics` of many devices as one table: a column per key (int64 or float64), the same order."""
    rows = [evaluate_metrics(pid, res) for pid, res in zip(partition_ids, results, strict=True)]
    return {key: np.array([row[key] for row in rows], dtype=np.int64 if isinstance(value, int) else np.float64)
            for key, value in rows[0].items()}


def make_client_app(workspace: Workspace) -> ClientApp:
    """The ClientApp (query, train, evaluate) over ``workspace``."""
    client_app = ClientApp()
    client_app.query()(query)
    client_app.train()(functools.partial(train, workspace=workspace))
    client_app.evaluate()(functools.partial(evaluate, workspace=workspace))
    return client_app


app = make_client_app(Workspace())
"""The plain ClientApp: every message builds what it needs (the engines use a caching one)."""
