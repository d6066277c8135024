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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, RecordDict
from flwr.serverapp import Grid

from term_fl.config import Scenario, check_fits_dataset
from term_fl.data import FederatedDataset, dataset_for
from term_fl.maths.fairness import fairness_summary
from term_fl.flower_internals import to_array_record
from term_fl.common.keys import (
    CONFIG,
    EVAL_METRICS,
    EVAL_SPLITS,
    NUM_PARTITIONS,
    PARTITION_ID,
    SCENARIO,
    TRAIN_LOSS_AFTER,
    eval_key,
)
from term_fl.learning.models import get_weights, model_for
from term_fl.maths.risks import loss_risks
from term_fl.strategies import STRATEGIES, EvaluationReport, FedAvg, TrainReport
from term_fl.strategies.registry import COMMON_SETTINGS
from term_fl.strategies.replies import metrics_of

log = logging.getLogger("term_fl")

RISK_ALPHA = 0.1


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
    """The strategy a scenario names (term_fl.strategies.registry), with its parameters and our sampling."""
    spec, run = STRATEGIES[scenario.strategy.name], scenario.run
    return spec.build(
        scenario.strategy.settings,
        scenario.client,
        **{key: getattr(scenario.strategy, key) for key in COMMON_SETTINGS.model_fields},
        clients_per_round=run.clients_per_round,  # at most num_devices: check_fits_dataset
        seed=run.seed,
        evaluate_fraction=run.evaluate_fraction,
        min_available_nodes=num_devices,
    )


NodePartitions = Callable[[float], Mapping[int, int] | None]
"""How an engine that placed the partitions itself tells which node holds which: called with the
seconds left, it returns ``{node_id: partition_id}``, or None when it cannot tell (then every node is asked)."""


QUERY_TRIES = 3  # a node whose partition query failed is asked at most this often in one discovery


def discover_nodes(
    grid: Grid,
    expected: int,
    timeout: float,
    poll_s: float = 0.2,
    known: NodePartitions | None = None,
    settle_s: float | None = None,
) -> dict[int, int]:
    """Map node ids to partition ids, waiting up to ``timeout`` s for ``expected`` nodes.

    Every node is asked for its partition-id (one query message each; a node
    whose query failed is asked again, ``QUERY_TRIES`` in all), unless
    ``known`` gives a table that covers exactly the connected nodes and
    partitions ``0..expected-1``: Flower's Simulation Engine builds that table
    when it creates its virtual nodes, and asking 10,000 of them costs 10,000
    round trips through Ray (benchmarks/README.md, 'discovery').

    ``settle_s`` is for engines that register all their nodes at once
    (Flower's Simulation Engine under ``flwr run``): once some nodes are
    connected and their number has not changed for ``settle_s`` seconds,
    fewer than ``expected`` is an error right away instead of after ``timeout``.
    """
    start = time.monotonic()
    deadline = start + timeout
    count, changed = -1, start
    while len(node_ids := sorted(grid.get_node_ids())) < expected:
        now = time.monotonic()
        if len(node_ids) != count:
            count, changed = len(node_ids), now
        if settle_s is not None and count > 0 and now - changed >= settle_s:
            raise FederationError(
                f"the simulation has {count} virtual SuperNodes but the scenario has {expected} devices: "
                f"run it with num-supernodes={expected}, e.g. "
                f'flwr run . local --federation-config "num-supernodes={expected}"'
            )
        if now > deadline:
            raise FederationError(
                f"only {len(node_ids)} of {expected} expected nodes connected within {timeout:g} s "
                "(run.node_timeout); start one SuperNode per partition, or raise run.node_timeout"
            )
        time.sleep(poll_s)
    if known is not None:
        table = known(max(0.0, deadline - time.monotonic()))
        if table is not None and set(table) == set(node_ids) and sorted(table.values()) == list(range(expected)):
            return dict(table)
        log.info("the engine's node table does not match the connected nodes: asking every node")
    mapping: dict[int, int] = {}
    asking, tries = node_ids, 0
    while asking:
        tries += 1
        for node, pid in _query_partitions(grid, asking, expected, max(1.0, deadline - time.monotonic())):
            if pid in mapping.values():
                other = next(n for n, p in mapping.items() if p == pid)
                raise FederationError(
                    f"nodes {other} and {node} both hold partition-id={pid}; "
                    "give every SuperNode a distinct partition-id"
                )
            mapping[node] = pid
        # A query that failed (an error reply: Flower answers "ClientApp crashed" when a ClientApp
        # process misses its task-token or heartbeat window on an overloaded host) is asked again
        # (QUERY_TRIES in all) while run.node_timeout lasts, the still-connected nodes only.
        online = set(grid.get_node_ids())
        asking = [n for n in asking if n not in mapping and n in online]
        if asking and tries < QUERY_TRIES and time.monotonic() < deadline - 1.0:
            log.warning("asking %d node(s) again for their partition: %s", len(asking), asking[:20])
            time.sleep(min(poll_s * 5, 1.0))
        else:
            break
    if len(mapping) < expected:
        missing = sorted(set(range(expected)) - set(mapping.values()))
        raise FederationError(
            f"{len(mapping)} of {expected} partitions answered the discovery query within {timeout:g} s; "
            f"missing partition ids: {missing[:20]}{' ...' if len(missing) > 20 else ''}"
        )
    return mapping


