"""The strategy registry is the one list of strategies: config, server loop, comparison and dashboard follow it."""

from __future__ import annotations

import inspect
import json

import numpy as np
import pytest

from conftest import small_scenario
from term_fl.comparison.summaries import group_cells
from term_fl.config import ConfigError, Scenario, StrategyConfig
from term_fl.dashboard import compare_view
from term_fl.federation.loop import build_scenario_strategy
from term_fl.results import ResultsStore
from term_fl.runs.run import run_one
from term_fl.strategies import STRATEGIES, FedAvg, cell_label
from term_fl.strategies.registry import COMMON_SETTINGS


# Where a class is a drop-in for Flower's, Flower's default wins (QFFL's q, as QFedAvg's).
FLOWER_DEFAULTS = {("qffl", "q"): 0.1}


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_a_strategy_class_has_the_defaults_of_its_settings(name):
    spec = STRATEGIES[name]
    signature = inspect.signature(spec.strategy.__init__).parameters
    for field, info in spec.settings.model_fields.items():
        expected = FLOWER_DEFAULTS.get((name, field), info.default)
        assert signature[spec.arguments.get(field, field)].default == expected, (name, field)
    template = inspect.signature(FedAvg.__init__).parameters  # the settings every strategy takes
    for field, info in COMMON_SETTINGS.model_fields.items():
        assert template[field].default == info.default and StrategyConfig.model_fields[field].default == info.default


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_the_scenario_strategy_table_holds_each_strategys_settings_in_its_sub_table(name):
    subtable = StrategyConfig.alternatives[name]
    assert StrategyConfig.model_fields[name].annotation is subtable
    assert issubclass(subtable, STRATEGIES[name].settings)  # the strategy's own model: its checks too
    for field, info in STRATEGIES[name].settings.model_fields.items():
        assert subtable.model_fields[field].default == info.default
        assert subtable.model_fields[field].metadata == info.metadata  # the same range


def test_the_scenario_and_the_class_refuse_a_value_with_the_same_message():
    with pytest.raises(ConfigError, match=r"strategy\.afl\.lambda_lr: Input should be greater than 0 \(got -1\)"):
        small_scenario("strategy.name=afl", "strategy.lambda_lr=-1")
    with pytest.raises(ValueError, match=r"AFL: lambda_lr: Input should be greater than 0 \(got -1\)"):
        STRATEGIES["afl"].strategy(lambda_lr=-1)


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_the_server_builds_every_registered_strategy_from_a_scenario(name):
    scenario = small_scenario(f"strategy.name={name}", "client.lr=0.2")
    strategy = build_scenario_strategy(scenario, 6)
    assert type(strategy) is STRATEGIES[name].strategy
    params = scenario.strategy_params()
    arguments = STRATEGIES[name].arguments
    for key in STRATEGIES[name].settings.model_fields:
        assert getattr(strategy, arguments.get(key, key)) == params[key] == getattr(scenario.strategy.settings, key)
    assert strategy.clients_per_round == 3 and strategy.seed == scenario.run.seed


def test_cell_labels_name_the_tuned_parameters():
    assert cell_label({"name": "term", "t": 20.0, "lam": 1.0, "tau": 0.0}) == "term t=20"
    assert cell_label({"name": "qffl", "q": 5.0, "client_lr": 0.03, "tau": -1.0}) == "qffl q=5 tau=-1"
    assert cell_label({"name": "afl", "lambda_lr": 0.05, "tau": 0.0}) == "afl lambda_lr=0.05"
    assert cell_label({"name": "fedavg", "tau": 0.0}) == "fedavg"
    assert cell_label({"name": "qffl", "q": 2.0, "loss_reduction": "sum", "tau": 0.0}) == "qffl q=2 sum"
    assert cell_label({"name": "term", "t": 0.1, "loss_reduction": "sum", "tau": 0.0}) == "term t=0.1 sum"


def test_afl_runs_end_to_end_and_shows_up_in_the_store_the_summary_the_comparison_and_the_dashboard(tmp_path):
    scenario = small_scenario("run.engine=inprocess", "strategy.name=afl", "strategy.lambda_lr=0.5")
    with ResultsStore(tmp_path / "results.db") as store:
        recorder = run_one(scenario, store, out_dir=tmp_path / "run")
        train = store.load_train(recorder.run_id)
        for r in (1, 2, 3):
            assert train["tilted_weight"][train["round"] == r].sum() == pytest.approx(1.0, abs=1e-12)
        compared = compare_view.compare(store, run_ids=[recorder.run_id])
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["strategy"] == {"name": "afl", "lambda_lr": 0.5, "tau": 0.0}
    lam = np.array(summary["mixture_weights"])
    assert lam.shape == (6,) and np.all(lam >= 0) and lam.sum() == pytest.approx(1.0, abs=1e-12)
    assert not np.allclose(lam, 1 / 6)
    assert group_cells([summary])[0]["cell"] == "afl lambda_lr=0.5"
    assert compared["cells"][0]["label"] == "afl lambda_lr=0.5"
    assert compared["runs"][0]["params"] == {"lambda_lr": 0.5, "tau": 0.0}
    assert Scenario.model_validate_json((tmp_path / "run" / "config.json").read_text()).strategy.name == "afl"
