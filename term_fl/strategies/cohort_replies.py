"""A round's replies as one stacked record and one metric table, and their filter.

The in-process engine's batch executors answer a round's messages at once:
instead of one reply Message per client, :class:`CohortReplies` holds the
trained models stacked (:class:`~.stacked.StackedModels`, client k in row k)
and the metrics as one table (a column per key). The strategies' template
filters, sorts and aggregates that form directly (:func:`filter_cohort`),
with the checks, reasons, warnings and order of the per-message reply filter
(:mod:`.replies`), so a round gives the same results bit for bit; nothing is
unpacked per client but the plain metric dicts of the round's report. The
Flower engine and deployments keep per-client Messages.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from logging import INFO, WARNING

import numpy as np
from flwr.app import ArrayRecord
from flwr.supercore import log
from numpy.typing import NDArray

from term_fl.common.keys import PARTITION_ID

from .reports import ExcludedReply, reply_name
from .stacked import StackedModels

__all__ = ["CohortReplies", "FilteredCohort", "filter_cohort"]


@dataclass(frozen=True)
class CohortReplies:
    """The replies of m clients to one batch of messages, client k in row k.

    Attributes
    ----------
    node_ids : list of int
        The node each reply comes from.
    metrics : mapping
        Metric key -> column ``(m,)`` of numbers (int64 or float64), keys in
        the order the ClientApp writes them.
    models : StackedModels or None
        The trained models of training replies; None for evaluation replies.
    """

    node_ids: list[int]
    metrics: Mapping[str, NDArray]
    models: StackedModels | None = None

    def __post_init__(self) -> None:
        m = len(self.node_ids)
        shapes = {key: np.shape(column) for key, column in self.metrics.items()}
        if any(shape != (m,) for shape in shapes.values()) or (self.models is not None and len(self.models) != m):
            raise ValueError(f"CohortReplies of {m} clients needs columns (m,) and m models; got {shapes}.")

    def __len__(self) -> int:
        return len(self.node_ids)


@dataclass(frozen=True)
class FilteredCohort:
    """The valid rows of a :class:`CohortReplies`, sorted by partition id, and the excluded ones."""

    node_ids: list[int]
    metrics: list[dict[str, int | float]]  # each valid reply's metrics as plain numbers
    models: StackedModels | None  # None when no row is valid, or for evaluation replies
    excluded: list[ExcludedReply]


def _partitions(cohort: CohortReplies, key: str) -> list[int | None]:
    """Each row's partition id, None where its column is missing or not an integral finite number."""
    column = cohort.metrics.get(key)
    if column is None:
        return [None] * len(cohort)
    if np.asarray(column).dtype.kind in "iu":
        return column.tolist()  # integers: every value is a partition id
    return [int(v) if math.isfinite(v) and float(v).is_integer() else None for v in column.tolist()]


def _metric_problems(
    cohort: CohortReplies, required: Sequence[str], positive: Sequence[str], nonnegative: Sequence[str]
) -> list[str | None]:
    """Why each row's metrics are unusable (the first reason, as the per-message filter words it), or None."""
    reasons: list[str | None] = [None] * len(cohort)
    for key in required:
        column = cohort.metrics.get(key)
        if column is not None and _all_valid(column, key in positive, key in nonnegative):
            continue  # no row has a problem with this key: skip the row by row checks
        values = [None] * len(cohort) if column is None else column.tolist()
        for k, value in enumerate(values):
            if reasons[k] is not None:
                continue
            if value is None:
                reasons[k] = f"missing metric '{key}'"
            elif not math.isfinite(value):
                reasons[k] = f"metric '{key}' is not finite: {value}"
            elif key in positive and value <= 0:
                reasons[k] = f"metric '{key}' must be > 0, got {value}"
            elif key in nonnegative and value < 0:
                reasons[k] = f"metric '{key}' must be >= 0, got {value}"
    return reasons


