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
(a NaN loss is excluded, not spread into the model), arrays keep the global
model's dtypes (Flower returns float64 for float32 models and cannot update
integer arrays such as BatchNorm's ``num_batches_tracked`` in place) and are
decoded without ``gc.collect``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from logging import INFO, WARNING
from typing import Annotated, Any, Literal

import numpy as np
from flwr.app import MetricRecord, RecordDict
from flwr.supercore import log
from numpy.typing import NDArray
from pydantic import Field

from term_fl.common.keys import ARRAYS, CONFIG, NUM_EXAMPLES, TRAIN_LOSS_BEFORE
from term_fl.common.settings import HASHED_WHEN_SET

from .fedavg import Aggregation, FedAvg, RoundInputs
from .settings import LOSS_KEYS, Settings, loss_reduction_field

__all__ = ["HUGE_UPDATE", "QFFL", "QFFLSettings", "huge_updates", "qffl_coefficients", "squared_distances"]

LOSS_OFFSET = 1e-10
HUGE_UPDATE = 1e6
"""q-FFL leaves out an update more than this many times the round's median update norm (m >= 3)."""


class QFFLSettings(Settings):
    """q-FFL's parameters (the ``[strategy]`` fields of a scenario with ``name = "qffl"``)."""

    q: float = Field(1.0, ge=0.0, le=100.0, allow_inf_nan=False,
                     description="fairness parameter: 0 is a uniform average of the local models")
    # added after q-FFL's first stored runs: their config hashes hold no loss_reduction
    loss_reduction: Annotated[Literal["mean", "sum"], HASHED_WHEN_SET] = loss_reduction_field()


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


def huge_updates(squared: NDArray[np.float64]) -> NDArray[np.bool_]:
    """The updates q-FFL leaves out: ||w - w_k|| above :data:`HUGE_UPDATE` x the round's median norm, or not finite.

    q-FFL divides every client's step by sum_j h_j, h_j growing with
    ||w - w_j||^2: one update of float32-max weights would shrink every
    coefficient to about 1e-70 and the round would change nothing. Honest
    updates from one global model do not differ in norm by a factor of a
    million. The median needs at least 3 replies to stay among the honest ones.
    """
    norms = np.sqrt(np.asarray(squared, dtype=np.float64))
    finite = np.isfinite(norms)
    median = float(np.median(norms[finite])) if np.any(finite) else 0.0
    huge = ~finite
    if norms.size >= 3 and median > 0.0:
        huge |= norms > HUGE_UPDATE * median
    return huge


