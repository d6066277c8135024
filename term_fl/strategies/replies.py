"""Reading and checking the replies of a round: one reply filter for every strategy and the server loop.

docs/contracts.md, 'Replies': error replies, missing keys, non-finite losses or
arrays are excluded with a warning naming the node (Flower's own consistency
check would otherwise abort the run, and QFedAvg would turn a NaN loss into a
NaN model); the valid replies are sorted by partition-id before any sum
(float32 sums in arrival order differ run to run).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from logging import INFO, WARNING
from typing import Any, NamedTuple

import numpy as np
from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict
from flwr.serverapp.exception import AggregationError
from flwr.supercore import log
from numpy.typing import NDArray

from term_fl.flower_internals import from_array, records_of
from term_fl.common.keys import METRICS, PARTITION_ID, TRAIN_LOSS_BEFORE, TRAIN_LOSS_BEFORE_SUM

from .reports import ExcludedReply, reply_name
from .stacked import StackedModels

__all__ = [
    "PARTITION_HELPER",
    "TrainReplies",
    "aggregated_metrics",
    "arrays_of",
    "carriers",
    "filter_replies",
    "filter_train_replies",
    "metric_carriers",
    "metric_values",
    "metrics_of",
    "missing_loss_error",
    "missing_partition_error",
    "partition_id_of",
    "sent_index",
]


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def metrics_of(msg: Message) -> MetricRecord | None:
    """The only MetricRecord of a reply; None for an error reply or one without exactly one."""
    if msg.has_error() or not msg.has_content():
        return None
    records = records_of(msg.content, MetricRecord)
    return records[0] if len(records) == 1 else None


def arrays_of(msg: Message) -> ArrayRecord:
    """The only ArrayRecord of a valid training reply."""
    return records_of(msg.content, ArrayRecord)[0]


def metric_values(
    replies: Sequence[Message | Mapping[str, Any]], key: str, missing: float | None = None
) -> NDArray[np.float64]:
    """The metric ``key`` of each (validated) reply, or of each reply's metrics as a dict, as a float64 array.

    With ``missing`` set, a reply without a number under ``key`` gives that
    value instead (FedAvg records the losses that are sent: NaN for the others).
    """
    records = [metrics_of(item) if isinstance(item, Message) else item for item in replies]
    if missing is None:
        return np.array([float(metrics[key]) for metrics in records], dtype=np.float64)
    values = (metrics.get(key) for metrics in records)
    return np.array([float(v) if _is_number(v) else missing for v in values], dtype=np.float64)


@functools.cache
def _flower_average() -> Callable[[list[RecordDict], str], MetricRecord]:
    """Flower's default metrics aggregation: what its FedAvg uses when given none."""
    from flwr.serverapp.strategy import FedAvg as FlowerFedAvg

    return FlowerFedAvg().train_metrics_aggr_fn


def aggregated_metrics(
    fn: Callable[[list[RecordDict], str], MetricRecord], metrics: Sequence[Mapping[str, Any]], weighting_key: str
) -> MetricRecord:
    """A strategy's ``train_metrics_aggr_fn`` / ``evaluate_metrics_aggr_fn`` over the valid replies' metrics.

    Flower's default (``aggregate_metricrecords``: the average weighted by
    ``weighting_key``, which it leaves out) is computed on the plain dicts,
    with its arithmetic in its order; any other function gets one RecordDict
    per reply holding its MetricRecord.
    """
    if fn is not _flower_average():
        return fn([RecordDict({METRICS: MetricRecord(dict(m))}) for m in metrics], weighting_key)
    weights = [m[weighting_key] for m in metrics]
    total = sum(weights)
    averaged: dict[str, Any] = {}
    for record, weight in zip(metrics, [w / total for w in weights], strict=True):
        for key, value in record.items():
            if key == weighting_key:
                continue
            if isinstance(value, list):
                averaged[key] = ([v * weight for v in value] if key not in averaged
                                 else [c + v * weight for c, v in zip(averaged[key], value, strict=True)])
            else:
                averaged[key] = value * weight if key not in averaged else averaged[key] + value * weight
    return MetricRecord(averaged)


