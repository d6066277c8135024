"""The scenario: one run (one strategy, one seed), plus an optional sweep grid."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator

from term_fl.common.errors import ConfigError
from term_fl.common.settings import NOT_HASHED
from term_fl.data.registry import DATASETS, check_data_size
from term_fl.strategies.registry import COMMON_SETTINGS, STRATEGIES
from term_fl.strategies.settings import resolve_loss_transform

from .choices import DataConfig, ModelConfig, StrategyConfig
from .tables import ClientConfig, ResourcesConfig, RunConfig, SelectionConfig, Table

__all__ = ["COMPILED_MODELS", "DEFAULT_SCENARIO", "DEFENCE_RATIOS", "NAME_PATTERN", "NAME_RULE", "Scenario",
           "check_fits_dataset", "executor_of", "loss_transform_of",
           "clients_per_round_message"]

DEFAULT_SCENARIO = "default"
# A scenario name becomes part of folder names under ./runs/ and of run ids.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
NAME_RULE = "1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit (it names folders under ./runs/)"


class Scenario(Table):
    """One run (plus an optional sweep grid)."""

    name: Annotated[str, NOT_HASHED] = Field(DEFAULT_SCENARIO, description=NAME_RULE)
    description: Annotated[str, NOT_HASHED] = ""
    run: RunConfig = Field(default_factory=RunConfig)
    strategy: StrategyConfig = Field(default_factory=StrategyConfig)  # type: ignore[valid-type]
    client: ClientConfig = Field(default_factory=ClientConfig)
    data: DataConfig = Field(default_factory=DataConfig)  # type: ignore[valid-type]
    model: ModelConfig = Field(default_factory=ModelConfig)  # type: ignore[valid-type]
    resources: Annotated[ResourcesConfig, NOT_HASHED] = Field(default_factory=ResourcesConfig)
    selection: Annotated[SelectionConfig, NOT_HASHED] = Field(default_factory=SelectionConfig)
    sweep: Annotated[dict[str, list[Any]], NOT_HASHED] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        if not re.fullmatch(NAME_PATTERN, value):
            raise ValueError(f"must be {NAME_RULE}")
        return value

    @model_validator(mode="after")
    def _sample_fits_the_federation(self) -> Scenario:
        # A file's device count is known once it is read: check_fits_dataset.
        known = DATASETS[self.data.name].known_devices
        if known is not None and self.run.clients_per_round > known(self.data.settings):
            raise ValueError(clients_per_round_message(self.run.clients_per_round, known(self.data.settings)))
        return self

    @model_validator(mode="after")
    def _data_fits_the_limit(self) -> Scenario:
        # Estimated from the settings, before any sample is generated (a sweep refuses before its first cell).
        check_data_size(DATASETS[self.data.name], self.data.settings, self.data.size_limit_gb)
        return self

    @property
    def data_seed(self) -> int:
        """The seed of the dataset: data.seed, or run.seed when unset (re-split per seed)."""
        return self.run.seed if self.data.seed is None else self.data.seed

    @property
    def run_name(self) -> str:
        return self.run.name or self.name

    def strategy_params(self) -> dict[str, Any]:
        """The parameters that shape the chosen strategy (its class's arguments), and the client-side tilt tau.

        The shared settings count only where they act, so that earlier hashes
        and labels stay as they were: a defence when on, the loss transform
        as :func:`loss_transform_of` resolves it when not "none" (with its
        ``loss_clip`` for "median_mad"): a TERM run with t < 0 and the
        default transform hashes apart from the runs before the transform.
        """
        params = STRATEGIES[self.strategy.name].params(self.strategy.settings, self.client)
        params["tau"] = self.client.tau
        for defence in DEFENCE_RATIOS:
            if getattr(self.strategy, defence):
                params[defence] = getattr(self.strategy, defence)
        transform = loss_transform_of(self)
        if transform != "none":
            params["loss_transform"] = transform
            if transform == "median_mad":
                params["loss_clip"] = self.strategy.loss_clip
        return params

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str) -> Scenario:
        """A scenario from its JSON (a run's config.json, the scenario sent to clients).

        JSON written before ``strategy.loss_transform`` existed is a run that
        transformed no loss: it reads as ``"none"`` (not the "auto" default),
        so its hash stays the one it was stored with.
        """
        data = json.loads(text)
        strategy = data.get("strategy") if isinstance(data, dict) else None
        if isinstance(strategy, dict) and "loss_transform" not in strategy:
            strategy["loss_transform"] = "none"
        return cls.model_validate(data)


COMPILED_MODELS = ("linear_svm", "logreg")
"""The models ``run.executor = "auto"`` trains with the compiled executor on the in-process engine."""


DEFENCE_RATIOS = ("clip_loss", "max_update_norm", "max_size_ratio")
"""The shared settings that are off at 0 (the others of ``COMMON_SETTINGS``: ``loss_transform``, ``loss_clip``)."""


def loss_transform_of(scenario: Scenario) -> str:
    """The loss transform a run of ``scenario`` applies: "none" for a strategy that reads no loss, else
    ``strategy.loss_transform`` with "auto" resolved (median_mad for TERM with t < 0)."""
    spec = STRATEGIES[scenario.strategy.name]
    if not spec.strategy.needs_loss:
        return "none"
    tilt = getattr(scenario.strategy.settings, spec.tilt) if spec.tilt else None
    return resolve_loss_transform(scenario.strategy.loss_transform, tilt)


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


def clients_per_round_message(clients_per_round: int, num_devices: int) -> str:
    return (
        f"run.clients_per_round = {clients_per_round} but the dataset has {num_devices} devices; "
        f"allowed: 1..{num_devices} (raise data.num_devices for synthetic data, or sample fewer devices)"
    )


def check_fits_dataset(scenario: Scenario, num_devices: int) -> None:
    """Raise ConfigError when the scenario asks for more devices per round than the dataset has."""
    if scenario.run.clients_per_round > num_devices:
        raise ConfigError(clients_per_round_message(scenario.run.clients_per_round, num_devices))
