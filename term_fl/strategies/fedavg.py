"""FedAvg, the template of every term-fl strategy.

:class:`FedAvg` is a subclass of Flower 1.42's ``flwr.serverapp.strategy.FedAvg``
that adds

- seeded sampling by partition-id once the server called
  :meth:`FedAvg.set_node_partitions` (:mod:`.sampling`);
- the reply filter of :mod:`.replies` in every ``aggregate_*``: bad replies
  are excluded with a warning instead of aborting the run, the valid ones
  sorted by partition-id so sums do not depend on arrival order;
- one update rule, ``w_new = g w + sum_k c_k w_k`` (:mod:`.arithmetic`),
  where each strategy only writes its *round function*,
  :meth:`FedAvg.round_step`: from the round's losses, sizes (and, if it
  needs them, models) and the strategy's state, the coefficients, the new
  state and the round's diagnostics, as values (fedjax's ``apply``);
- a :class:`~.reports.TrainReport` per training round, returned by
  :meth:`FedAvg.aggregate_round` and kept as ``last_round`` / ``history``.

A new strategy subclasses :class:`FedAvg`, overrides ``round_step`` (and
``state_diagnostics`` when it keeps state), and is listed in
:mod:`term_fl.strategies.registry`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from logging import INFO, WARNING
from typing import Any, ClassVar, NamedTuple

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.exception import AggregationError
from flwr.serverapp.strategy import FedAvg as FlowerFedAvg
from flwr.supercore import log
from numpy.typing import NDArray

from term_fl.flower_internals import from_array_record
from term_fl.common.keys import (ARRAYS, CONFIG, NUM_EXAMPLES, PARTITION_ID, SERVER_ROUND, TRAIN_LOSS_BEFORE,
                                 TRAIN_LOSS_BEFORE_SUM)
from term_fl.maths.robust import bounded_model, clip_losses, update_norm, update_scales
from term_fl.common.seeding import EVAL_SAMPLING, TRAIN_SAMPLING

from .arithmetic import combine_models, local_models, record_like
from .replies import (
    arrays_of,
    filter_replies,
    metric_carriers,
    metric_values,
    metrics_of,
    partition_id_of,
    sent_index,
)
from .reports import Diagnostics, EvaluationReport, TrainReport
from .sampling import PartitionSampler
from .settings import Defences

__all__ = ["Aggregation", "FedAvg", "RoundInputs", "TrainOutcome"]


@dataclass(frozen=True)
class RoundInputs:
    """What a round function sees: the valid training replies of one round, sorted by partition id.

    ``global_model()`` and ``local_models()`` decode the models on demand (one
    local model at a time), for the strategies whose weights depend on them.
    """

    server_round: int
    partition_ids: NDArray[np.int64]  # -1 where a reply carried none
    losses: NDArray[np.float64]  # F_k (metric train_loss_key; NaN where a reply lacks it and the strategy needs none)
    num_examples: NDArray[np.float64]  # n_k (metric weighted_by_key)
    global_model: Callable[[], dict[str, NDArray]]
    local_models: Callable[[], Iterator[dict[str, NDArray]]]


@dataclass(frozen=True)
class Aggregation:
    """What a round function decides: ``w_new = global_coefficient * w + sum_k coefficients[k] w_k``.

    ``diagnostics`` holds numbers of this round worth recording beside the
    strategy's state (:meth:`FedAvg.state_diagnostics`).
    """

    coefficients: NDArray[np.float64]
    global_coefficient: float = 0.0
    diagnostics: Diagnostics = field(default_factory=dict)

    def stepped(self, server_learning_rate: float) -> Aggregation:
        """The update taken with a server learning rate eta: ``w + eta (w_new - w)``.

        That is coefficients ``eta c_k`` and global coefficient ``1 - eta (1 - g)``;
        eta = 1 returns this aggregation unchanged (bit for bit).
        """
        if server_learning_rate == 1.0:
            return self
        return replace(
            self,
            coefficients=server_learning_rate * np.asarray(self.coefficients, dtype=np.float64),
            global_coefficient=1.0 - server_learning_rate * (1.0 - self.global_coefficient),
        )


class TrainOutcome(NamedTuple):
    """What :meth:`FedAvg.aggregate_round` returns."""

    arrays: ArrayRecord | None  # the new global model; None when no reply was valid
    metrics: MetricRecord | None  # Flower's aggregated training metrics
    report: TrainReport


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


def _log_report(report: TrainReport) -> None:
    scalars = {k: v for k, v in report.diagnostics.items() if isinstance(v, float | int)}
    if scalars:
        log(INFO, "aggregate_train: round %d: %s", report.server_round,
            ", ".join(f"{k} = {v:.6g}" for k, v in scalars.items()))
    for node, partition, loss, weight in zip(report.node_ids, report.partition_ids, report.losses,
                                             report.weights, strict=True):
        if math.isnan(loss):  # a strategy that needs no loss (FedAvg) and a reply that sent none
            log(INFO, "\t> node %d (partition %s): weight %.6g", node, partition, weight)
        else:
            log(INFO, "\t> node %d (partition %s): F_k = %.6g, weight %.6g", node, partition, loss, weight)


class FedAvg(FlowerFedAvg):
    """FedAvg with seeded partition sampling, a reply filter and round reports.

    Implementation based on https://arxiv.org/abs/1602.05629: the new global
    model is sum_k (n_k / sum_j n_j) w_k over the valid replies, the same
    numbers as Flower's ``aggregate_arrayrecords`` (computed in float64 and
    returned with the global model's dtypes and shapes, 0-d arrays included;
    integer arrays are rounded to the nearest integer). It needs no loss from
    the clients. The base of term-fl's q-FFL, TERM and AFL strategies.

    The arguments up to ``evaluate_metrics_aggr_fn`` are Flower's FedAvg's,
    with its names, positions and defaults; term-fl's own are keywords.

    Parameters
    ----------
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
    train_loss_key : str (default: "train_loss_before")
        Metric key of F_k, the loss of the received global model on the
        client's training data, measured before local training. FedAvg only
        records it (in :class:`~.reports.TrainReport`, NaN where a reply lacks
        it); the strategies that weight by it (:attr:`needs_loss`) require it.
        Not Flower's ``"train_loss"``: Flower's examples send that key as the
        mean loss *during* local training.
    server_learning_rate : float (default: 1.0)
        eta_s > 0 in w <- w + eta_s (w_round - w), where w_round is the
        strategy's own update. 1.0 is the plain update; FedAvg with another
        value is Flower's FedAvgM without momentum.
    clip_loss : float (default: 0.0, off)
        Defence against a client that lies about its loss: a reported loss
        above ``clip_loss`` x the round's median is lowered to it before the
        round function sees it (:func:`term_fl.maths.robust.clip_losses`); 0 or >= 1.
    max_update_norm : float (default: 0.0, off)
        Defence against a client that sends huge weights: an update
        w_k - w longer than ``max_update_norm`` x the round's median update
        norm is scaled down to it (:func:`term_fl.maths.robust.update_scales`);
        0 or >= 1.
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
    partition_key : str (default: "partition-id")
        Metric key of the partition id in replies (sorting, reports, logs).
    """

    needs_loss: ClassVar[bool] = False
    """Whether the round function weights by F_k (then a round in which no reply carries it is an error)."""

    # pylint: disable=too-many-arguments,too-many-instance-attributes
    def __init__(  # noqa: PLR0913
        self,
        fraction_train: float = 1.0,
        fraction_evaluate: float = 1.0,
        min_train_nodes: int = 2,
        min_evaluate_nodes: int = 2,
        min_available_nodes: int = 2,
        weighted_by_key: str = NUM_EXAMPLES,
        arrayrecord_key: str = ARRAYS,
        configrecord_key: str = CONFIG,
        train_metrics_aggr_fn: Callable[[list[RecordDict], str], MetricRecord] | None = None,
        evaluate_metrics_aggr_fn: Callable[[list[RecordDict], str], MetricRecord] | None = None,
        *,
        train_loss_key: str = TRAIN_LOSS_BEFORE,
        server_learning_rate: float = 1.0,
        clip_loss: float = 0.0,
        max_update_norm: float = 0.0,
        clients_per_round: int | None = None,
        seed: int = 0,
        evaluate_fraction: float = 1.0,
        partition_key: str = PARTITION_ID,
    ) -> None:
        defences = Defences.of(type(self).__name__, clip_loss=clip_loss, max_update_norm=max_update_norm)
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
        self.clip_loss = defences.clip_loss
        self.max_update_norm = defences.max_update_norm
        if not (isinstance(server_learning_rate, int | float) and math.isfinite(server_learning_rate)
                and server_learning_rate > 0):
            raise ValueError(f"server_learning_rate must be a positive number, got {server_learning_rate!r}.")
        if not (isinstance(train_loss_key, str) and train_loss_key):
            raise ValueError(f"train_loss_key must be a metric key (a non-empty str), got {train_loss_key!r}.")
        self.train_loss_key = train_loss_key
        self.server_learning_rate = float(server_learning_rate)
        self.clients_per_round = clients_per_round
        self.seed = seed
        self.evaluate_fraction = float(evaluate_fraction)
        self.partition_key = partition_key
        self.current_arrays: ArrayRecord | None = None
        self.state: Any = None
        self.last_round: TrainReport | None = None
        self.history: list[TrainReport] = []
        self.last_evaluation: EvaluationReport | None = None
        self._sent: list[Message] = []
        self._sampler: PartitionSampler | None = None

    # --- sampling ---------------------------------------------------------

    def set_node_partitions(self, mapping: Mapping[int, int]) -> None:
        """Learn which partition each node holds (node_id -> partition_id).

        From then on training and evaluation sample partitions with the seeded
        generator and send to their nodes.
        """
        self._sampler = PartitionSampler(mapping, self.seed)

    @property
    def node_partitions(self) -> dict[int, int] | None:
        """The node_id -> partition_id mapping, or None when not set."""
        return None if self._sampler is None else self._sampler.node_partitions

    def sample_partitions(self, server_round: int, grid: Grid, size: int, stream: int) -> list[int]:
        """``size`` partitions (sorted) among those whose node is connected (:meth:`PartitionSampler.sample`)."""
        assert self._sampler is not None
        return self._sampler.sample(server_round, grid.get_node_ids(), size, stream)

    def _messages_to_partitions(
        self,
        partitions: list[int],
        arrays: ArrayRecord,
        config: ConfigRecord,
        message_type: str,
        total: int,
    ) -> Iterable[Message]:
        assert self._sampler is not None
        log(
            INFO,
            "%s: sampled partitions %s (%d of %d)",
            "configure_train" if message_type == MessageType.TRAIN else "configure_evaluate",
            partitions,
            len(partitions),
            total,
        )
        record = RecordDict({self.arrayrecord_key: arrays, self.configrecord_key: config})
        return self._remember(self._construct_messages(record, self._sampler.nodes(partitions), message_type))

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
        if self._sampler is None:
            return self._remember(super().configure_train(server_round, arrays, config, grid))
        config[SERVER_ROUND] = server_round
        total = len(self._sampler.node_of_partition)
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
        if self._sampler is None:
            return self._remember(super().configure_evaluate(server_round, arrays, config, grid))
        config[SERVER_ROUND] = server_round
        count = len(self._sampler.connected(grid.get_node_ids()))
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
        """Metric requirements of training replies (extended by subclasses): F_k where :attr:`needs_loss`."""
        loss = (self.train_loss_key,) if self.needs_loss else ()
        return {
            "required_metrics": (self.weighted_by_key, *loss),
            "positive_metrics": (self.weighted_by_key,),
            "nonnegative_metrics": (),
        }

    def round_step(self, inputs: RoundInputs, state: Any) -> tuple[Aggregation, Any]:
        """This round's aggregation from the valid replies and the strategy's state; the new state.

        The strategy's round function, pure: it reads ``inputs``, ``state`` and
        the strategy's settings, changes nothing, and returns what the round
        does. FedAvg: c_k = n_k / sum_j n_j, no global term, no state.
        """
        return Aggregation(inputs.num_examples / inputs.num_examples.sum()), state

    def state_diagnostics(self, state: Any) -> Diagnostics:
        """The strategy's state as diagnostics of a round (none for FedAvg)."""
        return {}

    def global_model(self) -> dict[str, NDArray]:
        """The global model sent in ``configure_train``, decoded."""
        if self.current_arrays is None:
            raise AggregationError(
                f"{type(self).__name__} needs the global model of this round: call "
                "configure_train before aggregate_train."
            )
        return from_array_record(self.current_arrays)

    def aggregate_round(self, server_round: int, replies: Iterable[Message]) -> TrainOutcome:
        """Filter and sort the replies, run the round function, combine the models.

        Returns the new global model (None when no reply was valid: the model
        is left unchanged), Flower's aggregated metrics and the round's
        :class:`TrainReport`; the report is also kept as :attr:`last_round`.
        A strategy that :attr:`needs_loss` raises :class:`AggregationError`
        when no reply of the round carries ``train_loss_key`` (the clients do
        not send it: a misconfiguration, not a failed round).
        """
        replies = list(replies)
        if self.needs_loss:
            with_metrics, with_loss = metric_carriers(replies, self.train_loss_key)
            if with_metrics and not with_loss:
                raise missing_loss_error(type(self).__name__, self.train_loss_key, server_round, with_metrics)
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
            log(WARNING, "aggregate_train: no valid reply in round %d; model unchanged.", server_round)
            empty = np.zeros(0)
            report = TrainReport(server_round, [], [], empty, empty, empty,
                                 self.state_diagnostics(self.state), [], excluded)
            return self._record(TrainOutcome(None, None, report))

        partition_ids = [-1 if (p := partition_id_of(m, self.partition_key)) is None else p for m in valid]
        reported = metric_values(valid, self.train_loss_key, missing=None if self.needs_loss else math.nan)
        inputs = RoundInputs(
            server_round=server_round,
            partition_ids=np.array(partition_ids, dtype=np.int64),
            losses=self._defended_losses(valid, reported),
            num_examples=metric_values(valid, self.weighted_by_key),
            global_model=self.global_model,
            local_models=lambda: self._defended_models(valid),
        )
        aggregation, state = self.round_step(inputs, self.state)
        aggregation = aggregation.stepped(self.server_learning_rate)
        global_model = self.global_model() if aggregation.global_coefficient != 0.0 else None
        combined = combine_models(
            self._defended_models(valid), aggregation.coefficients, global_model, aggregation.global_coefficient
        )
        like = self.current_arrays if self.current_arrays is not None else arrays_of(valid[0])
        arrays = record_like(combined, like)
        metrics = self.train_metrics_aggr_fn([msg.content for msg in valid], self.weighted_by_key)
        self.state = state
        report = TrainReport(
            server_round=server_round,
            partition_ids=partition_ids,
            node_ids=[msg.metadata.src_node_id for msg in valid],
            losses=reported,
            num_examples=inputs.num_examples,
            weights=np.asarray(aggregation.coefficients, dtype=np.float64),
            diagnostics={**self.state_diagnostics(state), **aggregation.diagnostics},
            metrics=[dict(metrics_of(msg).items()) for msg in valid],
            excluded=excluded,
        )
        _log_report(report)
        return self._record(TrainOutcome(arrays, metrics, report))

    # --- opt-in defences against hostile clients (term_fl.maths.robust) -----------

    def _defended_losses(self, replies: Sequence[Message], losses: NDArray[np.float64]) -> NDArray[np.float64]:
        """The reported losses, those above ``clip_loss`` x the round's median lowered to it."""
        clipped_losses, clipped = clip_losses(losses, self.clip_loss)
        for msg, loss, cut in zip(replies, losses, clipped, strict=True):
            if cut:
                log(WARNING, "node %d (partition %s) reported loss %.6g, clipped to %.6g (clip_loss = %g x median)",
                    msg.metadata.src_node_id, partition_id_of(msg, self.partition_key), loss,
                    float(np.max(clipped_losses)), self.clip_loss)
        return clipped_losses

    def _defended_models(self, replies: Sequence[Message]) -> Iterator[dict[str, NDArray]]:
        """The replies' models; with ``max_update_norm``, each update bounded to that many median norms."""
        if self.max_update_norm <= 0:
            yield from local_models(replies)
            return
        global_model = self.global_model()
        norms = np.array([update_norm(local, global_model) for local in local_models(replies)])
        scales = update_scales(norms, self.max_update_norm)
        for msg, local, norm, scale in zip(replies, local_models(replies), norms, scales, strict=True):
            if scale < 1.0:
                log(WARNING, "node %d (partition %s): update norm %.6g scaled down to %.6g (max_update_norm = %g x "
                    "median)", msg.metadata.src_node_id, partition_id_of(msg, self.partition_key), norm,
                    norm * scale, self.max_update_norm)
            yield bounded_model(local, global_model, float(scale))

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Flower's hook: :meth:`aggregate_round` without the report (see :attr:`last_round`)."""
        outcome = self.aggregate_round(server_round, replies)
        return outcome.arrays, outcome.metrics

    def _record(self, outcome: TrainOutcome) -> TrainOutcome:
        self.last_round = outcome.report
        self.history.append(outcome.report)
        return outcome

    def evaluation_report(
        self, server_round: int, replies: Iterable[Message], required_metrics: Sequence[str] = ()
    ) -> EvaluationReport:
        """Filter and sort evaluation replies: ``num-examples`` and ``required_metrics`` must hold valid numbers.

        The server loop's evaluation; the report is also kept as :attr:`last_evaluation`.
        """
        return self._evaluation(server_round, replies, required_metrics)[1]

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """Flower's hook: filter and sort the replies, keep an EvaluationReport, average metrics as Flower does."""
        valid, _ = self._evaluation(server_round, replies, ())
        if not valid:
            return None
        return self.evaluate_metrics_aggr_fn([msg.content for msg in valid], self.weighted_by_key)

    def _evaluation(
        self, server_round: int, replies: Iterable[Message], required_metrics: Sequence[str]
    ) -> tuple[list[Message], EvaluationReport]:
        valid, excluded = filter_replies(
            replies,
            require_arrays=False,
            required_metrics=(self.weighted_by_key, *required_metrics),
            positive_metrics=(self.weighted_by_key,),
            partition_key=self.partition_key,
            context="aggregate_evaluate",
            sent=self._sent_index(),
        )
        self.last_evaluation = EvaluationReport(
            server_round=server_round,
            partition_ids=[-1 if (p := partition_id_of(m, self.partition_key)) is None else p for m in valid],
            node_ids=[msg.metadata.src_node_id for msg in valid],
            metrics=[dict(metrics_of(msg).items()) for msg in valid],
            excluded=excluded,
        )
        return valid, self.last_evaluation

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
            "no (Flower sampling)" if self._sampler is None else len(self._sampler.node_of_partition),
        )
        log(INFO, "\t├──> train_loss_key: '%s' (%s) | partition key: '%s' | server_learning_rate: %s",
            self.train_loss_key, "required" if self.needs_loss else "recorded when sent", self.partition_key,
            self.server_learning_rate)
        super().summary()
