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

import numpy as np
import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from term_fl.config import Scenario
from term_fl.data import DeviceData, FederatedDataset, build_dataset
from term_fl.models import TermModel, build_model, set_weights
from term_fl.keys import (
    ARRAYS,
    CONFIG,
    EVAL_SPLITS,
    METRICS,
    NUM_EXAMPLES,
    NUM_PARTITIONS,
    PARTITION_ID,
    SCENARIO,
    SERVER_ROUND,
    TRAIN_LOSS,
    TRAIN_LOSS_AFTER,
    TRAIN_LOSS_SUM,
    eval_key,
)
from term_fl.node_query import partition_reply
from term_fl.seeding import derive_seed
from term_fl.flower_internals import from_array_record, to_array_record
from term_fl.training import as_tensors, evaluate_segments, move_model, resolve_device, train_tensors

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
        sha256=d.sha256,
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


def _partition(context: Context, dataset: FederatedDataset) -> int:
    try:
        pid = int(context.node_config[PARTITION_ID])
    except KeyError:
        raise ValueError(
            "node_config has no 'partition-id': start the SuperNode with "
            "--node-config \"partition-id=I num-partitions=N\""
        ) from None
    num = int(context.node_config.get(NUM_PARTITIONS, dataset.num_devices))
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
    data: DeviceTensors
    model: TermModel  # holding the incoming global weights, on data.device


@dataclass(frozen=True)
class DeviceTensors:
    """One device's splits as checked tensors on a torch device.

    ``x_eval`` / ``y_eval`` stack the validation and the test split (in
    :data:`EVAL_SPLITS` order) so one forward pass evaluates both;
    ``eval_ends`` are the split boundaries for
    :func:`term_fl.training.evaluate_segments`.
    """

    device: torch.device
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_eval: torch.Tensor
    y_eval: torch.Tensor
    eval_ends: tuple[int, ...]


@functools.lru_cache(maxsize=256)
def device_tensors(data: DeviceData, model: TermModel, device: torch.device) -> DeviceTensors:
    """A device's data checked against the model and converted once per (device, model, torch device).

    Bounded: a client process that meets thousands of partitions (Flower's
    Simulation Engine) keeps the last 256; on the CPU the training tensors
    share memory with the dataset's arrays.
    """
    x_train, y_train = as_tensors(model, data.x_train, data.y_train, device)
    splits = [data.split(name) for name in EVAL_SPLITS]
    x_eval, y_eval = as_tensors(
        model, np.concatenate([x for x, _ in splits]), np.concatenate([y for _, y in splits]), device
    )
    ends = tuple(int(n) for n in np.cumsum([len(y) for _, y in splits]))
    return DeviceTensors(device, x_train, y_train, x_eval, y_eval, ends)


# The weights last loaded into each worker model, by the record they came from:
# the in-process engine hands one global-model record to every client of a
# round, so the evaluation clients need not reload it. Flower's engines
# deserialise a record per message, so nothing is reused there.
_loaded_from: weakref.WeakKeyDictionary[TermModel, weakref.ref] = weakref.WeakKeyDictionary()


def _load(model: TermModel, arrays: ArrayRecord) -> None:
    ref = _loaded_from.get(model)
    if ref is not None and ref() is arrays:
        return
    set_weights(model, from_array_record(arrays))
    _loaded_from[model] = weakref.ref(arrays)


@functools.lru_cache(maxsize=8)
def _setting(scenario_json: str) -> tuple[Scenario, FederatedDataset, TermModel, torch.device]:
    """What a scenario fixes for every message of a run: scenario, dataset, worker model, torch device.

    One worker model per scenario and process; each message loads its
    weights into it. It stays in eval mode (training switches and switches back).
    """
    scenario = scenario_from_json(scenario_json)
    dataset = dataset_for(scenario)
    model = model_for(scenario, dataset)
    model.eval()
    return scenario, dataset, model, resolve_device(scenario.client.device)


def _task(msg: Message, context: Context) -> _Task:
    torch.set_num_threads(1)
    scenario, dataset, model, device = _setting(str(msg.content[CONFIG][SCENARIO]))
    pid = _partition(context, dataset)
    move_model(model, device)
    _load(model, msg.content[ARRAYS])
    return _Task(scenario, pid, device_tensors(dataset.device(pid), model, device), model)


@app.query()
def query(msg: Message, context: Context) -> Message:
    """Tell the server which partition this node holds (node discovery)."""
    return partition_reply(msg, context)


@app.train()
def train_handler(msg: Message, context: Context) -> Message:
    """Report F_k (the incoming model's loss on the train split), train locally, reply."""
    task = _task(msg, context)
    scenario, pid, data = task.scenario, task.partition_id, task.data
    server_round = int(msg.content[CONFIG][SERVER_ROUND])
    c = scenario.client
    _loaded_from.pop(task.model, None)  # trained in place: no longer the global model
    result = train_tensors(
        task.model,
        data.x_train,
        data.y_train,
        lr=c.lr,
        epochs=c.epochs,
        batch_size=c.batch_size,
        weight_decay=c.weight_decay,
        tau=c.tau,
        seed=derive_seed(scenario.run.seed, server_round, pid),
    )
    before = result.before
    metrics = MetricRecord(
        {
            NUM_EXAMPLES: int(result.num_examples),
            PARTITION_ID: pid,
            # F_k: tau-tilted loss of the incoming model (the mean loss when tau = 0)
            TRAIN_LOSS: float(before.loss_tilted),
            TRAIN_LOSS_SUM: float(before.loss_sum),
            TRAIN_LOSS_AFTER: float(result.loss_after),
        }
    )
    return Message(RecordDict({ARRAYS: to_array_record(result.weights), METRICS: metrics}), reply_to=msg)


@app.evaluate()
def evaluate_handler(msg: Message, context: Context) -> Message:
    """Evaluate the global model on this device's validation and test splits (one forward pass)."""
    task = _task(msg, context)
    data = task.data
    values: dict[str, int | float] = {PARTITION_ID: task.partition_id}
    results = evaluate_segments(task.model, data.x_eval, data.y_eval, data.eval_ends)
    for split, res in zip(EVAL_SPLITS, results, strict=True):
        values[eval_key(split, "loss")] = res.loss_mean
        values[eval_key(split, "accuracy")] = res.accuracy
        values[eval_key(split, "correct")] = res.correct
        values[eval_key(split, "examples")] = res.examples
    values[NUM_EXAMPLES] = sum(res.examples for res in results)
    return Message(RecordDict({METRICS: MetricRecord(values)}), reply_to=msg)
