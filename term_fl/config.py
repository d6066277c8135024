"""Scenario schema: the single source of every setting of a run.

A scenario file (TOML) describes one run: one strategy, one seed. It may
carry a ``[sweep]`` table of dotted keys to lists, which ``term-fl sweep``
expands into a grid of runs. Values come, in order of precedence, from
``--set key=value`` overrides, the scenario file, environment variables
(``TERM_FL_VEHICLE_DATA`` for ``data.path``) and the defaults below.

Validation happens once, at the edge: unknown keys and out-of-range values
raise :class:`ConfigError` with messages that name the dotted key, the value
and what is allowed.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import itertools
import json
import math
import os
import re
import tomllib
import typing
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)

from term_fl.common.errors import ConfigError
from term_fl.maths.fairness import STATISTICS
from term_fl.strategies.registry import COMMON_SETTINGS, STRATEGIES
from term_fl.data.vehicle import ANY_SHA256, VEHICLE_SHA256, check_sha256

VEHICLE_DATA_ENV = "TERM_FL_VEHICLE_DATA"
DEFAULT_SCENARIO = "default"
SWEEP_CELLS_KEY = "cells"  # [sweep] key holding a list of variants (inline tables)
# A scenario name becomes part of folder names under ./runs/ and of run ids.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
NAME_RULE = "1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit (it names folders under ./runs/)"


def _admits_bool(annotation: Any) -> bool:
    """Whether a field's type accepts a bool (bool itself, Any, or a union/list holding one)."""
    if annotation is bool or annotation is Any:
        return True
    return any(_admits_bool(arg) for arg in typing.get_args(annotation))


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_as_number(cls, value: Any, info: ValidationInfo) -> Any:
        """``true`` is not the number 1: pydantic would accept it for an int or float field."""
        field = cls.model_fields.get(info.field_name or "")
        if field is None or _admits_bool(field.annotation):
            return value
        items = value if isinstance(value, list) else [value]
        if any(isinstance(v, bool) for v in items):
            raise ValueError("a boolean is not allowed here (give a number, or the value the key describes)")
        return value


class RunConfig(_Table):
    """How the federation runs."""

    rounds: int = Field(50, ge=1, le=100_000, description="number of federated rounds")
    clients_per_round: int = Field(10, ge=1, description="devices sampled for training each round")
    seed: int = Field(0, ge=0, le=2**31 - 1, description="seed of every random choice of the run")
    engine: Literal["flower", "inprocess"] = Field(
        "flower", description="flower: Flower's Simulation Engine (Ray); inprocess: same code, one process"
    )
    executor: Literal["auto", "sequential", "cohort", "compiled"] = Field(
        "auto",
        description="how the in-process engine trains a round's clients: sequential one by one (the reference); "
        "cohort as one batched torch computation; compiled as cohort, the linear models' SGD in one compiled "
        "kernel (numba); both equal to the reference to float32 rounding; auto: compiled for linear_svm and "
        "logreg on the in-process engine, else sequential (executor_of)",
    )
    evaluate_fraction: float = Field(
        1.0, gt=0.0, le=1.0, description="fraction of devices evaluated on val and test each round"
    )
    evaluate_every: int = Field(
        1, ge=1, le=100_000,
        description="evaluate the global model on val and test every N rounds (the last round always)",
    )
    max_failed_rounds: int = Field(
        3, ge=1, description="stop with an error after this many consecutive rounds without a valid reply"
    )
    node_timeout: float = Field(120.0, gt=0, description="seconds to wait for all expected nodes to connect")
    round_timeout: float = Field(600.0, gt=0, description="seconds to wait for the replies of one round")
    name: str = Field("", description="run name shown in tables and the dashboard ('' = scenario name)")
    reference: Literal[("none", *STRATEGIES)] = Field(  # type: ignore[valid-type]
        "none",
        description="a baseline strategy that `term-fl run` also runs, on the same seed and settings (plain: no "
                    "client tilt), and shows beside the run with the differences; 'none' runs the scenario alone",
    )


