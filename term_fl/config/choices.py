"""The tables that choose among registered alternatives: ``[strategy]``, ``[data]`` and ``[model]``.

Each such table holds ``name`` (the chosen alternative), the settings every
alternative shares (the strategies' defences; the data's seed, splits and
noise) and one sub-table per registered alternative, whose fields are that
alternative's settings model (its defaults, ranges and checks)::

    [strategy]
    name = "term"
    clip_loss = 3            # every strategy's
    [strategy.term]
    t = 10
    [strategy.qffl]          # used when a sweep or a reference runs q-FFL
    q = 1

The chosen alternative's sub-table is what runs; the others are the settings
a sweep over ``name`` or a reference run takes. Every sub-table is validated
by its own model, so a typo in any of them is an error.

The flat form of scenario files written before the sub-tables
(``[strategy] t = 10`` beside ``q = 1``) is read as per-alternative
defaults: a flat key goes to every alternative that has a setting of that
name (where its own sub-table does not set it), so a key the chosen
alternative lacks is ignored, as it always was. Keys given on the command
line or in a sweep's cells are stricter (:mod:`term_fl.config.loading`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, Field, create_model, field_validator, model_validator

from term_fl.common.settings import HASHED_WHEN_SET, NOT_HASHED
from term_fl.data.registry import DATASETS, DEFAULT_SIZE_LIMIT_GB
from term_fl.learning.registry import MODELS
from term_fl.strategies.registry import COMMON_SETTINGS, STRATEGIES

from .tables import Table

__all__ = ["ChoiceTable", "DataConfig", "ModelConfig", "StrategyConfig", "spread_flat_keys"]


class ChoiceTable(Table):
    """``name``, the shared settings, and one sub-table per alternative (built by :func:`choice_table`)."""

    kind: ClassVar[str] = ""  # "strategy", "dataset", "model": how messages call an alternative
    alternatives: ClassVar[dict[str, type[BaseModel]]] = {}  # alternative -> its sub-table model

    name: str = Field("", description="the chosen alternative (choice_table makes it one of the registered names)")

    @model_validator(mode="before")
    @classmethod
    def _flat_keys_are_defaults(cls, data: Any) -> Any:
        """The flat form: a key of some alternatives' settings becomes a default of each of those alternatives."""
        return spread_flat_keys(cls, data) if isinstance(data, Mapping) else data

    @property
    def settings(self) -> BaseModel:
        """The chosen alternative's settings (its sub-table)."""
        return getattr(self, self.name)  # type: ignore[attr-defined]

    @classmethod
    def shared_keys(cls) -> tuple[str, ...]:
        """The settings every alternative shares (neither ``name`` nor a sub-table)."""
        return tuple(key for key in cls.model_fields if key != "name" and key not in cls.alternatives)

    def shared_settings(self) -> dict[str, Any]:
        """The shared settings' values."""
        return {key: getattr(self, key) for key in self.shared_keys()}

    @classmethod
    def keys_of(cls, alternative: str) -> tuple[str, ...]:
        """The settings of one alternative (its sub-table's fields)."""
        return tuple(cls.alternatives[alternative].model_fields)

    @classmethod
    def owners(cls, key: str) -> list[str]:
        """The alternatives that have a setting named ``key``."""
        return [name for name, table in cls.alternatives.items() if key in table.model_fields]


