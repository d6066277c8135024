"""AFL: agnostic federated learning as a Flower strategy.

Mohri, Sivek, Suresh, "Agnostic Federated Learning", ICML 2019. The model
minimises the loss of the worst mixture of the devices' distributions,
min_w max_{lambda in simplex} sum_k lambda_k L_k(w): the server keeps mixture
weights lambda over *all* K devices and moves them by projected gradient
ascent on the devices' losses (the gradient in lambda_k is L_k(w)), while the
model is aggregated with them.

With partial participation only the sampled devices S report a loss, so each
round, over the valid replies (F_k: the loss of the incoming model on device
k's training data, as every strategy here reads it):

    lambda_k <- lambda_k + gamma F_k      for k in S (the other coordinates keep their value),
    lambda   <- Proj_simplex(lambda),
    w        <- sum_{k in S} (lambda_k / sum_{j in S} lambda_j) w_k.

That is this implementation's choice for partial participation: the
stochastic gradient with the unsampled coordinates set to zero, the
aggregation with the *updated* lambda renormalised over the sampled devices
(as TERM updates Rt before weighting). lambda starts uniform (1/K) and is the
strategy's state, reported every round as the diagnostic
``mixture_weights``. If every sampled device has lambda 0 after the step
(only possible when their lambda was 0 and their losses are 0) the model is
kept unchanged: no sampled device carries weight.
"""

from __future__ import annotations

from collections.abc import Iterable
from logging import INFO, WARNING
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message
from flwr.serverapp import Grid
from flwr.serverapp.exception import AggregationError
from flwr.supercore import log
from numpy.typing import ArrayLike, NDArray
from pydantic import Field

from term_fl.common.arrays import finite_vector

from .fedavg import Aggregation, FedAvg, RoundInputs
from .replies import PARTITION_HELPER
from .reports import Diagnostics
from .settings import Settings

__all__ = ["AFL", "AFLSettings", "afl_round", "project_onto_simplex"]


class AFLSettings(Settings):
    """AFL's parameters (the ``[strategy]`` fields of a scenario with ``name = "afl"``)."""

    lambda_lr: float = Field(0.01, gt=0.0, le=100.0, allow_inf_nan=False,
                             description="AFL step size gamma of the projected gradient ascent on the mixture weights")


def project_onto_simplex(values: ArrayLike) -> NDArray[np.float64]:
    """The Euclidean projection of ``values`` onto the simplex {x : x >= 0, sum x = 1}.

    x_k = max(v_k - theta, 0) with theta chosen so that the x sum to 1, found
    from the sorted values (Held, Wolfe, Crowder 1974; Duchi et al. 2008).
    """
    v = finite_vector(values, "values")
    ordered = np.sort(v)[::-1]
    cumulative = np.cumsum(ordered) - 1.0
    ranks = np.arange(1, v.size + 1)
    count = int(np.flatnonzero(ordered - cumulative / ranks > 0)[-1]) + 1
    theta = cumulative[count - 1] / count
    return np.maximum(v - theta, 0.0)


