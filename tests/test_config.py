"""Scenario schema: defaults, precedence, overrides, sweeps and the errors users see."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from term_fl.config import (
    VEHICLE_DATA_ENV,
    ConfigError,
    Scenario,
    config_hash,
    load_scenario,
    parse_overrides,
    sweep_cells,
)
from term_fl.data import VEHICLE_SHA256

REPO = Path(__file__).resolve().parents[1]


def write(tmp_path, text: str, name: str = "s.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_embedded_default_is_term_on_synthetic_with_a_sweep():
    s = load_scenario(None, environ={})
    assert s.strategy.name == "term" and s.data.name == "synthetic"
    assert s.data.synthetic.alpha == 1.0 and s.data.synthetic.beta == 1.0 and s.data.synthetic.num_devices == 30
    assert set(s.sweep["strategy.name"]) == {"fedavg", "fedavg_uniform", "term"}
    # `term-fl run` shows TERM next to both baselines, in about a minute: in-process, batched clients
    assert (s.run.reference, s.run.engine, s.run.executor) == (["fedavg", "fedavg_uniform"], "inprocess", "cohort")
    assert s.strategy.term.t > 0 and s.run.evaluate_every > 1


def test_set_overrides_file_which_overrides_default(tmp_path):
    path = write(tmp_path, "[strategy]\nt = 2.5\n[run]\nrounds = 7\n")
    s = load_scenario(path, ["strategy.t=5"], environ={})
    assert s.strategy.term.t == 5.0  # --set beats the file
    assert s.run.rounds == 7  # the file beats the default
    assert s.client.lr == Scenario().client.lr  # default


def test_vehicle_path_precedence_set_then_file_then_env(tmp_path):
    a, b, c = (tmp_path / n for n in ("a.json", "b.json", "c.json"))
    for p in (a, b, c):
        p.write_text("{}")
    path = write(tmp_path, f'[data]\nname = "vehicle"\npath = "{b.name}"\n')
    env = {VEHICLE_DATA_ENV: str(c)}
    accept = "data.sha256=any"  # these files are stand-ins, not the published data
    assert load_scenario(path, [f"data.path={a}", accept], environ=env).data.vehicle.path == str(a.resolve())
    assert load_scenario(path, [accept], environ=env).data.vehicle.path == str(b.resolve())  # relative to the file
    plain = write(tmp_path, '[data]\nname = "vehicle"\n', "plain.toml")
    assert load_scenario(plain, [accept], environ=env).data.vehicle.path == str(c.resolve())


def test_vehicle_file_with_another_sha256_is_refused_unless_accepted(tmp_path):
    other = tmp_path / "other.json"
    other.write_text('{"users": []}')
    actual = hashlib.sha256(other.read_bytes()).hexdigest()
    scenario = write(tmp_path, f'[data]\nname = "vehicle"\npath = "{other.name}"\n')
    with pytest.raises(ConfigError) as info:
        load_scenario(scenario, [], environ={})
    message = str(info.value)
    assert message.startswith("data.vehicle.sha256: ") and str(other) in message
    assert f"expected {VEHICLE_SHA256}" in message and f"actual {actual}" in message
    assert load_scenario(scenario, [f"data.sha256={actual}"], environ={}).data.vehicle.sha256 == actual
    assert load_scenario(scenario, [f"data.sha256={actual.upper()}"], environ={}).data.vehicle.sha256 == actual
    assert load_scenario(scenario, ["data.sha256=any"], environ={}).data.vehicle.sha256 == "any"
    with pytest.raises(ConfigError, match=r"data\.vehicle\.sha256"):
        load_scenario(scenario, ["data.sha256=abc"], environ={})


def test_data_sha256_leaves_config_hash_as_before():
    # hashes computed by the previous version (before data.sha256 existed) for its default and fairness
    # scenarios (kept in tests/data/scenarios-0.1): the expectation is not hashed
    old = REPO / "tests" / "data" / "scenarios-0.1"
    assert config_hash(load_scenario(old / "default.toml", environ={})) == "db58e5a881cbcf83"
    assert config_hash(load_scenario(old / "fairness.toml", environ={})) == "15a15f27804de62a"
    other = load_scenario(old / "default.toml", ["data.vehicle.sha256=" + "0" * 64], environ={})
    assert config_hash(other) == "db58e5a881cbcf83"


def test_missing_vehicle_data_says_where_to_get_it(tmp_path):
    plain = write(tmp_path, '[data]\nname = "vehicle"\n')
    with pytest.raises(ConfigError, match=r"data\.vehicle\.path: not set.*TERM_FL_VEHICLE_DATA"):
        load_scenario(plain, [], environ={})
    with pytest.raises(ConfigError, match=r"does not exist"):
        load_scenario(plain, [f"data.path={tmp_path / 'nope.json'}"], environ={})


def test_unknown_key_is_named_with_the_allowed_keys(tmp_path):
    path = write(tmp_path, "[strategy]\ntt = 1\n")
    with pytest.raises(ConfigError, match=r"strategy\.tt: unknown key \(allowed in \[strategy\]: (?=[^)]*\bt\b)(?=[^)]*\bq\b)"):
        load_scenario(path, environ={})
    with pytest.raises(ConfigError, match=r"client\.lrr: unknown key"):
        load_scenario(None, ["client.lrr=0.1"], environ={})
    with pytest.raises(ConfigError, match=r"nosuch: unknown key"):
        load_scenario(None, ["nosuch.x=1"], environ={})


@pytest.mark.parametrize(
    ("override", "pattern"),
    [
        ("strategy.t=5000", r"strategy\.term\.t: .*less than or equal to 1000.*5000"),
        ("run.rounds=0", r"run\.rounds: .*greater than or equal to 1"),
        ("strategy.lam=0", r"strategy\.term\.lam: .*greater than 0"),
        ("strategy.name=fedprox", r"strategy\.name: .*'fedavg', 'fedavg_uniform', .* or 'krum'.*fedprox"),
        ("client.device=gpu", r"client\.device: .*pattern"),
        ("run.engine=ray", r"run\.engine: .*'flower' or 'inprocess'"),
        ("data.train_fraction=0.9", r"sum to 1"),
        ("data.noisy_devices=[-1]", r"data\.noisy_devices: .*>= 0"),
    ],
)
def test_out_of_range_values_name_key_and_allowed_range(override, pattern):
    with pytest.raises(ConfigError, match=pattern):
        load_scenario(None, [override], environ={})


def test_bad_override_syntax_and_bad_toml(tmp_path):
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        parse_overrides(["strategy.t"])
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_scenario(write(tmp_path, "[run\nrounds=1"), environ={})
    with pytest.raises(ConfigError, match="does not exist"):
        load_scenario(tmp_path / "missing.toml", environ={})
    with pytest.raises(ConfigError, match="is a value, not a table"):
        load_scenario(None, ["run.rounds.x=1"], environ={})


def test_override_values_are_typed():
    assert parse_overrides(["a=1", "b=1.5", "c=true", "d=fedavg", 'e="x y"', "f=[1, 2]"]) == {
        "a": 1, "b": 1.5, "c": True, "d": "fedavg", "e": "x y", "f": [1, 2],
    }


def test_sweep_grid_expands_in_order_and_validates_cells(tmp_path):
    path = write(tmp_path, '[sweep]\n"strategy.name" = ["fedavg", "term"]\n"run.seed" = [1, 2]\n')
    cells = sweep_cells(load_scenario(path, environ={}))
    assert [o for o, _ in cells] == [
        {"strategy.name": "fedavg", "run.seed": 1}, {"strategy.name": "fedavg", "run.seed": 2},
        {"strategy.name": "term", "run.seed": 1}, {"strategy.name": "term", "run.seed": 2},
    ]
    assert [c.run.seed for _, c in cells] == [1, 2, 1, 2]
    bad = write(tmp_path, '[sweep]\n"strategy.tt" = [1]\n', "bad.toml")
    with pytest.raises(ConfigError, match=r"strategy\.tt: unknown key"):
        load_scenario(bad, environ={})
    empty = write(tmp_path, '[sweep]\n"strategy.t" = []\n', "empty.toml")
    with pytest.raises(ConfigError, match="non-empty list"):
        load_scenario(empty, environ={})
    out_of_range = write(tmp_path, '[sweep]\n"strategy.t" = [1, 5000]\n', "oor.toml")
    with pytest.raises(ConfigError, match=r"strategy\.term\.t"):
        sweep_cells(load_scenario(out_of_range, environ={}))


def test_config_hash_groups_seeds_but_not_settings():
    a = load_scenario(None, ["run.seed=1"], environ={})
    b = load_scenario(None, ["run.seed=2"], environ={})
    c = load_scenario(None, ["run.seed=1", "strategy.t=2"], environ={})
    assert config_hash(a) == config_hash(b) != config_hash(c)


def test_scenario_round_trips_through_json():
    s = load_scenario(None, ["strategy.t=-3", "client.tau=-1"], environ={})
    assert Scenario.from_json(s.to_json()) == s


def test_data_seed_defaults_to_run_seed():
    assert load_scenario(None, ["run.seed=7"], environ={}).data_seed == 7
    assert load_scenario(None, ["run.seed=7", "data.seed=3"], environ={}).data_seed == 3


def test_sweep_runs_cells_that_resolve_to_the_same_settings_once(tmp_path):
    """FedAvg ignores t and q: a product grid must not run it once per t and q value."""
    path = write(
        tmp_path,
        '[sweep]\n"strategy.name" = ["fedavg", "qffl", "term"]\n"strategy.q" = [1, 5]\n'
        '"strategy.t" = [0.1, 1, 10]\n"run.seed" = [0, 1]\n',
    )
    cells = sweep_cells(load_scenario(path, environ={}))
    names = [c.strategy.name for _, c in cells]
    assert names.count("fedavg") == 2  # 1 cell x 2 seeds
    assert names.count("qffl") == 2 * 2  # 2 q values x 2 seeds
    assert names.count("term") == 3 * 2  # 3 t values x 2 seeds
    fedavg_overrides = [o for o, c in cells if c.strategy.name == "fedavg"]
    assert all("strategy.t" not in o and "strategy.q" not in o for o in fedavg_overrides)


def test_sweep_cells_variants_are_crossed_with_the_grid(tmp_path):
    path = write(
        tmp_path,
        '[sweep]\ncells = [{ "strategy.name" = "fedavg" }, { "strategy.name" = "term", "strategy.t" = -1 },\n'
        '  { "strategy.name" = "term", "strategy.t" = -1, "client.tau" = -2 }]\n"run.seed" = [0, 1]\n',
    )
    cells = sweep_cells(load_scenario(path, environ={}))
    assert [(c.strategy.name, c.strategy.term.t if c.strategy.name == "term" else None, c.client.tau, c.run.seed)
            for _, c in cells] == [
        ("fedavg", None, 0.0, 0), ("fedavg", None, 0.0, 1),
        ("term", -1.0, 0.0, 0), ("term", -1.0, 0.0, 1),
        ("term", -1.0, -2.0, 0), ("term", -1.0, -2.0, 1),
    ]
    bad = write(tmp_path, '[sweep]\ncells = [{ "strategy.tt" = 1 }]\n', "bad.toml")
    with pytest.raises(ConfigError, match=r"strategy\.tt: unknown key"):
        load_scenario(bad, environ={})
    not_tables = write(tmp_path, '[sweep]\ncells = [1, 2]\n', "nt.toml")
    with pytest.raises(ConfigError, match="sweep.cells must be a non-empty list of inline tables"):
        load_scenario(not_tables, environ={})


def test_config_hash_ignores_parameters_the_strategy_does_not_use(tmp_path):
    a = load_scenario(None, ["strategy.name=fedavg", "strategy.term.t=1"], environ={})
    b = load_scenario(None, ["strategy.name=fedavg", "strategy.term.t=50", "strategy.qffl.q=3"], environ={})
    assert config_hash(a) == config_hash(b)
    # the flat form of a file: keys the chosen strategy lacks are ignored, in the run and in the hash
    plain = write(tmp_path, '[strategy]\nname = "fedavg"\n', "plain.toml")
    flat = write(tmp_path, '[strategy]\nname = "fedavg"\nt = 50\nq = 3\nlambda_lr = 0.5\n', "flat.toml")
    assert config_hash(load_scenario(flat, environ={})) == config_hash(load_scenario(plain, environ={}))


def test_sweeping_a_whole_table_is_refused(tmp_path):
    """A whole-table value would silently drop the file's other settings of that table."""
    path = write(tmp_path, '[strategy]\nlam = 0.5\n[sweep]\nstrategy = [{ name = "term", t = 2 }]\n')
    with pytest.raises(ConfigError, match="names a whole table"):
        load_scenario(path, environ={})