def metric_carriers(replies: Iterable[Message], key: str) -> tuple[int, int]:
    """How many replies hold a MetricRecord, and how many of those carry ``key``."""
    records = [metrics for msg in replies if (metrics := metrics_of(msg)) is not None]
    return len(records), sum(1 for metrics in records if key in metrics)


def carriers(replies: Sequence[Message] | Any, key: str) -> tuple[int, int]:
    """:func:`metric_carriers` of a list of replies, or of a round's stacked replies (``CohortReplies``)."""
    if isinstance(replies, Sequence):
        return metric_carriers(replies, key)
    return len(replies), len(replies) if key in replies.metrics else 0


def missing_loss_error(strategy: str, key: str, server_round: int, replies: int) -> AggregationError:
    """The error of a round in which no training reply carries the loss the strategy weights by."""
    summed = ", with_sum=True" if key == TRAIN_LOSS_BEFORE_SUM else ""
    send = (f'metrics["{key}"] = loss_before' if key not in (TRAIN_LOSS_BEFORE, TRAIN_LOSS_BEFORE_SUM)
            else "metrics.update(train_metrics(loss_before))")
    return AggregationError(
        f"{strategy} weights each client by F_k, the loss of the received global model on the client's "
        f"training data, measured before local training, which it reads from the metric '{key}'; none of "
        f"the {replies} training replies of round {server_round} carries it. Add two lines to the "
        "ClientApp's train function (from term_fl.plugin import pre_training_loss, train_metrics):\n"
        f"    loss_before = pre_training_loss(model, trainloader, loss_fn{summed})  "
        "# after loading the received weights, before training\n"
        f"    {send}  # in the reply's MetricRecord\n"
        "With Flower Datasets' dict batches, name the input and label columns: "
        f'pre_training_loss(model, trainloader, loss_fn, keys=("img", "label"){summed}). '
        "NumPy, JAX and scikit-learn models have the same helper in term_fl.plugin.numpy_loss, .jax_loss and "
        ".sklearn_loss. Or pass train_loss_key=KEY if the clients send this loss under another key. "
        "(Flower's examples send 'train_loss' as the mean loss during local training: another quantity.)"
    )


PARTITION_HELPER = (
    "The ClientApp answers the server's partition query and sends its partition id with each train reply "
    "(from term_fl.plugin.partitions import partition_reply; from term_fl.plugin import train_metrics):\n"
    "    app.query()(partition_reply)  # the ClientApp answers with context.node_config['partition-id']\n"
    "    metrics.update(train_metrics(loss_before, partition_id=context.node_config['partition-id']))\n"
    "and the ServerApp learns the table before strategy.start (from term_fl.plugin.partitions import "
    "node_partitions):\n"
    "    strategy.set_node_partitions(node_partitions(grid, expected=NUM_PARTITIONS))"
)
"""What a Flower app adds so that the server knows each reply's partition (AFL; seeded sampling)."""


def missing_partition_error(strategy: str, key: str, server_round: int, replies: int) -> AggregationError:
    """The error of a round in which no training reply carries its partition id (AFL indexes by it)."""
    return AggregationError(
        f"{strategy} keeps a mixture weight per partition and reads each reply's partition from the metric "
        f"'{key}'; none of the {replies} training replies of round {server_round} carries it. {PARTITION_HELPER}"
    )


def partition_id_of(msg: Message | Mapping[str, Any], partition_key: str = PARTITION_ID) -> int | None:
    """The partition id a reply (or its metrics as a dict) reports, or None when it carries no usable one."""
    metrics = metrics_of(msg) if isinstance(msg, Message) else msg
    value = None if metrics is None else metrics.get(partition_key)
    if _is_number(value) and math.isfinite(value) and float(value).is_integer():
        return int(value)
    return None


def _sort_key(msg: Message, partition_key: str) -> tuple[int, int, int]:
    partition = partition_id_of(msg, partition_key)
    node = msg.metadata.src_node_id
    return (0, partition, node) if partition is not None else (1, node, 0)


