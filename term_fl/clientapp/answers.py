"""What a node answers, without torch: its partition, and the train and evaluate replies of docs/contracts.md.

Both ClientApp paths build their replies here: the torch one
(:mod:`term_fl.clientapp.app`) and the one of the linear models that needs
no torch (:mod:`term_fl.clientapp.linear_app`).
"""

from __future__ import annotations

from collections.abc import Sequence

from flwr.app import Context, Message

from term_fl.common.keys import (
    ARRAYS,
    EVAL_SPLITS,
    METRICS,
    NUM_EXAMPLES,
    NUM_PARTITIONS,
    PARTITION_ID,
    TRAIN_LOSS_AFTER,
    TRAIN_LOSS_BEFORE,
    TRAIN_LOSS_BEFORE_SUM,
    eval_key,
)
from term_fl.data import FederatedDataset
from term_fl.flower_internals import metric_record, reply_message, to_array_record
from term_fl.learning.results import EvalResult, TrainResult

__all__ = ["evaluate_metrics", "evaluate_reply", "partition_of", "train_metrics", "train_reply"]


def partition_of(context: Context, dataset: FederatedDataset) -> int:
    """The partition this node holds (its ``node_config``), checked against the dataset; ValueError saying how to fix it."""
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


def train_metrics(partition_id: int, result: TrainResult) -> dict[str, int | float]:
    """The metrics of a train reply (docs/contracts.md, 'Messages'), in the order the reply holds them."""
    before = result.before
    return {
        NUM_EXAMPLES: int(result.num_examples),
        PARTITION_ID: partition_id,
        # F_k: tau-tilted loss of the incoming model (the mean loss when tau = 0)
        TRAIN_LOSS_BEFORE: float(before.loss_tilted),
        TRAIN_LOSS_BEFORE_SUM: float(before.loss_sum),
        TRAIN_LOSS_AFTER: float(result.loss_after),
    }


def train_reply(msg: Message, partition_id: int, result: TrainResult) -> Message:
    """The reply to a train message: the trained weights and :func:`train_metrics`."""
    metrics = metric_record(train_metrics(partition_id, result))
    return reply_message(msg, {ARRAYS: to_array_record(result.weights), METRICS: metrics})


def evaluate_metrics(partition_id: int, results: Sequence[EvalResult]) -> dict[str, int | float]:
    """The metrics of an evaluate reply: per split of :data:`EVAL_SPLITS` (in order) its loss, accuracy, counts."""
    values: dict[str, int | float] = {PARTITION_ID: partition_id}
    for split, res in zip(EVAL_SPLITS, results, strict=True):
        values[eval_key(split, "loss")] = res.loss_mean
        values[eval_key(split, "accuracy")] = res.accuracy
        values[eval_key(split, "correct")] = res.correct
        values[eval_key(split, "examples")] = res.examples
    values[NUM_EXAMPLES] = sum(res.examples for res in results)
    return values


def evaluate_reply(msg: Message, partition_id: int, results: Sequence[EvalResult]) -> Message:
    """The reply to an evaluate message: :func:`evaluate_metrics`."""
    return reply_message(msg, {METRICS: metric_record(evaluate_metrics(partition_id, results))})
