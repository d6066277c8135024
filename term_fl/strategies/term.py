"""TERM: device-level tilted aggregation as a Flower strategy.

Li, Beirami, Sanjabi, Smith, "On Tilted Losses in Machine Learning: Theory
and Applications", JMLR 2023 (stochastic hierarchical TERM with groups =
devices and tau = 0; a client may still tilt its own samples with tau and
report its tau-tilted loss as F_k).  Each round, over the valid replies:

    a_k = n_k / sum_j n_j  (or 1/m),   R_S = (1/t) log sum_k a_k exp(t F_k),
    Rt  = R_S (first round) or (1/t) log((1 - lam) exp(t Rt) + lam exp(t R_S)),
    p_k = a_k exp(t F_k - t Rt),
    w  <- w - eta_s sum_k p_k (w - w_k).

The math lives in :mod:`term_fl.maths.tilting`; the round function
(:meth:`TermFedAvg.round_step`) turns it into coefficients, with Rt as the
strategy's state.
"""

from __future__ import annotations

from collections.abc import Callable
from logging import INFO
from typing import Any, Literal

import numpy as np
from flwr.app import MetricRecord, RecordDict
from flwr.supercore import log
from numpy.typing import NDArray
from pydantic import Field

from term_fl.common.keys import ARRAYS, CONFIG, NUM_EXAMPLES
from term_fl.maths.tilting import term_round

from .fedavg import Aggregation, FedAvg, RoundInputs
from .reports import Diagnostics
from .settings import LOSS_KEYS, Settings, loss_reduction_field

__all__ = ["TermFedAvg", "TermSettings"]



def old_model_share(weights: NDArray[np.float64], sums_to_one: bool) -> float:
    """g = 1 - sum_k p_k, the share of the old global model in w_new = g w + sum_k p_k w_k (before eta_s).

    When the p_k sum to 1 in exact arithmetic (lam = 1, or t = 0 where p_k = a_k)
    g is 0 exactly: their float sum is off by about 1e-16, and adding that
    fraction of the old model every round made t = 0 differ from FedAvg.
    """
    return 0.0 if sums_to_one else 1.0 - float(np.sum(weights))


class TermSettings(Settings):
    """TERM's parameters (the ``[strategy]`` fields of a scenario with ``name = "term"``)."""

    t: float = Field(1.0, ge=-1000.0, le=1000.0, allow_inf_nan=False,
                     description="device-level tilt: t > 0 fairness, t < 0 robustness, 0 the weighted average; "
                                 "with t > 0 a client that reports a huge loss takes all the weight: see clip_loss")
    lam: float = Field(1.0, gt=0.0, le=1.0, allow_inf_nan=False,
                       description="mixing rate of the running estimate Rt across rounds (1 = no memory)")
    base_weighting: Literal["num_examples", "uniform"] = Field(
        "num_examples", description="base weights a_k before tilting: proportional to n_k, or uniform")
    loss_reduction: Literal["mean", "sum"] = loss_reduction_field()
    server_lr: float = Field(1.0, gt=0.0, le=100.0, allow_inf_nan=False,
                             description="server learning rate eta_s (the reference code's step is 1/m)")


