"""The rows of the store, and their conversion to SQL parameters, from query results, and to JSON."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import MISSING, dataclass, fields
from operator import attrgetter, itemgetter
from typing import Any

import numpy as np

from term_fl.common.jsonable import plain
from term_fl.common.keys import EVAL_SPLITS

from . import schema


@dataclass(frozen=True, slots=True)
class TrainRow:
    """One sampled device's training reply in one round (a dict with these keys works too).

    Parameters
    ----------
    partition_id
        The device.
    sampled
        Whether the device was sampled this round (default True).
    included
        Whether its reply was valid and aggregated (default True).
    train_loss
        F_k: loss of the incoming global model on the device's train split.
    train_loss_after
        Loss after local training.
    tilted_weight
        The aggregation weight the strategy applied (None if not included).
    num_examples
        Training examples the device reported (None if no reply).
    """

    partition_id: int
    sampled: bool = True
    included: bool = True
    train_loss: float | None = None
    train_loss_after: float | None = None
    tilted_weight: float | None = None
    num_examples: int | None = None


@dataclass(frozen=True, slots=True)
class EvalRow:
    """One device's evaluation of the global model on one split (a dict with these keys works too)."""

    partition_id: int
    split: str
    loss: float | None
    accuracy: float | None
    correct: int
    examples: int


@dataclass(frozen=True, slots=True)
class RunInfo:
    """A row of ``runs``, with its JSON columns decoded."""

    run_id: str
    name: str
    scenario: str
    engine: str
    strategy: str
    strategy_params: dict[str, Any]
    seed: int
    config_hash: str
    config: dict[str, Any]
    data: dict[str, Any]
    status: str
    error: str | None
    rounds_planned: int
    rounds_completed: int
    started_at: float
    finished_at: float | None
    run_dir: str | None
    summary: dict[str, Any] | None
    heartbeat_at: float | None = None
    """The writer's last sign of life (None for runs of schema version 1)."""
    damaged: tuple[str, ...] = ()
    """JSON columns of the row that could not be decoded (their values read as empty); () for a sound row."""


# -- row conversion -----------------------------------------------------------

_REQUIRED = object()


def _convert(convert: Callable[[Any], Any], value: Any, what: str) -> Any:
    """convert(value), or a ValueError naming the value's place."""
    try:
        return convert(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what}: {exc}") from None