def _strategy_table() -> type[_Table]:
    """The [strategy] table: ``name`` (a registered strategy), every registered strategy's settings
    and the settings every strategy takes (the defences against hostile clients).

    One flat table, so that a sweep over ``strategy.name`` runs from one file;
    each strategy reads its own fields (term_fl.strategies.registry). The
    fields, defaults, ranges and checks are the strategies' settings models:
    the strategy classes validate with the same models.
    """
    fields: dict[str, Any] = {}
    for settings in (COMMON_SETTINGS, *(spec.settings for spec in STRATEGIES.values())):
        for key, info in settings.model_fields.items():
            if key in fields and repr(fields[key][1]) != repr(info):
                raise TypeError(f"strategies define the [strategy] field {key!r} in two different ways")
            fields[key] = (info.annotation, copy.copy(info))
    names = tuple(STRATEGIES)
    return create_model(
        "StrategyConfig",
        __base__=_Table,
        __doc__="Which server strategy aggregates the client updates, and its parameters.",
        name=(Literal[names], Field("term", description=f"the strategy: {', '.join(names)}")),
        **fields,
    )


StrategyConfig = _strategy_table()


class ClientConfig(_Table):
    """Local training on each device."""

    lr: float = Field(0.1, gt=0.0, le=100.0)
    epochs: int = Field(1, ge=1, le=10_000)
    batch_size: int = Field(32, ge=1, le=1_000_000)
    tau: float = Field(0.0, ge=-1000.0, le=1000.0, description="sample-level tilt on the local loss (hierarchical TERM)")
    weight_decay: float = Field(0.0, ge=0.0, le=10.0)
    device: str = Field("auto", pattern=r"^(auto|cpu|cuda(:\d+)?)$", description="auto | cpu | cuda | cuda:i")


class DataConfig(_Table):
    """The federated dataset and its per-device splits."""

    name: Literal["synthetic", "vehicle"] = "synthetic"
    path: str | None = Field(None, description=f"vehicle JSON file (else ${VEHICLE_DATA_ENV})")
    sha256: str = Field(
        VEHICLE_SHA256,
        pattern=rf"^([0-9a-fA-F]{{64}}|{ANY_SHA256})$",
        description="expected sha256 of the vehicle file (default: the published vehicle_fewshot.json); "
        f"another file's own hash accepts that file knowingly, '{ANY_SHA256}' accepts any",
    )
    seed: int | None = Field(None, ge=0, le=2**31 - 1, description="data seed (None = run.seed: re-split per seed)")
    num_devices: int = Field(100, ge=1, le=1_000_000, description="synthetic devices")
    alpha: float = Field(1.0, ge=0.0, le=100.0)
    beta: float = Field(1.0, ge=0.0, le=100.0)
    max_samples: int = Field(1000, ge=3, le=1_000_000, description="cap on synthetic device size")
    train_fraction: float = Field(0.8, gt=0.0, lt=1.0)
    val_fraction: float = Field(0.1, gt=0.0, lt=1.0)
    test_fraction: float = Field(0.1, gt=0.0, lt=1.0)
    noise: Literal["none", "random_labels", "flip_labels", "scale_features"] = "none"
    noisy_devices: list[int] = Field(default_factory=list)
    num_noisy: int = Field(0, ge=0)
    noise_scale: float = Field(10.0, gt=0.0)

    @model_validator(mode="after")
    def _fractions_sum_to_one(self) -> DataConfig:
        total = self.train_fraction + self.val_fraction + self.test_fraction
        if not math.isclose(total, 1.0, abs_tol=1e-9):
            raise ValueError(
                "train_fraction + val_fraction + test_fraction must sum to 1 "
                f"(got {self.train_fraction} + {self.val_fraction} + {self.test_fraction} = {total:g})"
            )
        return self

    @field_validator("sha256")
    @classmethod
    def _lower_case_hash(cls, value: str) -> str:
        return value.lower()

    @field_validator("noisy_devices")
    @classmethod
    def _non_negative_devices(cls, value: list[int]) -> list[int]:
        bad = [d for d in value if d < 0]
        if bad:
            raise ValueError(f"device indices must be >= 0 (got {bad})")
        return sorted(set(value))