def _all_valid(column: NDArray, positive: bool, nonnegative: bool) -> bool:
    """Whether every value of a metric column is finite (and > 0 / >= 0 where asked)."""
    values = np.asarray(column, dtype=np.float64)
    return bool(np.isfinite(values).all() and (not positive or (values > 0).all())
                and (not nonnegative or (values >= 0).all()))


def _model_problems(models: StackedModels, reference: ArrayRecord | None) -> list[str | None]:
    """Why each row's model is unusable (keys or shapes unlike the global model's, non-finite values), or None."""
    m = len(models)
    if reference is not None:
        if set(models.arrays) != set(reference.keys()):
            return [f"array keys {sorted(models.arrays)} differ from the global model's "
                    f"{sorted(reference.keys())}"] * m
        for key, values in models.arrays.items():
            if tuple(values.shape[1:]) != tuple(reference[key].shape):
                return [f"array '{key}' has shape {tuple(values.shape[1:])}, the global model's is "
                        f"{tuple(reference[key].shape)}"] * m
    reasons: list[str | None] = [None] * m
    for key, values in models.arrays.items():
        if values.dtype.kind not in "fc":
            continue
        finite = np.isfinite(values.reshape(m, -1)).all(axis=1)
        for k in np.flatnonzero(~finite).tolist():
            reasons[k] = reasons[k] or f"array '{key}' has non-finite values"
    return reasons


def filter_cohort(  # noqa: PLR0913
    cohort: CohortReplies,
    *,
    required_metrics: Sequence[str],
    partition_key: str = PARTITION_ID,
    reference_arrays: ArrayRecord | None = None,
    positive_metrics: Sequence[str] = (),
    nonnegative_metrics: Sequence[str] = (),
    context: str = "aggregate",
) -> FilteredCohort:
    """:func:`~.replies.filter_train_replies` (or ``filter_replies`` without models) on the stacked form.

    The same checks, in the same order, with the same reasons and warnings;
    the valid rows sorted by partition id (then node id; rows without one
    last, by node id), their models taken from the stack as they are.
    """
    # Check each row's metrics, then its model
    partitions = _partitions(cohort, partition_key)
    reasons = _metric_problems(cohort, required_metrics, positive_metrics, nonnegative_metrics)
    if cohort.models is not None:
        model_reasons = _model_problems(cohort.models, reference_arrays)
        reasons = [r if r is not None else model_reasons[k] for k, r in enumerate(reasons)]
    # Sort as the per-message filter does, and log each row left out
    order = sorted(range(len(cohort)), key=lambda k: (0, partitions[k], cohort.node_ids[k])
                   if partitions[k] is not None else (1, cohort.node_ids[k], 0))
    excluded = [ExcludedReply(cohort.node_ids[k], partitions[k], reasons[k]) for k in order if reasons[k] is not None]
    for item in excluded:
        log(WARNING, "%s: excluding reply from %s: %s", context, reply_name(item.node_id, item.partition_id),
            item.reason)
    valid = [k for k in order if reasons[k] is None]
    log(INFO, "%s: %d valid replies, %d excluded", context, len(valid), len(excluded))
    # The valid rows' metrics as plain numbers, and their models (the stack itself when nothing moves)
    keys = list(cohort.metrics)
    columns = [cohort.metrics[key].tolist() for key in keys]
    metrics = [{key: column[k] for key, column in zip(keys, columns)} for k in valid]
    models = None
    if cohort.models is not None and valid:
        names = list(reference_arrays.keys()) if reference_arrays is not None else list(cohort.models.arrays)
        unchanged = valid == list(range(len(cohort))) and names == list(cohort.models.arrays)
        models = cohort.models if unchanged else StackedModels(
            {name: cohort.models.arrays[name][valid] for name in names})
    return FilteredCohort([cohort.node_ids[k] for k in valid], metrics, models, excluded)