def squared_distances(
    global_model: Mapping[str, NDArray], local_models: Iterable[Mapping[str, NDArray]]
) -> NDArray[np.float64]:
    """||w - w_k||^2 for each local model (taken one at a time, e.g. the rows of a StackedModels)."""
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

    A drop-in for Flower's ``QFedAvg``: the same arguments with the same
    names, positions and defaults, except ``train_loss_key``'s default
    ("train_loss_before", not "train_loss": Flower's examples send that key
    as the mean loss *during* local training); term-fl's own are keywords.
    A round in which no reply carries ``train_loss_key`` is an error that says
    what to add to the ClientApp (:func:`term_fl.plugin.losses.pre_training_loss`).

    Parameters
    ----------
    client_learning_rate : float
        Learning rate of the clients' local SGD; L = 1 / client_learning_rate
        estimates the Lipschitz constant (the scenario's ``client.lr``).
    q : float (default: 0.1)
        Fairness parameter in [0, 100]. q = 0 is a uniform average of the
        local models; larger q favours clients with a high loss. Flower's
        default; term-fl's scenarios default to 1.0.
    train_loss_key : str (default: "train_loss_before")
        Metric key of F_k >= 0, the loss of the received global model on the
        client's training data, measured before local training. Left at its
        default with ``loss_reduction="sum"``, it reads "train_loss_before_sum".
    fraction_train, fraction_evaluate, min_train_nodes, min_evaluate_nodes, min_available_nodes, \
weighted_by_key, arrayrecord_key, configrecord_key, train_metrics_aggr_fn, evaluate_metrics_aggr_fn
        Flower's FedAvg arguments (see :class:`~term_fl.strategies.FedAvg`).
    loss_reduction : {"mean", "sum"} (default: "mean")
        Which F_k the clients' replies provide: the mean loss or the loss
        summed over the device's samples (TERM's reference code's F_k: a
        "paper" mode that runs both strategies on the same F_k).
    **kwargs
        term-fl's keywords of :class:`~term_fl.strategies.FedAvg`
        (``server_learning_rate``, ``clients_per_round``, ``seed``,
        ``evaluate_fraction``, ``partition_key``).
    """

    needs_loss = True

    dp_weights = "q-FFL's coefficients L F_k^q / sum_j h_j"

    # pylint: disable=too-many-arguments
    def __init__(  # noqa: PLR0913
        self,
        client_learning_rate: float,
        q: float = 0.1,
        train_loss_key: str = TRAIN_LOSS_BEFORE,
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
        *,
        loss_reduction: str = "mean",
        **kwargs: Any,
    ) -> None:
        settings = QFFLSettings.of(type(self).__name__, q=q, loss_reduction=loss_reduction)
        if train_loss_key == TRAIN_LOSS_BEFORE:
            train_loss_key = LOSS_KEYS[settings.loss_reduction]
        if not (isinstance(client_learning_rate, int | float) and math.isfinite(client_learning_rate)
                and client_learning_rate > 0):
            raise ValueError(f"client_learning_rate must be a positive number, got {client_learning_rate!r}.")
        super().__init__(
            fraction_train,
            fraction_evaluate,
            min_train_nodes,
            min_evaluate_nodes,
            min_available_nodes,
            weighted_by_key,
            arrayrecord_key,
            configrecord_key,
            train_metrics_aggr_fn,
            evaluate_metrics_aggr_fn,
            train_loss_key=train_loss_key,
            **kwargs,
        )
        self.loss_reduction = settings.loss_reduction
        self.client_learning_rate = float(client_learning_rate)
        self.q = settings.q

    def train_filter_options(self) -> dict[str, tuple[str, ...]]:
        """F_k must also be >= 0 (F_k^q)."""
        options = super().train_filter_options()
        options["nonnegative_metrics"] = (self.train_loss_key,)
        return options

    def round_step(self, inputs: RoundInputs, state: None) -> tuple[Aggregation, None]:
        """c_k = L F_k^q / sum_j h_j and the global term 1 - sum_k c_k; no state."""
        distances = squared_distances(inputs.global_model(), inputs.models)
        huge = huge_updates(distances)
        for k in np.flatnonzero(huge).tolist():
            log(WARNING, "q-FFL round %d: reply %d of the round (partition %s) sent an update of norm %.6g, more than "
                "%g times the round's median: left out of this round (it would shrink every client's step to "
                "nothing; max_update_norm bounds such updates for every strategy)", inputs.server_round, k,
                inputs.partition_ids[k] if inputs.partition_ids[k] >= 0 else "unknown",
                float(np.sqrt(distances[k])), HUGE_UPDATE)
        coefficients = np.zeros(distances.size)
        if not np.all(huge):
            coefficients[~huge] = qffl_coefficients(inputs.losses[~huge], distances[~huge], self.q,
                                                    1.0 / self.client_learning_rate)
        return Aggregation(coefficients, global_coefficient=1.0 - float(np.sum(coefficients))), state

    def summary(self) -> None:
        """Log the q-FFL settings, then the shared ones."""
        log(INFO, "\t├──> q-FFL settings:")
        log(INFO, "\t│\t├── q: %s | loss: %s ('%s')", self.q, self.loss_reduction, self.train_loss_key)
        log(INFO, "\t│\t└── client_learning_rate: %s (L = %s)", self.client_learning_rate,
            1.0 / self.client_learning_rate)
        super().summary()
