"""The plain tables of a scenario: ``[run]``, ``[client]``, ``[resources]``, ``[selection]``, and their base.

Every table refuses unknown keys and a boolean where a number is due; each
field's default, range and description are the only ones (the README and
the error messages follow them). How a setting enters the config hash is
declared at the field (:mod:`term_fl.common.settings`).
"""

from __future__ import annotations

import typing
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from term_fl.common.settings import HASHED_WHEN_SET, NOT_HASHED
from term_fl.maths.fairness import STATISTICS
from term_fl.strategies.registry import STRATEGIES

__all__ = ["ClientConfig", "ResourcesConfig", "RunConfig", "SelectionConfig", "Table"]


def _admits_bool(annotation: Any) -> bool:
    """Whether a field's type accepts a bool (bool itself, Any, or a union/list holding one)."""
    if annotation is bool or annotation is Any:
        return True
    return any(_admits_bool(arg) for arg in typing.get_args(annotation))


class Table(BaseModel):
    """A table of a scenario: unknown keys refused, values checked on assignment too, no boolean as a number."""

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


StrategyName = Literal[tuple(STRATEGIES)]  # type: ignore[valid-type]
MAX_TIMEOUT_S = 7 * 24 * 3600.0
"""The longest node or round timeout (a week): a finite number of seconds, as every client must read it."""


class RunConfig(Table):
    """How the federation runs."""

    rounds: int = Field(50, ge=1, le=100_000, description="number of federated rounds")
    clients_per_round: int = Field(10, ge=1, description="devices sampled for training each round")
    seed: Annotated[int, NOT_HASHED] = Field(0, ge=0, le=2**31 - 1, description="seed of every random choice of the run")
    engine: Annotated[Literal["flower", "inprocess"], NOT_HASHED] = Field(
        "flower", description="flower: Flower's Simulation Engine (Ray); inprocess: same code, one process"
    )
    # the sequential executor is the reference: hashes from before run.executor existed stay valid;
    # "auto" is hashed as executor_of resolves it (config.hashing)
    executor: Annotated[Literal["auto", "sequential", "cohort", "compiled"], HASHED_WHEN_SET] = Field(
        "auto",
        description="how the in-process engine trains a round's clients: sequential one by one (the reference); "
        "cohort as one batched torch computation; compiled as cohort, the linear models' SGD in one compiled "
        "kernel (numba); both equal to the reference to float32 rounding; auto: compiled for linear_svm and "
        "logreg on the in-process engine, else sequential (executor_of)",
    )
    evaluate_fraction: float = Field(
        1.0, gt=0.0, le=1.0, description="fraction of devices evaluated on val and test each round"
    )
    # added in 0.3: hashed only away from uniform, so earlier hashes stay valid
    sampling: Annotated[Literal["uniform", "size"], HASHED_WHEN_SET] = Field(
        "uniform",
        description="how each training round samples its devices: uniform, or size (probability proportional to "
                    "the device's training examples n_k, without replacement, as the q-FFL and TERM reference code)",
    )
    # which rounds are recorded, not the model (the tail statistics read them): hashed away from 1
    evaluate_every: Annotated[int, HASHED_WHEN_SET] = Field(
        1, ge=1, le=100_000,
        description="evaluate the global model on val and test every N rounds (the last round always)",
    )
    max_failed_rounds: Annotated[int, NOT_HASHED] = Field(
        3, ge=1, description="stop with an error after this many consecutive rounds without a valid reply"
    )
    node_timeout: Annotated[float, NOT_HASHED] = Field(
        120.0, gt=0, le=MAX_TIMEOUT_S, allow_inf_nan=False,
        description="seconds to wait for all expected nodes to connect (at most a week)")
    round_timeout: Annotated[float, NOT_HASHED] = Field(
        600.0, gt=0, le=MAX_TIMEOUT_S, allow_inf_nan=False,
        description="seconds to wait for the replies of one round (at most a week)")
    checkpoint_every: Annotated[int, NOT_HASHED] = Field(
        1, ge=1, le=100_000,
        description="keep the global model and the strategy's state in the run folder every N rounds (and after "
                    "the last), for `term-fl run --resume RUN_ID`; a resumed run repeats at most N - 1 rounds",
    )
    name: Annotated[str, NOT_HASHED] = Field(
        "", description="run name shown in tables and the dashboard ('' = scenario name)")
    # where and how the run computes, not what: two settings that never move a number
    threads: Annotated[int, NOT_HASHED] = Field(
        0, ge=0, le=1024,
        description="torch's thread count for the run (0: torch's own; term-fl sweep runs each cell with 1 unless "
                    "set): clients train on one thread whatever it is, so it never changes a number",
    )
    ray_address: Annotated[str, NOT_HASHED] = Field(
        "", pattern=r"^(|auto|[A-Za-z0-9.\-]+:\d{1,5}|\[[0-9A-Fa-f:]+\]:\d{1,5})$",
        description="an existing Ray cluster to join, as HOST:PORT of its head (the GCS port of `ray start --head`) "
                    "or auto (the cluster started on this machine): Flower's Simulation Engine, and the cells of "
                    "term-fl sweep, run on it; term-fl never stops it ('': a private Ray instance, started and "
                    "stopped by term-fl)",
    )
    reference: Annotated[list[StrategyName], NOT_HASHED] = Field(  # type: ignore[valid-type]
        default_factory=list,
        description="baseline strategies that `term-fl run` also runs, in order, on the same seed and settings "
                    "(plain: no client tilt), and shows beside the run with the differences; a plain name is a "
                    "one-element list; 'none' or [] runs the scenario alone",
    )

    @field_validator("reference", mode="before")
    @classmethod
    def _one_name_or_a_list(cls, value: Any) -> Any:
        """``"fedavg"`` (the form of scenario files before lists) is ``["fedavg"]``; ``"none"`` is ``[]``."""
        if isinstance(value, str):
            return [] if value == "none" else [value]
        return value

    @field_validator("reference")
    @classmethod
    def _each_once(cls, value: list[str]) -> list[str]:
        repeated = sorted({name for name in value if value.count(name) > 1})
        if repeated:
            raise ValueError(f"lists {', '.join(repeated)} more than once; name each reference strategy once")
        return value


