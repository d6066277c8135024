"""One round of the server loop: train and aggregate, evaluate, and the record of the two.

A round is two exchanges over the Grid: the strategy samples partitions,
sends them the global model and aggregates their replies
(:func:`train_round`); then, in an evaluated round (:func:`evaluates`), it
sends the new global model to the devices it samples for evaluation and
collects their validation and test metrics (:func:`evaluate_round`).
:func:`round_record` turns the two into the round's :class:`RoundRecord`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

from flwr.app import ArrayRecord, ConfigRecord, Message
from flwr.serverapp import Grid

from term_fl.common.keys import EVAL_METRICS
from term_fl.federation.records import RoundRecord, evaluation_rows, train_rows
from term_fl.strategies import ExcludedReply, FedAvg, TrainReport
from term_fl.strategies.cohort_replies import CohortReplies

__all__ = [
    "NOT_EVALUATED",
    "CohortGrid",
    "EvaluatedRound",
    "TrainedRound",
    "evaluate_round",
    "evaluates",
    "exchange",
    "round_record",
    "train_round",
]


class TrainedRound(NamedTuple):
    """The training half of a round."""

    arrays: ArrayRecord | None  # the new global model; None when no reply was valid (the model is kept)
    sampled: list[int]  # the partitions sent the model, sorted
    report: TrainReport


class EvaluatedRound(NamedTuple):
    """The evaluation half of a round (empty in a round that does not evaluate)."""

    rows: list[dict[str, Any]]
    stats: dict[str, dict[str, Any]]
    excluded: Sequence[ExcludedReply]


NOT_EVALUATED = EvaluatedRound([], {}, ())
"""What a round that does not evaluate records of evaluation: nothing."""


def evaluates(server_round: int, rounds: int, every: int) -> bool:
    """Whether a round evaluates the global model: every ``every``-th round, and always the last."""
    return server_round == rounds or server_round % every == 0


@runtime_checkable
class CohortGrid(Protocol):
    """A Grid that can answer a batch as one stacked record (the in-process engine's)."""

    def exchange(self, messages: Iterable[Message]) -> CohortReplies | list[Message]:  # noqa: D102
        ...


def exchange(grid: Grid, messages: list[Message], timeout: float) -> CohortReplies | Iterable[Message]:
    """The replies to ``messages``: stacked where the grid answers a batch as one, else one Message each."""
    if isinstance(grid, CohortGrid):
        return grid.exchange(messages)
    return grid.send_and_receive(messages, timeout=timeout)


def _partitions_of(messages: Iterable[Message], node_partitions: dict[int, int]) -> list[int]:
    """The sorted partitions the messages go to."""
    return sorted(node_partitions[m.metadata.dst_node_id] for m in messages)


def train_round(
    grid: Grid,
    strategy: FedAvg,
    server_round: int,
    arrays: ArrayRecord,
    config: ConfigRecord,
    node_partitions: dict[int, int],
    timeout: float,
) -> TrainedRound:
    """Sample partitions, send them the global model, and aggregate their replies."""
    messages = list(strategy.configure_train(server_round, arrays, config, grid))
    sampled = _partitions_of(messages, node_partitions)
    new_arrays, _, report = strategy.aggregate_round(server_round, exchange(grid, messages, timeout))
    return TrainedRound(new_arrays, sampled, report)


def evaluate_round(
    grid: Grid, strategy: FedAvg, server_round: int, arrays: ArrayRecord, config: ConfigRecord, timeout: float
) -> EvaluatedRound:
    """Evaluate the global model on the sampled devices: their rows, and per split the statistics and loss risks.

    Every evaluated round records the loss risks too (a comparison draws
    them per round). A reply without every key of ``EVAL_METRICS`` is excluded.
    """
    messages = list(strategy.configure_evaluate(server_round, arrays, config, grid))
    evaluation = strategy.evaluation_report(server_round, exchange(grid, messages, timeout),
                                            required_metrics=EVAL_METRICS)
    rows, stats = evaluation_rows(evaluation)
    return EvaluatedRound(rows, stats, evaluation.excluded)


def round_record(
    server_round: int, trained: TrainedRound, evaluated: EvaluatedRound, duration_s: float
) -> RoundRecord:
    """The round's record: ``failed`` when no training reply was aggregated, every excluded reply listed."""
    report = trained.report
    return RoundRecord(
        server_round=server_round,
        status="ok" if trained.arrays is not None else "failed",
        train_rows=train_rows(trained.sampled, report),
        eval_rows=evaluated.rows,
        stats=evaluated.stats,
        diagnostics=report.diagnostics,
        duration_s=duration_s,
        excluded=[e._asdict() for e in (*report.excluded, *evaluated.excluded)],
    )
