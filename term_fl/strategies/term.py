"""TERM: device-level tilted aggregation as a Flower strategy.

Li, Beirami, Sanjabi, Smith, "On Tilted Losses in Machine Learning: Theory
and Applications", JMLR 2023 (stochastic hierarchical TERM with groups =
devices and tau = 0; a client may still tilt its own samples with tau and
report its tau-tilted loss as F_k).  Each round, over the valid replies:

    a_k = n_k / sum_j n_j  (or 1/m),   R_S = (1/t) log sum_k a_k exp(t F_k),
    Rt  = R_S (first round) or (1/t) log((1 - lam) exp(t Rt) + lam exp(t R_S)),
    p_k = a_k exp(t F_k - t Rt),
    w  <- w - eta_s sum_k p_k (w - w_k).

The math lives in :mod:`term_fl.tilting`; this class translates Messages.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from logging import INFO
from typing import Any

import numpy as np
from flwr.app import Message
from flwr.supercore import log
from numpy.typing import NDArray

from term_fl.tilting import term_round

from .base import Aggregation, FedAvg, partition_id_of

__all__ = ["TermFedAvg"]

BASE_WEIGHTINGS = ("num_examples", "uniform")
LOSS_REDUCTIONS = {"mean": "train_loss", "sum": "train_loss_sum"}


class TermFedAvg(FedAvg):
    """FedAvg whose client weights are tilted by the clients' losses.

    ``last_round.weights`` holds eta_s p_k (the tilted weights times the server
    learning rate, i.e. p_k with the default eta_s = 1) and
    ``last_round.running_estimate`` holds Rt.  t = 0 with
    ``base_weighting="num_examples"`` is FedAvg.

    Parameters
    ----------
    t : float (default: 0.0)
        Tilt across devices. t > 0 favours the devices with the highest loss
        (fairness: uniform performance); t < 0 suppresses them (robustness to
        corrupted devices); t = 0 is the plain weighted average. With t > 0
        the weights trust the clients' reported losses: one client that
        reports a huge F_k takes all the weight (``clip_loss`` of
        :class:`term_fl.strategies.FedAvg` bounds that; see
        :mod:`term_fl.robust`).
    lam : float (default: 1.0)
        Mixing rate lambda in (0, 1] of the running estimate Rt of the tilted
        objective across rounds. 1.0: no memory, the weights sum to 1. The
        paper's reference code uses 0.5 (then the weights need not sum to 1).
    base_weighting : {"num_examples", "uniform"} (default: "num_examples")
        Base weights a_k before tilting: proportional to n_k, or uniform.
    loss_reduction : {"mean", "sum"} (default: "mean")
        Which F_k the clients' replies provide: the mean loss (metric
        "train_loss") or, as the paper's reference code, the loss summed over
        the device's samples (metric "train_loss_sum").
    server_learning_rate : float (default: 1.0)
        eta_s in w <- w - eta_s sum_k p_k (w - w_k). The reference code's step
        is 1/m of FedAvg's (eta_s = 1/m for m clients per round).
    loss_key : str or None (default: None)
        Metric key of F_k; None picks it from ``loss_reduction``.
    **kwargs
        Passed to :class:`term_fl.strategies.FedAvg` (sampling, metric keys,
        Flower's settings).
    """

    # pylint: disable=too-many-arguments
    def __init__(
        self,
        *,
        t: float = 0.0,
        lam: float = 1.0,
        base_weighting: str = "num_examples",
        loss_reduction: str = "mean",
        server_learning_rate: float = 1.0,
        loss_key: str | None = None,
        **kwargs: Any,
    ) -> None:
        if loss_reduction not in LOSS_REDUCTIONS:
            raise ValueError(
                f"loss_reduction must be one of {sorted(LOSS_REDUCTIONS)}, got {loss_reduction!r}."
            )
        super().__init__(loss_key=loss_key or LOSS_REDUCTIONS[loss_reduction], **kwargs)
        if not math.isfinite(t):
            raise ValueError(f"t must be a finite number, got {t!r}.")
        if not 0.0 < lam <= 1.0:
            raise ValueError(f"lam must be in (0, 1], got {lam!r}.")
        if base_weighting not in BASE_WEIGHTINGS:
            raise ValueError(
                f"base_weighting must be one of {list(BASE_WEIGHTINGS)}, got {base_weighting!r}."
            )
        if not (math.isfinite(server_learning_rate) and server_learning_rate > 0):
            raise ValueError(
                f"server_learning_rate must be a positive number, got {server_learning_rate!r}."
            )
        self.t = float(t)
        self.lam = float(lam)
        self.base_weighting = base_weighting
        self.loss_reduction = loss_reduction
        self.server_learning_rate = float(server_learning_rate)
        self.running_estimate: float | None = None

    def compute_aggregation(
        self,
        server_round: int,
        replies: Sequence[Message],
        losses: NDArray[np.float64],
        num_examples: NDArray[np.float64],
    ) -> Aggregation:
        """c_k = eta_s p_k from :func:`term_fl.tilting.term_round`; updates Rt."""
        base = num_examples if self.base_weighting == "num_examples" else None
        result = term_round(losses, base, self.t, self.lam, self.running_estimate)
        self.running_estimate = result.running_estimate
        coefficients = self.server_learning_rate * result.weights
        log(
            INFO,
            "aggregate_train: round %d, t = %s: R_S = %.6g, Rt = %.6g",
            server_round,
            self.t,
            result.batch_objective,
            result.running_estimate,
        )
        for msg, loss, weight in zip(replies, losses, result.weights, strict=True):
            log(
                INFO,
                "\t> node %d (partition %s): F_k = %.6g, tilted weight %.6g",
                msg.metadata.src_node_id,
                partition_id_of(msg, self.partition_key),
                loss,
                weight,
            )
        return Aggregation(
            coefficients,
            global_coefficient=1.0 - float(np.sum(coefficients)),
            running_estimate=result.running_estimate,
        )

    def current_running_estimate(self) -> float | None:
        """Rt, unchanged by a round without valid replies."""
        return self.running_estimate

    def summary(self) -> None:
        """Log the TERM settings, then the shared ones."""
        log(INFO, "\t├──> TERM settings:")
        log(INFO, "\t│\t├── t: %s (%s)", self.t,
            "fairness" if self.t > 0 else "robustness" if self.t < 0 else "FedAvg weights")
        log(INFO, "\t│\t├── lam: %s | base weighting: %s", self.lam, self.base_weighting)
        log(INFO, "\t│\t├── loss: %s ('%s')", self.loss_reduction, self.loss_key)
        log(INFO, "\t│\t└── server_learning_rate: %s", self.server_learning_rate)
        super().summary()
