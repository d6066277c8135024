"""Engines that run the shared server loop: Flower's Simulation Engine and in-process."""

from __future__ import annotations

from collections.abc import Callable

from term_fl.client_app import app as client_app
from term_fl.client_app import dataset_for
from term_fl.config import Scenario
from term_fl.federation import FederationResult, Recorder, RoundRecord, run_federation

ENGINES = ("flower", "inprocess")


def run_scenario(
    scenario: Scenario,
    recorder: Recorder | None = None,
    *,
    on_round: Callable[[RoundRecord, int], None] | None = None,
) -> FederationResult:
    """Run one scenario on the engine ``scenario.run.engine`` names."""
    num_nodes = dataset_for(scenario).num_devices
    if scenario.run.engine == "inprocess":
        from term_fl.engines.inprocess import InProcessGrid

        return run_federation(InProcessGrid(client_app, num_nodes), scenario, recorder, on_round=on_round)
    from term_fl.engines.flower import run_flower_simulation

    return run_flower_simulation(scenario, num_nodes, recorder, on_round=on_round)
