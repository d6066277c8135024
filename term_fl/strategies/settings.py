"""The parameters of a strategy, validated once: by the strategy class and by the scenario's [strategy] table.

Each strategy declares its parameters as a :class:`Settings` model (default,
range, description); :mod:`term_fl.config` builds the scenario's
``[strategy]`` table from these models through the registry, and the
strategy class validates its arguments with the same model: one rule, one
message. :class:`Defences` are the settings every strategy takes (the
FedAvg template's opt-in defences, :mod:`term_fl.maths.robust`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from term_fl.common.keys import TRAIN_LOSS_BEFORE, TRAIN_LOSS_BEFORE_SUM
from term_fl.common.settings import HASHED_WHEN_SET

__all__ = ["LOSS_KEYS", "LossTransform", "Defences", "Settings", "loss_reduction_field", "resolve_loss_transform"]

LossTransform = Literal["auto", "none", "median_mad", "rank"]
"""``loss_transform``'s values: "auto" is "median_mad" for TERM with t < 0 and "none" otherwise."""


def resolve_loss_transform(setting: str, tilt: float | None) -> str:
    """The loss transform a strategy applies: ``setting``, where "auto" is "median_mad" for a negative tilt.

    ``tilt`` is TERM's t (None for a strategy without one): only TERM's
    robust mode (t < 0) is defended by default; elsewhere "auto" is "none",
    so FedAvg and TermFedAvg(t >= 0) keep their numbers.
    """
    if setting != "auto":
        return setting
    return "median_mad" if tilt is not None and tilt < 0 else "none"

LOSS_KEYS = {"mean": TRAIN_LOSS_BEFORE, "sum": TRAIN_LOSS_BEFORE_SUM}
"""Metric key of F_k for each loss reduction: the mean or the summed loss of the incoming model."""


def loss_reduction_field() -> Any:
    """The ``loss_reduction`` setting of the strategies that weight devices by F_k (TERM, q-FFL): one definition."""
    return Field("mean", description="F_k the clients report: mean loss (train_loss_before) or, as TERM's "
                                     "reference code, the loss summed over the device's samples (train_loss_before_sum)")


class Settings(BaseModel):
    """The parameters of a strategy, validated once: by the strategy class and by the scenario's [strategy] table.

    Each field's default, range and description are the only ones: the
    scenario schema (:mod:`term_fl.config`) takes its ``[strategy]`` fields
    from these models through the registry.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    @classmethod
    def of(cls, owner: str, **values: Any) -> Settings:
        """Validate ``values``; a ValueError naming ``owner``, the field, what is allowed and the value otherwise."""
        try:
            return cls(**values)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc']))}: {e['msg']} (got {e['input']!r})" for e in exc.errors()
            )
            raise ValueError(f"{owner}: {problems}") from None


def _off_or_ratio(value: float) -> float:
    if value != 0 and value < 1:
        raise ValueError("must be 0 (off) or a ratio >= 1 to the round's median")
    return value


OffOrRatio = Annotated[float, AfterValidator(_off_or_ratio)]


class Defences(Settings):
    """Opt-in defences against hostile clients (:mod:`term_fl.maths.robust`), settings of every strategy."""

    clip_loss: OffOrRatio = Field(
        0.0, ge=0.0, le=1e6, allow_inf_nan=False,
        description="defence, off at 0: a reported loss above clip_loss x the round's median is lowered to it "
                    "(with t > 0 a client reporting a huge loss would take all the weight)",
    )
    max_update_norm: OffOrRatio = Field(
        0.0, ge=0.0, le=1e6, allow_inf_nan=False,
        description="defence, off at 0: an update longer than max_update_norm x the round's median update norm "
                    "is scaled down to it (a client sending huge weights would be averaged in)",
    )
    # Added after stores held hashes: they enter the hash only where they act (Scenario.strategy_params)
    loss_transform: Annotated[LossTransform, HASHED_WHEN_SET] = Field(
        "auto",
        description="each reported loss made relative to its round before a strategy reads it: none, median_mad "
                    "(bounded to median +- loss_clip robust standard deviations; TERM tilts by that score, so t "
                    "has no units) or rank; auto = median_mad for TERM with t < 0, none otherwise",
    )
    loss_clip: Annotated[float, HASHED_WHEN_SET] = Field(
        3.0, gt=0.0, le=1e6, allow_inf_nan=False,
        description="median_mad's bound c, in robust standard deviations (1.4826 x the median absolute deviation)",
    )
    max_size_ratio: Annotated[OffOrRatio, HASHED_WHEN_SET] = Field(
        0.0, ge=0.0, le=1e6, allow_inf_nan=False,
        description="defence, off at 0: a reported num-examples above max_size_ratio x the round's median is "
                    "lowered to it (a client reporting 1e300 examples would take all the weight)",
    )