class ClientConfig(Table):
    """Local training on each device."""

    lr: float = Field(0.1, gt=0.0, le=100.0)
    epochs: int = Field(1, ge=1, le=10_000)
    batch_size: int = Field(32, ge=1, le=1_000_000)
    tau: float = Field(0.0, ge=-1000.0, le=1000.0, description="sample-level tilt on the local loss (hierarchical TERM)")
    weight_decay: float = Field(0.0, ge=0.0, le=10.0)
    device: str = Field("auto", pattern=r"^(auto|cpu|cuda(:\d+)?)$", description="auto | cpu | cuda | cuda:i")


class ResourcesConfig(Table):
    """Resources of each virtual client in the Simulation Engine (None = chosen from the machine)."""

    num_cpus: float | None = Field(None, gt=0.0, le=1024.0)
    num_gpus: float | None = Field(None, ge=0.0, le=64.0)


class SelectionConfig(Table):
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
    reference: Literal[("fedavg", "fedavg_uniform")] = Field(  # type: ignore[valid-type]
        "fedavg", description="the baseline whose validation `average` a candidate may fall at most max_mean_drop "
                              "below: fedavg (weighted by n_k) or fedavg_uniform (1/m)"
    )
    seeds: list[int] = Field(
        default_factory=list,
        description="the selection seeds: the parameters are chosen on their validation split; [] = every seed of "
                    "the sweep (selection and report then share seeds, and the sweep says so)",
    )
    report_seeds: list[int] = Field(
        default_factory=list,
        description="the report seeds: the tables, paired differences and tests come from their test split; "
                    "[] = every seed of the sweep not in `seeds`",
    )

    @field_validator("seeds", "report_seeds")
    @classmethod
    def _distinct_seeds(cls, value: list[int]) -> list[int]:
        if any(isinstance(s, bool) or s < 0 for s in value):
            raise ValueError(f"seeds must be integers >= 0 (got {value})")
        if len(set(value)) != len(value):
            raise ValueError(f"lists a seed more than once (got {value})")
        return sorted(value)

    @model_validator(mode="after")
    def _disjoint(self) -> SelectionConfig:
        shared = sorted(set(self.seeds) & set(self.report_seeds))
        if shared:
            raise ValueError(f"selection.seeds and selection.report_seeds share seeds {shared}: a seed that chose a "
                             "parameter cannot also report it")
        return self

    def split_seeds(self, seeds: list[int]) -> tuple[list[int], list[int]]:
        """The sweep's ``seeds`` as (selection seeds, report seeds).

        Neither list set: both are every seed (the sweep says they are shared).
        Only ``report_seeds``: nothing is chosen, every table is on them.
        """
        ran = sorted(set(seeds))
        if not self.seeds and not self.report_seeds:
            return ran, ran
        report = self.report_seeds or [s for s in ran if s not in self.seeds]
        return [s for s in ran if s in self.seeds], [s for s in ran if s in report]

    @property
    def split(self) -> str:
        """Where the selection reads the validation statistics: validation[_clean][_tail]."""
        return "validation" + ("_clean" if self.devices == "clean" else "") + ("_tail" if self.tail > 1 else "")