def _query_partitions(grid: Grid, node_ids: Sequence[int], expected: int, timeout: float) -> list[tuple[int, int]]:
    """Ask nodes which partition they hold: (node id, partition id) of every valid answer."""
    messages = [
        Message(RecordDict({CONFIG: ConfigRecord({})}), dst_node_id=node_id, message_type=MessageType.QUERY)
        for node_id in node_ids
    ]
    answers = []
    for reply in grid.send_and_receive(messages, timeout=timeout):
        metrics = metrics_of(reply)
        if metrics is None or PARTITION_ID not in metrics or NUM_PARTITIONS not in metrics:
            reason = reply.error.reason if reply.has_error() else "the reply holds no partition-id and num-partitions"
            log.warning("node %s failed the partition query: %s", reply.metadata.src_node_id, reason)
            continue
        pid = int(metrics[PARTITION_ID])
        num = int(metrics[NUM_PARTITIONS])
        if num != expected or not 0 <= pid < expected:
            raise FederationError(
                f"node {reply.metadata.src_node_id} holds partition-id={pid} of num-partitions={num}, "
                f"but the scenario's dataset has {expected} devices (partition ids 0..{expected - 1})"
            )
        answers.append((reply.metadata.src_node_id, pid))
    return answers


def rejoin_nodes(grid: Grid, node_partitions: dict[int, int], expected: int, timeout: float) -> dict[int, int]:
    """Map nodes that connected after discovery: a restarted SuperNode takes its partition back.

    A SuperNode that crashed and was started again (compose: ``restart:
    on-failure``) registers under a new node id. Flower's node liveness
    drops the old id from ``grid.get_node_ids()`` once it misses its
    heartbeats (about 60 s in Flower 1.42), and the strategies sample only
    connected nodes. A new id is asked for its partition; it takes the
    partition over when the partition's node is no longer connected (while
    that node is still connected, the newcomer is ignored with a warning).
    Engines whose nodes never change pay one ``get_node_ids()`` per round.
    """
    online = set(grid.get_node_ids())
    newcomers = sorted(online - set(node_partitions))
    if not newcomers:
        return node_partitions
    mapping = dict(node_partitions)
    node_of = {pid: node for node, pid in mapping.items()}
    for node, pid in _query_partitions(grid, newcomers, expected, timeout):
        old = node_of.get(pid)
        if old is not None and old in online:
            log.warning("node %s also holds partition-id=%d, which node %s still serves: ignored", node, pid, old)
            continue
        mapping.pop(old, None)
        mapping[node] = node_of[pid] = pid
        log.warning("partition %d is back: node %s replaces node %s", pid, node, old)
    return mapping


def _partition_of(messages: Iterable[Message], node_partitions: dict[int, int]) -> list[int]:
    return sorted(node_partitions[m.metadata.dst_node_id] for m in messages)


def _train_rows(sampled: Sequence[int], report: TrainReport) -> list[dict[str, Any]]:
    """One row per sampled device, from what the strategy aggregated (nothing but the partition for the others)."""
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


