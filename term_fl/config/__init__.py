"""Scenario schema: the single source of every setting of a run.

A scenario file (TOML) describes one run: one strategy, one seed. It may
carry a ``[sweep]`` table of dotted keys to lists, which ``term-fl sweep``
expands into a grid of runs. Values come, in order of precedence, from
``--set key=value`` overrides, the scenario file, environment variables
(``TERM_FL_VEHICLE_DATA`` for the vehicle data's path) and the defaults.

Validation happens once, at the edge: unknown keys and out-of-range values
raise :class:`ConfigError` with messages that name the dotted key, the value
and what is allowed.

Modules: :mod:`.tables` (``[run]``, ``[client]``, ``[resources]``,
``[selection]``), :mod:`.choices` (``[strategy]``, ``[data]``, ``[model]``:
a ``name`` chosen among the registered alternatives, the shared settings and
one sub-table per alternative, built from the strategy, dataset and model
registries), :mod:`.scenario` (:class:`Scenario`), :mod:`.loading` (files,
``--set``, the environment, messages), :mod:`.sweeps` (overrides, the sweep
grid, references, the baseline), :mod:`.hashing` (:func:`config_hash`).
"""

from term_fl.common.digest import file_digest
from term_fl.common.errors import ConfigError

from .choices import ChoiceTable, DataConfig, ModelConfig, StrategyConfig
from .hashing import FLAT_TABLE_DEFAULTS, config_hash, hashed_settings
from .loading import (
    SWEEP_CELLS_KEY,
    VEHICLE_DATA_ENV,
    check_chosen_settings,
    check_data_available,
    load_scenario,
    packaged_scenario_text,
    parse_overrides,
    parse_value,
    read_scenario_file,
    set_dotted,
    validate_scenario,
)
from .scenario import (
    COMPILED_MODELS,
    DEFAULT_SCENARIO,
    NAME_PATTERN,
    NAME_RULE,
    Scenario,
    check_fits_dataset,
    clients_per_round_message,
    executor_of,
    loss_transform_of,
)
from .sweeps import BASELINE, baseline_hash, reference_scenario, reference_scenarios, sweep_cells, with_overrides
from .tables import ClientConfig, ResourcesConfig, RunConfig, SelectionConfig, Table

__all__ = [
    "BASELINE",
    "COMPILED_MODELS",
    "DEFAULT_SCENARIO",
    "FLAT_TABLE_DEFAULTS",
    "NAME_PATTERN",
    "NAME_RULE",
    "SWEEP_CELLS_KEY",
    "VEHICLE_DATA_ENV",
    "ChoiceTable",
    "ClientConfig",
    "ConfigError",
    "DataConfig",
    "ModelConfig",
    "ResourcesConfig",
    "RunConfig",
    "Scenario",
    "SelectionConfig",
    "StrategyConfig",
    "Table",
    "baseline_hash",
    "check_chosen_settings",
    "check_data_available",
    "check_fits_dataset",
    "clients_per_round_message",
    "config_hash",
    "executor_of",
    "file_digest",
    "hashed_settings",
    "load_scenario",
    "loss_transform_of",
    "packaged_scenario_text",
    "parse_overrides",
    "parse_value",
    "read_scenario_file",
    "reference_scenario",
    "reference_scenarios",
    "set_dotted",
    "sweep_cells",
    "validate_scenario",
    "with_overrides",
]
