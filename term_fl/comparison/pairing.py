"""Which cells a comparison pairs: a cell and the baseline cells of the same settings.

Pure functions over a cell's flat settings (:func:`term_fl.comparison.cells.flat_settings`).
The baselines are the strategies the registry flags ``baseline=True``
(:data:`BASELINES`, in registry order: FedAvg first). A cell is paired with
each baseline's *plain* cell (no client-side tilt, tau = 0) whose settings
are the same but for the strategy's own: its name, its parameters and the
client-side tilt tau. The defences every strategy takes
(:data:`term_fl.strategies.registry.COMMON_SETTINGS`) are shared settings:
TERM with ``clip_loss = 3`` is paired with FedAvg with ``clip_loss = 3``; the
loss transform is not (no baseline reads a loss).
This is what :func:`term_fl.config.baseline_hash` computes for a scenario,
read from the settings a run stored, so the sweep, the dashboard and the
report pair alike (and a run's ``run.reference``, left out of the settings,
never keeps it from its references).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from term_fl.comparison.cells import settings_key, strategy_side
from term_fl.strategies.registry import COMMON_SETTINGS, STRATEGIES

__all__ = ["BASELINES", "baseline_cells", "is_plain", "pairing_key", "strategy_side"]

BASELINES: tuple[str, ...] = tuple(name for name, spec in STRATEGIES.items() if spec.baseline)
"""The strategies every cell is paired with, in order (the registry's ``baseline`` flag)."""

_SHARED = frozenset(f"strategy.{key}" for key in COMMON_SETTINGS.model_fields if not key.startswith("loss_"))
"""The defences a cell shares with its baselines. The loss transform (``loss_transform``, ``loss_clip``) is the
strategy's own: it acts only where a strategy reads the losses, which no baseline does, and "auto" resolves per
strategy (median_mad for TERM with t < 0), so a TERM cell under the default pairs with the baselines of its
scenario."""


def pairing_key(settings: Mapping[str, Any]) -> tuple[Any, ...]:
    """The settings a cell and its baseline cells share: all but the strategy's own (the defences stay in)."""
    return settings_key(settings, skip=lambda key: strategy_side(key) and key not in _SHARED)


def is_plain(settings: Mapping[str, Any]) -> bool:
    """No client-side tilt: ``client.tau`` (and the strategy's ``tau``) 0 or unset."""
    return not settings.get("client.tau") and not settings.get("strategy.tau")


def baseline_cells(cells: Sequence[tuple[str, str, Mapping[str, Any]]]) -> dict[str, dict[str, str]]:
    """Per cell, the baseline cells it is paired with: ``{cell key: {baseline strategy: baseline cell key}}``.

    ``cells`` are ``(key, strategy, flat settings)``. For each baseline of
    :data:`BASELINES` a cell gets the plain cell of that strategy with the
    same :func:`pairing_key`, if there is exactly one. A cell is never paired
    with itself, and a baseline cell only with the baselines before it in
    :data:`BASELINES` (FedAvg (uniform) minus FedAvg, not both ways).
    """
    plain: dict[tuple[str, tuple[Any, ...]], list[str]] = {}
    for key, strategy, settings in cells:
        if strategy in BASELINES and is_plain(settings):
            plain.setdefault((strategy, pairing_key(settings)), []).append(key)
    pairs: dict[str, dict[str, str]] = {}
    for key, strategy, settings in cells:
        group = pairing_key(settings)
        before = BASELINES[: BASELINES.index(strategy)] if strategy in BASELINES and is_plain(settings) else BASELINES
        found = {b: plain.get((b, group), []) for b in before}
        pairs[key] = {b: keys[0] for b, keys in found.items() if len(keys) == 1 and keys[0] != key}
    return pairs
