"""FedAvg, the template of every term-fl strategy.

:class:`FedAvg` is a subclass of Flower 1.42's ``flwr.serverapp.strategy.FedAvg``
(through :class:`~.sampling.PartitionSampling`, seeded sampling by
partition-id once the server called ``set_node_partitions``) that runs one
round of aggregation in these steps (:meth:`FedAvg.aggregate_round`):

1. the reply filter of :mod:`.replies`: bad replies are excluded with a
   warning instead of aborting the run, the valid ones sorted by partition-id
   (sums then do not depend on arrival order) and their models decoded once
   into one :class:`~.stacked.StackedModels`;
2. one reply per node and partition (:mod:`.trust`), then the defences of
   :mod:`.defences` (clipped and transformed losses, capped sizes, bounded
   updates);
3. the strategy's *round function*, :meth:`FedAvg.round_step`: from the
   round's losses, sizes, models and the strategy's state, an
   :class:`~.aggregation.Aggregation` (coefficients of
   ``w_new = g w + sum_k c_k w_k``, or the strategy's own aggregate arrays),
   the new state and the round's diagnostics, as values (fedjax's ``apply``);
4. the server learning rate, the new model in the global model's dtypes, and
   a :class:`~.reports.TrainReport`, returned and kept as ``last_round`` /
   ``history``.

A new strategy, linear or not, subclasses :class:`FedAvg`, overrides
``round_step`` (and ``state_diagnostics`` when it keeps state), and is listed
in :mod:`term_fl.strategies.registry`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from logging import INFO, WARNING
from typing import Any, ClassVar, Literal

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.exception import AggregationError
from flwr.supercore import log
from numpy.typing import NDArray

from term_fl.common.keys import ARRAYS, CONFIG, NUM_EXAMPLES, PARTITION_ID, TRAIN_LOSS_BEFORE
from term_fl.flower_internals import from_array_record, refuse_under_dp_wrapper

from .aggregation import Aggregation, RoundInputs, TrainOutcome
from .arithmetic import record_like
from .cohort_replies import CohortReplies, filter_cohort
from .defences import defended_losses, defended_models, defended_sizes, transformed_losses
from .replies import (
    TrainReplies,
    aggregated_metrics,
    filter_replies,
    filter_train_replies,
    carriers,
    metric_values,
    metrics_of,
    missing_loss_error,
    missing_partition_error,
    partition_id_of,
)
from .reports import Diagnostics, EvaluationReport, TrainReport, log_train_report
from .sampling import PartitionSampling
from .settings import Defences, resolve_loss_transform
from .trust import one_reply_each, trusted_replies

__all__ = ["Aggregation", "FedAvg", "RoundInputs", "TrainOutcome"]


class FedAvg(PartitionSampling):
    """FedAvg with seeded partition sampling, a reply filter and round reports.

    Implementation based on https://arxiv.org/abs/1602.05629: the new global
    model is sum_k (n_k / sum_j n_j) w_k over the valid replies, the same
    numbers as Flower's ``aggregate_arrayrecords`` (computed in float64 and
    returned with the global model's dtypes and shapes, 0-d arrays included;
    integer arrays are rounded to the nearest integer). It needs no loss from
    the clients. The base of every term-fl strategy.

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
    loss_transform : {"auto", "none", "median_mad", "rank"} (default: "auto")
        Each reported F_k made relative to its round before the round
        function reads it (:mod:`term_fl.maths.loss_transforms`): bounded to
        the median +- ``loss_clip`` robust standard deviations ("median_mad";
        TERM then tilts by the unitless score), or ranks. "auto" is
        "median_mad" for TERM with t < 0 (its robust mode, where the lowest
        reported loss would otherwise take the round) and "none" for every
        other strategy and t, so FedAvg and TermFedAvg(t >= 0) stay Flower's
        FedAvg. The strategies that read no loss (FedAvg, the robust
        aggregators) ignore it.
    loss_clip : float (default: 3.0)
        c > 0 of "median_mad", in robust standard deviations (1.4826 x MAD).
    max_size_ratio : float (default: 0.0, off)
        Defence against a client that lies about its size: a reported
        ``num-examples`` above ``max_size_ratio`` x the round's median is
        lowered to it before any strategy weighs by it
        (:func:`term_fl.maths.robust.cap_sizes`); 0 or >= 1.
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
    sampling : {"uniform", "size"} (default: "uniform")
        How training rounds draw their partitions once
        :meth:`set_node_partitions` was called: uniformly, or with
        probabilities proportional to each partition's number of training
        examples n_k, without replacement (as the q-FFL and TERM reference
        code samples); "size" needs the sizes, ``set_node_partitions(mapping,
        sizes)``. Evaluation samples uniformly.
    partition_key : str (default: "partition-id")
        Metric key of the partition id in replies (sorting, reports, logs).
    """

    needs_loss: ClassVar[bool] = False
    """Whether the round function weights by F_k (then a round in which no reply carries it is an error)."""
    needs_partition: ClassVar[bool] = False
    """Whether the round function indexes by partition id (AFL): a partition table is needed, and a reply's id."""
    dp_weights: ClassVar[str | None] = None
    """What the strategy's weights are where they are not Flower's FedAvg's or 1/m: refused under a DP wrapper."""

    # pylint: disable=too-many-arguments
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
        loss_transform: str = "auto",
        loss_clip: float = 3.0,
        max_size_ratio: float = 0.0,
        clients_per_round: int | None = None,
        seed: int = 0,
        evaluate_fraction: float = 1.0,
        sampling: Literal["uniform", "size"] = "uniform",
        partition_key: str = PARTITION_ID,
    ) -> None:
        defences = Defences.of(type(self).__name__, clip_loss=clip_loss, max_update_norm=max_update_norm,
                               loss_transform=loss_transform, loss_clip=loss_clip, max_size_ratio=max_size_ratio)
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
            clients_per_round=clients_per_round,
            seed=seed,
            evaluate_fraction=evaluate_fraction,
            sampling=sampling,
        )
        self.clip_loss = defences.clip_loss
        self.max_update_norm = defences.max_update_norm
        self.loss_transform_setting = defences.loss_transform
        self.loss_clip = defences.loss_clip
        self.max_size_ratio = defences.max_size_ratio
        if not (isinstance(server_learning_rate, int | float) and math.isfinite(server_learning_rate)
                and server_learning_rate > 0):
            raise ValueError(f"server_learning_rate must be a positive number, got {server_learning_rate!r}.")
        if not (isinstance(train_loss_key, str) and train_loss_key):
            raise ValueError(f"train_loss_key must be a metric key (a non-empty str), got {train_loss_key!r}.")
        self.train_loss_key = train_loss_key
        self.server_learning_rate = float(server_learning_rate)
        self.partition_key = partition_key
        self.state: Any = None
        self.last_round: TrainReport | None = None
        self.history: list[TrainReport] = []
        self.last_evaluation: EvaluationReport | None = None

    # --- what a strategy writes -------------------------------------------

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

    def tilt(self) -> float | None:
        """The strategy's tilt, whose sign picks the "auto" loss transform (TERM's t; None for the others)."""
        return None

    def dp_refusal(self) -> str | None:
        """Why a DP wrapper's noise would not fit this strategy's weights (:attr:`dp_weights`); None where it fits."""
        return self.dp_weights

    @property
    def loss_transform(self) -> str:
        """The loss transform applied: ``loss_transform`` with "auto" resolved (:func:`.settings.resolve_loss_transform`)."""
        return resolve_loss_transform(self.loss_transform_setting, self.tilt())

    # --- the template -----------------------------------------------------

    def global_model(self) -> dict[str, NDArray]:
        """The global model sent in ``configure_train``, decoded."""
        if self.current_arrays is None:
            raise AggregationError(f"{type(self).__name__} needs the global model of this round: call "
                                   "configure_train before aggregate_train.")
        return from_array_record(self.current_arrays)

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Refuse a Flower DP wrapper whose noise does not fit these weights (:attr:`dp_weights`); sample and send."""
        refuse_under_dp_wrapper(self)
        return super().configure_train(server_round, arrays, config, grid)

    def aggregate_round(self, server_round: int, replies: Iterable[Message] | CohortReplies) -> TrainOutcome:
        """Filter and sort the replies, apply the defences, run the round function, build the new model.

        Returns the new global model (None when no reply was valid: the model
        is left unchanged), Flower's aggregated metrics and the round's
        :class:`TrainReport`; the report is also kept as :attr:`last_round`.
        A strategy that :attr:`needs_loss` raises :class:`AggregationError`
        when no reply of the round carries ``train_loss_key`` (the clients do
        not send it: a misconfiguration, not a failed round).
        """
        # A strategy that weights by F_k (or indexes by partition) needs at least one reply that sends it
        replies = replies if isinstance(replies, CohortReplies) else list(replies)
        for needed, key, error in ((self.needs_loss, self.train_loss_key, missing_loss_error),
                                   (self.needs_partition, self.partition_key, missing_partition_error)):
            if needed and (counts := carriers(replies, key))[0] and not counts[1]:
                raise error(type(self).__name__, key, server_round, counts[0])
        # Keep the valid replies, sorted by partition id, each model decoded once (or taken from the stack)
        options = dict(partition_key=self.partition_key, reference_arrays=self.current_arrays,
                       context="aggregate_train", **self.train_filter_options())
        train = (TrainReplies(*filter_cohort(replies, **options).__dict__.values())
                 if isinstance(replies, CohortReplies)
                 else filter_train_replies(replies, sent=self._sent_index(), **options))
        train = self._one_reply_each(train)
        if train.models is None:
            log(WARNING, "aggregate_train: no valid reply in round %d; model unchanged.", server_round)
            empty = np.zeros(0)
            report = TrainReport(server_round, [], [], empty, empty, empty,
                                 self.state_diagnostics(self.state), [], train.excluded)
            return self._record(TrainOutcome(None, None, report))
        # The round function sees the defended losses and models; the global model is decoded at most once
        global_model = functools.cache(self.global_model)
        inputs, reported, sizes = self._round_inputs(server_round, train, global_model)
        aggregation, state = self.round_step(inputs, self.state)
        # The server learning rate scales the round's step; the new model keeps the global model's dtypes
        aggregation = aggregation.stepped(self.server_learning_rate)
        like = self.current_arrays if self.current_arrays is not None else train.models.model(0)
        arrays = record_like(aggregation.new_model(inputs.models, global_model), like)
        metrics = aggregated_metrics(self.train_metrics_aggr_fn, train.metrics, self.weighted_by_key)
        # Keep the new state; report what each reply reported and contributed
        self.state = state
        report = TrainReport(
            server_round=server_round,
            partition_ids=inputs.partition_ids.tolist(),
            node_ids=train.node_ids,
            losses=reported,
            num_examples=sizes,
            weights=np.asarray(aggregation.coefficients, dtype=np.float64),
            diagnostics={**self.state_diagnostics(state), **aggregation.diagnostics},
            metrics=train.metrics,
            excluded=train.excluded,
        )
        log_train_report(report)
        return self._record(TrainOutcome(arrays, metrics, report))

    def _round_inputs(
        self, server_round: int, train: TrainReplies, global_model: Callable[[], Mapping[str, NDArray]]
    ) -> tuple[RoundInputs, NDArray[np.float64], NDArray[np.float64]]:
        """The round function's inputs (the defences applied); F_k and n_k as reported."""
        assert train.models is not None
        partitions = [partition_id_of(metrics, self.partition_key) for metrics in train.metrics]
        who = list(zip(train.node_ids, partitions, strict=True))
        reported = metric_values(train.metrics, self.train_loss_key, missing=None if self.needs_loss else math.nan)
        sizes = metric_values(train.metrics, self.weighted_by_key)
        losses, scores = defended_losses(reported, self.clip_loss, who), None
        if self.needs_loss:
            transformed = transformed_losses(losses, self.loss_transform, self.loss_clip, server_round)
            losses, scores = transformed.losses, transformed.scores
        models = train.models
        if self.max_update_norm > 0:
            models = defended_models(models, global_model(), self.max_update_norm, who)
        inputs = RoundInputs(
            server_round=server_round,
            partition_ids=np.array([-1 if p is None else p for p in partitions], dtype=np.int64),
            losses=losses,
            num_examples=defended_sizes(sizes, self.max_size_ratio, who),
            models=models,
            global_model=global_model,
            scores=scores,
        )
        return inputs, reported, sizes


    def _one_reply_each(self, train: TrainReplies) -> TrainReplies:
        """``train`` without the replies :func:`.trust.one_reply_each` excludes."""
        return trusted_replies(train, partition_key=self.partition_key, node_partitions=self.node_partitions,
                               partition_sizes=self.partition_sizes, size_key=self.weighted_by_key,
                               require_partition=self.needs_partition, context="aggregate_train")

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

    # --- evaluation -------------------------------------------------------

    def evaluation_report(
        self, server_round: int, replies: Iterable[Message] | CohortReplies, required_metrics: Sequence[str] = ()
    ) -> EvaluationReport:
        """Filter and sort evaluation replies: ``num-examples`` and ``required_metrics`` must hold valid numbers.

        The server loop's evaluation (replies as Messages, or as one stacked
        :class:`~.cohort_replies.CohortReplies`); the report is also kept as
        :attr:`last_evaluation`.
        """
        return self._evaluation(server_round, replies, required_metrics)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """Flower's hook: filter and sort the replies, keep an EvaluationReport, average metrics as Flower does."""
        report = self._evaluation(server_round, replies, ())
        if not report.metrics:
            return None
        return aggregated_metrics(self.evaluate_metrics_aggr_fn, report.metrics, self.weighted_by_key)

    def _evaluation(
        self, server_round: int, replies: Iterable[Message] | CohortReplies, required_metrics: Sequence[str]
    ) -> EvaluationReport:
        options = dict(required_metrics=(self.weighted_by_key, *required_metrics),
                       positive_metrics=(self.weighted_by_key,), partition_key=self.partition_key,
                       context="aggregate_evaluate")
        if isinstance(replies, CohortReplies):
            cohort = filter_cohort(replies, **options)
            node_ids, metrics, excluded = cohort.node_ids, cohort.metrics, cohort.excluded
        else:
            valid, excluded = filter_replies(replies, require_arrays=False, sent=self._sent_index(), **options)
            node_ids = [msg.metadata.src_node_id for msg in valid]
            metrics = [dict(metrics_of(msg).items()) for msg in valid]
        keep, doubtful = one_reply_each(node_ids, metrics, partition_key=self.partition_key,
                                        node_partitions=self.node_partitions, context="aggregate_evaluate")
        if doubtful:
            node_ids, metrics = [node_ids[k] for k in keep], [metrics[k] for k in keep]
            excluded = [*excluded, *doubtful]
        self.last_evaluation = EvaluationReport(
            server_round=server_round,
            partition_ids=[-1 if (p := partition_id_of(m, self.partition_key)) is None else p for m in metrics],
            node_ids=node_ids,
            metrics=metrics,
            excluded=excluded,
        )
        return self.last_evaluation

    def summary(self) -> None:
        """Log the settings that shape a run."""
        log(INFO, "\t├──> train_loss_key: '%s' (%s) | partition key: '%s' | server_learning_rate: %s",
            self.train_loss_key, "required" if self.needs_loss else "recorded when sent", self.partition_key,
            self.server_learning_rate)
        super().summary()
