"""``config_hash``: what a run computes, as 16 hex digits that group the seeds of one sweep cell.

What enters the hash is declared at each field (:mod:`term_fl.common.settings`):
settings marked ``NOT_HASHED`` are left out (seeds, names, the engine,
timeouts, the per-client resources, the selection and sweep tables, a data
file's path), settings marked ``HASHED_WHEN_SET`` count only away from their
default (settings added after stores held hashes), and a data file counts by
its content (``DigestOf``). Of the ``[strategy]``, ``[data]`` and
``[model]`` tables only the chosen alternative's settings count, with the
shared ones: a sweep cell does not change with the settings of a strategy it
does not run.

The hash keeps the layout of the flat tables that came before the
sub-tables, so that every store keeps its hashes: the strategy section is
the strategy's name and parameters (:meth:`Scenario.strategy_params`), and
a run whose dataset or model lacks a setting the flat tables held hashes it
at the flat table's default (:data:`FLAT_TABLE_DEFAULTS`).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel

from term_fl.common.digest import file_digest
from term_fl.common.settings import HASHED_WHEN_SET, NOT_HASHED, DigestOf, marker

from .choices import ChoiceTable
from .scenario import Scenario, executor_of

__all__ = ["FLAT_TABLE_DEFAULTS", "config_hash", "hashed_settings"]

FLAT_TABLE_DEFAULTS: dict[str, dict[str, Any]] = {
    "data": {"num_devices": 100, "alpha": 1.0, "beta": 1.0, "max_samples": 1000},
    "model": {"hidden": 64, "l2": 1e-3},
}
"""The settings that the one flat ``[data]`` and ``[model]`` tables held for every dataset and model before the
sub-tables, at their defaults there. Every earlier hash holds them, so a run whose dataset or model lacks one
hashes it at this value: a vehicle run's hash holds ``num_devices = 100``, a softmax regression's
``hidden = 64``. A dataset or model added later adds nothing here. Never change these values: they are what
earlier versions hashed."""


def config_hash(scenario: Scenario) -> str:
    """Hash of what a run computes, without seeds: groups the seeds of one sweep cell.

    Left out: seeds, names and the description, the sweep and selection
    tables, the engine (both give the same numbers), the sequential executor
    (the reference; the cohort and compiled executors are in, ``"auto"`` as
    :func:`~term_fl.config.scenario.executor_of` resolves it: they agree with
    it to float32 rounding per step, not bit for bit), timeouts,
    ``run.max_failed_rounds``, ``run.threads`` and ``run.ray_address``, the per-client resources, the references, the
    settings of the strategies, datasets and models the run does not use,
    and a data file's path: the vehicle data counts by its content (the
    file's sha256), so the same file under another path is the same cell.
    """
    text = json.dumps(hashed_settings(scenario), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def hashed_settings(scenario: Scenario) -> dict[str, Any]:
    """The settings :func:`config_hash` hashes, table by table."""
    hashed: dict[str, Any] = {}
    for key, field in type(scenario).model_fields.items():
        if marker(field, NOT_HASHED):
            continue
        value = getattr(scenario, key)
        hashed[key] = _choice(key, value) if isinstance(value, ChoiceTable) else _fields(value)
    # "auto" counts as the executor it resolves to: "sequential" (the default of earlier hashes) is left out
    executor = executor_of(scenario)
    if executor != "sequential":
        hashed["run"]["executor"] = executor
    else:
        hashed["run"].pop("executor", None)
    hashed["strategy"] = _strategy(scenario)
    return hashed


def _fields(table: BaseModel, only: tuple[str, ...] | None = None) -> dict[str, Any]:
    """A table's settings by their markers: NOT_HASHED left out, HASHED_WHEN_SET only away from the default."""
    dumped = table.model_dump()
    out: dict[str, Any] = {}
    for key, field in type(table).model_fields.items():
        if (only is not None and key not in only) or marker(field, NOT_HASHED):
            continue
        if marker(field, HASHED_WHEN_SET) and getattr(table, key) == field.default:
            continue
        digest = marker(field, DigestOf)
        if digest is not None:  # a file counts by its content, and only where one is named
            path = getattr(table, digest.path)
            if path:
                out[key] = file_digest(path)
            continue
        out[key] = dumped[key]
    return out


def _choice(key: str, table: ChoiceTable) -> dict[str, Any]:
    """A [data] or [model] table: its name, the shared settings, the chosen alternative's, the flat table's rest."""
    hashed = {"name": table.name, **_fields(table, only=table.shared_keys()), **_fields(table.settings)}
    for setting, value in FLAT_TABLE_DEFAULTS.get(key, {}).items():
        hashed.setdefault(setting, value)
    return hashed


def _strategy(scenario: Scenario) -> dict[str, Any]:
    """The strategy's name and parameters, a HASHED_WHEN_SET setting only away from its default."""
    settings = scenario.strategy.settings
    hashed = {"name": scenario.strategy.name, **scenario.strategy_params()}
    for key, field in type(settings).model_fields.items():
        if marker(field, HASHED_WHEN_SET) and getattr(settings, key) == field.default:
            hashed.pop(key, None)
    return hashed