def _evaluation_rows(report: EvaluationReport) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Per-device rows of every split, and per split the fairness statistics and the loss risks."""
    rows: list[dict[str, Any]] = []
    stats: dict[str, dict[str, Any]] = {}
    for split in EVAL_SPLITS:
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
        if split_rows:
            column = {k: np.array([r[k] for r in split_rows]) for k in ("accuracy", "examples", "correct", "loss")}
            summary = fairness_summary(column["accuracy"], num_examples=column["examples"], correct=column["correct"])
            summary.update(loss_risks(column["loss"], alpha=RISK_ALPHA))
            stats[split] = summary
    return rows, stats


def evaluates(server_round: int, rounds: int, every: int) -> bool:
    """Whether a round evaluates the global model: every ``every``-th round, and always the last."""
    return server_round == rounds or server_round % every == 0


def initial_arrays(scenario: Scenario, dataset: FederatedDataset | None = None) -> ArrayRecord:
    """The initial global model of a scenario (seeded by run.seed) for its dataset."""
    model = model_for(scenario, dataset if dataset is not None else dataset_for(scenario))
    return to_array_record(get_weights(model))


def run_federation(
    grid: Grid,
    scenario: Scenario,
    recorder: Recorder | None = None,
    *,
    on_round: Callable[[RoundRecord, int], None] | None = None,
    dataset: FederatedDataset | None = None,
    node_partitions: NodePartitions | None = None,
    node_settle_s: float | None = None,
) -> FederationResult:
    """Run the scenario's rounds on ``grid`` and report every round to ``recorder``.

    ``dataset`` is the scenario's dataset when the caller built it already
    (:func:`term_fl.data.dataset_for`); the server needs its size, its
    metadata and its shapes, never a device's data. ``node_partitions``: the
    engine's own table of which node holds which partition, when it has one
    (:func:`discover_nodes`); else every node is asked. ``node_settle_s``:
    :func:`discover_nodes`'s ``settle_s``, for grids whose nodes all register
    at once.
    """
    recorder = recorder or Recorder()
    dataset = dataset if dataset is not None else dataset_for(scenario)
    check_fits_dataset(scenario, dataset.num_devices)
    recorder.start(scenario, dataset.metadata)
    result: FederationResult | None = None
    try:
        result = _rounds(grid, scenario, dataset, recorder, on_round, node_partitions, node_settle_s)
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
    dataset: FederatedDataset,
    recorder: Recorder,
    on_round: Callable[[RoundRecord, int], None] | None,
    known_partitions: NodePartitions | None = None,
    node_settle_s: float | None = None,
) -> FederationResult:
    run, num_devices = scenario.run, dataset.num_devices
    t0 = time.perf_counter()
    node_partitions = discover_nodes(grid, num_devices, run.node_timeout, known=known_partitions,
                                     settle_s=node_settle_s)
    discovery_s = time.perf_counter() - t0
    log.info("discovered %d nodes in %.2f s", len(node_partitions), discovery_s)

    strategy = build_scenario_strategy(scenario, num_devices)
    strategy.set_node_partitions(node_partitions)
    strategy.summary()
    arrays = initial_arrays(scenario, dataset)
    config = ConfigRecord({SCENARIO: scenario.to_json()})
    failed_in_a_row = 0
    ok_rounds = 0
    last: RoundRecord | None = None
    completed = 0
    for server_round in range(1, run.rounds + 1):
        start = time.perf_counter()
        if server_round > 1:
            rejoined = rejoin_nodes(grid, node_partitions, num_devices, run.round_timeout)
            if rejoined is not node_partitions:
                node_partitions = rejoined
                strategy.set_node_partitions(node_partitions)
        messages = list(strategy.configure_train(server_round, arrays, config, grid))
        sampled = _partition_of(messages, node_partitions)
        replies = grid.send_and_receive(messages, timeout=run.round_timeout)
        new_arrays, _, report = strategy.aggregate_round(server_round, replies)
        status = "ok"
        if new_arrays is None:
            status = "failed"
            failed_in_a_row += 1
            log.warning("round %d failed: no valid training reply; the model is unchanged", server_round)
        else:
            failed_in_a_row = 0
            ok_rounds += 1
            arrays = new_arrays
        eval_rows: list[dict[str, Any]] = []
        stats: dict[str, dict[str, Any]] = {}
        eval_excluded: tuple = ()
        if evaluates(server_round, run.rounds, run.evaluate_every):
            # Evaluate the global model: statistics and loss risks of every split, every
            # evaluated round (a comparison draws the risks per round too).
            messages = list(strategy.configure_evaluate(server_round, arrays, config, grid))
            replies = grid.send_and_receive(messages, timeout=run.round_timeout)
            evaluation = strategy.evaluation_report(server_round, replies, required_metrics=EVAL_METRICS)
            eval_rows, stats = _evaluation_rows(evaluation)
            eval_excluded = evaluation.excluded
        record = RoundRecord(
            server_round=server_round,
            status=status,
            train_rows=_train_rows(sampled, report),
            eval_rows=eval_rows,
            stats=stats,
            diagnostics=report.diagnostics,
            duration_s=time.perf_counter() - start,
            excluded=[e._asdict() for e in (*report.excluded, *eval_excluded)],
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
