"""Loading a scenario: the TOML file, ``--set`` overrides, the environment, and the errors users see.

Values come, in order of precedence, from ``--set key=value`` overrides, the
scenario file, environment variables (``TERM_FL_VEHICLE_DATA`` for the
vehicle data's path) and the schema's defaults. Validation happens once, at
the edge: unknown keys and out-of-range values raise :class:`ConfigError`
with messages that name the dotted key, the value and what is allowed.

In the ``[strategy]``, ``[data]`` and ``[model]`` tables a file's flat key
(``strategy.t``) is a default of every alternative that has it
(:mod:`term_fl.config.choices`); a flat key given by ``--set`` or a sweep's
cells must be a setting of the chosen alternative
(:func:`check_chosen_settings`), so ``--set strategy.t=2`` on a q-FFL
scenario is an error rather than a silent no-op. A sub-table key
(``strategy.term.t``) names its alternative and is taken as that
alternative's setting wherever it is given, as in a file.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from term_fl.common.errors import ConfigError
from term_fl.common.settings import PathSetting, marker
from term_fl.data.errors import DataSettingError
from term_fl.data.registry import DATASETS

from .choices import ChoiceTable, spread_flat_keys
from .scenario import DEFAULT_SCENARIO, Scenario

__all__ = ["SWEEP_CELLS_KEY", "VEHICLE_DATA_ENV", "check_chosen_settings", "check_data_available", "load_scenario",
           "packaged_scenario_text", "parse_overrides", "parse_value", "read_scenario_file", "set_dotted",
           "validate_scenario"]

VEHICLE_DATA_ENV = "TERM_FL_VEHICLE_DATA"
SWEEP_CELLS_KEY = "cells"  # [sweep] key holding a list of variants (inline tables)

Target = tuple[str, ...]  # a setting's place in the scenario: ("data", "vehicle", "path")


def allowed_keys(model: type[BaseModel]) -> str:
    """The keys a table allows, for a message (a choice table also lists its alternatives' settings)."""
    if not (isinstance(model, type) and issubclass(model, ChoiceTable)):
        return ", ".join(model.model_fields)
    kind = model.kind
    settings = dict.fromkeys(key for name in model.alternatives for key in model.keys_of(name))
    parts = ["name", *model.shared_keys()]
    if settings:
        parts.append(f"each {kind}'s settings: {', '.join(settings)}")
    parts.append(f"sub-tables: {', '.join(model.alternatives)}")
    return ", ".join(parts)


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
        allowed = allowed_keys(parent) if parent else ""
        return f"{key}: unknown key (allowed in [{'.'.join(loc[:-1]) or 'top level'}]: {allowed})"
    msg = err["msg"].removeprefix("Value error, ")
    if "input" in err and err["type"] not in {"model_type", "dict_type"}:
        return f"{key}: {msg} (got {err['input']!r})"
    return f"{key}: {msg}"


def validate_scenario(raw: Mapping[str, Any], *, source: str = "scenario") -> Scenario:
    """Validate a raw scenario mapping; raise ConfigError naming every bad key."""
    try:
        scenario = Scenario.model_validate(dict(raw))
    except ValidationError as exc:
        problems = "; ".join(_describe_error(e) for e in exc.errors())
        raise ConfigError(f"invalid {source}: {problems}") from None
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


def set_dotted(raw: dict[str, Any], key: str, value: Any) -> list[Target]:
    """Set ``raw[a][b] = value`` for ``key = 'a.b'``; the key must name a field of the schema.

    In a choice table a flat alternative key (``strategy.t``) sets that
    setting of every alternative that has it, over the file's values.
    Returns the places set.
    """
    parts = key.split(".")
    model: type[BaseModel] = Scenario
    node = raw
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part not in model.model_fields:
            owners = model.owners(part) if isinstance(model, type) and issubclass(model, ChoiceTable) else []
            if owners and last:  # a flat alternative key: into each owner's sub-table
                spread = spread_flat_keys(model, node)
                node.clear()
                node.update(spread)
                for owner in owners:
                    node[owner] = {**node.get(owner, {}), part: value}
                return [(*parts[:i], owner, part) for owner in owners]
            where = ".".join(parts[:i]) or "top level"
            raise ConfigError(f"{'.'.join(parts[: i + 1])}: unknown key (allowed in [{where}]: {allowed_keys(model)})")
        if last:
            node[part] = value
            return [tuple(parts)]
        annotation = model.model_fields[part].annotation
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            raise ConfigError(f"{key}: {'.'.join(parts[: i + 1])} is a value, not a table")
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{key}: {'.'.join(parts[: i + 1])} must be a table")
        model = annotation
    raise ConfigError(f"{key!r}: an empty key")  # unreachable: str.split gives at least one part


def check_chosen_settings(scenario: Scenario, keys: Iterable[str], *, source: str) -> None:
    """Raise ConfigError for a flat key (``strategy.t``) that the chosen strategy, dataset or model does not have.

    Such a key, given by ``--set`` or a sweep's cells, would change nothing
    in the run: the message names the chosen alternative, its settings and
    the alternatives that have the key.
    """
    for key in keys:
        table, _, setting = key.partition(".")
        choice = getattr(scenario, table, None) if table in Scenario.model_fields else None
        if not isinstance(choice, ChoiceTable) or "." in setting or not setting:
            continue
        if setting == "name" or setting in choice.shared_keys() or setting in choice.alternatives:
            continue
        if setting in choice.keys_of(choice.name):
            continue
        kind, chosen = choice.kind, choice.name
        own = ", ".join(choice.keys_of(chosen)) or "none"
        shared = ", ".join(choice.shared_keys())
        owners = choice.owners(setting)
        raise ConfigError(
            f"{key}: the {kind} {chosen} has no setting {setting!r} ({source}); {chosen}'s settings: {own}"
            + (f"; every {kind}'s: {shared}" if shared else "")
            + f". {setting!r} belongs to {', '.join(owners)}: to set it for a sweep or a reference that runs "
            f"one of them, write {table}.{owners[0]}.{setting}"
        )


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


def _path_settings() -> list[tuple[Target, PathSetting]]:
    """Every file-path setting of the choice tables' alternatives, with its marker."""
    found = []
    for table, field in Scenario.model_fields.items():
        model = field.annotation
        if isinstance(model, type) and issubclass(model, ChoiceTable):
            for alternative, subtable in model.alternatives.items():
                for key, info in subtable.model_fields.items():
                    path = marker(info, PathSetting)
                    if path is not None:
                        found.append(((table, alternative, key), path))
    return found


def _resolve_path(raw: dict[str, Any], target: Target, base: Path | None) -> None:
    """The path at ``target`` in ``raw``, made absolute (relative to ``base``, else the working directory)."""
    *tables, key = target
    node: Any = raw
    for name in tables:
        node = node.get(name) if isinstance(node, dict) else None
    if isinstance(node, dict) and isinstance(node.get(key), str) and node[key]:
        path = Path(os.path.expanduser(node[key]))
        node[key] = str(((base / path) if base is not None else path).resolve())


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
    _spread_choice_tables(raw)
    for target, _ in _path_settings():
        _resolve_path(raw, target, p.parent)
    return raw


def _spread_choice_tables(raw: dict[str, Any]) -> None:
    """The flat keys of the file's choice tables moved into the sub-tables (a table that is not one stays)."""
    for table, field in Scenario.model_fields.items():
        model = field.annotation
        if isinstance(raw.get(table), dict) and isinstance(model, type) and issubclass(model, ChoiceTable):
            raw[table] = spread_flat_keys(model, raw[table])


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
    A flat key of ``overrides`` that the chosen strategy, dataset or model
    lacks is an error (:func:`check_chosen_settings`).
    """
    environ = os.environ if environ is None else environ
    # the file's values, then the overrides over them
    if path is None:
        raw = tomllib.loads(packaged_scenario_text())
        _spread_choice_tables(raw)
        source = "embedded default scenario"
    else:
        raw = read_scenario_file(path)
        source = f"scenario file {str(path)!r}"
    if overrides is not None and not isinstance(overrides, Mapping):
        overrides = parse_overrides(overrides)
    paths = dict(_path_settings())
    for key, value in (overrides or {}).items():
        for target in set_dotted(raw, key, value):
            if target in paths:
                _resolve_path(raw, target, None)
    if overrides:
        source = f"{source} with overrides"
    # a path the file and the overrides leave unset comes from the environment
    for (table, alternative, key), setting in paths.items():
        tables = raw.setdefault(table, {})  # a non-table value is left for validation to report
        sub = tables.setdefault(alternative, {}) if isinstance(tables, dict) else None
        if setting.env and isinstance(sub, dict) and not sub.get(key) and environ.get(setting.env):
            sub[key] = str(Path(os.path.expanduser(environ[setting.env])).resolve())
    scenario = validate_scenario(raw, source=source)
    check_chosen_settings(scenario, overrides or {}, source="set by --set")
    if check_files:
        check_data_available(scenario)
    return scenario


def check_data_available(scenario: Scenario) -> None:
    """Fail early, with directions, when a file the scenario's dataset needs is missing or is another file."""
    spec = DATASETS[scenario.data.name]
    if spec.check is None:
        return
    try:
        spec.check(scenario.data.settings)
    except DataSettingError as exc:
        raise ConfigError(f"data.{spec.name}.{exc.setting}: {exc.message}") from None
