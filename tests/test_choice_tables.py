"""[strategy], [data] and [model]: a chosen name, shared settings and one sub-table per registered alternative.

The rules: a file's flat key is a default of every alternative that has it
(ignored, and not hashed, where the chosen one lacks it); a sub-table key
names its alternative wherever it is given; a flat key given by --set or a
sweep's cells must be a setting of the chosen alternative; a sweep grid key
applies to the alternatives that have it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from term_fl.config import (
    VEHICLE_DATA_ENV,
    ConfigError,
    DataConfig,
    ModelConfig,
    StrategyConfig,
    config_hash,
    load_scenario,
    reference_scenario,
    reference_scenarios,
    sweep_cells,
    with_overrides,
)
from term_fl.data import DATASETS
from term_fl.learning.registry import MODELS
from term_fl.strategies import STRATEGIES

REPO = Path(__file__).resolve().parents[1]
HASHES = json.loads((REPO / "tests" / "data" / "flat-tables" / "hashes.json").read_text())


def write(tmp_path: Path, text: str, name: str = "s.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_each_registry_gives_its_table_one_sub_table_per_entry():
    for table, registry in ((StrategyConfig, STRATEGIES), (DataConfig, DATASETS), (ModelConfig, MODELS)):
        assert list(table.alternatives) == list(registry)
        for name, spec in registry.items():
            assert issubclass(table.alternatives[name], spec.settings)


def test_sub_tables_hold_each_strategys_settings_and_a_sweep_over_the_name_takes_each(tmp_path):
    path = write(tmp_path, '[strategy]\nname = "term"\n[strategy.term]\nt = 7\n[strategy.qffl]\nq = 4\n'
                           '[sweep]\n"strategy.name" = ["fedavg", "qffl", "term"]\n')
    scenario = load_scenario(path, environ={})
    assert (scenario.strategy.settings.t, scenario.strategy.qffl.q) == (7.0, 4.0)
    params = {cell.strategy.name: cell.strategy_params() for _, cell in sweep_cells(scenario)}
    assert params["term"]["t"] == 7.0 and params["qffl"]["q"] == 4.0 and "t" not in params["qffl"]


def test_a_file_in_sub_table_form_expands_to_the_cells_and_hashes_of_its_flat_form(tmp_path):
    """configs/fairness.toml as released written with sub-tables and sub-table grid keys: the same cells, hashes."""
    text = (REPO / "tests" / "data" / "flat-tables" / "released" / "fairness.toml").read_text()
    for flat, tables in (
        ('[strategy]\nname = "term"\nt = 3.0\n', '[strategy]\nname = "term"\n[strategy.term]\nt = 3.0\n'),
        ('[data]\nname = "synthetic"\nnum_devices = 30\nalpha = 1.0\nbeta = 1.0\n'
         'train_fraction = 0.6\nval_fraction = 0.2\ntest_fraction = 0.2\n',
         '[data]\nname = "synthetic"\ntrain_fraction = 0.6\nval_fraction = 0.2\ntest_fraction = 0.2\n'
         '[data.synthetic]\nnum_devices = 30\nalpha = 1.0\nbeta = 1.0\n'),
        ('"strategy.q" = [1.0, 5.0]\n"strategy.t" = [1.0, 3.0, 10.0]',
         '"strategy.qffl.q" = [1.0, 5.0]\n"strategy.term.t" = [1.0, 3.0, 10.0]'),
    ):
        assert flat in text
        text = text.replace(flat, tables)
    cells = sweep_cells(load_scenario(write(tmp_path, text), environ={}))
    expected = [c for c in HASHES["cells"] if c["file"] == "configs/fairness.toml"]
    assert [config_hash(cell) for _, cell in cells] == [c["hash"] for c in expected]
    names = {(c.strategy.name, o.get("strategy.term.t"), o.get("strategy.qffl.q")) for o, c in cells}
    assert names == {("fedavg", None, None), ("qffl", None, 1.0), ("qffl", None, 5.0),
                     ("term", 1.0, None), ("term", 3.0, None), ("term", 10.0, None)}


def test_within_a_file_the_sub_table_beats_the_flat_key_and_set_beats_both(tmp_path):
    path = write(tmp_path, '[strategy]\nt = 2\nq = 3\n[strategy.term]\nt = 5\n')
    scenario = load_scenario(path, environ={})
    assert (scenario.strategy.term.t, scenario.strategy.qffl.q) == (5.0, 3.0)
    assert load_scenario(path, ["strategy.t=9"], environ={}).strategy.term.t == 9.0
    assert load_scenario(path, ["strategy.term.t=8"], environ={}).strategy.term.t == 8.0
    # a flat --set key sets every strategy that has it: loss_reduction is TERM's and q-FFL's
    both = load_scenario(path, ["strategy.loss_reduction=sum"], environ={}).strategy
    assert both.term.loss_reduction == both.qffl.loss_reduction == "sum"


def test_a_sub_table_of_another_strategy_set_by_set_is_a_default_for_that_strategy():
    scenario = load_scenario(None, ["strategy.name=qffl", "strategy.term.t=2", "run.reference=term"], environ={})
    assert scenario.strategy.settings.q == 1.0 and config_hash(scenario) == config_hash(
        load_scenario(None, ["strategy.name=qffl", "run.reference=term"], environ={}))
    assert reference_scenario(scenario).strategy_params()["t"] == 2.0  # the reference that runs TERM takes it


def test_a_flat_set_key_the_chosen_strategy_lacks_is_an_error_even_when_a_file_sets_it_flat(tmp_path):
    path = write(tmp_path, '[strategy]\nname = "qffl"\nt = 2\n')
    assert load_scenario(path, environ={}).strategy.term.t == 2.0  # the file's flat t: TERM's default
    with pytest.raises(ConfigError, match=r"strategy\.t: the strategy qffl has no setting 't'"):
        load_scenario(path, ["strategy.t=3"], environ={})
    with pytest.raises(ConfigError, match=r"strategy\.t: the strategy fedavg has no setting 't'"):
        with_overrides(load_scenario(path, environ={}), {"strategy.name": "fedavg", "strategy.t": 1})


def test_a_grid_key_applies_to_the_strategies_that_have_it_and_sub_table_keys_work_in_cells(tmp_path):
    path = write(tmp_path, '[sweep]\ncells = [{ "strategy.name" = "fedavg" }, '
                           '{ "strategy.name" = "term", "strategy.term.lam" = 0.5 }]\n'
                           '"strategy.term.t" = [1, 3]\n"strategy.q" = [1, 5]\n')
    cells = sweep_cells(load_scenario(path, environ={}))
    assert [(o, c.strategy.name) for o, c in cells] == [
        ({"strategy.name": "fedavg"}, "fedavg"),
        ({"strategy.name": "term", "strategy.term.lam": 0.5, "strategy.term.t": 1}, "term"),
        ({"strategy.name": "term", "strategy.term.lam": 0.5, "strategy.term.t": 3}, "term"),
    ]
    assert [c.strategy.settings.lam for _, c in cells[1:]] == [0.5, 0.5]


def test_data_and_model_sub_tables_and_their_flat_form_are_the_same_scenario(tmp_path):
    flat = write(tmp_path, '[data]\nnum_devices = 12\nalpha = 0.5\n[model]\nname = "mlp"\nhidden = 8\nl2 = 0.1\n'
                           '[run]\nclients_per_round = 4\n', "flat.toml")
    tables = write(tmp_path, '[data.synthetic]\nnum_devices = 12\nalpha = 0.5\n[model]\nname = "mlp"\n'
                             '[model.mlp]\nhidden = 8\n[run]\nclients_per_round = 4\n', "tables.toml")
    a, b = load_scenario(flat, environ={}), load_scenario(tables, environ={})
    assert (a.data.settings.num_devices, a.model.settings.hidden) == (12, 8)
    assert config_hash(a) == config_hash(b)  # model.l2 is the SVM's: the MLP's hash leaves it out
    with pytest.raises(ConfigError, match=r"data\.synthetic\.path: unknown key \(allowed in \[data\.synthetic\]: "
                                          r"num_devices, alpha, beta, max_samples, minority, concept_noise, samples_per_device\)"):
        load_scenario(write(tmp_path, '[data.synthetic]\npath = "x.json"\n', "bad.toml"), environ={})


def test_the_vehicle_path_of_a_sub_table_is_relative_to_the_file_and_the_environment_fills_it(tmp_path):
    (tmp_path / "v.json").write_text("{}")
    path = write(tmp_path, '[data]\nname = "vehicle"\n[data.vehicle]\npath = "v.json"\nsha256 = "any"\n')
    assert load_scenario(path, environ={}).data.vehicle.path == str((tmp_path / "v.json").resolve())
    bare = write(tmp_path, 'name = "bare"\n', "bare.toml")  # no [data] table at all
    env = {VEHICLE_DATA_ENV: str(tmp_path / "v.json")}
    assert load_scenario(bare, environ=env).data.vehicle.path == str((tmp_path / "v.json").resolve())


@pytest.mark.parametrize(("value", "expected"), [("fedavg", ["fedavg"]), ("none", []), ([], []),
                                                  (["qffl", "fedavg"], ["qffl", "fedavg"])])
def test_run_reference_is_a_list_and_a_plain_name_is_a_one_element_list(value, expected):
    scenario = with_overrides(load_scenario(None, environ={}), {"run.reference": value})
    assert scenario.run.reference == expected
    assert config_hash(scenario) == config_hash(load_scenario(None, environ={}))  # never hashed
    assert [r.strategy.name for r in reference_scenarios(scenario)] == expected


def test_the_references_run_in_order_on_the_scenarios_settings_and_the_scenario_itself_is_left_out():
    scenario = load_scenario(None, ['run.reference=["qffl", "term", "fedavg"]', "client.tau=-1",
                                    "strategy.qffl.q=3"], environ={})
    references = reference_scenarios(scenario)
    assert [r.strategy.name for r in references] == ["qffl", "term", "fedavg"]
    assert [r.run.name for r in references] == [f"default (reference: {n})" for n in ("qffl", "term", "fedavg")]
    assert all(r.client.tau == 0.0 and r.run.reference == [] and r.run.seed == scenario.run.seed for r in references)
    assert references[0].strategy.settings.q == 3.0
    itself = load_scenario(None, ['run.reference=["term", "fedavg"]'], environ={})
    assert [r.strategy.name for r in reference_scenarios(itself)] == ["fedavg"]
