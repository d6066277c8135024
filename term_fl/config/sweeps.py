"""Runs made from a scenario: overrides, the ``[sweep]`` grid, the references and the baseline of comparisons."""

from __future__ import annotations

import itertools
from collections.abc import Collection, Mapping
from typing import Any

from term_fl.common.errors import ConfigError

from .choices import ChoiceTable
from .hashing import config_hash
from .loading import SWEEP_CELLS_KEY, check_chosen_settings, set_dotted, validate_scenario
from .scenario import Scenario

__all__ = ["BASELINE", "baseline_hash", "grid_size", "reference_scenario", "reference_scenarios", "sweep_cells",
           "with_overrides"]


def with_overrides(scenario: Scenario, overrides: Mapping[str, Any], *, lenient: Collection[str] = ()) -> Scenario:
    """A copy of ``scenario`` with dotted overrides applied and validated.

    A flat key (``strategy.t``) that the chosen strategy, dataset or model
    lacks is an error, as on the command line, unless it is in ``lenient``
    (a sweep grid's keys: they apply to the alternatives that have them).
    """
    raw = scenario.model_dump()
    for key, value in overrides.items():
        set_dotted(raw, key, value)
    cell = validate_scenario(raw, source="sweep cell")
    check_chosen_settings(cell, [key for key in overrides if key not in lenient], source="set for this run")
    return cell


def grid_size(sweep: Mapping[str, Any]) -> int:
    """How many cells a ``[sweep]`` table expands to at most (before cells that coincide are merged): the
    product of its lists' lengths, times the number of ``cells`` variants. Counted, not expanded."""
    size = len(sweep.get(SWEEP_CELLS_KEY, [{}]))
    for key, values in sweep.items():
        if key != SWEEP_CELLS_KEY:
            size *= len(values)
    return size


def _check_grid_size(sweep: Mapping[str, Any], max_cells: int) -> None:
    size = grid_size(sweep)
    if size <= max_cells:
        return
    factors = [f"{len(v):,} values of {k}" for k, v in sweep.items() if k != SWEEP_CELLS_KEY]
    if SWEEP_CELLS_KEY in sweep:
        factors.append(f"{len(sweep[SWEEP_CELLS_KEY]):,} variants in sweep.cells")
    raise ConfigError(
        f"the [sweep] grid has {size:,} cells ({' x '.join(factors)}); at most {max_cells:,} run in one sweep: "
        "sweep fewer values, or raise the limit with --max-cells N"
    )


def sweep_cells(scenario: Scenario, *, max_cells: int | None = None) -> list[tuple[dict[str, Any], Scenario]]:
    """Expand the ``[sweep]`` table into runs: one (overrides, scenario) per cell, in a stable order.

    Every key but ``cells`` maps a dotted key to a list of values, and the
    grid is their product (the last key varies fastest). ``cells``, when
    given, is a list of inline tables of dotted overrides (variants such as
    ``{ "strategy.name" = "term", "strategy.t" = -1 }``), each crossed with
    that product. A grid key applies to the strategies (datasets, models)
    that have it; a variant's flat key must be a setting of the variant's
    strategy. Cells whose resolved settings coincide (e.g. FedAvg at
    different values of the TERM parameter t) run once. A grid of more than
    ``max_cells`` cells (:func:`grid_size`) is a :class:`ConfigError` that
    names its size, before any cell is made.
    """
    if not scenario.sweep:
        return [({}, scenario)]
    if max_cells is not None:
        _check_grid_size(scenario.sweep, max_cells)
    variants = scenario.sweep.get(SWEEP_CELLS_KEY, [{}])
    keys = [k for k in scenario.sweep if k != SWEEP_CELLS_KEY]
    cells: list[tuple[dict[str, Any], Scenario]] = []
    seen: set[tuple[str, int]] = set()
    for variant in variants:
        for combo in itertools.product(*(scenario.sweep[k] for k in keys)):
            overrides = {**variant, **dict(zip(keys, combo, strict=True))}
            cell = with_overrides(scenario, overrides, lenient=keys)
            identity = (config_hash(cell), cell.run.seed)
            if identity in seen:
                continue
            seen.add(identity)
            cells.append((_relevant_overrides(overrides, cell), cell))
    return cells


def _relevant_overrides(overrides: dict[str, Any], cell: Scenario) -> dict[str, Any]:
    """The overrides that name the cell's folder: without settings its strategy, dataset or model does not use."""
    params = cell.strategy_params()
    kept = {}
    for key, value in overrides.items():
        table, _, rest = key.partition(".")
        choice = getattr(cell, table, None) if table in Scenario.model_fields else None
        if isinstance(choice, ChoiceTable) and rest != "name":
            alternative, _, setting = rest.rpartition(".")
            if alternative and alternative != choice.name:
                continue  # another alternative's sub-table
            uses = setting in params if table == "strategy" else (
                setting in choice.shared_keys() or setting in choice.keys_of(choice.name))
            if not uses:
                continue
        kept[key] = value
    return kept


BASELINE = {"strategy.name": "fedavg", "client.tau": 0.0}
"""The baseline that comparisons pair every cell with: plain FedAvg (no client-side tilt), same other settings."""


def baseline_hash(scenario: Scenario) -> str:
    """config_hash of the plain-FedAvg run with ``scenario``'s other settings: its partner in paired differences."""
    return config_hash(with_overrides(scenario, BASELINE))


def reference_scenario(scenario: Scenario, name: str | None = None) -> Scenario | None:
    """The run of reference strategy ``name`` beside ``scenario`` (default: the first of ``run.reference``).

    The same seed and settings with the reference strategy (the settings the
    scenario gives that strategy, else its defaults) and no client-side
    tilt; None when there is none or it is ``scenario`` itself.
    """
    if name is None:
        if not scenario.run.reference:
            return None
        name = scenario.run.reference[0]
    reference = with_overrides(
        scenario,
        {"strategy.name": name, "client.tau": 0.0, "run.reference": [],
         "run.name": f"{scenario.run_name} (reference: {name})"},
    )
    return None if config_hash(reference) == config_hash(scenario) else reference


def reference_scenarios(scenario: Scenario) -> list[Scenario]:
    """The runs ``run.reference`` asks for beside ``scenario``, in its order (those that are ``scenario`` left out)."""
    references = (reference_scenario(scenario, name) for name in scenario.run.reference)
    return [reference for reference in references if reference is not None]
