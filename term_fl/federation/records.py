"""What the server loop records: the store's rows of a round, its statistics, and where they go.

Each round becomes one :class:`RoundRecord`: a row per sampled device of
training (:func:`train_rows`), a row per device and split of evaluation
(:func:`evaluation_rows`), the fairness statistics and loss risks of each
split, and the strategy's diagnostics. The loop hands it to a
:class:`Recorder` (the results store, the console, tests) and ends with a
:class:`FederationResult`, or with a :class:`FederationError` when it cannot
go on. The row keys are the columns of the store's ``device_train`` and
``device_eval`` tables (docs/contracts.md, "The results store").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from flwr.app import ArrayRecord

from term_fl.common.keys import EVAL_SPLITS, PARTITION_ID, TRAIN_LOSS_AFTER, eval_key
from term_fl.config import Scenario
from term_fl.maths.fairness import fairness_summary
from term_fl.maths.risks import loss_risks
from term_fl.strategies import EvaluationReport, TrainReport

__all__ = [
    "RISK_ALPHA",
    "Checkpoint",
    "FederationError",
    "FederationResult",
    "Recorder",
    "RoundRecord",
    "evaluation_rows",
    "train_rows",
]

RISK_ALPHA = 0.1
"""Tail level alpha of the loss risks (VaR, CVaR, EVaR, TiVaR) recorded every evaluated round."""


class FederationError(RuntimeError):
    """The federation cannot go on (no nodes, too many failed rounds)."""


@dataclass
class RoundRecord:
    """Everything recorded about one round."""

    server_round: int
    status: str  # "ok" | "failed"
    train_rows: list[dict[str, Any]]
    eval_rows: list[dict[str, Any]]
    stats: dict[str, dict[str, Any]]  # "val" / "test" -> fairness statistics + loss risks
    diagnostics: dict[str, Any]  # the strategy's own numbers (TERM: running_estimate)
    duration_s: float
    excluded: list[dict[str, Any]] = field(default_factory=list)

    @property
    def tilted_weights(self) -> dict[int, float]:
        """Aggregation weight of each device whose reply was aggregated this round."""
        return {r["partition_id"]: r["tilted_weight"] for r in self.train_rows if r["included"]}


@dataclass
class FederationResult:
    """The end of a federation: the final global model, the rounds run, the last record, the node table."""

    arrays: ArrayRecord
    rounds_completed: int
    last: RoundRecord | None
    node_partitions: dict[int, int]
    discovery_s: float


@dataclass(frozen=True)
class Checkpoint:
    """Where a run stands after a round: what the server loop needs to go on from there.

    Sampling and local training draw from (seed, round, partition) generators,
    so the global model, the strategy's state (``strategy.state``: TERM's
    running estimate, AFL's mixture weights) and the loop's counters of
    failed rounds are all a resumed run needs to give the numbers of an
    uninterrupted one.
    """

    server_round: int  # the last round completed (and recorded)
    arrays: ArrayRecord  # the global model after it
    strategy_state: Any
    ok_rounds: int  # rounds with a valid training reply so far
    failed_in_a_row: int  # failed rounds since the last good one


class Recorder:
    """Receives the rounds of a run (the results store, the console, tests); this one ignores them."""

    def start(self, scenario: Scenario, dataset_metadata: dict[str, Any]) -> None:  # noqa: D102
        pass

    def record_round(self, record: RoundRecord) -> None:  # noqa: D102
        pass

    def checkpoint(self, checkpoint: Checkpoint) -> None:
        """Keep where the run stands after a recorded round (every ``run.checkpoint_every`` rounds and the last)."""

    def finish(self, status: str, result: FederationResult | None, error: str | None = None) -> None:  # noqa: D102
        pass


def train_rows(sampled: Sequence[int], report: TrainReport) -> list[dict[str, Any]]:
    """One row per sampled device, from what the strategy aggregated (nothing but the partition for the others).

    ``train_loss`` is F_k as the reply reported it under the strategy's
    ``train_loss_key`` (before any ``clip_loss``), ``tilted_weight`` the
    coefficient the strategy applied to the device's model.
    """
    aggregated = {pid: i for i, pid in enumerate(report.partition_ids)}
    rows = []
    for pid in sampled:
        i = aggregated.get(pid)
        if i is None:
            rows.append({"partition_id": pid, "sampled": 1, "included": 0, "train_loss": None,
                         "train_loss_after": None, "tilted_weight": None, "num_examples": None})
            continue
        after = report.metrics[i].get(TRAIN_LOSS_AFTER)
        rows.append(
            {
                "partition_id": pid,
                "sampled": 1,
                "included": 1,
                "train_loss": float(report.losses[i]),  # F_k as the strategy used it
                "train_loss_after": None if after is None else float(after),
                "tilted_weight": float(report.weights[i]),
                "num_examples": int(report.num_examples[i]),
            }
        )
    return rows


def evaluation_rows(report: EvaluationReport) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Per-device rows of every split, and per split the fairness statistics and the loss risks."""
    rows: list[dict[str, Any]] = []
    stats: dict[str, dict[str, Any]] = {}
    for split in EVAL_SPLITS:
        # One row per evaluated device, in the report's (partition) order
        split_rows = [
            {
                "partition_id": int(m[PARTITION_ID]),
                "split": split,
                "loss": float(m[eval_key(split, "loss")]),
                "accuracy": float(m[eval_key(split, "accuracy")]),
                "correct": int(m[eval_key(split, "correct")]),
                "examples": int(m[eval_key(split, "examples")]),
            }
            for m in report.metrics
        ]
        rows.extend(split_rows)
        # The statistics over the devices: accuracies for fairness, losses for the risks
        if split_rows:
            column = {k: np.array([r[k] for r in split_rows]) for k in ("accuracy", "examples", "correct", "loss")}
            summary = fairness_summary(column["accuracy"], num_examples=column["examples"], correct=column["correct"])
            summary.update(loss_risks(column["loss"], alpha=RISK_ALPHA))
            stats[split] = summary
    return rows, stats