class ModelConfig(_Table):
    """The model every client trains."""

    name: Literal["linear_svm", "logreg", "mlp"] = "logreg"
    hidden: int = Field(64, ge=1, le=100_000)
    l2: float = Field(1e-3, ge=0.0, le=100.0, description="L2 penalty of the linear SVM")


class ResourcesConfig(_Table):
    """Resources of each virtual client in the Simulation Engine (None = chosen from the machine)."""

    num_cpus: float | None = Field(None, gt=0.0, le=1024.0)
    num_gpus: float | None = Field(None, ge=0.0, le=64.0)


class SelectionConfig(_Table):
    """How a sweep picks each strategy's tuned parameter (TERM's t, q-FFL's q ...) on validation, as the TERM paper does."""

    objective: Literal[tuple(s.key for s in STATISTICS)] = Field(  # type: ignore[valid-type]
        "worst_10", description="the validation statistic to optimise (its direction says which way is better)"
    )
    average: Literal["mean", "pooled_mean"] = Field(
        "mean", description="the validation accuracy that may drop at most max_mean_drop below FedAvg's: "
                            "mean (device mean, each device counting once) or pooled_mean (pooled over samples)"
    )
    max_mean_drop: float = Field(
        0.01, ge=0.0, le=1.0, description="allowed drop of the validation `average` below FedAvg's (else below "
                                          "the best candidate's)"
    )
    tail: int = Field(
        1, ge=1, le=100_000, description="validation statistics are averaged over each run's last `tail` "
                                         "evaluated rounds, then over seeds (1: the last round)"
    )
    devices: Literal["all", "clean"] = Field(
        "all", description="the devices whose validation statistics count: all, or clean (without injected "
                           "noise: their validation labels are not corrupted)"
    )

    @property
    def split(self) -> str:
        """Where the selection reads the validation statistics: validation[_clean][_tail]."""
        return "validation" + ("_clean" if self.devices == "clean" else "") + ("_tail" if self.tail > 1 else "")


class Scenario(_Table):
    """One run (plus an optional sweep grid)."""

    name: str = Field(DEFAULT_SCENARIO, description=NAME_RULE)
    description: str = ""
    run: RunConfig = Field(default_factory=RunConfig)
    strategy: StrategyConfig = Field(default_factory=StrategyConfig)
    client: ClientConfig = Field(default_factory=ClientConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    resources: ResourcesConfig = Field(default_factory=ResourcesConfig)
    selection: SelectionConfig = Field(default_factory=SelectionConfig)
    sweep: dict[str, list[Any]] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        if not re.fullmatch(NAME_PATTERN, value):
            raise ValueError(f"must be {NAME_RULE}")
        return value

    @model_validator(mode="after")
    def _sample_fits_the_federation(self) -> Scenario:
        # The vehicle file's device count is known once it is read: check_fits_dataset.
        if self.data.name == "synthetic" and self.run.clients_per_round > self.data.num_devices:
            raise ValueError(clients_per_round_message(self.run.clients_per_round, self.data.num_devices))
        return self

    @property
    def data_seed(self) -> int:
        """The seed of the dataset: data.seed, or run.seed when unset (re-split per seed)."""
        return self.run.seed if self.data.seed is None else self.data.seed

    @property
    def run_name(self) -> str:
        return self.run.name or self.name

    def strategy_params(self) -> dict[str, Any]:
        """The parameters that shape the chosen strategy (its class's arguments), and the client-side tilt tau."""
        params = STRATEGIES[self.strategy.name].params(self.strategy, self.client)
        params["tau"] = self.client.tau
        for defence in COMMON_SETTINGS.model_fields:  # only when on: earlier hashes and labels stay as they were
            if getattr(self.strategy, defence):
                params[defence] = getattr(self.strategy, defence)
        return params

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str) -> Scenario:
        return cls.model_validate_json(text)