class TermFedAvg(FedAvg):
    """FedAvg whose client weights are tilted by the clients' losses.

    ``last_round.weights`` holds eta_s p_k (the tilted weights times the server
    learning rate, i.e. p_k with the default eta_s = 1) and
    ``last_round.diagnostics["running_estimate"]`` holds Rt
    (:attr:`running_estimate`).  t = 0 with ``base_weighting="num_examples"``
    is FedAvg. Every training round needs F_k from the clients, at any t
    (t = 0 included): a round in which no reply carries ``train_loss_key`` is
    an error that says what to add to the ClientApp
    (:func:`term_fl.plugin.losses.pre_training_loss`).

    Arguments in the order of Flower's QFedAvg, the tilt ``t`` in place of its
    ``client_learning_rate, q``: ``t``, ``train_loss_key``, then Flower's
    FedAvg arguments (names, positions and defaults as in
    :class:`~term_fl.strategies.FedAvg`); TERM's other settings and term-fl's
    are keywords.

    Parameters
    ----------
    t : float (default: 1.0)
        Tilt across devices, in [-1000, 1000]. t > 0 favours the devices with
        the highest loss (fairness: uniform performance); t < 0 suppresses
        them (robustness to corrupted devices); t = 0 is the plain weighted
        average. With t > 0 the weights trust the clients' reported losses:
        one client that reports a huge F_k takes all the weight
        (``clip_loss`` of :class:`term_fl.strategies.FedAvg` bounds that; see
        :mod:`term_fl.maths.robust`).
    train_loss_key : str or None (default: None)
        Metric key of F_k, the loss of the received global model on the
        client's training data measured before local training; None picks it
        from ``loss_reduction``: "train_loss_before" (mean) or
        "train_loss_before_sum" (sum).
    fraction_train, fraction_evaluate, min_train_nodes, min_evaluate_nodes, min_available_nodes, \
weighted_by_key, arrayrecord_key, configrecord_key, train_metrics_aggr_fn, evaluate_metrics_aggr_fn
        Flower's FedAvg arguments (see :class:`~term_fl.strategies.FedAvg`).
    lam : float (default: 1.0)
        Mixing rate lambda in (0, 1] of the running estimate Rt of the tilted
        objective across rounds. 1.0: no memory, the weights sum to 1. The
        paper's reference code uses 0.5 (then the weights need not sum to 1).
    base_weighting : {"num_examples", "uniform"} (default: "num_examples")
        Base weights a_k before tilting: proportional to n_k, or uniform.
    loss_reduction : {"mean", "sum"} (default: "mean")
        Which F_k the clients' replies provide: the mean loss or, as the
        paper's reference code, the loss summed over the device's samples.
    server_learning_rate : float (default: 1.0)
        eta_s in (0, 100] in w <- w - eta_s sum_k p_k (w - w_k) (the
        scenario's ``strategy.server_lr``). The reference code's step is 1/m
        of FedAvg's (eta_s = 1/m for m clients per round).
    **kwargs
        term-fl's keywords of :class:`~term_fl.strategies.FedAvg`
        (``clients_per_round``, ``seed``, ``evaluate_fraction``, ``partition_key``).
    """

    needs_loss = True

    # pylint: disable=too-many-arguments
    def __init__(  # noqa: PLR0913
        self,
        t: float = 1.0,
        train_loss_key: str | None = None,
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
        lam: float = 1.0,
        base_weighting: str = "num_examples",
        loss_reduction: str = "mean",
        server_learning_rate: float = 1.0,
        **kwargs: Any,
    ) -> None:
        settings = TermSettings.of(type(self).__name__, t=t, lam=lam, base_weighting=base_weighting,
                                   loss_reduction=loss_reduction, server_lr=server_learning_rate)
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
            train_loss_key=train_loss_key or LOSS_KEYS[settings.loss_reduction],
            server_learning_rate=settings.server_lr,
            **kwargs,
        )
        self.t = settings.t
        self.lam = settings.lam
        self.base_weighting = settings.base_weighting
        self.loss_reduction = settings.loss_reduction

    @property
    def running_estimate(self) -> float | None:
        """Rt after the last round (None before the first valid round): the strategy's state."""
        return self.state

    def round_step(self, inputs: RoundInputs, state: float | None) -> tuple[Aggregation, float]:
        """c_k = p_k and g = 1 - sum_k p_k from :func:`term_fl.maths.tilting.term_round` (eta_s applied by FedAvg); the state is Rt."""
        base = inputs.num_examples if self.base_weighting == "num_examples" else None
        result = term_round(inputs.losses, base, self.t, self.lam, state)
        sums_to_one = self.lam == 1.0 or self.t == 0.0
        return (
            Aggregation(result.weights, global_coefficient=old_model_share(result.weights, sums_to_one)),
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
        log(INFO, "\t│\t└── loss: %s ('%s')", self.loss_reduction, self.train_loss_key)
        super().summary()
