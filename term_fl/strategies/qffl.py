"""q-FFL (q-FedAvg) on term-fl's shared plumbing.

Li, Sanjabi, Beirami, Smith, "Fair Resource Allocation in Federated
Learning", ICLR 2020 (openreview.net/pdf?id=ByexElSYDr).  With
L = 1 / client_learning_rate and Delta_k = L (w - w_k):

    D_k = F_k^q Delta_k,
    h_k = q F_k^(q-1) ||Delta_k||^2 + L F_k^q,
    w  <- w - sum_k D_k / sum_k h_k,

that is w_new = (1 - sum_k c_k) w + sum_k c_k w_k with
c_k = L F_k^q / sum_j h_j.  As in Flower's QFedAvg, F_k is offset by 1e-10
so that F_k = 0 is allowed.  Unlike Flower's QFedAvg, replies are filtered
(a NaN loss is excluded, not spread into the model) and arrays are decoded
without ``gc.collect``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from logging import INFO
from typing import Any

import numpy as np
from flwr.app import Message
from flwr.supercore import log
from numpy.typing import NDArray

from .base import Aggregation, FedAvg

__all__ = ["QFFL", "qffl_coefficients", "squared_distances"]

LOSS_OFFSET = 1e-10


def qffl_coefficients(
    losses: NDArray[np.float64],
    squared_distances: NDArray[np.float64],
    q: float,
    lipschitz: float,
) -> NDArray[np.float64]:
    """c_k = L F_k^q / sum_j h_j, h_j = q F_j^(q-1) L^2 ||w - w_j||^2 + L F_j^q.

    Parameters
    ----------
    losses : numpy.ndarray
        F_k >= 0 (offset by 1e-10 inside).
    squared_distances : numpy.ndarray
        ||w - w_k||^2 (so ||Delta_k||^2 = L^2 ||w - w_k||^2).
    q : float
        Fairness parameter (q = 0: c_k = 1/m, a uniform average).
    lipschitz : float
        L = 1 / client_learning_rate.
    """
    f = np.asarray(losses, dtype=np.float64) + LOSS_OFFSET
    f_q = np.power(f, q)
    h = q * np.power(f, q - 1.0) * lipschitz**2 * np.asarray(squared_distances) + lipschitz * f_q
    return lipschitz * f_q / np.sum(h)


def squared_distances(
    global_model: Mapping[str, NDArray], local_models: Iterable[Mapping[str, NDArray]]
) -> NDArray[np.float64]:
    """||w - w_k||^2 for each local model (decoded one at a time when given an iterator)."""
    w = {k: np.asarray(v, dtype=np.float64) for k, v in global_model.items()}
    return np.array(
        [
            sum(float(np.sum(np.square(w[k] - np.asarray(v, dtype=np.float64))))
                for k, v in local.items())
            for local in local_models
        ],
        dtype=np.float64,
    )


class QFFL(FedAvg):
    """q-FFL: fair aggregation that up-weights clients with a high loss.

    ``last_round.weights`` holds c_k = L F_k^q / sum_j h_j, the effective share
    of each client model in w_new = (1 - sum_k c_k) w + sum_k c_k w_k.

    Parameters
    ----------
    client_learning_rate : float
        Learning rate of the clients' local SGD; L = 1 / client_learning_rate
        estimates the Lipschitz constant.
    q : float (default: 0.1)
        Fairness parameter. q = 0 is a uniform average of the local models;
        larger q favours clients with a high loss. Tune it per use case.
    **kwargs
        Passed to :class:`term_fl.strategies.FedAvg` (sampling, metric keys,
        Flower's settings); ``loss_key`` (default "train_loss") names F_k,
        which must be >= 0.
    """

    def __init__(self, *, client_learning_rate: float, q: float = 0.1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not (math.isfinite(client_learning_rate) and client_learning_rate > 0):
            raise ValueError(
                f"client_learning_rate must be a positive number, got {client_learning_rate!r}."
            )
        if not (math.isfinite(q) and q >= 0):
            raise ValueError(f"q must be a non-negative number, got {q!r}.")
        self.client_learning_rate = float(client_learning_rate)
        self.q = float(q)

    def train_filter_options(self) -> dict[str, tuple[str, ...]]:
        """F_k must also be >= 0 (F_k^q)."""
        options = super().train_filter_options()
        options["nonnegative_metrics"] = (self.loss_key,)
        return options

    def compute_aggregation(
        self,
        server_round: int,
        replies: Sequence[Message],
        losses: NDArray[np.float64],
        num_examples: NDArray[np.float64],
    ) -> Aggregation:
        """c_k = L F_k^q / sum_j h_j and the global term 1 - sum_k c_k."""
        distances = squared_distances(self.global_model(), self.local_models(replies))
        coefficients = qffl_coefficients(losses, distances, self.q, 1.0 / self.client_learning_rate)
        return Aggregation(coefficients, global_coefficient=1.0 - float(np.sum(coefficients)))

    def summary(self) -> None:
        """Log the q-FFL settings, then the shared ones."""
        log(INFO, "\t├──> q-FFL settings:")
        log(INFO, "\t│\t├── q: %s", self.q)
        log(INFO, "\t│\t└── client_learning_rate: %s (L = %s)", self.client_learning_rate,
            1.0 / self.client_learning_rate)
        super().summary()
