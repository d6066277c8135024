"""The Flower ClientApp: one device's partition -> local training -> reply.

The server sends the resolved scenario (one JSON string, paths absolute) in
every message's ConfigRecord, so the ClientApp needs nothing else: the same
code runs in Flower's Simulation Engine, in the Deployment Engine and in the
in-process engine. Datasets and models are built lazily inside the client
process from (scenario, partition-id) and cached.
"""

from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from term_fl.config import Scenario
from term_fl.data import DeviceData, FederatedDataset, build_dataset
from term_fl.models import TermModel, build_model, set_weights
from term_fl.seeding import derive_seed
from term_fl.training import evaluate, resolve_device, train

SCENARIO_KEY = "scenario"
EVAL_SPLITS = ("val", "test")

app = ClientApp()


@functools.lru_cache(maxsize=8)
def scenario_from_json(text: str) -> Scenario:
    """Parse the scenario sent by the server (cached: every message carries it)."""
    return Scenario.from_json(text)


def dataset_kwargs(scenario: Scenario) -> dict:
    """Keyword arguments of term_fl.data.build_dataset for a scenario."""
    d = scenario.data
    return dict(
        path=d.path,
        seed=scenario.data_seed,
        num_devices=d.num_devices,
        alpha=d.alpha,
        beta=d.beta,
        max_samples=d.max_samples,
        train_fraction=d.train_fraction,
        val_fraction=d.val_fraction,
        test_fraction=d.test_fraction,
        noise=d.noise,
        noisy_devices=tuple(d.noisy_devices),
        num_noisy=d.num_noisy,
        noise_scale=d.noise_scale,
    )


@functools.lru_cache(maxsize=8)
def _cached_dataset(name: str, frozen_kwargs: tuple) -> FederatedDataset:
    return build_dataset(name, **dict(frozen_kwargs))


def dataset_for(scenario: Scenario) -> FederatedDataset:
    """The scenario's dataset, built once per process (devices are built lazily)."""
    return _cached_dataset(scenario.data.name, tuple(sorted(dataset_kwargs(scenario).items())))


def model_for(scenario: Scenario, dataset: FederatedDataset, seed: int | None = None) -> TermModel:
    """A fresh model of the scenario's architecture (initialised from ``seed``)."""
    m = scenario.model
    return build_model(
        m.name,
        dataset.num_features,
        dataset.num_classes,
        hidden=m.hidden,
        l2=m.l2,
        seed=scenario.run.seed if seed is None else seed,
    )


@functools.lru_cache(maxsize=8)
def _worker_model(scenario_json: str) -> TermModel:
    scenario = scenario_from_json(scenario_json)
    return model_for(scenario, dataset_for(scenario))


def _partition(context: Context, dataset: FederatedDataset) -> int:
    try:
        pid = int(context.node_config["partition-id"])
    except KeyError:
        raise ValueError(
            "node_config has no 'partition-id': start the SuperNode with "
            "--node-config \"partition-id=I num-partitions=N\""
        ) from None
    num = int(context.node_config.get("num-partitions", dataset.num_devices))
    if num != dataset.num_devices or not 0 <= pid < dataset.num_devices:
        raise ValueError(
            f"partition-id={pid} num-partitions={num} does not match the dataset "
            f"'{dataset.name}' with {dataset.num_devices} devices (allowed partition ids 0..{dataset.num_devices - 1})"
        )
    return pid


@dataclass
class _Task:
    """What one train or evaluate message asks of this node."""

    scenario: Scenario
    partition_id: int
    data: DeviceData
    model: TermModel  # holding the incoming global weights


def _task(msg: Message, context: Context) -> _Task:
    torch.set_num_threads(1)
    scenario_json = str(msg.content["config"][SCENARIO_KEY])
    scenario = scenario_from_json(scenario_json)
    dataset = dataset_for(scenario)
    pid = _partition(context, dataset)
    model = _worker_model(scenario_json)
    set_weights(model, _decoded(msg.content["arrays"]))
    return _Task(scenario, pid, dataset.device(pid), model)


_last_decoded: dict[str, Any] = {}


def _decoded(arrays: ArrayRecord) -> dict[str, np.ndarray]:
    """The arrays of a record as numpy, decoded once per record object.

    The in-process engine hands one global-model record to every client of a
    round; Flower's engines deserialise a record per message (no reuse).
    """
    ref = _last_decoded.get("record")
    if ref is None or ref() is not arrays:
        _last_decoded["record"] = weakref.ref(arrays)
        _last_decoded["weights"] = {k: v.numpy() for k, v in arrays.items()}
    return _last_decoded["weights"]


@app.query()
def query(msg: Message, context: Context) -> Message:
    """Tell the server which partition this node holds (node discovery)."""
    pid = int(context.node_config.get("partition-id", -1))
    num = int(context.node_config.get("num-partitions", 0))
    return Message(RecordDict({"metrics": MetricRecord({"partition-id": pid, "num-partitions": num})}), reply_to=msg)


@app.train()
def train_handler(msg: Message, context: Context) -> Message:
    """Report F_k (the incoming model's loss on the train split), train locally, reply."""
    task = _task(msg, context)
    scenario, pid = task.scenario, task.partition_id
    server_round = int(msg.content["config"]["server-round"])
    c = scenario.client
    result = train(
        task.model,
        task.data.x_train,
        task.data.y_train,
        lr=c.lr,
        epochs=c.epochs,
        batch_size=c.batch_size,
        weight_decay=c.weight_decay,
        tau=c.tau,
        seed=derive_seed(scenario.run.seed, server_round, pid),
        device=resolve_device(c.device),
    )
    before = result.before
    metrics = MetricRecord(
        {
            "num-examples": int(result.num_examples),
            "partition-id": pid,
            # F_k: tau-tilted loss of the incoming model (the mean loss when tau = 0)
            "train_loss": float(before.loss_tilted),
            "train_loss_sum": float(before.loss_sum),
            "train_loss_after": float(result.loss_after),
        }
    )
    arrays = ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in result.weights.items()})
    return Message(RecordDict({"arrays": arrays, "metrics": metrics}), reply_to=msg)


@app.evaluate()
def evaluate_handler(msg: Message, context: Context) -> Message:
    """Evaluate the global model on this device's validation and test splits."""
    task = _task(msg, context)
    device = resolve_device(task.scenario.client.device)
    values: dict[str, int | float] = {"partition-id": task.partition_id}
    total = 0
    for split in EVAL_SPLITS:
        x, y = task.data.split(split)
        res = evaluate(task.model, x, y, device=device)
        values[f"{split}_loss"] = float(res.loss_mean)
        values[f"{split}_accuracy"] = float(res.accuracy)
        values[f"{split}_correct"] = int(res.correct)
        values[f"{split}_examples"] = int(res.examples)
        total += int(res.examples)
    values["num-examples"] = total
    return Message(RecordDict({"metrics": MetricRecord(values)}), reply_to=msg)