def spread_flat_keys(table: type[ChoiceTable], data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` with each flat alternative key moved into the sub-tables of the alternatives that have it.

    A sub-table's own value wins over the flat key (the more specific form);
    keys that no alternative has stay, for validation to name.
    """
    out = dict(data)
    for key in list(out):
        owners = [] if key == "name" or key in table.model_fields else table.owners(key)
        if not owners:
            continue
        value = out.pop(key)
        for owner in owners:
            sub = out.get(owner, {})
            if isinstance(sub, Mapping):  # otherwise validation reports the sub-table (or keeps a built model)
                out[owner] = {key: value, **sub}
    return out


def choice_table(
    name: str, doc: str, *, kind: str, shared: type[ChoiceTable], default: str,
    alternatives: Mapping[str, type[BaseModel]],
) -> type[ChoiceTable]:
    """The model of a table that chooses among ``alternatives`` (name -> settings model)."""
    subtables: dict[str, Any] = {}
    for alternative, settings in alternatives.items():
        if alternative in shared.model_fields or alternative == "name":
            raise TypeError(f"the {kind} {alternative!r} has the name of a setting of the [{name}] table")
        clash = set(settings.model_fields) & (set(shared.model_fields) | set(alternatives))
        if clash:
            raise TypeError(f"the {kind} {alternative!r} defines {sorted(clash)}, a shared setting or a {kind}'s name")
        title = "".join(part.title() for part in alternative.split("_"))
        subtable = create_model(f"{title}Table", __base__=(Table, settings), __doc__=settings.__doc__)
        subtables[alternative] = (subtable, Field(default_factory=subtable, description=f"{alternative}'s settings"))
    names = tuple(alternatives)
    model = create_model(
        name, __base__=shared, __doc__=doc,
        name=(Literal[names], Field(default, description=f"the {kind}: {', '.join(names)}")),
        **subtables,
    )
    model.kind = kind
    model.alternatives = {alternative: subtables[alternative][0] for alternative in alternatives}
    return model


class _StrategyShared(COMMON_SETTINGS, ChoiceTable):  # type: ignore[misc, valid-type]
    """The settings every strategy takes (the defences against hostile clients)."""


MAX_NOISE_SCALE = 1e6
"""The largest ``data.noise_scale``: features of a few units scaled by it stay far inside float32's range
(3.4e38), and so do the losses and gradients of a model trained on them."""


class _DataShared(ChoiceTable):
    """The settings every dataset shares: the data seed, the per-device splits, the injected noise."""

    seed: Annotated[int | None, NOT_HASHED] = Field(
        None, ge=0, le=2**31 - 1, description="data seed (None = run.seed: re-split per seed)")
    train_fraction: float = Field(0.8, gt=0.0, lt=1.0)
    val_fraction: float = Field(0.1, gt=0.0, lt=1.0)
    test_fraction: float = Field(0.1, gt=0.0, lt=1.0)
    noise: Literal["none", "random_labels", "flip_labels", "scale_features"] = "none"
    noisy_devices: list[int] = Field(default_factory=list)
    num_noisy: int = Field(0, ge=0)
    noise_scale: float = Field(
        10.0, gt=0.0, le=MAX_NOISE_SCALE, allow_inf_nan=False,
        description="factor of the noisy devices' features (noise = scale_features)")
    # added in 0.3: hashed only away from 0, so earlier hashes stay valid
    min_test_samples: Annotated[int, HASHED_WHEN_SET] = Field(
        0, ge=0, le=1_000_000,
        description="at least this many test samples per device (taken from train, then validation; each split "
                    "keeps one), so that a small device's test accuracy, and the worst 10%, are not one or two "
                    "predictions; 0: the split fractions alone",
    )
    size_limit_gb: Annotated[float, NOT_HASHED] = Field(
        DEFAULT_SIZE_LIMIT_GB, gt=0.0, le=1e6, allow_inf_nan=False,
        description="refuse data whose samples are estimated to take more memory than this many GB (synthetic "
                    "data: from num_devices and max_samples), before anything is generated")

    @model_validator(mode="after")
    def _fractions_sum_to_one(self) -> _DataShared:
        total = self.train_fraction + self.val_fraction + self.test_fraction
        if not math.isclose(total, 1.0, abs_tol=1e-9):
            raise ValueError(
                "train_fraction + val_fraction + test_fraction must sum to 1 "
                f"(got {self.train_fraction} + {self.val_fraction} + {self.test_fraction} = {total:g})"
            )
        return self

    @field_validator("noisy_devices")
    @classmethod
    def _non_negative_devices(cls, value: list[int]) -> list[int]:
        bad = [d for d in value if d < 0]
        if bad:
            raise ValueError(f"device indices must be >= 0 (got {bad})")
        return sorted(set(value))


StrategyConfig = choice_table(
    "StrategyConfig", "Which server strategy aggregates the client updates, and its parameters.",
    kind="strategy", shared=_StrategyShared, default="term",
    alternatives={name: spec.settings for name, spec in STRATEGIES.items()},
)
DataConfig = choice_table(
    "DataConfig", "The federated dataset and its per-device splits.",
    kind="dataset", shared=_DataShared, default="synthetic",
    alternatives={name: spec.settings for name, spec in DATASETS.items()},
)
ModelConfig = choice_table(
    "ModelConfig", "The model every client trains.",
    kind="model", shared=ChoiceTable, default="logreg",
    alternatives={name: spec.settings for name, spec in MODELS.items()},
)