def _metrics_problem(
    msg: Message,
    required_metrics: Sequence[str],
    positive_metrics: Sequence[str],
    nonnegative_metrics: Sequence[str],
) -> str | None:
    if msg.has_error():
        return f"error reply (code {msg.error.code}): {msg.error.reason}"
    if not msg.has_content():
        return "reply has no content"
    records = records_of(msg.content, MetricRecord)
    if len(records) != 1:
        return f"expected exactly one MetricRecord, found {len(records)}"
    metrics = records[0]
    for key in required_metrics:
        if key not in metrics:
            return f"missing metric '{key}'"
        value = metrics[key]
        if not _is_number(value):
            return f"metric '{key}' is not a number: {value!r}"
        if not math.isfinite(value):
            return f"metric '{key}' is not finite: {value}"
        if key in positive_metrics and value <= 0:
            return f"metric '{key}' must be > 0, got {value}"
        if key in nonnegative_metrics and value < 0:
            return f"metric '{key}' must be >= 0, got {value}"
    return None


def _decoded_arrays(msg: Message, reference: ArrayRecord | None) -> tuple[str | None, dict[str, NDArray] | None]:
    """Why a training reply's model is unusable (None if it is), and the model decoded (None if it is not)."""
    records = records_of(msg.content, ArrayRecord)
    if len(records) != 1:
        return f"expected exactly one ArrayRecord, found {len(records)}", None
    record = records[0]
    if reference is not None:
        if set(record.keys()) != set(reference.keys()):
            return (
                f"array keys {sorted(record.keys())} differ from the global "
                f"model's {sorted(reference.keys())}"
            ), None
        for key, array in record.items():
            if tuple(array.shape) != tuple(reference[key].shape):
                return (
                    f"array '{key}' has shape {tuple(array.shape)}, the global "
                    f"model's is {tuple(reference[key].shape)}"
                ), None
    decoded: dict[str, NDArray] = {}
    for key, array in record.items():
        try:
            values = from_array(array)
        except (TypeError, ValueError) as err:
            return f"array '{key}' cannot be decoded: {err}", None
        if values.shape != tuple(array.shape):
            return f"array '{key}' holds values of shape {values.shape}, its shape says {tuple(array.shape)}", None
        if values.dtype.kind in "fc" and not np.all(np.isfinite(values)):
            return f"array '{key}' has non-finite values", None
        decoded[key] = values
    return None, decoded if reference is None else {key: decoded[key] for key in reference.keys()}


class TrainReplies(NamedTuple):
    """The valid training replies of a round (sorted): their nodes, metrics and models (decoded once, stacked).

    The same for replies that came as Messages (:func:`filter_train_replies`)
    and as one stacked record (:func:`term_fl.strategies.cohort_replies.filter_cohort`).
    """

    node_ids: list[int]
    metrics: list[dict[str, Any]]  # each valid reply's MetricRecord as a plain dict
    models: StackedModels | None  # None when no reply is valid
    excluded: list[ExcludedReply]


def filter_train_replies(
    replies: Iterable[Message],
    *,
    required_metrics: Sequence[str],
    reference_arrays: ArrayRecord | None = None,
    **options: Any,
) -> TrainReplies:
    """:func:`filter_replies` for training replies, which also returns the valid replies' models.

    Each valid reply's ArrayRecord is decoded exactly once (in the check that
    its values are finite) and the models are stacked in the order of the
    valid replies, with the keys in the order of ``reference_arrays`` (the
    global model; else the first valid reply's). ``options``: those of
    :func:`filter_replies`.
    """
    valid, models, excluded = _filter(replies, require_arrays=True, required_metrics=required_metrics,
                                      reference_arrays=reference_arrays, **options)
    return TrainReplies([msg.metadata.src_node_id for msg in valid], [dict(metrics_of(msg).items()) for msg in valid],
                        StackedModels.stack(models) if models else None, excluded)