def afl_round(
    mixture_weights: ArrayLike, sampled: ArrayLike, losses: ArrayLike, lambda_lr: float
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """One AFL round with partial participation: the new lambda and the sampled devices' coefficients.

    Parameters
    ----------
    mixture_weights : array-like of shape (K,)
        lambda, on the simplex, over every device.
    sampled : array-like of int, shape (m,)
        Indices (into lambda) of the devices that reported a loss.
    losses : array-like of shape (m,)
        Their losses F_k.
    lambda_lr : float
        The step size gamma > 0.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        lambda' = Proj(lambda + gamma F on the sampled coordinates), and
        lambda'_S / sum lambda'_S (all zeros when that sum is 0).
    """
    lam = finite_vector(mixture_weights, "mixture_weights").copy()
    index = np.asarray(sampled, dtype=np.int64)
    lam[index] += lambda_lr * finite_vector(losses, "losses")
    lam = project_onto_simplex(lam)
    mass = float(np.sum(lam[index]))
    coefficients = lam[index] / mass if mass > 0.0 else np.zeros(index.size)
    return lam, coefficients


class AFL(FedAvg):
    """Agnostic federated learning: aggregate with adversarial mixture weights lambda over the devices.

    ``last_round.weights`` holds lambda renormalised over the aggregated
    devices and ``last_round.diagnostics["mixture_weights"]`` lambda over every
    partition, in partition order (:attr:`mixture_weights`). AFL needs every
    device's partition id: call :meth:`set_node_partitions` before the first
    round (term-fl's server loop does; a Flower app learns the table with
    :func:`term_fl.plugin.partitions.node_partitions`), and each train reply
    carries its ``partition-id``. Without the table ``configure_train`` is an
    error; a round in which no reply carries a partition id is an error; a
    reply without one, or with one outside the table, is excluded with a
    warning and the others aggregated.

    Parameters
    ----------
    lambda_lr : float (default: 0.01)
        Step size gamma in (0, 100] of the projected gradient ascent on lambda.
    **kwargs
        Passed to :class:`term_fl.strategies.FedAvg` (sampling, metric keys,
        Flower's settings); ``train_loss_key`` (default "train_loss_before") names F_k.
    """

    needs_loss = True
    needs_partition = True
    dp_weights = "AFL's mixture weights lambda_k, moved by each client's loss"

    def __init__(self, *, lambda_lr: float = 0.01, **kwargs: Any) -> None:
        settings = AFLSettings.of(type(self).__name__, lambda_lr=lambda_lr)
        super().__init__(**kwargs)
        self.lambda_lr = settings.lambda_lr

    @property
    def mixture_weights(self) -> dict[int, float] | None:
        """lambda by partition id after the last round (None before the first valid round)."""
        if self.state is None:
            return None
        return dict(zip(self._partitions(), self.state.tolist(), strict=True))

    def _partitions(self) -> list[int]:
        if self.node_partitions is None:
            raise AggregationError(
                "AFL keeps a mixture weight for every partition and reads each reply's partition from the metric "
                f"'{self.partition_key}', so it needs the partition table (which node holds which partition-id) "
                f"before the first round: call set_node_partitions. {PARTITION_HELPER}"
            )
        return sorted(self.node_partitions.values())

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Refuse to train without the partition table (AFL would exclude every reply); then sample and send."""
        self._partitions()
        return super().configure_train(server_round, arrays, config, grid)

    def train_filter_options(self) -> dict[str, tuple[str, ...]]:
        """Replies must also carry their partition id (lambda is indexed by it)."""
        options = super().train_filter_options()
        options["required_metrics"] = (*options["required_metrics"], self.partition_key)
        return options

    def round_step(
        self, inputs: RoundInputs, state: NDArray[np.float64] | None
    ) -> tuple[Aggregation, NDArray[np.float64]]:
        """lambda' = Proj(lambda + gamma F on the sampled devices); c = lambda'_S / sum lambda'_S.

        The state is lambda over the partitions in sorted order, uniform before the first round.
        """
        partitions = np.array(self._partitions(), dtype=np.int64)
        lam = np.full(partitions.size, 1.0 / partitions.size) if state is None else state
        index = np.searchsorted(partitions, inputs.partition_ids)
        unknown = (index >= partitions.size) | (partitions[np.minimum(index, partitions.size - 1)]
                                                != inputs.partition_ids)
        if np.any(unknown):  # the template excludes such replies (.trust): a round function called directly
            raise AggregationError(
                f"AFL: replies from partitions {inputs.partition_ids[unknown].tolist()} that "
                f"set_node_partitions did not name ({partitions.size} partitions known)"
            )
        new_lam, coefficients = afl_round(lam, index, inputs.losses, self.lambda_lr)
        if not np.any(coefficients):
            log(WARNING, "AFL round %d: every sampled device has mixture weight 0; model unchanged.",
                inputs.server_round)
            return Aggregation(coefficients, global_coefficient=1.0), new_lam
        return Aggregation(coefficients), new_lam

    def state_diagnostics(self, state: NDArray[np.float64] | None) -> Diagnostics:
        """lambda over every partition (sorted by partition id), as ``mixture_weights``."""
        return {} if state is None else {"mixture_weights": state.tolist()}

    def summary(self) -> None:
        """Log the AFL settings, then the shared ones."""
        log(INFO, "\t├──> AFL settings:")
        log(INFO, "\t│\t└── lambda_lr: %s", self.lambda_lr)
        super().summary()
