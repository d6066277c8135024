"""Shared plumbing of term-fl's Flower strategies.

Every strategy here derives from :class:`FedAvg`, a subclass of Flower 1.42's
``flwr.serverapp.strategy.FedAvg`` that adds

- seeded sampling by partition-id once the server called
  :meth:`FedAvg.set_node_partitions` (Flower's own sampling is not seeded and
  node ids are random per run);
- one reply filter, :func:`filter_replies`, used by every ``aggregate_*``:
  bad replies are excluded with a warning instead of aborting the run, and the
  valid ones are sorted by partition-id so sums do not depend on arrival order;
- one update rule, ``w_new = (1 - sum_k c_k) w + sum_k c_k w_k``
  (:func:`combine_models`, float64, one client model at a time), where each
  strategy only chooses the coefficients c_k;
- a :class:`RoundReport` per training round (``last_round``, ``history``) with
  the per-partition losses and the coefficients c_k actually applied.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from logging import INFO, WARNING
from typing import NamedTuple, TypeVar

import numpy as np
from flwr.app import (
    ArrayRecord,
    ConfigRecord,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.serverapp import Grid
from flwr.serverapp.exception import AggregationError
from flwr.serverapp.strategy import FedAvg as FlowerFedAvg
from flwr.supercore import log
from numpy.typing import NDArray

from term_fl.array_codec import from_array, from_array_record
from term_fl.robust import bounded_model, clip_losses, update_norm, update_scales
from term_fl.seeding import EVAL_SAMPLING, TRAIN_SAMPLING
from term_fl.array_codec import to_array_record as codec_array_record

RecordT = TypeVar("RecordT", ArrayRecord, MetricRecord, ConfigRecord)

__all__ = [
    "Aggregation",
    "EvaluationReport",
    "ExcludedReply",
    "FedAvg",
    "RoundReport",
    "combine_models",
    "decode_arrays",
    "filter_replies",
    "iter_local_models",
    "metric_values",
    "records_of",
    "reply_arrays",
    "reply_metrics",
    "to_array_record",
]


class ExcludedReply(NamedTuple):
    """A reply left out of aggregation, and why."""

    node_id: int
    partition_id: int | None
    reason: str


@dataclass(frozen=True)
class RoundReport:
    """What one training round aggregated (``FedAvg.last_round``).

    Attributes
    ----------
    server_round : int
        The round.
    partition_ids : list[int]
        Partition id of each valid reply, in the (sorted) order aggregated; -1
        where a reply carried none.
    node_ids : list[int]
        Node id of each valid reply, same order.
    losses : numpy.ndarray
        F_k, the loss of the incoming global model reported by each reply
        (metric ``loss_key``).
    num_examples : numpy.ndarray
        n_k (metric ``weighted_by_key``).
    weights : numpy.ndarray
        The coefficients c_k actually applied in
        ``w_new = (1 - sum_k c_k) w + sum_k c_k w_k``: n_k / sum n for FedAvg,
        eta_s p_k for TERM, L F_k^q / sum_j h_j for q-FFL.
    running_estimate : float or None
        TERM's running estimate Rt after the round; None for other strategies.
    excluded : list[ExcludedReply]
        Replies left out, with the reason.
    """

    server_round: int
    partition_ids: list[int]
    node_ids: list[int]
    losses: NDArray[np.float64]
    num_examples: NDArray[np.float64]
    weights: NDArray[np.float64]
    running_estimate: float | None
    excluded: list[ExcludedReply] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        """True when no reply was valid (the model was left unchanged)."""
        return not self.node_ids


@dataclass(frozen=True)
class EvaluationReport:
    """What one evaluation round aggregated (``FedAvg.last_evaluation``).

    ``metrics[i]`` is the MetricRecord (as a dict) of the reply from
    ``node_ids[i]`` / ``partition_ids[i]``, sorted by partition id.
    """

    server_round: int
    partition_ids: list[int]
    node_ids: list[int]
    metrics: list[dict[str, float | int | list[float] | list[int]]]
    excluded: list[ExcludedReply] = field(default_factory=list)


@dataclass(frozen=True)
class Aggregation:
    """Coefficients of ``w_new = global_coefficient * w + sum_k coefficients[k] w_k``."""

    coefficients: NDArray[np.float64]
    global_coefficient: float = 0.0
    running_estimate: float | None = None


# --- replies -----------------------------------------------------------------


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def records_of(content: RecordDict, kind: type[RecordT]) -> list[RecordT]:
    """The records of one type in a RecordDict, in order.

    What ``content.metric_records`` / ``content.array_records`` hold, without
    building their synchronised dictionaries (a cost per call, per reply).
    """
    return [record for record in content.values() if isinstance(record, kind)]


def _reply_metrics(msg: Message) -> MetricRecord | None:
    """The only MetricRecord of a reply, or None."""
    if msg.has_error() or not msg.has_content():
        return None
    records = records_of(msg.content, MetricRecord)
    return records[0] if len(records) == 1 else None


def reply_metrics(msg: Message) -> MetricRecord:
    """The (only) MetricRecord of a valid reply."""
    return records_of(msg.content, MetricRecord)[0]


def reply_arrays(msg: Message) -> ArrayRecord:
    """The (only) ArrayRecord of a valid training reply."""
    return records_of(msg.content, ArrayRecord)[0]


def decode_arrays(record: ArrayRecord) -> dict[str, NDArray]:
    """Decode an ArrayRecord to numpy arrays (keeps the record intact, no gc)."""
    return from_array_record(record)


def metric_values(replies: Sequence[Message], key: str) -> NDArray[np.float64]:
    """The metric ``key`` of each (validated) reply as a float64 array."""
    return np.array([float(_reply_metrics(msg)[key]) for msg in replies], dtype=np.float64)


def partition_id_of(msg: Message, partition_key: str) -> int | None:
    """The partition id a reply reports, or None when it carries no usable one."""
    metrics = _reply_metrics(msg)
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


def _arrays_problem(msg: Message, reference: ArrayRecord | None) -> str | None:
    records = records_of(msg.content, ArrayRecord)
    if len(records) != 1:
        return f"expected exactly one ArrayRecord, found {len(records)}"
    record = records[0]
    if reference is not None:
        if set(record.keys()) != set(reference.keys()):
            return (
                f"array keys {sorted(record.keys())} differ from the global "
                f"model's {sorted(reference.keys())}"
            )
        for key, array in record.items():
            if tuple(array.shape) != tuple(reference[key].shape):
                return (
                    f"array '{key}' has shape {tuple(array.shape)}, the global "
                    f"model's is {tuple(reference[key].shape)}"
                )
    for key, array in record.items():
        try:
            values = from_array(array)
        except (TypeError, ValueError) as err:
            return f"array '{key}' cannot be decoded: {err}"
        if values.dtype.kind in "fc" and not np.all(np.isfinite(values)):
            return f"array '{key}' has non-finite values"
    return None


def filter_replies(
    replies: Iterable[Message],
    *,
    require_arrays: bool,
    required_metrics: Sequence[str],
    partition_key: str = "partition-id",
    reference_arrays: ArrayRecord | None = None,
    positive_metrics: Sequence[str] = (),
    nonnegative_metrics: Sequence[str] = (),
    context: str = "aggregate",
    sent: Mapping[str, tuple[int, int | None]] | None = None,
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
    reply in partition order.

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
    materialised = sorted(replies, key=lambda msg: _sort_key(msg, partition_key))
    valid: list[Message] = []
    excluded: list[ExcludedReply] = []
    for msg in materialised:
        reason = _metrics_problem(msg, required_metrics, positive_metrics, nonnegative_metrics)
        if reason is None and require_arrays:
            reason = _arrays_problem(msg, reference_arrays)
            if reason is None and reference_arrays is None:
                reference_arrays = reply_arrays(msg)
        if reason is None:
            valid.append(msg)
            continue
        node_id, partition_id = msg.metadata.src_node_id, partition_id_of(msg, partition_key)
        if sent and msg.metadata.reply_to_message_id in sent:
            node_id, sent_partition = sent[msg.metadata.reply_to_message_id]
            partition_id = sent_partition if partition_id is None else partition_id
        item = ExcludedReply(node_id, partition_id, reason)
        excluded.append(item)
        log(
            WARNING,
            "%s: excluding reply from node %d (partition %s): %s",
            context,
            item.node_id,
            "unknown" if item.partition_id is None else item.partition_id,
            reason,
        )
    log(INFO, "%s: %d valid replies, %d excluded", context, len(valid), len(excluded))
    return valid, excluded


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


# --- model arithmetic ------------------------------------------------------


def combine_models(
    local_models: Iterable[Mapping[str, NDArray]],
    coefficients: Sequence[float],
    global_model: Mapping[str, NDArray] | None = None,
    global_coefficient: float = 0.0,
) -> dict[str, NDArray[np.float64]]:
    """w_new = global_coefficient * w + sum_k c_k w_k, in float64.

    ``local_models`` may be a generator: models are folded into the sum one at
    a time, so memory does not grow with the number of clients.  The global
    term is skipped when ``global_coefficient`` is 0 (then ``global_model`` may
    be None).
    """
    total: dict[str, NDArray[np.float64]] | None = None
    for model, c in zip(local_models, coefficients, strict=True):
        if total is None:
            total = {k: c * np.asarray(v, dtype=np.float64) for k, v in model.items()}
        else:
            for k, v in model.items():
                total[k] += c * np.asarray(v, dtype=np.float64)
    if total is None:
        raise ValueError("combine_models needs at least one local model.")
    if global_coefficient != 0.0:
        if global_model is None:
            raise ValueError("global_model is required when global_coefficient != 0.")
        for k, v in global_model.items():
            total[k] += global_coefficient * np.asarray(v, dtype=np.float64)
    return total


def to_array_record(arrays: Mapping[str, NDArray], like: ArrayRecord) -> ArrayRecord:
    """ArrayRecord with the keys (order) and dtypes of ``like`` holding ``arrays``."""
    out = {}
    for key, template in like.items():
        dtype = np.dtype(template.dtype)
        value = np.asarray(arrays[key])
        if dtype.kind in "iub":
            value = np.rint(value)
        out[key] = np.ascontiguousarray(value.astype(dtype))
    return codec_array_record(out)


def iter_local_models(replies: Sequence[Message]) -> Iterator[dict[str, NDArray]]:
    """Decode the model of each (valid) training reply, one at a time."""
    for msg in replies:
        yield decode_arrays(reply_arrays(msg))


# --- strategy ---------------------------------------------------------------


class FedAvg(FlowerFedAvg):
    """FedAvg with seeded partition sampling, a reply filter and round reports.

    Implementation based on https://arxiv.org/abs/1602.05629: the new global
    model is sum_k (n_k / sum_j n_j) w_k over the valid replies, the same
    numbers as Flower's ``aggregate_arrayrecords`` (computed in float64 and
    returned with the global model's dtypes).  The base of term-fl's q-FFL and
    TERM strategies.

    Parameters
    ----------
    clients_per_round : int or None (default: None)
        Number of partitions sampled for training each round, honoured exactly
        once :meth:`set_node_partitions` was called (capped at the partitions
        whose node is connected). None: Flower's ``fraction_train`` /
        ``min_train_nodes`` rule.
    seed : int (default: 0)
        Seed of the partition sampling: round r draws from
        ``numpy.random.default_rng([seed, r, 0])`` (training) and
        ``[seed, r, 1]`` (evaluation), so the same seed samples the same
        partitions whatever node ids Flower assigns.
    evaluate_fraction : float (default: 1.0)
        Fraction of the connected partitions evaluated per round
        (ceil(evaluate_fraction * P); 1.0 evaluates all, 0.0 none), once
        :meth:`set_node_partitions` was called. Before that Flower's
        ``fraction_evaluate`` applies.
    loss_key : str (default: "train_loss")
        Metric key of F_k, the loss of the incoming model, in training replies;
        required in every training reply and recorded in :class:`RoundReport`.
    partition_key : str (default: "partition-id")
        Metric key of the partition id in replies (sorting, reports, logs).
    fraction_train : float (default: 1.0)
        Flower's fraction of nodes trained per round when ``clients_per_round``
        is None.
    fraction_evaluate : float (default: 1.0)
        Flower's fraction of nodes evaluated per round before
        :meth:`set_node_partitions` was called.
    min_train_nodes : int (default: 2)
        Flower's minimum number of nodes trained per round (applies when
        ``clients_per_round`` is None).
    min_evaluate_nodes : int (default: 2)
        Flower's minimum number of nodes evaluated per round (Flower sampling).
    min_available_nodes : int (default: 2)
        Flower's minimum number of connected nodes before sampling (Flower
        sampling).
    weighted_by_key : str (default: "num-examples")
        Metric key of n_k; required (> 0) in every reply.
    arrayrecord_key : str (default: "arrays")
        Key of the ArrayRecord in the messages sent.
    configrecord_key : str (default: "config")
        Key of the ConfigRecord in the messages sent.
    train_metrics_aggr_fn : callable, optional (default: None)
        (list[RecordDict], str) -> MetricRecord over the valid training
        replies; None: Flower's num-examples weighted average.
    evaluate_metrics_aggr_fn : callable, optional (default: None)
        Same for evaluation replies.
    clip_loss : float (default: 0.0, off)
        Defence against a client that lies about its loss: a reported loss
        above ``clip_loss`` x the round's median is lowered to it before the
        weights are computed (:func:`term_fl.robust.clip_losses`); 0 or >= 1.
    max_update_norm : float (default: 0.0, off)
        Defence against a client that sends huge weights: an update
        w_k - w longer than ``max_update_norm`` x the round's median update
        norm is scaled down to it (:func:`term_fl.robust.update_scales`);
        0 or >= 1.
    """

    # pylint: disable=too-many-arguments,too-many-instance-attributes
    def __init__(
        self,
        *,
        clients_per_round: int | None = None,
        seed: int = 0,
        evaluate_fraction: float = 1.0,
        loss_key: str = "train_loss",
        partition_key: str = "partition-id",
        fraction_train: float = 1.0,
        fraction_evaluate: float = 1.0,
        min_train_nodes: int = 2,
        min_evaluate_nodes: int = 2,
        min_available_nodes: int = 2,
        weighted_by_key: str = "num-examples",
        arrayrecord_key: str = "arrays",
        configrecord_key: str = "config",
        train_metrics_aggr_fn: Callable[[list[RecordDict], str], MetricRecord] | None = None,
        evaluate_metrics_aggr_fn: Callable[[list[RecordDict], str], MetricRecord] | None = None,
        clip_loss: float = 0.0,
        max_update_norm: float = 0.0,
    ) -> None:
        super().__init__(
            fraction_train=fraction_train,
            fraction_evaluate=fraction_evaluate,
            min_train_nodes=min_train_nodes,
            min_evaluate_nodes=min_evaluate_nodes,
            min_available_nodes=min_available_nodes,
            weighted_by_key=weighted_by_key,
            arrayrecord_key=arrayrecord_key,
            configrecord_key=configrecord_key,
            train_metrics_aggr_fn=train_metrics_aggr_fn,
            evaluate_metrics_aggr_fn=evaluate_metrics_aggr_fn,
        )
        if clients_per_round is not None and (
            isinstance(clients_per_round, bool)
            or not isinstance(clients_per_round, int)
            or clients_per_round < 1
        ):
            raise ValueError(
                f"clients_per_round must be a positive int or None, got {clients_per_round!r}."
            )
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {seed!r}.")
        if not 0.0 <= evaluate_fraction <= 1.0:
            raise ValueError(f"evaluate_fraction must be in [0, 1], got {evaluate_fraction!r}.")
        for name, value in (("clip_loss", clip_loss), ("max_update_norm", max_update_norm)):
            if not (math.isfinite(value) and (value == 0 or value >= 1)):
                raise ValueError(f"{name} must be 0 (off) or a ratio >= 1 to the round's median, got {value!r}.")
        self.clip_loss = float(clip_loss)
        self.max_update_norm = float(max_update_norm)
        self.clients_per_round = clients_per_round
        self.seed = seed
        self.evaluate_fraction = float(evaluate_fraction)
        self.loss_key = loss_key
        self.partition_key = partition_key
        self.current_arrays: ArrayRecord | None = None
        self.last_round: RoundReport | None = None
        self.history: list[RoundReport] = []
        self._sent: list[Message] = []
        self.last_evaluation: EvaluationReport | None = None
        self._node_of_partition: dict[int, int] | None = None

    # --- sampling ---------------------------------------------------------

    def set_node_partitions(self, mapping: Mapping[int, int]) -> None:
        """Learn which partition each node holds (node_id -> partition_id).

        From then on training and evaluation sample partitions with the seeded
        generator and send to their nodes.
        """
        node_of_partition: dict[int, int] = {}
        for node, partition in mapping.items():
            if partition in node_of_partition:
                raise ValueError(
                    f"partition {partition} is mapped to two nodes "
                    f"({node_of_partition[partition]} and {node}); each partition "
                    "must belong to exactly one node."
                )
            node_of_partition[int(partition)] = int(node)
        self._node_of_partition = node_of_partition

    @property
    def node_partitions(self) -> dict[int, int] | None:
        """The node_id -> partition_id mapping, or None when not set."""
        if self._node_of_partition is None:
            return None
        return {node: part for part, node in self._node_of_partition.items()}

    def sample_partitions(
        self, server_round: int, grid: Grid, size: int, stream: int
    ) -> list[int]:
        """``size`` partitions (sorted) among those whose node is connected.

        Drawn without replacement from the sorted connected partition ids with
        ``numpy.random.default_rng([seed, server_round, stream])``.
        """
        assert self._node_of_partition is not None
        connected = set(grid.get_node_ids())
        available = sorted(p for p, n in self._node_of_partition.items() if n in connected)
        if size > len(available):
            log(
                WARNING,
                "Round %d: %d partitions requested but only %d connected; sampling all.",
                server_round,
                size,
                len(available),
            )
            size = len(available)
        if size == len(available):
            return available
        rng = np.random.default_rng([self.seed, server_round, stream])
        return sorted(int(p) for p in rng.choice(available, size=size, replace=False))

    def _messages_to_partitions(
        self,
        partitions: list[int],
        arrays: ArrayRecord,
        config: ConfigRecord,
        message_type: str,
        total: int,
    ) -> Iterable[Message]:
        assert self._node_of_partition is not None
        log(
            INFO,
            "%s: sampled partitions %s (%d of %d)",
            "configure_train" if message_type == MessageType.TRAIN else "configure_evaluate",
            partitions,
            len(partitions),
            total,
        )
        record = RecordDict({self.arrayrecord_key: arrays, self.configrecord_key: config})
        nodes = [self._node_of_partition[p] for p in partitions]
        return self._remember(self._construct_messages(record, nodes, message_type))

    def _remember(self, messages: Iterable[Message]) -> list[Message]:
        """Keep this round's instructions: the grid gives them ids when it pushes them."""
        self._sent = list(messages)
        return self._sent

    def _sent_index(self) -> dict[str, tuple[int, int | None]]:
        return sent_index(self._sent, self.node_partitions)

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Sample partitions (seeded) and send them the global model."""
        self.current_arrays = arrays.copy()
        if self._node_of_partition is None:
            return self._remember(super().configure_train(server_round, arrays, config, grid))
        config["server-round"] = server_round
        total = len(self._node_of_partition)
        if self.clients_per_round is not None:
            size = self.clients_per_round
        elif self.fraction_train == 0.0:
            return []
        else:
            size = max(int(total * self.fraction_train), self.min_train_nodes)
        partitions = self.sample_partitions(server_round, grid, size, stream=TRAIN_SAMPLING)
        return self._messages_to_partitions(
            partitions, arrays, config, MessageType.TRAIN, total
        )

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Sample ceil(evaluate_fraction * P) partitions (seeded) for evaluation."""
        if self._node_of_partition is None:
            return self._remember(super().configure_evaluate(server_round, arrays, config, grid))
        config["server-round"] = server_round
        connected = set(grid.get_node_ids())
        count = sum(1 for n in self._node_of_partition.values() if n in connected)
        # the small offset keeps e.g. ceil(0.3 * 10) at 3 despite rounding
        size = math.ceil(self.evaluate_fraction * count - 1e-9)
        if size == 0:
            return []
        partitions = self.sample_partitions(server_round, grid, size, stream=EVAL_SAMPLING)
        return self._messages_to_partitions(
            partitions, arrays, config, MessageType.EVALUATE, count
        )

    # --- aggregation ------------------------------------------------------

    def train_filter_options(self) -> dict[str, tuple[str, ...]]:
        """Metric requirements of training replies (extended by subclasses)."""
        return {
            "required_metrics": (self.weighted_by_key, self.loss_key),
            "positive_metrics": (self.weighted_by_key,),
            "nonnegative_metrics": (),
        }

    def compute_aggregation(
        self,
        server_round: int,
        replies: Sequence[Message],
        losses: NDArray[np.float64],
        num_examples: NDArray[np.float64],
    ) -> Aggregation:
        """FedAvg: c_k = n_k / sum_j n_j, no global term."""
        return Aggregation(coefficients=num_examples / num_examples.sum())

    def global_model(self) -> dict[str, NDArray]:
        """The global model sent in ``configure_train``, decoded."""
        if self.current_arrays is None:
            raise AggregationError(
                f"{type(self).__name__} needs the global model of this round: call "
                "configure_train before aggregate_train."
            )
        return decode_arrays(self.current_arrays)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Filter and sort the replies, combine the models, record a RoundReport."""
        valid, excluded = filter_replies(
            replies,
            require_arrays=True,
            partition_key=self.partition_key,
            reference_arrays=self.current_arrays,
            context="aggregate_train",
            sent=self._sent_index(),
            **self.train_filter_options(),
        )
        if not valid:
            log(WARNING, "aggregate_train: no valid reply in round %d; model unchanged.",
                server_round)
            empty = np.zeros(0)
            self._record(RoundReport(server_round, [], [], empty, empty, empty,
                                     self.current_running_estimate(), excluded))
            return None, None

        losses = self.defended_losses(valid, metric_values(valid, self.loss_key))
        num_examples = metric_values(valid, self.weighted_by_key)
        aggregation = self.compute_aggregation(server_round, valid, losses, num_examples)
        global_model = self.global_model() if aggregation.global_coefficient != 0.0 else None
        combined = combine_models(
            self.local_models(valid),
            aggregation.coefficients,
            global_model,
            aggregation.global_coefficient,
        )
        like = self.current_arrays if self.current_arrays is not None else reply_arrays(valid[0])
        arrays = to_array_record(combined, like)
        metrics = self.train_metrics_aggr_fn([msg.content for msg in valid], self.weighted_by_key)
        self._record(
            RoundReport(
                server_round=server_round,
                partition_ids=[
                    -1 if (p := partition_id_of(m, self.partition_key)) is None else p
                    for m in valid
                ],
                node_ids=[msg.metadata.src_node_id for msg in valid],
                losses=losses,
                num_examples=num_examples,
                weights=np.asarray(aggregation.coefficients, dtype=np.float64),
                running_estimate=aggregation.running_estimate,
                excluded=excluded,
            )
        )
        return arrays, metrics

    # --- opt-in defences against hostile clients (term_fl.robust) -----------

    def defended_losses(self, replies: Sequence[Message], losses: NDArray[np.float64]) -> NDArray[np.float64]:
        """The reported losses, those above ``clip_loss`` x the round's median lowered to it."""
        clipped_losses, clipped = clip_losses(losses, self.clip_loss)
        for msg, loss, cut in zip(replies, losses, clipped, strict=True):
            if cut:
                log(WARNING, "node %d (partition %s) reported loss %.6g, clipped to %.6g (clip_loss = %g x median)",
                    msg.metadata.src_node_id, partition_id_of(msg, self.partition_key), loss,
                    float(np.max(clipped_losses)), self.clip_loss)
        return clipped_losses

    def local_models(self, replies: Sequence[Message]) -> Iterator[dict[str, NDArray]]:
        """The replies' models; with ``max_update_norm``, each update bounded to that many median norms."""
        if self.max_update_norm <= 0:
            yield from iter_local_models(replies)
            return
        global_model = self.global_model()
        norms = np.array([update_norm(local, global_model) for local in iter_local_models(replies)])
        scales = update_scales(norms, self.max_update_norm)
        for msg, local, norm, scale in zip(replies, iter_local_models(replies), norms, scales, strict=True):
            if scale < 1.0:
                log(WARNING, "node %d (partition %s): update norm %.6g scaled down to %.6g (max_update_norm = %g x "
                    "median)", msg.metadata.src_node_id, partition_id_of(msg, self.partition_key), norm,
                    norm * scale, self.max_update_norm)
            yield bounded_model(local, global_model, float(scale))

    def current_running_estimate(self) -> float | None:
        """Running estimate reported in rounds without valid replies (None here)."""
        return None

    def _record(self, report: RoundReport) -> None:
        self.last_round = report
        self.history.append(report)

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        """Filter and sort the replies, record an EvaluationReport, average metrics."""
        valid, excluded = filter_replies(
            replies,
            require_arrays=False,
            required_metrics=(self.weighted_by_key,),
            positive_metrics=(self.weighted_by_key,),
            partition_key=self.partition_key,
            context="aggregate_evaluate",
            sent=self._sent_index(),
        )
        self.last_evaluation = EvaluationReport(
            server_round=server_round,
            partition_ids=[
                -1 if (p := partition_id_of(m, self.partition_key)) is None else p
                for m in valid
            ],
            node_ids=[msg.metadata.src_node_id for msg in valid],
            metrics=[dict(_reply_metrics(msg).items()) for msg in valid],
            excluded=excluded,
        )
        if not valid:
            return None
        return self.evaluate_metrics_aggr_fn([msg.content for msg in valid], self.weighted_by_key)

    def summary(self) -> None:
        """Log the settings that shape a run."""
        log(INFO, "\t├──> term-fl sampling:")
        log(
            INFO,
            "\t│\t├── clients_per_round: %s | evaluate_fraction: %.2f | seed: %d",
            self.clients_per_round,
            self.evaluate_fraction,
            self.seed,
        )
        log(
            INFO,
            "\t│\t└── partitions known: %s",
            "no (Flower sampling)"
            if self._node_of_partition is None
            else len(self._node_of_partition),
        )
        log(INFO, "\t├──> loss key: '%s' | partition key: '%s'", self.loss_key,
            self.partition_key)
        super().summary()
