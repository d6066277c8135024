"""TERM: device-level tilted aggregation as a Flower strategy.

Li, Beirami, Sanjabi, Smith, "On Tilted Losses in Machine Learning: Theory
and Applications", JMLR 2023 (stochastic hierarchical TERM with groups =
devices and tau = 0; a client may still tilt its own samples with tau and
report its tau-tilted loss as F_k).  Each round, over the valid replies:

    a_k = n_k / sum_j n_j  (or 1/m),   R_S = (1/t) log sum_k a_k exp(t F_k),
    Rt  = R_S (first round) or (1/t) log((1 - lam) exp(t Rt) + lam exp(t R_S)),
    p_k = a_k exp(t F_k - t Rt),
    w  <- w - eta_s sum_k p_k (w - w_k).

The math lives in :mod:`term_fl.tilting`; the round function
(:meth:`TermFedAvg.round_step`) turns it into coefficients, with Rt as the
strategy's state.
"""

from __future__ import annotations

from logging import INFO
from typing import Any, Literal

import numpy as np
from flwr.supercore import log
from pydantic import Field

from term_fl.keys import TRAIN_LOSS, TRAIN_LOSS_SUM
from term_fl.tilting import term_round

from .fedavg import Aggregation, FedAvg, RoundInputs
from .reports import Diagnostics
from .settings import Settings

__all__ = ["TermFedAvg", "TermSettings"]

LOSS_KEYS = {"mean": TRAIN_LOSS, "sum": TRAIN_LOSS_SUM}


class TermSettings(Settings):
    """TERM's parameters (the ``[strategy]`` fields of a scenario with ``name = "term"``)."""

    t: float = Field(1.0, ge=-1000.0, le=1000.0, allow_inf_nan=False,
                     description="device-level tilt: t > 0 fairness, t < 0 robustness, 0 the weighted average; "
                                 "with t > 0 a client that reports a huge loss takes all the weight: see clip_loss")
    lam: float = Field(1.0, gt=0.0, le=1.0, allow_inf_nan=False,
                       description="mixing rate of the running estimate Rt across rounds (1 = no memory)")
    base_weighting: Literal["num_examples", "uniform"] = Field(
        "num_examples", description="base weights a_k before tilting: proportional to n_k, or uniform")
    loss_reduction: Literal["mean", "sum"] = Field(
        "mean", description="F_k the clients report: mean loss (train_loss) or summed loss (train_loss_sum)")
    server_lr: float = Field(1.0, gt=0.0, le=100.0, allow_inf_nan=False,
                             description="server learning rate eta_s (the reference code's step is 1/m)")


class TermFedAvg(FedAvg):
    """FedAvg whose client weights are tilted by the clients' losses.

    ``last_round.weights`` holds eta_s p_k (the tilted weights times the server
    learning rate, i.e. p_k with the default eta_s = 1) and
    ``last_round.diagnostics["running_estimate"]`` holds Rt
    (:attr:`running_estimate`).  t = 0 with ``base_weighting="num_examples"``
    is FedAvg.

    Parameters
    ----------
    t : float (default: 1.0)
        Tilt across devices, in [-1000, 1000]. t > 0 favours the devices with
        the highest loss (fairness: uniform performance); t < 0 suppresses
        them (robustness to corrupted devices); t = 0 is the plain weighted
        average. With t > 0 the weights trust the clients' reported losses:
        one client that reports a huge F_k takes all the weight
        (``clip_loss`` of :class:`term_fl.strategies.FedAvg` bounds that; see
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
    server_lr : float (default: 1.0)
        eta_s in (0, 100] in w <- w - eta_s sum_k p_k (w - w_k). The reference
        code's step is 1/m of FedAvg's (eta_s = 1/m for m clients per round).
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
        t: float = 1.0,
        lam: float = 1.0,
        base_weighting: str = "num_examples",
        loss_reduction: str = "mean",
        server_lr: float = 1.0,
        loss_key: str | None = None,
        **kwargs: Any,
    ) -> None:
        settings = TermSettings.of(type(self).__name__, t=t, lam=lam, base_weighting=base_weighting,
                                   loss_reduction=loss_reduction, server_lr=server_lr)
        super().__init__(loss_key=loss_key or LOSS_KEYS[settings.loss_reduction], **kwargs)
        self.settings = settings
        self.t = settings.t
        self.lam = settings.lam
        self.base_weighting = settings.base_weighting
        self.loss_reduction = settings.loss_reduction
        self.server_lr = settings.server_lr

    @property
    def running_estimate(self) -> float | None:
        """Rt after the last round (None before the first valid round): the strategy's state."""
        return self.state

    def round_step(self, inputs: RoundInputs, state: float | None) -> tuple[Aggregation, float]:
        """c_k = eta_s p_k and g = 1 - sum_k c_k from :func:`term_fl.tilting.term_round`; the state is Rt."""
        base = inputs.num_examples if self.base_weighting == "num_examples" else None
        result = term_round(inputs.losses, base, self.t, self.lam, state)
        coefficients = self.server_lr * result.weights
        return (
            Aggregation(coefficients, global_coefficient=1.0 - float(np.sum(coefficients))),
            result.running_estimate,
        )

    def state_diagnostics(self, state: float | None) -> Diagnostics:
        """Rt, as ``running_estimate`` (kept through a round without valid replies)."""
        return {} if state is None else {"running_estimate": state}

    def summary(self) -> None:
        """Log the TERM settings, then the shared ones."""
        log(INFO, "\t├──> TERM settings:")
        log(INFO, "\t│\t├── t: %s (%s)", self.t,
            "fairness" if self.t > 0 else "robustness" if self.t < 0 else "FedAvg weights")
        log(INFO, "\t│\t├── lam: %s | base weighting: %s", self.lam, self.base_weighting)
        log(INFO, "\t│\t├── loss: %s ('%s')", self.loss_reduction, self.loss_key)
        log(INFO, "\t│\t└── server_lr: %s", self.server_lr)
        super().summary()