COMPILED_MODELS = ("linear_svm", "logreg")
"""The models ``run.executor = "auto"`` trains with the compiled executor on the in-process engine."""


def executor_of(scenario: Scenario) -> str:
    """The executor a run of ``scenario`` uses: ``run.executor``, where ``"auto"`` is resolved.

    ``"auto"`` is ``"compiled"`` on the in-process engine for the models of
    :data:`COMPILED_MODELS`, and ``"sequential"`` otherwise (Flower's engine
    runs every client as its own ClientApp).
    """
    executor = scenario.run.executor
    if executor != "auto":
        return executor
    compiled = scenario.run.engine == "inprocess" and scenario.model.name in COMPILED_MODELS
    return "compiled" if compiled else "sequential"


# --------------------------------------------------------------------------
# Loading, overrides, errors
# --------------------------------------------------------------------------


def clients_per_round_message(clients_per_round: int, num_devices: int) -> str:
    return (
        f"run.clients_per_round = {clients_per_round} but the dataset has {num_devices} devices; "
        f"allowed: 1..{num_devices} (raise data.num_devices for synthetic data, or sample fewer devices)"
    )


def check_fits_dataset(scenario: Scenario, num_devices: int) -> None:
    """Raise ConfigError when the scenario asks for more devices per round than the dataset has."""
    if scenario.run.clients_per_round > num_devices:
        raise ConfigError(clients_per_round_message(scenario.run.clients_per_round, num_devices))


def _allowed_keys(model: type[BaseModel]) -> str:
    return ", ".join(model.model_fields)


def _model_at(path: Sequence[str | int]) -> type[BaseModel] | None:
    model: type[BaseModel] = Scenario
    for part in path:
        field = model.model_fields.get(str(part))
        if field is None:
            return model
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
        else:
            return model
    return model


def _describe_error(err: Mapping[str, Any]) -> str:
    loc = [str(p) for p in err["loc"]]
    key = ".".join(loc)
    if not key:  # a check across tables: its message names the keys
        return err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        parent = _model_at(loc[:-1])
        allowed = _allowed_keys(parent) if parent else ""
        return f"{key}: unknown key (allowed in [{'.'.join(loc[:-1]) or 'top level'}]: {allowed})"
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    if "input" in err and err["type"] not in {"model_type", "dict_type"}:
        return f"{key}: {msg} (got {err['input']!r})"
    return f"{key}: {msg}"


def validate_scenario(raw: Mapping[str, Any], *, source: str = "scenario") -> Scenario:
    """Validate a raw scenario mapping; raise ConfigError naming every bad key."""
    try:
        scenario = Scenario.model_validate(dict(raw))
    except ValidationError as exc:
        lines = "\n  ".join(_describe_error(e) for e in exc.errors())
        raise ConfigError(f"invalid {source}:\n  {lines}") from None
    _check_sweep_keys(scenario.sweep, source=source)
    return scenario


def parse_value(text: str) -> Any:
    """Parse an override value as TOML (numbers, booleans, lists, quoted strings), else a bare string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text
    except RecursionError:
        raise ConfigError(f"override value {text[:40]!r}...: nested too deeply") from None


def parse_overrides(items: Iterable[str]) -> dict[str, Any]:
    """Parse ``key=value`` strings into a dotted-key mapping."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"override {item!r}: expected KEY=VALUE with a dotted key such as strategy.t=1.0")
        out[key] = parse_value(value.strip())
    return out