def _as_real(value: Any) -> float | None:
    """A float for a REAL column; NaN and None become None (SQL NULL)."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)):
        raise TypeError(f"expected a number, got {value!r}")
    value = float(value)
    return None if value != value else value


def _as_finite_real(value: Any) -> float | None:
    """A float for a REAL column that mirrors a JSON value: NaN, ±inf and None become None (SQL NULL)."""
    value = _as_real(value)
    return value if value is None or math.isfinite(value) else None


def _as_int(value: Any) -> int:
    """An int for an INTEGER column; integral floats (3.0) pass, 3.5 or '3' do not."""
    if isinstance(value, (float, np.floating)):
        if not float(value).is_integer():
            raise ValueError(f"expected an integer, got {value!r}")
        return int(value)
    try:
        return int(value.__index__())
    except AttributeError:
        raise TypeError(f"expected an integer, got {value!r}") from None


def _as_optional_int(value: Any) -> int | None:
    """An int, or None for None and NaN (a count the device did not send)."""
    if value is None or (isinstance(value, (float, np.floating)) and value != value):
        return None
    return _as_int(value)


def _as_flag(value: Any) -> int:
    """0 or 1 for a bool column."""
    flag = int(value) if isinstance(value, np.bool_) else _as_int(value)
    if flag not in (0, 1):
        raise ValueError(f"expected 0/1 or a bool, got {value!r}")
    return flag


def _as_split(value: Any) -> str:
    _check_split(value)
    return value


def _check_split(split: Any) -> None:
    if split not in EVAL_SPLITS:
        raise ValueError(f"split must be one of {EVAL_SPLITS}, got {split!r}")


class _RowSpec:
    """How rows of one per-device table become SQL parameters (after run_id, round)."""

    def __init__(self, cls: type, converters: dict[str, Callable[[Any], Any]]) -> None:
        self.cls = cls
        self.names = tuple(f.name for f in fields(cls))
        self.key_set = frozenset(self.names)
        self.defaults = tuple(_REQUIRED if f.default is MISSING else f.default for f in fields(cls))
        self.converters = tuple(converters[name] for name in self.names)
        self._attributes = attrgetter(*self.names)
        self._items = itemgetter(*self.names)

    def fast(self, run_id: str, round: int, rows: list[Any], what: str) -> Iterator[tuple[Any, ...]]:
        """Parameters without conversion where a row is a dataclass or a dict with every key."""
        prefix = (run_id, round)
        for i, row in enumerate(rows):
            if type(row) is self.cls:
                yield prefix + self._attributes(row)
            elif type(row) is dict and row.keys() == self.key_set:
                yield prefix + self._items(row)
            else:
                yield self._converted(prefix, i, row, what)

    def convert(self, run_id: str, round: int, rows: list[Any], what: str) -> Iterator[tuple[Any, ...]]:
        """Parameters converted and validated value by value."""
        prefix = (run_id, round)
        for i, row in enumerate(rows):
            yield self._converted(prefix, i, row, what)

    def _converted(self, prefix: tuple[str, int], i: int, row: Any, what: str) -> tuple[Any, ...]:
        if isinstance(row, Mapping):
            unknown = row.keys() - self.key_set
            if unknown:
                raise ValueError(f"{what}[{i}] has unknown keys {sorted(unknown)}; allowed: {list(self.names)}")
            values = [row.get(name, default) for name, default in zip(self.names, self.defaults, strict=True)]
        else:
            values = [getattr(row, name, default) for name, default in zip(self.names, self.defaults, strict=True)]
        params = list(prefix)
        for name, convert, value in zip(self.names, self.converters, values, strict=True):
            if value is _REQUIRED:
                raise ValueError(f"{what}[{i}] has no {name!r}")
            try:
                params.append(convert(value))
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{what}[{i}][{name!r}]: {exc}") from None
        return tuple(params)


_TRAIN_ROWS = _RowSpec(
    TrainRow,
    {"partition_id": _as_int, "sampled": _as_flag, "included": _as_flag, "train_loss": _as_real,
     "train_loss_after": _as_real, "tilted_weight": _as_real, "num_examples": _as_optional_int},
)  # fmt: skip
_EVAL_ROWS = _RowSpec(
    EvalRow,
    {"partition_id": _as_int, "split": _as_split, "loss": _as_real, "accuracy": _as_real,
     "correct": _as_int, "examples": _as_int},
)  # fmt: skip


# -- decoding -----------------------------------------------------------------


def _columns(rows: list[tuple[Any, ...]], dtypes: dict[str, Any]) -> dict[str, np.ndarray]:
    """Column arrays of query rows; NULL becomes NaN in float columns."""
    if not rows:
        return {name: np.empty(0, dtype=dtype) for name, dtype in dtypes.items()}
    columns = zip(*rows, strict=True)
    return {name: np.array(column, dtype=dtype) for (name, dtype), column in zip(dtypes.items(), columns, strict=True)}


def _nan_if_none(value: float | None) -> float:
    return math.nan if value is None else value


def _run_info(row: tuple[Any, ...], now: float) -> RunInfo:
    (run_id, name, scenario, engine, strategy, params, seed, config_hash, config, data, status, error,
     planned, completed, started, finished, run_dir, summary, heartbeat) = row  # fmt: skip
    if status == "running" and now - (heartbeat if heartbeat is not None else started) > schema.LOST_AFTER_S:
        status = "lost"
    damaged: list[str] = []

    def decode(text: str | None, column: str, empty: Any) -> Any:
        """A JSON column; a damaged one (hand-edited, a disk fault) reads as ``empty`` and is named in ``damaged``."""
        if text is None:
            return empty
        try:
            return json.loads(text)
        except (ValueError, RecursionError):
            damaged.append(column)
            return empty

    return RunInfo(
        run_id=run_id, name=name, scenario=scenario, engine=engine, strategy=strategy,
        strategy_params=decode(params, "strategy_params_json", {}), seed=seed, config_hash=config_hash,
        config=decode(config, "config_json", {}), data=decode(data, "data_json", {}), status=status, error=error,
        rounds_planned=planned, rounds_completed=completed, started_at=started, finished_at=finished,
        run_dir=run_dir, summary=decode(summary, "summary_json", None), heartbeat_at=heartbeat,
        damaged=tuple(damaged),
    )  # fmt: skip


# -- JSON ---------------------------------------------------------------------


def _dumps(obj: Any, what: str) -> str:
    try:
        return json.dumps(plain(obj), allow_nan=False)
    except TypeError as exc:
        raise ValueError(f"{what}: {exc}") from None


def _nan_for_null(obj: Any) -> Any:
    """Statistics are numbers: a JSON null (a stored NaN or ±inf) reads back as NaN."""
    if obj is None:
        return math.nan
    if isinstance(obj, dict):
        return {k: _nan_for_null(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_nan_for_null(v) for v in obj]
    return obj
