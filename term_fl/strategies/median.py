"""Coordinate-wise median (FedMedian) on term-fl's template.

Yin, Chen, Ramchandran, Bartlett, "Byzantine-Robust Distributed Learning:
Towards Optimal Statistical Rates", ICML 2018 (arxiv.org/abs/1803.01498).
At every coordinate of the model, the median of the m clients' values (the
mean of the middle two when m is even): fewer than half of the clients can
send anything without moving it outside the range of the honest values.
It is the trimmed mean (:mod:`.trimmed_mean`) that cuts (m - 1) // 2 values
at each end, and equals ``numpy.median`` (Flower's FedMedian) bit for bit.

Each client's recorded weight is its share of the median averaged over the
model's coordinates (1 where its value is the median of an odd m, 1/2 for
each middle value of an even m, ties to the lower partition id), so the
weights sum to 1 and a client whose values are never in the middle gets 0.

Differences from Flower's FedMedian: computed in float64 and returned in the
global model's dtypes (equal values for float models; integer arrays are
rounded, Flower returns them as float64); replies are filtered and sorted,
and the template's defences and server learning rate apply; Flower empties
the replies' ArrayRecords as it reads them, term-fl leaves them intact.
"""

from __future__ import annotations

from .fedavg import Aggregation, FedAvg, RoundInputs
from .settings import Settings
from .trimmed_mean import trimmed_mean

__all__ = ["FedMedian", "MedianSettings"]


class MedianSettings(Settings):
    """The median has no parameters of its own (the ``[strategy]`` table's defences apply)."""


class FedMedian(FedAvg):
    """Coordinate-wise median of the clients' models: a robust aggregator (Yin et al., 2018).

    ``last_round.weights`` holds each client's share of the median, averaged
    over the coordinates (see the module docstring). A drop-in for Flower's
    ``FedMedian``: the arguments of :class:`~term_fl.strategies.FedAvg`.
    """

    dp_weights = "a coordinate-wise median (one client may set a coordinate)"

    def round_step(self, inputs: RoundInputs, state: None) -> tuple[Aggregation, None]:
        """M = the coordinate-wise median (the trimmed mean with cut (m - 1) // 2); weights: the shares of it."""
        aggregate, shares = trimmed_mean(inputs.models, (len(inputs.models) - 1) // 2)
        return Aggregation(shares, model=aggregate), state