def set_dotted(raw: dict[str, Any], key: str, value: Any) -> None:
    """Set ``raw[a][b] = value`` for ``key = 'a.b'``; the key must name a field of the schema."""
    parts = key.split(".")
    model: type[BaseModel] = Scenario
    node = raw
    for i, part in enumerate(parts):
        if part not in model.model_fields:
            where = ".".join(parts[:i]) or "top level"
            raise ConfigError(
                f"{'.'.join(parts[: i + 1])}: unknown key (allowed in [{where}]: {_allowed_keys(model)})"
            )
        annotation = model.model_fields[part].annotation
        last = i == len(parts) - 1
        if last:
            node[part] = value
            return
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            raise ConfigError(f"{key}: {'.'.join(parts[: i + 1])} is a value, not a table")
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{key}: {'.'.join(parts[: i + 1])} must be a table")
        model = annotation


def _check_sweep_keys(sweep: Mapping[str, Any], *, source: str) -> None:
    variants = sweep.get(SWEEP_CELLS_KEY, [{}])
    if not isinstance(variants, list) or not variants or not all(isinstance(v, dict) for v in variants):
        raise ConfigError(
            f"invalid {source}: sweep.cells must be a non-empty list of inline tables of dotted keys, "
            'e.g. [{ "strategy.name" = "fedavg" }, { "strategy.name" = "term", "strategy.t" = -1 }]'
        )
    for variant in variants:
        for key in variant:
            _check_sweep_key(key, source)
    for key, values in sweep.items():
        if key == SWEEP_CELLS_KEY:
            continue
        _check_sweep_key(key, source)
        if not isinstance(values, list) or not values:
            raise ConfigError(f"invalid {source}: sweep.{key!s} must be a non-empty list (got {values!r})")


def _check_sweep_key(key: str, source: str) -> None:
    if key.startswith("sweep") or key.startswith("selection"):
        raise ConfigError(f"sweep.{key}: cannot sweep over the sweep or selection tables")
    try:
        set_dotted({}, key, None)
    except ConfigError as exc:
        raise ConfigError(f"invalid {source}: sweep key {exc}") from None
    if "." not in key:
        raise ConfigError(
            f"invalid {source}: sweep key {key!r} names a whole table; sweep its values by "
            f"dotted keys (e.g. \"{key}.name\"), or list variants in sweep.cells"
        )


def read_scenario_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a TOML scenario file; relative data paths are taken relative to the file."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"scenario file {str(p)!r} does not exist (give a .toml file, or nothing for the default)")
    try:
        raw = tomllib.loads(p.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"scenario file {str(p)!r} is not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"scenario file {str(p)!r} is not a text file (not UTF-8 at byte {exc.start}); give a TOML scenario file"
        ) from None
    except RecursionError:
        raise ConfigError(f"scenario file {str(p)!r}: values nested too deeply to read") from None
    except OSError as exc:
        raise ConfigError(f"scenario file {str(p)!r} cannot be read: {exc.strerror}") from None
    data = raw.get("data")
    if isinstance(data, dict) and isinstance(data.get("path"), str) and data["path"]:
        data["path"] = str((p.parent / os.path.expanduser(data["path"])).resolve())
    return raw


def packaged_scenario_text(name: str = DEFAULT_SCENARIO) -> str:
    ref = resources.files("term_fl") / "scenarios" / f"{name}.toml"
    return ref.read_text(encoding="utf-8")


