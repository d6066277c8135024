"""Engines that run the shared server loop: Flower's Simulation Engine and in-process.

The server loop is imported when a scenario runs, not with the package: a
ClientApp process that imports the engines' client cache
(:mod:`term_fl.clientapp.cache`) needs none of it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, ContextManager

from term_fl.config import ConfigError, Scenario, check_fits_dataset, executor_of
from term_fl.data import dataset_for
from term_fl.common.errors import EngineStartError

if TYPE_CHECKING:
    from term_fl.clientapp.cache import ClientCache
    from term_fl.engines.cohort_executor import CohortExecutor
    from term_fl.federation.loop import Checkpoint, FederationResult, Recorder, RoundRecord

__all__ = ["ENGINES", "EngineStartError", "batch_executor", "check_machine", "engine_session", "run_scenario"]


def check_machine(scenario: Scenario) -> None:
    """Fail fast, with one message, when this machine cannot run the scenario's clients.

    Both simulation engines run every client on this machine: a CUDA device
    (``client.device``) or GPUs per client (``resources.num_gpus``) that are
    not here would otherwise fail every client of every round.
    """
    from term_fl.learning.training import resolve_device

    try:
        resolve_device(scenario.client.device)
    except (RuntimeError, ValueError) as exc:
        raise ConfigError(f"client.device = {scenario.client.device!r}: {exc}") from None
    if scenario.resources.num_gpus and scenario.run.engine == "flower":
        from term_fl.engines.flower import cuda_device_count

        if not cuda_device_count():
            raise ConfigError(
                f"resources.num_gpus = {scenario.resources.num_gpus:g} but this machine has no CUDA GPU; "
                "set it to 0 (or leave it unset)"
            )


def batch_executor(executor: str, cache: ClientCache) -> CohortExecutor | None:
    """The in-process Grid's executor of a resolved ``run.executor`` (None: the ClientApp message by message)."""
    if executor == "cohort":
        from term_fl.engines.cohort_executor import CohortExecutor

        return CohortExecutor(cache)
    if executor == "compiled":
        from term_fl.engines.compiled_executor import CompiledExecutor

        return CompiledExecutor(cache)
    return None


def engine_session(scenario: Scenario) -> ContextManager[None]:
    """One Ray instance for several runs on the Flower engine (a sweep, a run and its reference); nothing in-process."""
    if scenario.run.engine == "flower":
        from term_fl.engines.flower import ray_session

        return ray_session(scenario)
    return contextlib.nullcontext()


def run_scenario(
    scenario: Scenario,
    recorder: Recorder | None = None,
    *,
    on_round: Callable[[RoundRecord, int], None] | None = None,
    resume: Checkpoint | None = None,
) -> FederationResult:
    """Run one scenario on the engine ``scenario.run.engine`` names (and, in-process, ``run.executor``).

    ``resume``: go on after a checkpoint of the scenario's run
    (:func:`term_fl.federation.loop.run_federation`). torch runs on
    ``run.threads`` threads (0: as it is) for the run.

    Reads the settings of :mod:`term_fl.flower_internals` from the environment
    again (``TERM_FL_FLOWER_INTERNALS``, ``TERM_FL_FLOWER_PATCHES``): they hold
    for the run.
    """
    from term_fl.flower_internals.gate import reload
    from term_fl.learning.threads import pinned_threads

    reload()
    with pinned_threads(scenario.run.threads):
        return _run_on_engine(scenario, recorder, on_round, resume)


def _run_on_engine(
    scenario: Scenario,
    recorder: Recorder | None,
    on_round: Callable[[RoundRecord, int], None] | None,
    resume: Checkpoint | None = None,
) -> FederationResult:
    from term_fl.federation.loop import run_federation

    if executor_of(scenario) != "sequential" and scenario.run.engine != "inprocess":
        raise ConfigError(
            f"run.executor = {scenario.run.executor!r} needs run.engine = 'inprocess' (got "
            f"{scenario.run.engine!r}): Flower's engine runs every client as its own ClientApp; use "
            "--engine inprocess (or --set run.engine=inprocess), or run.executor = 'sequential' or 'auto'"
        )
    if scenario.run.ray_address and scenario.run.engine != "flower":
        raise ConfigError(
            f"run.ray_address = {scenario.run.ray_address!r} joins a Ray cluster for Flower's Simulation Engine, but "
            f"run.engine = {scenario.run.engine!r} uses no Ray; use --engine flower, or leave run.ray_address empty "
            "(term-fl sweep --ray-address runs in-process cells as Ray tasks on the cluster)")
    check_machine(scenario)
    dataset = dataset_for(scenario)
    num_nodes = dataset.num_devices
    check_fits_dataset(scenario, num_nodes)
    if scenario.run.engine == "inprocess":
        from term_fl.clientapp.app import make_client_app
        from term_fl.clientapp.cache import ClientCache
        from term_fl.engines.inprocess import InProcessGrid

        cache = ClientCache()  # the run's own client caches, shared with its cohort executor
        executor = batch_executor(executor_of(scenario), cache)
        with InProcessGrid(make_client_app(cache), num_nodes, executor=executor) as grid:
            return run_federation(grid, scenario, recorder, on_round=on_round, dataset=dataset, resume=resume)
    from term_fl.engines.flower import run_flower_simulation

    return run_flower_simulation(scenario, num_nodes, recorder, on_round=on_round, resume=resume)
