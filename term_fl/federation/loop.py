"""The server loop shared by every engine.

``run_federation(grid, scenario, recorder)`` is what a ServerApp does: build
the initial model, learn which node holds which partition (waiting for the
expected nodes with a deadline, :mod:`.discovery`), then for each round let
the strategy sample by partition-id, train, aggregate, evaluate the global
model on the devices' validation and test splits (:mod:`.rounds`), and
record every device's metrics (:mod:`.records`). The Flower Simulation
Engine, the Deployment Engine and the in-process engine all call this
function with their own Grid, so no loop or formula exists twice.

The names of :mod:`.discovery` and :mod:`.records` that code imported from
this module before the loop was split stay importable from here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from flwr.app import ArrayRecord, ConfigRecord
from flwr.serverapp import Grid

from term_fl.common.keys import SCENARIO
from term_fl.config import RunConfig, Scenario, check_fits_dataset
from term_fl.data import FederatedDataset, dataset_for
from term_fl.federation.discovery import QUERY_TRIES, NodePartitions, discover_nodes, rejoin_nodes
from term_fl.federation.records import (RISK_ALPHA, Checkpoint, FederationError, FederationResult, Recorder,
                                        RoundRecord)
from term_fl.federation.rounds import (
    NOT_EVALUATED,
    RoundSteps,
    drive,
    evaluate_steps,
    evaluates,
    round_record,
    train_steps,
)
from term_fl.flower_internals import to_array_record
from term_fl.learning.models import get_weights, model_for
from term_fl.strategies import STRATEGIES, FedAvg
from term_fl.strategies.registry import COMMON_SETTINGS

__all__ = [
    "QUERY_TRIES",
    "RISK_ALPHA",
    "Checkpoint",
    "FederationError",
    "FederationResult",
    "NodePartitions",
    "Recorder",
    "RoundRecord",
    "build_scenario_strategy",
    "checkpoints",
    "discover_nodes",
    "evaluates",
    "federation_steps",
    "initial_arrays",
    "rejoin_nodes",
    "run_federation",
]

log = logging.getLogger("term_fl")


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
        sampling=run.sampling,
        min_available_nodes=num_devices,
    )


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
    resume: Checkpoint | None = None,
) -> FederationResult:
    """Run the scenario's rounds on ``grid`` and report every round to ``recorder``.

    ``dataset`` is the scenario's dataset when the caller built it already
    (:func:`term_fl.data.dataset_for`); the server needs its size, its
    metadata and its shapes, never a device's data. ``node_partitions``: the
    engine's own table of which node holds which partition, when it has one
    (:func:`discover_nodes`); else every node is asked. ``node_settle_s``:
    :func:`discover_nodes`'s ``settle_s``, for grids whose nodes all register
    at once. ``resume``: a checkpoint of this scenario's run (its last
    completed round); the rounds after it run, with its model and strategy
    state, and give the numbers of an uninterrupted run.

    The recorder hears ``start`` before discovery, ``checkpoint`` after every
    ``run.checkpoint_every``-th recorded round and the last, and ``finish``
    at the end: ``finished``, ``interrupted`` (Ctrl-C, SIGTERM, SIGHUP, a
    ``SystemExit`` such as Flower's on a deployment's SIGTERM; re-raised) or
    ``failed`` (any other exception, re-raised) with the error's type and message.
    """
    return drive(federation_steps(grid, scenario, recorder, on_round=on_round, dataset=dataset,
                                  node_partitions=node_partitions, node_settle_s=node_settle_s, resume=resume))


def federation_steps(
    grid: Grid,
    scenario: Scenario,
    recorder: Recorder | None = None,
    *,
    on_round: Callable[[RoundRecord, int], None] | None = None,
    dataset: FederatedDataset | None = None,
    node_partitions: NodePartitions | None = None,
    node_settle_s: float | None = None,
    resume: Checkpoint | None = None,
) -> RoundSteps[FederationResult]:
    """:func:`run_federation` as steps: every exchange of its rounds is yielded, its replies sent back.

    :func:`run_federation` answers them from ``grid``
    (:func:`~term_fl.federation.rounds.drive`); a driver of several runs
    answers the exchanges of all of them together
    (:func:`term_fl.engines.group.run_group`). An exception thrown in where
    the steps wait is recorded as the run's end, as any other, and re-raised.
    """
    recorder = recorder or Recorder()
    dataset = dataset if dataset is not None else dataset_for(scenario)
    check_fits_dataset(scenario, dataset.num_devices)
    recorder.start(scenario, dataset.metadata)
    result: FederationResult | None = None
    try:
        result = yield from _rounds(grid, scenario, dataset, recorder, on_round, node_partitions, node_settle_s,
                                    resume)
    except (KeyboardInterrupt, SystemExit) as exc:
        recorder.finish("interrupted", result, interruption(exc))
        raise
    except BaseException as exc:
        recorder.finish("failed", result, f"{type(exc).__name__}: {exc}")
        raise
    recorder.finish("finished", result)
    return result


def interruption(exc: BaseException) -> str:
    """What the store records as the reason of an interrupted run."""
    if isinstance(exc, SystemExit):
        return f"the process was asked to exit (SystemExit {exc.code})"
    return str(exc) or "interrupted by the user"


def checkpoints(server_round: int, rounds: int, every: int) -> bool:
    """Whether the run keeps a checkpoint after a round: every ``every``-th round, and always the last."""
    return server_round == rounds or server_round % every == 0


def _rounds(
    grid: Grid,
    scenario: Scenario,
    dataset: FederatedDataset,
    recorder: Recorder,
    on_round: Callable[[RoundRecord, int], None] | None,
    known_partitions: NodePartitions | None = None,
    node_settle_s: float | None = None,
    resume: Checkpoint | None = None,
) -> RoundSteps[FederationResult]:
    """Discover the nodes, build the strategy, and run ``run.rounds`` rounds (those after ``resume``), each
    recorded as it ends.

    Raises :class:`FederationError` after ``run.max_failed_rounds``
    consecutive rounds without a valid training reply, and at the end when
    no round had one.
    """
    run, num_devices = scenario.run, dataset.num_devices
    # Learn which node holds which partition (timed: discovery can dominate a short run)
    t0 = time.perf_counter()
    node_partitions = discover_nodes(grid, num_devices, run.node_timeout, known=known_partitions,
                                     settle_s=node_settle_s)
    discovery_s = time.perf_counter() - t0
    log.info("discovered %d nodes in %.2f s", len(node_partitions), discovery_s)

    # The scenario's strategy, sampling by partition-id; the seeded initial model
    strategy = build_scenario_strategy(scenario, num_devices)
    sizes = dict(enumerate(dataset.metadata["sizes"]["train"]))  # n_k, for sampling = "size"
    strategy.set_node_partitions(node_partitions, sizes)
    strategy.set_partition_sizes(sizes)  # and a reply's n_k is checked against it
    strategy.summary()
    arrays = initial_arrays(scenario, dataset)
    config = ConfigRecord({SCENARIO: scenario.to_json()})

    failed_in_a_row = ok_rounds = done = 0
    if resume is not None:  # go on after the checkpoint's round, from its model and strategy state
        arrays, strategy.state, done = resume.arrays, resume.strategy_state, resume.server_round
        ok_rounds, failed_in_a_row = resume.ok_rounds, resume.failed_in_a_row
    last: RoundRecord | None = None
    for server_round in range(done + 1, run.rounds + 1):
        start = time.perf_counter()
        # A SuperNode that restarted under a new node id takes its partition back
        if server_round > 1:
            node_partitions = _rejoin(grid, strategy, node_partitions, num_devices, run)
        # Train and aggregate; without a valid reply the round fails and the model stays
        trained = yield from train_steps(grid, strategy, server_round, arrays, config, node_partitions,
                                         run.round_timeout)
        if trained.arrays is None:
            failed_in_a_row += 1
            log.warning("round %d failed: no valid training reply; the model is unchanged", server_round)
        else:
            failed_in_a_row = 0
            ok_rounds += 1
            arrays = trained.arrays
        # Evaluate the global model every run.evaluate_every rounds, and in the last
        evaluated = NOT_EVALUATED
        if evaluates(server_round, run.rounds, run.evaluate_every):
            evaluated = yield from evaluate_steps(grid, strategy, server_round, arrays, config, run.round_timeout)
        # Record the round (and, every run.checkpoint_every rounds, where the run stands), then stop after
        # run.max_failed_rounds failed rounds in a row
        last = round_record(server_round, trained, evaluated, time.perf_counter() - start)
        recorder.record_round(last)
        if checkpoints(server_round, run.rounds, run.checkpoint_every):
            recorder.checkpoint(Checkpoint(server_round, arrays, strategy.state, ok_rounds, failed_in_a_row))
        if on_round is not None:
            on_round(last, run.rounds)
        if failed_in_a_row >= run.max_failed_rounds:
            raise FederationError(
                f"{failed_in_a_row} consecutive rounds without a valid training reply "
                f"(run.max_failed_rounds = {run.max_failed_rounds}); last round {server_round}"
            )
    completed = last.server_round if last is not None else done
    if ok_rounds == 0:  # fewer rounds than run.max_failed_rounds, every one failed: nothing was learned
        raise FederationError(
            f"every round failed ({completed} of {completed}): no valid training reply was aggregated; "
            "the excluded replies of each round say why (term-fl runs / the dashboard)"
        )
    return FederationResult(arrays, completed, last, node_partitions, discovery_s)


def _rejoin(grid: Grid, strategy: FedAvg, node_partitions: dict[int, int], expected: int, run: RunConfig
            ) -> dict[int, int]:
    """:func:`rejoin_nodes` (waiting up to ``run.node_timeout`` while no node is connected), and the strategy told
    when the node table changed."""
    rejoined = rejoin_nodes(grid, node_partitions, expected, run.round_timeout, wait_s=run.node_timeout)
    if rejoined is not node_partitions:
        strategy.set_node_partitions(rejoined, strategy.sampling_sizes)
    return rejoined