def load_scenario(
    path: str | os.PathLike[str] | None = None,
    overrides: Mapping[str, Any] | Iterable[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    check_files: bool = True,
) -> Scenario:
    """Resolve a scenario: ``--set`` > file > environment > schema default.

    ``path`` None loads the embedded default scenario (no files needed).
    Relative paths given in ``overrides`` or the environment are taken
    relative to the working directory; every path of the result is absolute.
    """
    environ = os.environ if environ is None else environ
    if path is None:
        raw = tomllib.loads(packaged_scenario_text())
        source = "embedded default scenario"
    else:
        raw = read_scenario_file(path)
        source = f"scenario file {str(path)!r}"
    if overrides is not None and not isinstance(overrides, Mapping):
        overrides = parse_overrides(overrides)
    for key, value in (overrides or {}).items():
        set_dotted(raw, key, value)
        if key == "data.path" and isinstance(value, str):
            raw["data"]["path"] = str(Path(os.path.expanduser(value)).resolve())
    if overrides:
        source = f"{source} with overrides"
    data = raw.setdefault("data", {})  # a non-table value is left for validation to report
    if isinstance(data, dict) and not data.get("path") and environ.get(VEHICLE_DATA_ENV):
        data["path"] = str(Path(os.path.expanduser(environ[VEHICLE_DATA_ENV])).resolve())
    scenario = validate_scenario(raw, source=source)
    if check_files:
        check_data_available(scenario)
    return scenario


def check_data_available(scenario: Scenario) -> None:
    """Fail early, with directions, when a file the scenario needs is missing."""
    if scenario.data.name != "vehicle":
        return
    where = (
        "the vehicle-sensor data is vehicle_fewshot.json (SensIT, 23 devices; see the README "
        "'Data' section); give its path with --set data.path=PATH, data.path in the scenario "
        f"file, or the environment variable {VEHICLE_DATA_ENV}"
    )
    if not scenario.data.path:
        raise ConfigError(f"data.path: not set; {where}")
    if not Path(scenario.data.path).is_file():
        raise ConfigError(f"data.path: file {scenario.data.path!r} does not exist; {where}")
    if scenario.data.sha256 != ANY_SHA256:
        try:
            check_sha256(scenario.data.path, file_digest(scenario.data.path), scenario.data.sha256)
        except ValueError as exc:
            raise ConfigError(f"data.sha256: {exc}") from None


def with_overrides(scenario: Scenario, overrides: Mapping[str, Any]) -> Scenario:
    """A copy of ``scenario`` with dotted overrides applied and validated."""
    raw = scenario.model_dump()
    for key, value in overrides.items():
        set_dotted(raw, key, value)
    return validate_scenario(raw, source="sweep cell")


def sweep_cells(scenario: Scenario) -> list[tuple[dict[str, Any], Scenario]]:
    """Expand the ``[sweep]`` table into runs: one (overrides, scenario) per cell, in a stable order.

    Every key but ``cells`` maps a dotted key to a list of values, and the
    grid is their product (the last key varies fastest). ``cells``, when
    given, is a list of inline tables of dotted overrides (variants such as
    ``{ "strategy.name" = "term", "strategy.t" = -1 }``), each crossed with
    that product. Cells whose resolved settings coincide (e.g. FedAvg at
    different values of the TERM parameter t) run once.
    """
    if not scenario.sweep:
        return [({}, scenario)]
    variants = scenario.sweep.get(SWEEP_CELLS_KEY, [{}])
    keys = [k for k in scenario.sweep if k != SWEEP_CELLS_KEY]
    cells: list[tuple[dict[str, Any], Scenario]] = []
    seen: set[tuple[str, int]] = set()
    for variant in variants:
        for combo in itertools.product(*(scenario.sweep[k] for k in keys)):
            overrides = {**variant, **dict(zip(keys, combo, strict=True))}
            cell = with_overrides(scenario, overrides)
            identity = (config_hash(cell), cell.run.seed)
            if identity in seen:
                continue
            seen.add(identity)
            cells.append((_relevant_overrides(overrides, cell), cell))
    return cells


BASELINE = {"strategy.name": "fedavg", "client.tau": 0.0}
"""The baseline that comparisons pair every cell with: plain FedAvg (no client-side tilt), same other settings."""


def baseline_hash(scenario: Scenario) -> str:
    """config_hash of the plain-FedAvg run with ``scenario``'s other settings: its partner in paired differences."""
    return config_hash(with_overrides(scenario, BASELINE))


def reference_scenario(scenario: Scenario) -> Scenario | None:
    """The run ``run.reference`` asks for beside ``scenario``: the same seed and settings with the reference
    strategy (its default parameters, no client-side tilt); None when there is none or it is ``scenario`` itself."""
    name = scenario.run.reference
    if name == "none":
        return None
    reference = with_overrides(
        scenario,
        {"strategy.name": name, "client.tau": 0.0, "run.reference": "none",
         "run.name": f"{scenario.run_name} (reference: {name})"},
    )
    return None if config_hash(reference) == config_hash(scenario) else reference


def _relevant_overrides(overrides: dict[str, Any], cell: Scenario) -> dict[str, Any]:
    """Drop strategy parameters that the cell's strategy does not use (they name its folder)."""
    used = {f"strategy.{k}" for k in cell.strategy_params()} | {"strategy.name", "strategy.server_lr"}
    return {k: v for k, v in overrides.items() if not k.startswith("strategy.") or k in used}


# Settings that change where a run executes or how long it waits, not what it
# computes: runs that differ only in them are the same cell.
_NOT_HASHED = {
    "run": ("seed", "name", "engine", "node_timeout", "round_timeout", "max_failed_rounds", "reference"),
    "data": ("seed", "path", "sha256"),
}


_HASHED_WHEN_SET = (  # (table, key, default, only for this strategy)
    ("run", "executor", "sequential", None),  # hashes from before run.executor existed stay valid
    ("run", "evaluate_every", 1, None),  # which rounds are recorded, not the model; the tail statistics read them
    ("strategy", "loss_reduction", "mean", "qffl"),  # TERM's hashes always held its loss_reduction
)


def config_hash(scenario: Scenario) -> str:
    """Hash of what a run computes, without seeds: groups the seeds of one sweep cell.

    Left out: seeds, names and the description, the sweep and selection
    tables, the engine (both give the same numbers), the sequential executor
    (the reference; the cohort and compiled executors are in, ``"auto"`` as
    :func:`executor_of` resolves it: they agree with it to float32 rounding
    per step, not bit for bit), timeouts and
    ``run.max_failed_rounds``, the per-client resources, the parameters the
    strategy does not use, and ``data.path``: a synthetic scenario does not
    read it (so ``TERM_FL_VEHICLE_DATA`` set in one shell and not in another
    changes nothing), and the vehicle data counts by its content (the file's
    sha256), so the same file under another path is the same cell.
    """
    raw = scenario.model_dump()
    raw["run"]["executor"] = executor_of(scenario)
    raw["strategy"] = {"name": scenario.strategy.name, **scenario.strategy_params()}
    for table, keys in _NOT_HASHED.items():
        for key in keys:
            raw[table].pop(key, None)
    for table in ("sweep", "selection", "description", "name", "resources"):
        raw.pop(table, None)
    # Settings added later count only away from their default, so earlier hashes (and sweeps) stay valid.
    for table, key, default, only in _HASHED_WHEN_SET:
        if raw[table].get(key) == default and only in (None, scenario.strategy.name):
            raw[table].pop(key)
    # data.sha256 is what the check expects; the vehicle data counts by its actual content
    if scenario.data.name == "vehicle" and scenario.data.path:
        raw["data"]["sha256"] = file_digest(scenario.data.path)
    text = json.dumps(raw, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def file_digest(path: str) -> str:
    """sha256 of a file's bytes (cached while its size and mtime stay), or its path when it cannot be read."""
    try:
        stat = os.stat(path)
    except OSError:
        return f"unreadable:{path}"
    return _digest(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=16)
def _digest(path: str, mtime_ns: int, size: int) -> str:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return f"unreadable:{path}"
    return digest.hexdigest()
