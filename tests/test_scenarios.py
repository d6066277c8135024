"""The scenario files in configs/: they validate, their sweeps expand, and they say what docs/scenarios.md claims."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import pytest

from term_fl.config import VEHICLE_DATA_ENV, config_hash, load_scenario, sweep_cells, with_overrides

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
SCENARIO_FILES = sorted(CONFIGS.glob("*.toml"))
VEHICLE_DATA = os.environ.get(VEHICLE_DATA_ENV) or "/work/shared/data/vehicle/vehicle_fewshot.json"
HAVE_VEHICLE = Path(VEHICLE_DATA).is_file()
VEHICLE_SCENARIOS = {"vehicle-sensor.toml", "noisy-sensors.toml"}


def load(name: str, overrides=None):
    path = CONFIGS / name
    if name in VEHICLE_SCENARIOS and not HAVE_VEHICLE:
        pytest.skip(f"vehicle data not found (set {VEHICLE_DATA_ENV})")
    return load_scenario(path, overrides, environ={VEHICLE_DATA_ENV: VEHICLE_DATA})


def cells(name: str):
    return [cell for _, cell in sweep_cells(load(name))]


def test_the_three_scenarios_exist():
    assert {p.name for p in SCENARIO_FILES} >= {"vehicle-sensor.toml", "fairness.toml", "noisy-sensors.toml"}


@pytest.mark.parametrize("path", SCENARIO_FILES, ids=lambda p: p.name)
def test_every_scenario_validates_and_its_sweep_expands(path):
    s = load(path.name)
    assert s.name == path.stem
    expanded = sweep_cells(s)
    assert len(expanded) > 1
    # every cell is one distinct run: no two cells share settings and seed
    keys = {(config_hash(c), c.run.seed) for _, c in expanded}
    assert len(keys) == len(expanded)


def test_vehicle_data_path_comes_from_the_environment_not_the_file():
    for name in VEHICLE_SCENARIOS:
        raw = tomllib.loads((CONFIGS / name).read_text())
        assert "path" not in raw["data"]
        assert load(name).data.vehicle.path == str(Path(VEHICLE_DATA).resolve())


def test_vehicle_sensor_claims():
    s = load("vehicle-sensor.toml")
    assert s.data.name == "vehicle" and s.model.name == "linear_svm" and s.model.linear_svm.l2 > 0
    assert s.run.clients_per_round == 10 and s.run.evaluate_every == 1
    assert s.data.seed is None  # each run.seed re-splits
    assert s.data.val_fraction >= 0.2 and s.data.test_fraction >= 0.3
    # selection: the device mean bounds the choice, on validation averaged over the last 10 rounds
    assert (s.selection.objective, s.selection.average, s.selection.tail) == ("worst_10", "mean", 10)
    # t and q chosen on seeds 0-9, every reported number from seeds 10-19
    assert (s.selection.seeds, s.selection.report_seeds) == (list(range(10)), list(range(10, 20)))
    cs = cells("vehicle-sensor.toml")
    assert len(cs) == 9 * 20
    assert {c.strategy.name for c in cs} == {"fedavg", "fedavg_uniform", "qffl", "term"}
    assert sorted({c.run.seed for c in cs}) == list(range(20))
    assert all(c.strategy.term.t > 0 for c in cs if c.strategy.name == "term")
    assert all(c.client.tau == 0 for c in cs)
    # both modes for both fair strategies: mean losses and the reference code's summed losses
    modes = {(c.strategy.name, c.strategy.settings.loss_reduction) for c in cs if c.strategy.name in ("term", "qffl")}
    assert modes == {("term", "mean"), ("term", "sum"), ("qffl", "mean"), ("qffl", "sum")}


def test_fairness_claims():
    s = load("fairness.toml")
    assert s.data.name == "synthetic" and s.data.synthetic.num_devices == 30
    assert (s.data.synthetic.alpha, s.data.synthetic.beta) == (1.0, 1.0)
    assert s.model.name == "logreg"
    assert s.client.lr < 0.041  # below the stiffest devices' stability limit
    assert s.run.evaluate_every > 1 and (s.selection.tail, s.selection.average) == (5, "mean")
    assert (s.selection.seeds, s.selection.report_seeds) == (list(range(10)), list(range(10, 20)))
    assert s.selection.reference == "fedavg_uniform"  # the baseline that counts each device once, as the metrics do
    cs = cells("fairness.toml")
    assert sorted({c.run.seed for c in cs}) == list(range(20))
    assert {c.strategy.name for c in cs} == {"fedavg", "fedavg_uniform", "qffl", "term"}
    assert sorted({c.strategy.qffl.q for c in cs if c.strategy.name == "qffl"}) == [1, 5]
    assert sorted({c.strategy.term.t for c in cs if c.strategy.name == "term"}) == [1, 3, 10]
    # one cell per distinct setting: 2 baselines + 2 q + 3 t, each over 20 seeds
    assert len({config_hash(c) for c in cs}) == 7
    assert len(cs) == 7 * 20


def test_the_default_run_has_the_fairness_scenarios_settings():
    default, fairness = load_scenario(None, environ={VEHICLE_DATA_ENV: VEHICLE_DATA}), load("fairness.toml")
    for table in ("client", "data", "model", "selection"):
        assert getattr(default, table).model_dump() == getattr(fairness, table).model_dump(), table
    assert (default.run.rounds, default.run.evaluate_every) == (fairness.run.rounds, fairness.run.evaluate_every)
    assert default.strategy.name == "term" and default.strategy.term.t in {1.0, 3.0, 10.0}
    assert default.run.reference == ["fedavg", "fedavg_uniform"]
    # its sweep is the one pre-declared comparison, on the report seeds alone
    assert sorted({c.run.seed for _, c in sweep_cells(default)}) == default.selection.report_seeds


def test_noisy_sensors_claims():
    s = load("noisy-sensors.toml")
    assert s.data.name == "vehicle" and s.data.noise == "flip_labels"
    assert s.data.num_noisy > 0 or s.data.noisy_devices
    # chosen on the clean devices' validation split (their labels are not corrupted)
    assert (s.selection.devices, s.selection.objective, s.selection.tail) == ("clean", "mean", 10)
    cs = cells("noisy-sensors.toml")
    variants = {(c.strategy.name, c.strategy.term.t if c.strategy.name == "term" else None, c.client.tau) for c in cs}
    assert ("fedavg", None, 0.0) in variants
    assert any(name == "term" and t < 0 and tau == 0 for name, t, tau in variants)  # device-level TERM
    assert any(name == "term" and t < 0 and tau < 0 for name, t, tau in variants)  # hierarchical TERM
    assert all(t < 0 for name, t, _ in variants if name == "term")
    assert ("fedavg_uniform", None, 0.0) in variants
    assert (s.selection.seeds, s.selection.report_seeds) == (list(range(10)), list(range(10, 20)))
    assert sorted({c.run.seed for c in cs}) == list(range(20))


def test_noisy_devices_are_reproducible_from_the_seed():
    from term_fl.data import build_dataset

    s = load("noisy-sensors.toml")

    def noisy(seed):
        ds = build_dataset("vehicle", path=s.data.vehicle.path, seed=seed, noise=s.data.noise, num_noisy=s.data.num_noisy,
                           train_fraction=s.data.train_fraction, val_fraction=s.data.val_fraction,
                           test_fraction=s.data.test_fraction)
        return tuple(ds.metadata["noise"]["devices"])

    assert noisy(0) == noisy(0)
    assert len(noisy(0)) == s.data.num_noisy


@pytest.mark.slow
def test_vehicle_sensor_sweep_smoke(tmp_path):
    from term_fl.cli.sweep import run_sweep

    s = load("vehicle-sensor.toml", {"run.rounds": 2})
    s = with_overrides(s, {"sweep": {**s.sweep, "run.seed": [0, 10]}})  # a selection and a report seed
    assert run_sweep(s, db=tmp_path / "results.db", out_dir=tmp_path / "sweep", engine="inprocess") == 0
    csv_path, json_path = tmp_path / "sweep" / "comparison.csv", tmp_path / "sweep" / "comparison.json"
    assert csv_path.is_file() and json_path.is_file()
    result = json.loads(json_path.read_text())
    assert {row["strategy"] for row in result["cells"]} == {"fedavg", "fedavg_uniform", "qffl", "term"}
    header = csv_path.read_text().splitlines()[0]
    assert "test.worst_10" in header
