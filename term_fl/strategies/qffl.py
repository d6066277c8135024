"""q-FFL (q-FedAvg) on term-fl's shared plumbing.

Li, Sanjabi, Beirami, Smith, "Fair Resource Allocation in Federated
Learning", ICLR 2020 (openreview.net/pdf?id=ByexElSYDr).  With
L = 1 / client_lr and Delta_k = L (w - w_k):

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
from collections.abc import Iterable, Mapping
from logging import INFO
from typing import Any

import numpy as np
from flwr.supercore import log
from numpy.typing import NDArray
from pydantic import Field

from .fedavg import Aggregation, FedAvg, RoundInputs
from .settings import Settings

__all__ = ["QFFL", "QFFLSettings", "qffl_coefficients", "squared_distances"]

LOSS_OFFSET = 1e-10


class QFFLSettings(Settings):
    """q-FFL's parameters (the ``[strategy]`` fields of a scenario with ``name = "qffl"``)."""

    q: float = Field(1.0, ge=0.0, le=100.0, allow_inf_nan=False,
                     description="fairness parameter: 0 is a uniform average of the local models")


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
        L = 1 / client_lr.
    """
    f = np.asarray(losses, dtype=np.float64) + LOSS_OFFSET
    f_q = np.power(f, q)
    h = q * np.power(f, q - 1.0) * lipschitz**2 * np.asarray(squared_distances) + lipschitz * f_q
    return lipschitz * f_q / np.sum(h)


def squared_distances(
    global_model: Mapping[str, NDArray], local_models: Iterable[Mapping[str, NDArray]]
) -> NDArray[np.float64]:
    """||w - w_k||^2 for each local model (taken one at a time)."""
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
    client_lr : float
        Learning rate of the clients' local SGD; L = 1 / client_lr estimates
        the Lipschitz constant (Flower's QFedAvg calls it client_learning_rate).
    q : float (default: 1.0)
        Fairness parameter in [0, 100]. q = 0 is a uniform average of the local
        models; larger q favours clients with a high loss. Tune it per use case.
    **kwargs
        Passed to :class:`term_fl.strategies.FedAvg` (sampling, metric keys,
        Flower's settings); ``loss_key`` (default "train_loss") names F_k,
        which must be >= 0.
    """

    def __init__(self, *, client_lr: float, q: float = 1.0, **kwargs: Any) -> None:
        settings = QFFLSettings.of(type(self).__name__, q=q)
        super().__init__(**kwargs)
        if not (math.isfinite(client_lr) and client_lr > 0):
            raise ValueError(f"client_lr must be a positive number, got {client_lr!r}.")
        self.settings = settings
        self.client_lr = float(client_lr)
        self.q = settings.q

    def train_filter_options(self) -> dict[str, tuple[str, ...]]:
        """F_k must also be >= 0 (F_k^q)."""
        options = super().train_filter_options()
        options["nonnegative_metrics"] = (self.loss_key,)
        return options

    def round_step(self, inputs: RoundInputs, state: None) -> tuple[Aggregation, None]:
        """c_k = L F_k^q / sum_j h_j and the global term 1 - sum_k c_k; no state."""
        distances = squared_distances(inputs.global_model(), inputs.local_models())
        coefficients = qffl_coefficients(inputs.losses, distances, self.q, 1.0 / self.client_lr)
        return Aggregation(coefficients, global_coefficient=1.0 - float(np.sum(coefficients))), state

    def summary(self) -> None:
        """Log the q-FFL settings, then the shared ones."""
        log(INFO, "\t├──> q-FFL settings:")
        log(INFO, "\t│\t├── q: %s", self.q)
        log(INFO, "\t│\t└── client_lr: %s (L = %s)", self.client_lr, 1.0 / self.client_lr)
        super().summary()
