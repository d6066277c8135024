"""TERM at t = 0 is FedAvg bit for bit, end to end, on every scenario, over many rounds.

At t = 0 the tilted weights are n_k / sum_j n_j exactly, and their sum is 1 in
exact arithmetic: the old model must then have no share in the new one (a
float sum of the weights is 1 +- 1e-16, and adding that fraction of the old
model every round made t = 0 drift away from FedAvg).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import vehicle_path
from term_fl.config import VEHICLE_DATA_ENV, load_scenario, with_overrides
from term_fl.engines import run_scenario
from term_fl.federation.loop import Recorder

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
SCENARIOS = [None, *sorted(CONFIGS.glob("*.toml"))]


class Keep(Recorder):
    def __init__(self) -> None:
        self.records = []

    def record_round(self, record) -> None:
        self.records.append(record)


def run(scenario):
    keep = Keep()
    result = run_scenario(scenario, keep)  # in-process, with the scenario's own executor
    return result, keep.records


def load(path):
    environ = {}
    if path is not None and "vehicle" in path.read_text():
        data = vehicle_path()
        if data is None:
            pytest.skip(f"vehicle data not found (set {VEHICLE_DATA_ENV})")
        environ = {VEHICLE_DATA_ENV: str(data)}
    # the scenario's own data, model, training and executor; 100 rounds, evaluated every 25th
    return load_scenario(path, {"run.rounds": 100, "run.evaluate_every": 25, "run.engine": "inprocess"},
                         environ=environ)


@pytest.mark.slow
@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: "default" if p is None else p.stem)
def test_term_at_t_zero_is_fedavg_bit_for_bit(path):
    scenario = load(path)
    fedavg, fedavg_rounds = run(with_overrides(scenario, {"strategy.name": "fedavg"}))
    term, term_rounds = run(with_overrides(scenario, {"strategy.name": "term", "strategy.t": 0.0}))
    assert term.rounds_completed == fedavg.rounds_completed == 100
    for key, array in fedavg.arrays.items():
        assert np.array_equal(term.arrays[key].numpy(), array.numpy()), key
    # F_k summed over a device's samples ("paper" mode, configs/vehicle-paper.toml) is n_k times FedAvg's mean
    summed = getattr(with_overrides(scenario, {"strategy.name": "term"}).strategy.settings, "loss_reduction") == "sum"
    for a, b in zip(fedavg_rounds, term_rounds, strict=True):
        if summed:
            b_rows = [{**row, "train_loss": row["train_loss"] / row["num_examples"]} for row in b.train_rows]
            assert [row["train_loss"] for row in b_rows] == pytest.approx([row["train_loss"] for row in a.train_rows])
            b_rows = [{**row, "train_loss": r["train_loss"]} for row, r in zip(b_rows, a.train_rows, strict=True)]
        else:
            b_rows = b.train_rows
        assert a.train_rows == b_rows  # same devices, same F_k (up to the reduction), same weights n_k / sum n
        assert a.eval_rows == b.eval_rows  # same per-device losses and accuracies
    assert [r.server_round for r in fedavg_rounds if r.eval_rows] == [25, 50, 75, 100]
