"""Benchmark 1: per-round time of the in-process engine vs a naive FedAvg loop.

The engine: ``run_federation`` on ``InProcessGrid`` with FedAvg (vehicle data
when available, else Synthetic), 23 devices, 10 per round, every device
evaluated on val and test each round, metrics recorded by a no-op Recorder.
The baseline: :class:`benchmarks.reference.ReferenceFedAvg` on the same data
with the same lr / epochs / batch size. Both run single-threaded
(``torch.set_num_threads(1)``, as Flower's virtual clients do) and are
interleaved A/B/A/B; round 1 of each block is a warm-up and is dropped; the
medians over the remaining rounds are compared. Target: ratio <= 2.0.
"""

from __future__ import annotations

import torch

from term_fl.clientapp.app import make_client_app
from term_fl.data import dataset_for
from term_fl.clientapp.cache import ClientCache
from term_fl.engines.inprocess import InProcessGrid
from term_fl.federation.loop import Recorder, RoundRecord, run_federation

from .common import BenchResult, Options, Row, fmt_s, median, verdict, vehicle_scenario
from .reference import ReferenceFedAvg
from .timing_grid import TimingGrid

NAME = "inprocess_vs_reference"
TARGET = 2.0
SIZES = {"small": {"rounds": 3, "blocks": 1}, "full": {"rounds": 21, "blocks": 2}}


def _engine_rounds(scenario) -> tuple[list[float], list[dict[str, float]]]:
    """Round durations, and per round where the time went (clients training / evaluating, server)."""
    durations: list[float] = []
    parts: list[dict[str, float]] = []
    inner = InProcessGrid(make_client_app(ClientCache()), dataset_for(scenario).num_devices)  # as run_scenario
    grid = TimingGrid(inner)

    def on_round(record: RoundRecord, total: int) -> None:
        durations.append(record.duration_s)
        train = sum(c.duration for c in grid.calls if c.kind == "train")
        evaluate = sum(c.duration for c in grid.calls if c.kind == "evaluate")
        parts.append({"clients_train_s": train, "clients_evaluate_s": evaluate,
                      "server_s": record.duration_s - train - evaluate})
        grid.calls.clear()

    with inner:
        run_federation(grid, scenario, Recorder(), on_round=on_round)
    return durations, parts


def _reference_rounds(scenario, device: str) -> list[float]:
    ref = ReferenceFedAvg(scenario, device=device)
    return [ref.run_round(r)["duration_s"] for r in range(1, scenario.run.rounds + 1)]


def run(opts: Options) -> BenchResult:
    size = SIZES[opts.size]
    scenario, source = vehicle_scenario(
        opts, "run.engine=inprocess", "strategy.name=fedavg", f"run.rounds={size['rounds']}", "run.evaluate_fraction=1.0"
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    engine_blocks: list[list[float]] = []
    reference_blocks: list[list[float]] = []
    engine_parts: list[dict[str, float]] = []
    try:
        for _ in range(size["blocks"]):  # A/B/A/B
            durations, parts = _engine_rounds(scenario)
            engine_blocks.append(durations)
            engine_parts.extend(parts[1:])
            reference_blocks.append(_reference_rounds(scenario, opts.device))
    finally:
        torch.set_num_threads(threads)
    engine = median([d for block in engine_blocks for d in block[1:]])
    reference = median([d for block in reference_blocks for d in block[1:]])
    ratio = engine / reference
    result = BenchResult(NAME)
    result.raw = {
        "scenario": {"name": scenario.name, **source, "model": scenario.model.name,
                     "clients_per_round": scenario.run.clients_per_round, "rounds_per_block": scenario.run.rounds,
                     "lr": scenario.client.lr, "epochs": scenario.client.epochs, "batch_size": scenario.client.batch_size},
        "engine_round_s": engine_blocks,
        "reference_round_s": reference_blocks,
        "engine_median_s": engine,
        "reference_median_s": reference,
        "engine_breakdown_median_s": {k: median([p[k] for p in engine_parts]) for k in engine_parts[0]},
        "ratio": ratio,
        "target_ratio": TARGET,
        "warmup_rounds_dropped_per_block": 1,
    }
    result.rows.append(
        Row(
            f"{NAME} (per round, median)",
            f"engine {fmt_s(engine)}",
            f"reference {fmt_s(reference)}",
            f"{ratio:.2f} / <= {TARGET:.1f}",
            verdict(ratio <= TARGET),
        )
    )
    return result
