"""Coordinate-wise trimmed mean (FedTrimmedAvg) on term-fl's template.

Yin, Chen, Ramchandran, Bartlett, "Byzantine-Robust Distributed Learning:
Towards Optimal Statistical Rates", ICML 2018 (arxiv.org/abs/1803.01498).
At every coordinate j of the model, the m clients' values are sorted, the
``cut = floor(beta m)`` lowest and the ``cut`` highest are dropped and the
rest averaged:

    M_j = (1 / (m - 2 cut)) sum_{r = cut}^{m - cut - 1} w_(r),j

``beta`` is the fraction cut at *each* end, as in Flower's FedTrimmedAvg and
scipy's ``trim_mean`` (floor: with beta = 0.2, 10 clients lose 2 values at
each end and fewer than 5 clients lose none). Up to ``cut`` clients per round
can send anything, at any coordinate, without moving M outside the range of
the honest values.

Each client's recorded weight is its share of M averaged over the model's
coordinates: at a coordinate each kept value has share 1 / (m - 2 cut)
(ties go to the lower partition id), so the weights sum to 1 and a client
whose values are always cut gets 0. The median (:mod:`.median`) is the
trimmed mean that keeps the middle one or two values.

Differences from Flower's FedTrimmedAvg: computed in float64 and returned in
the global model's dtypes (Flower averages float32 models in float32, in the
order ``np.partition`` leaves the kept values: the results agree to float
rounding; integer arrays are rounded, Flower returns them as float64);
replies are filtered and sorted, and the template's defences and server
learning rate apply.
"""

from __future__ import annotations

from collections.abc import Callable
from logging import INFO
from typing import Any

import numpy as np
from flwr.app import MetricRecord, RecordDict
from flwr.supercore import log
from numpy.typing import NDArray
from pydantic import Field

from term_fl.common.keys import ARRAYS, CONFIG, NUM_EXAMPLES

from .fedavg import Aggregation, FedAvg, RoundInputs
from .settings import Settings
from .stacked import StackedModels

__all__ = ["FedTrimmedAvg", "TrimmedMeanSettings", "trim_count", "trimmed_mean"]


class TrimmedMeanSettings(Settings):
    """The trimmed mean's parameter (the ``[strategy]`` field of a scenario with ``name = "trimmed_mean"``)."""

    beta: float = Field(0.2, ge=0.0, lt=0.5, allow_inf_nan=False,
                        description="trimmed mean: fraction of the clients' values cut at each end of every "
                                    "coordinate (floor(beta m) lowest and as many highest); 0 is the plain mean")


def trim_count(num_clients: int, beta: float) -> int:
    """cut = floor(beta m): how many values are dropped at each end (Flower's and scipy's rule)."""
    return int(beta * num_clients)


def trimmed_mean(models: StackedModels, cut: int) -> tuple[dict[str, NDArray[np.float64]], NDArray[np.float64]]:
    """M, the coordinate-wise mean of the values ranked cut .. m - cut - 1, and each client's share of M.

    Parameters
    ----------
    models : StackedModels
        The m client models.
    cut : int
        Values dropped at each end, 0 <= cut and 2 cut < m.

    Returns
    -------
    (dict, numpy.ndarray)
        M in float64 by array name, and per client the fraction of the
        model's coordinates at which its value was kept, divided by m - 2 cut
        (the shares sum to 1).
    """
    m = len(models)
    if cut < 0 or 2 * cut >= m:
        raise ValueError(f"trimmed_mean: cut must be in [0, m/2) for m = {m} clients, got {cut}")
    aggregate: dict[str, NDArray[np.float64]] = {}
    kept = np.zeros(m, dtype=np.int64)
    coordinates = 0
    for name, stacked in models.arrays.items():
        # Rank the m values of every coordinate (ties by client order) and average the middle ones
        values = np.asarray(stacked, dtype=np.float64)
        order = np.argsort(values, axis=0, kind="stable")
        ranked = np.take_along_axis(values, order, axis=0)
        aggregate[name] = np.mean(ranked[cut:m - cut], axis=0)
        # Count, per client, the coordinates at which its value was kept
        kept += np.bincount(order[cut:m - cut].ravel(), minlength=m)
        coordinates += values[0].size
    return aggregate, kept / float((m - 2 * cut) * max(coordinates, 1))


class FedTrimmedAvg(FedAvg):
    """Coordinate-wise trimmed mean of the clients' models: a robust aggregator (Yin et al., 2018).

    ``last_round.weights`` holds each client's share of the trimmed mean,
    averaged over the coordinates (see the module docstring). A drop-in for
    Flower's ``FedTrimmedAvg``: Flower's FedAvg arguments, then ``beta``,
    with Flower's names, positions and defaults; term-fl's are keywords.

    Parameters
    ----------
    fraction_train, fraction_evaluate, min_train_nodes, min_evaluate_nodes, min_available_nodes, \
weighted_by_key, arrayrecord_key, configrecord_key, train_metrics_aggr_fn, evaluate_metrics_aggr_fn
        Flower's FedAvg arguments (see :class:`~term_fl.strategies.FedAvg`).
    beta : float (default: 0.2)
        Fraction cut at each end of every coordinate, in [0, 0.5):
        floor(beta m) values of the m clients at each end.
    **kwargs
        term-fl's keywords of :class:`~term_fl.strategies.FedAvg`.
    """

    dp_weights = "a coordinate-wise trimmed mean (the kept clients share each coordinate)"

    # pylint: disable=too-many-arguments
    def __init__(  # noqa: PLR0913
        self,
        fraction_train: float = 1.0,
        fraction_evaluate: float = 1.0,
        min_train_nodes: int = 2,
        min_evaluate_nodes: int = 2,
        min_available_nodes: int = 2,
        weighted_by_key: str = NUM_EXAMPLES,
        arrayrecord_key: str = ARRAYS,
        configrecord_key: str = CONFIG,
        train_metrics_aggr_fn: Callable[[list[RecordDict], str], MetricRecord] | None = None,
        evaluate_metrics_aggr_fn: Callable[[list[RecordDict], str], MetricRecord] | None = None,
        beta: float = 0.2,
        **kwargs: Any,
    ) -> None:
        settings = TrimmedMeanSettings.of(type(self).__name__, beta=beta)
        super().__init__(fraction_train, fraction_evaluate, min_train_nodes, min_evaluate_nodes,
                         min_available_nodes, weighted_by_key, arrayrecord_key, configrecord_key,
                         train_metrics_aggr_fn, evaluate_metrics_aggr_fn, **kwargs)
        self.settings = settings
        self.beta = settings.beta

    def round_step(self, inputs: RoundInputs, state: None) -> tuple[Aggregation, None]:
        """M = the trimmed mean with cut = floor(beta m); the weights are the clients' shares of it."""
        aggregate, shares = trimmed_mean(inputs.models, trim_count(len(inputs.models), self.beta))
        return Aggregation(shares, model=aggregate), state

    def summary(self) -> None:
        """Log the trimmed mean's setting, then the shared ones."""
        log(INFO, "\t├──> FedTrimmedAvg settings:")
        log(INFO, "\t│\t└── beta: %s (floor(beta m) values cut at each end)", self.beta)
        super().summary()