def test_the_engine_is_explicit_only_when_given(tmp_path):
    path = write(tmp_path, "[run]\nrounds = 5\n")
    assert "engine" not in load_scenario(path, environ={}).run.model_fields_set
    assert "engine" in load_scenario(path, ["run.engine=flower"], environ={}).run.model_fields_set
    assert "engine" in load_scenario(None, environ={}).run.model_fields_set  # the default names its engine


def test_config_hash_of_a_synthetic_scenario_ignores_the_vehicle_data_environment(tmp_path):
    """A sweep resumed in a shell without TERM_FL_VEHICLE_DATA must find its finished cells."""
    with_env = load_scenario(None, environ={VEHICLE_DATA_ENV: str(tmp_path / "vehicle.json")})
    without = load_scenario(None, environ={})
    assert with_env.data.vehicle.path is not None and without.data.vehicle.path is None
    assert config_hash(with_env) == config_hash(without)


def test_config_hash_of_vehicle_data_follows_the_files_content_not_its_path(tmp_path):
    first, copy, other = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    first.write_text('{"users": []}')
    copy.write_text('{"users": []}')
    other.write_text('{"users": ["x"]}')

    def hashed(path):
        return config_hash(load_scenario(None, ["data.name=vehicle", f"data.path={path}", "data.sha256=any",
                                                "run.clients_per_round=1"], environ={}))

    assert hashed(first) == hashed(copy) != hashed(other)


