"""Benchmark 3: round time of TermFedAvg vs Flower's built-in FedAvg in the Flower engine.

One benchmark ServerApp, run once in Flower's Simulation Engine (inside one
``ray_session``) with ``term_fl.clientapp.cache.app`` as the ClientApp, calls
``strategy.start(grid=..., initial_arrays=..., num_rounds=R,
train_config=ConfigRecord({"scenario": ...}), evaluate_config=same)`` for
each strategy, interleaved A/B/A/B after one warm-up start of each. Both use
Flower's own node sampling with the same ``fraction_train`` (10 clients per
round) and ``fraction_evaluate`` (1.0: every device, as the engine does), and
``min_available_nodes`` = all nodes. Rounds are timed by wrapping the Grid
(time between consecutive training calls). Target: mean round ratio <= 1.10.
"""

from __future__ import annotations

import tempfile
import time
from typing import Any

from flwr.app import ConfigRecord, Context
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg as FlowerFedAvg

from term_fl.data import dataset_for
from term_fl.common.keys import SCENARIO as SCENARIO_KEY
from term_fl.clientapp.cache import app as client_app
from term_fl.config import Scenario
from term_fl.engines.flower import backend_config, ray_session, without_run_simulation_notice
from term_fl.federation.loop import initial_arrays
from term_fl.strategies import TermFedAvg

from .common import BenchResult, Options, Row, fmt_s, mean, median, verdict, vehicle_scenario
from .timing_grid import TimingGrid

NAME = "term_vs_flower_fedavg"
TARGET = 1.10
SIZES = {"small": {"rounds": 2, "reps": 1}, "full": {"rounds": 5, "reps": 4}}
CLIENTS_PER_ROUND = 10
EVALUATE_FRACTION = 1.0


def _strategies(scenario: Scenario, num_nodes: int) -> dict[str, Any]:
    # int(num_nodes * fraction) must give exactly CLIENTS_PER_ROUND (Flower rounds down).
    fraction = min(1.0, (CLIENTS_PER_ROUND + 0.5) / num_nodes)
    common = dict(fraction_train=fraction, fraction_evaluate=EVALUATE_FRACTION,
                  min_available_nodes=num_nodes, min_train_nodes=min(CLIENTS_PER_ROUND, num_nodes))
    t = scenario.strategy.term.t if scenario.strategy.term.t > 0 else 1.0
    return {
        "TermFedAvg": lambda: TermFedAvg(t=t, **common),
        "flwr.FedAvg": lambda: FlowerFedAvg(**common),
    }


def run(opts: Options) -> BenchResult:
    size = SIZES[opts.size]
    scenario, source = vehicle_scenario(opts, "run.engine=flower", "strategy.name=term")
    num_nodes = dataset_for(scenario).num_devices
    factories = _strategies(scenario, num_nodes)
    rounds: dict[str, list[list[float]]] = {name: [] for name in factories}
    outcome: dict[str, Any] = {}
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        try:
            outcome["server_started"] = time.perf_counter()
            timing = TimingGrid(grid)
            arrays = initial_arrays(scenario)

            def start(name: str, num_rounds: int) -> list[float]:
                timing.calls.clear()
                config = {SCENARIO_KEY: scenario.to_json()}
                factories[name]().start(
                    grid=timing, initial_arrays=arrays, num_rounds=num_rounds,
                    train_config=ConfigRecord(dict(config)), evaluate_config=ConfigRecord(dict(config)),
                )
                return timing.round_durations(time.perf_counter())

            for name in factories:  # warm-up: actors, data caches, first messages
                outcome.setdefault("warmup", {})[name] = start(name, 1)
            for _ in range(size["reps"]):  # A/B/A/B
                for name in factories:
                    rounds[name].append(start(name, size["rounds"]))
        except BaseException as exc:  # re-raised in the caller below
            outcome["error"] = exc

    from flwr.simulation import run_simulation

    t0 = time.perf_counter()
    with ray_session(scenario), tempfile.TemporaryDirectory(prefix="tfl-ray-", dir="/tmp") as ray_tmp:
        ray_start = time.perf_counter() - t0
        t1 = time.perf_counter()
        with without_run_simulation_notice():
            run_simulation(server_app=server_app, client_app=client_app, num_supernodes=num_nodes,
                           backend_config=backend_config(scenario, ray_tmp))
        simulation_s = time.perf_counter() - t1
    if "error" in outcome:
        raise outcome["error"]
    if not all(rounds.values()):
        raise RuntimeError("the benchmark ServerApp did not run (see the log above)")
    term_all = [d for block in rounds["TermFedAvg"] for d in block]
    flwr_all = [d for block in rounds["flwr.FedAvg"] for d in block]
    term_mean, flwr_mean = mean(term_all), mean(flwr_all)
    ratio = term_mean / flwr_mean
    result = BenchResult(NAME)
    result.raw = {
        "scenario": {"name": scenario.name, **source, "model": scenario.model.name, "num_nodes": num_nodes,
                     "clients_per_round": CLIENTS_PER_ROUND, "evaluate_fraction": EVALUATE_FRACTION,
                     "rounds_per_start": size["rounds"], "repetitions": size["reps"]},
        "round_s": rounds,
        "warmup_round_s": outcome.get("warmup", {}),
        "term_mean_s": term_mean,
        "flwr_fedavg_mean_s": flwr_mean,
        "term_median_s": median(term_all),
        "flwr_fedavg_median_s": median(flwr_all),
        "ratio_mean": ratio,
        "ratio_median": median(term_all) / median(flwr_all),
        "target_ratio": TARGET,
        "ray_start_s": ray_start,
        "simulation_s": simulation_s,
        "startup_to_server_s": outcome["server_started"] - t1,
    }
    result.rows.append(
        Row(
            f"{NAME} (mean round, {CLIENTS_PER_ROUND}/{num_nodes} clients)",
            f"TermFedAvg {fmt_s(term_mean)}",
            f"flwr FedAvg {fmt_s(flwr_mean)}",
            f"{ratio:.3f} / <= {TARGET:.2f}",
            verdict(ratio <= TARGET),
        )
    )
    return result