def filter_replies(
    replies: Iterable[Message],
    *,
    require_arrays: bool,
    required_metrics: Sequence[str],
    **options: Any,
) -> tuple[list[Message], list[ExcludedReply]]:
    """Split replies into valid ones (sorted) and excluded ones (logged).

    A reply is excluded, with a WARNING naming its node (and partition when
    known), when it is an error reply, does not hold exactly one MetricRecord,
    lacks a required metric or holds a non-numeric / NaN / inf value for one
    (or a non-positive / negative one where ``positive_metrics`` /
    ``nonnegative_metrics`` ask), and, when ``require_arrays``, does not hold
    exactly one ArrayRecord, holds array keys or shapes other than
    ``reference_arrays`` (the global model) or non-finite array values.
    Without ``reference_arrays`` the reference is the first otherwise valid
    reply in partition order. (:func:`filter_train_replies` also returns the
    decoded models of the valid training replies.)

    Parameters
    ----------
    replies : Iterable[Message]
        The replies (consumed once).
    require_arrays : bool
        True for training replies.
    required_metrics : sequence of str
        Metric keys that must hold finite numbers.
    partition_key : str (default: "partition-id")
        Metric key of the partition id, used to sort and to name replies.
    reference_arrays : ArrayRecord, optional
        The global model sent this round.
    positive_metrics, nonnegative_metrics : sequence of str
        Subsets of ``required_metrics`` that must be > 0 / >= 0.
    context : str
        Prefix of the log lines (e.g. "aggregate_train").
    sent : mapping, optional
        Message id -> (node id, partition id) of the instructions sent this
        round (see :func:`sent_index`). Names the node a reply answers for when
        the reply does not come from it: Flower's SuperLink answers for an
        unavailable node with an error reply of its own.

    Returns
    -------
    tuple[list[Message], list[ExcludedReply]]
        Valid replies sorted by partition id (then node id; replies without a
        partition id last, by node id), and the excluded replies.
    """
    valid, _, excluded = _filter(replies, require_arrays=require_arrays, required_metrics=required_metrics,
                                 **options)
    return valid, excluded


def _filter(  # noqa: PLR0913
    replies: Iterable[Message],
    *,
    require_arrays: bool,
    required_metrics: Sequence[str],
    partition_key: str = PARTITION_ID,
    reference_arrays: ArrayRecord | None = None,
    positive_metrics: Sequence[str] = (),
    nonnegative_metrics: Sequence[str] = (),
    context: str = "aggregate",
    sent: Mapping[str, tuple[int, int | None]] | None = None,
) -> tuple[list[Message], list[dict[str, NDArray]], list[ExcludedReply]]:
    """The valid replies (sorted), their decoded models (when ``require_arrays``), the excluded replies."""
    materialised = sorted(replies, key=lambda msg: _sort_key(msg, partition_key))
    valid: list[Message] = []
    models: list[dict[str, NDArray]] = []
    excluded: list[ExcludedReply] = []
    for msg in materialised:
        # Check the metrics, then (training) decode the model once and check its keys, shapes and values
        reason = _metrics_problem(msg, required_metrics, positive_metrics, nonnegative_metrics)
        if reason is None and require_arrays:
            reason, model = _decoded_arrays(msg, reference_arrays)
            if reason is None:
                models.append(model)
                reference_arrays = reference_arrays if reference_arrays is not None else arrays_of(msg)
        if reason is None:
            valid.append(msg)
            continue
        # Name the node (and partition) the reply answers for, and log why it is left out
        node_id, partition_id = msg.metadata.src_node_id, partition_id_of(msg, partition_key)
        if sent and msg.metadata.reply_to_message_id in sent:
            node_id, sent_partition = sent[msg.metadata.reply_to_message_id]
            partition_id = sent_partition if partition_id is None else partition_id
        item = ExcludedReply(node_id, partition_id, reason)
        excluded.append(item)
        log(WARNING, "%s: excluding reply from %s: %s", context, reply_name(item.node_id, item.partition_id), reason)
    log(INFO, "%s: %d valid replies, %d excluded", context, len(valid), len(excluded))
    return valid, models, excluded


def sent_index(
    messages: Iterable[Message], node_partitions: Mapping[int, int] | None = None
) -> dict[str, tuple[int, int | None]]:
    """Message id -> (destination node, its partition) of messages already pushed."""
    partitions = node_partitions or {}
    return {
        m.metadata.message_id: (m.metadata.dst_node_id, partitions.get(m.metadata.dst_node_id))
        for m in messages
        if m.metadata.message_id
    }
