"""The server loop shared by every engine.

``run_federation(grid, scenario, recorder)`` is what a ServerApp does: build
the initial model, learn which node holds which partition (waiting for the
expected nodes with a deadline), then for each round let the strategy sample
by partition-id, train, aggregate, evaluate the global model on the devices'
validation and test splits, and record every device's metrics. The Flower
Simulation Engine, the Deployment Engine and the in-process engine all call
this function with their own Grid, so no loop or formula exists twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid

from term_fl.client_app import EVAL_SPLITS, SCENARIO_KEY, dataset_for, model_for
from term_fl.config import Scenario, check_fits_dataset
from term_fl.fairness import fairness_summary, loss_risks
from term_fl.models import get_weights
from term_fl.array_codec import to_array_record
from term_fl.strategies import FedAvg, build_strategy, filter_replies, sent_index
from term_fl.strategies.base import records_of, reply_metrics

log = logging.getLogger("term_fl")

EVAL_METRICS = tuple(
    f"{split}_{what}" for split in EVAL_SPLITS for what in ("loss", "accuracy", "correct", "examples")
)
RISK_ALPHA = 0.1
SPLIT_NAMES = {"val": "validation", "test": "test"}


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
    running_estimate: float | None
    duration_s: float
    excluded: list[dict[str, Any]] = field(default_factory=list)

    @property
    def tilted_weights(self) -> dict[int, float]:
        """Aggregation weight of each device whose reply was aggregated this round."""
        return {r["partition_id"]: r["tilted_weight"] for r in self.train_rows if r["included"]}


@dataclass
class FederationResult:
    arrays: ArrayRecord
    rounds_completed: int
    last: RoundRecord | None
    node_partitions: dict[int, int]
    discovery_s: float


class Recorder:
    """Receives the rounds of a run (the results store, the console, tests)."""

    def start(self, scenario: Scenario, dataset_metadata: dict[str, Any]) -> None:  # noqa: D102
        pass

    def record_round(self, record: RoundRecord) -> None:  # noqa: D102
        pass

    def finish(self, status: str, result: FederationResult | None, error: str | None = None) -> None:  # noqa: D102
        pass


def build_scenario_strategy(scenario: Scenario, num_devices: int) -> FedAvg:
    """The strategy a scenario names, with our sampling and reply handling."""
    s, r = scenario.strategy, scenario.run
    common = dict(
        clients_per_round=r.clients_per_round,  # at most num_devices: check_fits_dataset
        seed=r.seed,
        evaluate_fraction=r.evaluate_fraction,
        min_available_nodes=num_devices,
        clip_loss=s.clip_loss,
        max_update_norm=s.max_update_norm,
    )
    if s.name == "term":
        return build_strategy(
            "term", t=s.t, lam=s.lam, base_weighting=s.base_weighting,
            loss_reduction=s.loss_reduction, server_learning_rate=s.server_lr, **common,
        )
    if s.name == "qffl":
        return build_strategy("qffl", q=s.q, client_learning_rate=scenario.client.lr, **common)
    return build_strategy("fedavg", **common)


def discover_nodes(grid: Grid, expected: int, timeout: float, poll_s: float = 0.2) -> dict[int, int]:
    """Map node ids to partition ids, waiting up to ``timeout`` s for ``expected`` nodes."""
    deadline = time.monotonic() + timeout
    while len(node_ids := sorted(grid.get_node_ids())) < expected:
        if time.monotonic() > deadline:
            raise FederationError(
                f"only {len(node_ids)} of {expected} expected nodes connected within {timeout:g} s "
                "(run.node_timeout); start one SuperNode per partition, or raise run.node_timeout"
            )
        time.sleep(poll_s)
    messages = [
        Message(RecordDict({"config": ConfigRecord({})}), dst_node_id=node_id, message_type=MessageType.QUERY)
        for node_id in node_ids
    ]
    remaining = max(1.0, deadline - time.monotonic())
    replies = list(grid.send_and_receive(messages, timeout=remaining))
    mapping: dict[int, int] = {}
    for reply in replies:
        if reply.has_error():
            log.warning("node %s failed the partition query: %s", reply.metadata.src_node_id, reply.error.reason)
            continue
        metrics = reply_metrics(reply)
        pid = int(metrics["partition-id"])
        num = int(metrics["num-partitions"])
        if num != expected or not 0 <= pid < expected:
            raise FederationError(
                f"node {reply.metadata.src_node_id} holds partition-id={pid} of num-partitions={num}, "
                f"but the scenario's dataset has {expected} devices (partition ids 0..{expected - 1})"
            )
        if pid in mapping.values():
            other = next(n for n, p in mapping.items() if p == pid)
            raise FederationError(
                f"nodes {other} and {reply.metadata.src_node_id} both hold partition-id={pid}; "
                "give every SuperNode a distinct partition-id"
            )
        mapping[reply.metadata.src_node_id] = pid
    if len(mapping) < expected:
        missing = sorted(set(range(expected)) - set(mapping.values()))
        raise FederationError(
            f"{len(mapping)} of {expected} partitions answered the discovery query within {timeout:g} s; "
            f"missing partition ids: {missing[:20]}{' ...' if len(missing) > 20 else ''}"
        )
    return mapping


def _partition_of(messages: Iterable[Message], node_partitions: dict[int, int]) -> list[int]:
    return sorted(node_partitions[m.metadata.dst_node_id] for m in messages)


def _train_rows(sampled: Sequence[int], replies: Sequence[Message], strategy: FedAvg) -> list[dict[str, Any]]:
    report = strategy.last_round
    weights = {} if report is None else dict(zip(report.partition_ids, np.asarray(report.weights).tolist()))
    metrics_by_pid: dict[int, Any] = {}
    for reply in replies:
        if reply.has_error() or not reply.has_content():
            continue
        records = records_of(reply.content, MetricRecord)
        if not records:
            continue
        metrics = records[0]
        if "partition-id" in metrics:
            metrics_by_pid[int(metrics["partition-id"])] = metrics
    rows = []
    for pid in sampled:
        m = metrics_by_pid.get(pid, {})
        rows.append(
            {
                "partition_id": pid,
                "sampled": 1,
                "included": int(pid in weights),
                "train_loss": float(m["train_loss"]) if "train_loss" in m else None,
                "train_loss_after": float(m["train_loss_after"]) if "train_loss_after" in m else None,
                "tilted_weight": weights.get(pid),
                "num_examples": int(m["num-examples"]) if "num-examples" in m else None,
            }
        )
    return rows


def _evaluate_round(
    grid: Grid,
    strategy: FedAvg,
    server_round: int,
    arrays: ArrayRecord,
    config: ConfigRecord,
    timeout: float,
    risk_splits: tuple[str, ...],
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """Evaluate the global model; statistics per split, loss risks for ``risk_splits``."""
    messages = list(strategy.configure_evaluate(server_round, arrays, config, grid))
    replies = list(grid.send_and_receive(messages, timeout=timeout))
    valid, excluded = filter_replies(
        replies, require_arrays=False, required_metrics=EVAL_METRICS,
        context="evaluate", sent=sent_index(messages, strategy.node_partitions),
    )
    metrics = [reply_metrics(reply) for reply in valid]
    rows: list[dict[str, Any]] = []
    stats: dict[str, dict[str, Any]] = {}
    for split in EVAL_SPLITS:
        split_rows = [
            {
                "partition_id": int(m["partition-id"]),
                "split": split,
                "loss": float(m[f"{split}_loss"]),
                "accuracy": float(m[f"{split}_accuracy"]),
                "correct": int(m[f"{split}_correct"]),
                "examples": int(m[f"{split}_examples"]),
            }
            for m in metrics
        ]
        rows.extend(split_rows)
        if split_rows:
            column = {k: np.array([r[k] for r in split_rows]) for k in ("accuracy", "examples", "correct", "loss")}
            summary = fairness_summary(column["accuracy"], num_examples=column["examples"], correct=column["correct"])
            if split in risk_splits:
                summary.update(loss_risks(column["loss"], alpha=RISK_ALPHA))
            stats[split] = summary
    return rows, stats, [e._asdict() for e in excluded]


def initial_arrays(scenario: Scenario) -> ArrayRecord:
    """The initial global model of a scenario (seeded by run.seed)."""
    model = model_for(scenario, dataset_for(scenario))
    return to_array_record(get_weights(model))


def run_federation(
    grid: Grid,
    scenario: Scenario,
    recorder: Recorder | None = None,
    *,
    on_round: Callable[[RoundRecord, int], None] | None = None,
) -> FederationResult:
    """Run the scenario's rounds on ``grid`` and report every round to ``recorder``."""
    recorder = recorder or Recorder()
    dataset = dataset_for(scenario)
    check_fits_dataset(scenario, dataset.num_devices)
    recorder.start(scenario, dataset.metadata)
    result: FederationResult | None = None
    try:
        result = _rounds(grid, scenario, dataset.num_devices, recorder, on_round)
    except KeyboardInterrupt:
        recorder.finish("interrupted", result, "interrupted by the user")
        raise
    except BaseException as exc:
        recorder.finish("failed", result, f"{type(exc).__name__}: {exc}")
        raise
    recorder.finish("finished", result)
    return result