@pytest.mark.parametrize(
    "override",
    ["run.engine=inprocess", "run.node_timeout=5", "run.round_timeout=9", "run.max_failed_rounds=7",
     "resources.num_cpus=2", "run.name=other", "description='x'", "name=renamed"],
)
def test_config_hash_ignores_where_and_how_long_a_run_waits(override):
    assert config_hash(load_scenario(None, [override], environ={})) == config_hash(load_scenario(None, environ={}))


@pytest.mark.parametrize("override", ["client.lr=0.5", "data.num_devices=50", "run.rounds=3", "model.name=mlp",
                                      "run.evaluate_fraction=0.5", "client.device=cpu"])
def test_config_hash_changes_with_what_a_run_computes(override):
    assert config_hash(load_scenario(None, [override], environ={})) != config_hash(load_scenario(None, environ={}))


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("run.rounds=true", "run.rounds: a boolean is not allowed"),
        ("strategy.t=false", "strategy.term.t: a boolean is not allowed"),
        ("data.noisy_devices=[1, true]", "data.noisy_devices: a boolean is not allowed"),
        ("run.clients_per_round=31", "run.clients_per_round = 31 but the dataset has 30 devices; allowed: 1..30"),
        ("name=../up", "name: must be 1 to 64 letters"),
        ("name=a/b", "name: must be 1 to 64 letters"),
        ("name=.hidden", "name: must be 1 to 64 letters"),
    ],
)
def test_values_that_used_to_pass_silently_are_refused(override, message):
    with pytest.raises(ConfigError) as err:
        load_scenario(None, [override], environ={})
    assert message in str(err.value)


def test_booleans_still_set_boolean_keys_and_numbers_still_set_numbers():
    s = load_scenario(None, ["strategy.t=2", "run.rounds=4", "data.noisy_devices=[1, 2]"], environ={})
    assert (s.strategy.term.t, s.run.rounds, s.data.noisy_devices) == (2.0, 4, [1, 2])
