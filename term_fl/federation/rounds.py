"""One round of the server loop: train and aggregate, evaluate, and the record of the two.

A round is two exchanges over the Grid: the strategy samples partitions,
sends them the global model and aggregates their replies
(:func:`train_round`); then, in an evaluated round (:func:`evaluates`), it
sends the new global model to the devices it samples for evaluation and
collects their validation and test metrics (:func:`evaluate_round`).
:func:`round_record` turns the two into the round's :class:`RoundRecord`.

Each half is also written as *steps* (:func:`train_steps`,
:func:`evaluate_steps`): a generator that yields its :class:`Exchange` and
is sent the replies. :func:`drive` answers them from the exchange's own grid
(what :func:`train_round` does); a driver of several runs at once
(:func:`term_fl.engines.group.run_group`) answers the exchanges of all its
runs together.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Sequence
from typing import Any, NamedTuple, Protocol, TypeVar, runtime_checkable

from flwr.app import ArrayRecord, ConfigRecord, Message
from flwr.serverapp import Grid

from term_fl.common.keys import EVAL_METRICS
from term_fl.federation.records import RoundRecord, evaluation_rows, train_rows
from term_fl.strategies import ExcludedReply, FedAvg, TrainReport
from term_fl.strategies.cohort_replies import CohortReplies
from term_fl.strategies.instructions import Instructions

__all__ = [
    "NOT_EVALUATED",
    "CohortGrid",
    "EvaluatedRound",
    "Exchange",
    "RoundSteps",
    "TrainedRound",
    "answer",
    "drive",
    "evaluate_round",
    "evaluate_steps",
    "evaluates",
    "exchange",
    "round_record",
    "train_round",
    "train_steps",
]

T = TypeVar("T")


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

    def exchange(self, messages: Sequence[Message]) -> CohortReplies | list[Message]:  # noqa: D102
        ...


def exchange(grid: Grid, messages: Sequence[Message], timeout: float) -> CohortReplies | Iterable[Message]:
    """The replies to ``messages``: stacked where the grid answers a batch as one, else one Message each.

    ``messages`` may be the strategy's :class:`~term_fl.strategies.instructions.Instructions`:
    a grid that answers them as one never builds the Messages.
    """
    if isinstance(grid, CohortGrid):
        return grid.exchange(messages)
    return grid.send_and_receive(messages, timeout=timeout)


def _partitions_of(messages: Sequence[Message], node_partitions: dict[int, int]) -> list[int]:
    """The sorted partitions the messages go to."""
    nodes = messages.node_ids if isinstance(messages, Instructions) else [m.metadata.dst_node_id for m in messages]
    return sorted(node_partitions[node] for node in nodes)


def _instructions(messages: Iterable[Message]) -> Sequence[Message]:
    """What ``configure_train`` / ``configure_evaluate`` returned, as a sequence (Instructions stay unbuilt)."""
    return messages if isinstance(messages, Instructions) else list(messages)


class Exchange(NamedTuple):
    """A batch of messages a round waits on: whoever drives the round answers it (:func:`answer`)."""

    grid: Grid
    messages: Sequence[Message]
    timeout: float


RoundSteps = Generator[Exchange, Any, T]
"""A round (or a run) as steps: it yields each :class:`Exchange` and is sent the replies, then returns its value."""


def answer(request: Exchange) -> CohortReplies | Iterable[Message]:
    """The replies to one exchange, from its grid (:func:`exchange`)."""
    return exchange(request.grid, request.messages, request.timeout)


def drive(steps: RoundSteps[T]) -> T:
    """Run ``steps`` to the end, answering each exchange from its own grid; its value.

    An exception while answering is thrown into the steps (a run records
    how it ended, then re-raises).
    """
    try:
        request = next(steps)
        while True:
            try:
                replies = answer(request)
            except BaseException as exc:  # noqa: BLE001 - the steps see it where they wait, and re-raise
                request = steps.throw(exc)
                continue
            request = steps.send(replies)
    except StopIteration as stop:
        return stop.value


def train_steps(
    grid: Grid,
    strategy: FedAvg,
    server_round: int,
    arrays: ArrayRecord,
    config: ConfigRecord,
    node_partitions: dict[int, int],
    timeout: float,
) -> RoundSteps[TrainedRound]:
    """:func:`train_round` as steps: the strategy's instructions are yielded, the replies aggregated."""
    messages = _instructions(strategy.configure_train(server_round, arrays, config, grid))
    sampled = _partitions_of(messages, node_partitions)
    replies = yield Exchange(grid, messages, timeout)
    new_arrays, _, report = strategy.aggregate_round(server_round, replies)
    return TrainedRound(new_arrays, sampled, report)


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
    return drive(train_steps(grid, strategy, server_round, arrays, config, node_partitions, timeout))


def evaluate_steps(
    grid: Grid, strategy: FedAvg, server_round: int, arrays: ArrayRecord, config: ConfigRecord, timeout: float
) -> RoundSteps[EvaluatedRound]:
    """:func:`evaluate_round` as steps: the strategy's instructions are yielded, the replies reported."""
    messages = _instructions(strategy.configure_evaluate(server_round, arrays, config, grid))
    replies = yield Exchange(grid, messages, timeout)
    evaluation = strategy.evaluation_report(server_round, replies, required_metrics=EVAL_METRICS)
    rows, stats = evaluation_rows(evaluation)
    return EvaluatedRound(rows, stats, evaluation.excluded)


def evaluate_round(
    grid: Grid, strategy: FedAvg, server_round: int, arrays: ArrayRecord, config: ConfigRecord, timeout: float
) -> EvaluatedRound:
    """Evaluate the global model on the sampled devices: their rows, and per split the statistics and loss risks.

    Every evaluated round records the loss risks too (a comparison draws
    them per round). A reply without every key of ``EVAL_METRICS`` is excluded.
    """
    return drive(evaluate_steps(grid, strategy, server_round, arrays, config, timeout))


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