def _rounds(
    grid: Grid,
    scenario: Scenario,
    num_devices: int,
    recorder: Recorder,
    on_round: Callable[[RoundRecord, int], None] | None,
) -> FederationResult:
    run = scenario.run
    t0 = time.perf_counter()
    node_partitions = discover_nodes(grid, num_devices, run.node_timeout)
    discovery_s = time.perf_counter() - t0
    log.info("discovered %d nodes in %.2f s", len(node_partitions), discovery_s)

    strategy = build_scenario_strategy(scenario, num_devices)
    strategy.set_node_partitions(node_partitions)
    strategy.summary()
    arrays = initial_arrays(scenario)
    config = ConfigRecord({SCENARIO_KEY: scenario.to_json()})
    failed_in_a_row = 0
    ok_rounds = 0
    last: RoundRecord | None = None
    completed = 0
    for server_round in range(1, run.rounds + 1):
        start = time.perf_counter()
        messages = list(strategy.configure_train(server_round, arrays, config, grid))
        sampled = _partition_of(messages, node_partitions)
        replies = list(grid.send_and_receive(messages, timeout=run.round_timeout))
        new_arrays, _ = strategy.aggregate_train(server_round, replies)
        report = strategy.last_round
        excluded = [e._asdict() for e in (report.excluded if report else [])]
        status = "ok"
        if new_arrays is None:
            status = "failed"
            failed_in_a_row += 1
            log.warning("round %d failed: no valid training reply; the model is unchanged", server_round)
        else:
            failed_in_a_row = 0
            ok_rounds += 1
            arrays = new_arrays
        train_rows = _train_rows(sampled, replies, strategy)
        # Loss risks (a numerical search each) every round on test; on
        # validation only in the last round, which the summary reports.
        risk_splits = EVAL_SPLITS if server_round == run.rounds else ("test",)
        eval_rows, stats, eval_excluded = _evaluate_round(
            grid, strategy, server_round, arrays, config, run.round_timeout, risk_splits
        )
        record = RoundRecord(
            server_round=server_round,
            status=status,
            train_rows=train_rows,
            eval_rows=eval_rows,
            stats=stats,
            running_estimate=getattr(report, "running_estimate", None),
            duration_s=time.perf_counter() - start,
            excluded=excluded + eval_excluded,
        )
        recorder.record_round(record)
        completed = server_round
        last = record
        if on_round is not None:
            on_round(record, run.rounds)
        if failed_in_a_row >= run.max_failed_rounds:
            raise FederationError(
                f"{failed_in_a_row} consecutive rounds without a valid training reply "
                f"(run.max_failed_rounds = {run.max_failed_rounds}); last round {server_round}"
            )
    if ok_rounds == 0:  # fewer rounds than run.max_failed_rounds, every one failed: nothing was learned
        raise FederationError(
            f"every round failed ({completed} of {completed}): no valid training reply was aggregated; "
            "the excluded replies of each round say why (term-fl runs / the dashboard)"
        )
    return FederationResult(arrays, completed, last, node_partitions, discovery_s)
