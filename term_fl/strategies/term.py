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

from collections.abc import Callable, Iterable
from logging import INFO, WARNING
from typing import Any, Literal

import numpy as np
from flwr.app import MetricRecord, RecordDict
from flwr.supercore import log
from numpy.typing import NDArray
from pydantic import Field

from flwr.app import Message

from term_fl.common.keys import ARRAYS, CONFIG, NUM_EXAMPLES
from term_fl.maths.tilting import term_round

from .cohort_replies import CohortReplies
from .fedavg import Aggregation, FedAvg, RoundInputs, TrainOutcome
from .reports import Diagnostics, effective_clients
from .settings import LOSS_KEYS, Settings, loss_reduction_field

__all__ = ["CONCENTRATED_CLIENTS", "CONCENTRATED_ROUNDS", "TermFedAvg", "TermSettings"]

CONCENTRATED_CLIENTS = 1.5
"""Below this effective number of clients 1 / sum_k p_k^2, one client holds nearly all of a round's weight."""
CONCENTRATED_ROUNDS = 3
"""After this many such rounds in a row TERM warns, once per run, that t is too large for the losses' scale."""


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
    are keywords. So ``TermFedAvg(0.5)`` is t = 0.5, not Flower's
    ``FedAvg(0.5)`` (fraction_train = 0.5): pass Flower's arguments by name.

    **Choosing t.** With ``loss_transform="none"`` (the default for t >= 0)
    t is in the units of 1 / F_k: a client whose loss is d above another's
    gets exp(t d) times its weight. Choose t so that t times the spread of a
    round's losses (their interquartile range, say) is about 1 to 3. Mean
    cross-entropy (nats; ln C at chance) and hinge losses of different
    clients usually lie within 0.1 to 2 of each other: t between 1 and 10
    (term-fl's scenarios use t = 10 on cross-entropy and hinge losses, and
    t = -2 on hinge losses with flipped labels). A squared error is in the
    squared units of the target and can spread over thousands: t = 1 then
    gives one client all the weight; scale t by 1 / spread, or use
    ``loss_transform="median_mad"``, where t is per robust standard
    deviation of the round's losses whatever their units (t = 1: a client one
    standard deviation above the median gets e = 2.7 times a median
    client's weight, at most exp(t loss_clip)). When one client holds nearly
    all the weight (1 / sum_k p_k^2 below 1.5) for 3 rounds in a row, a
    warning says so, once per run.

    Parameters
    ----------
    t : float (default: 1.0)
        Tilt across devices, in [-1000, 1000]. t > 0 favours the devices with
        the highest loss (fairness: uniform performance); t < 0 suppresses
        them (robustness to corrupted devices); t = 0 is the plain weighted
        average. The weights trust the clients' reported losses: with t > 0
        and ``loss_transform="none"`` one client that reports a huge F_k
        takes all the weight (``loss_transform`` or ``clip_loss`` bound it).
        With t < 0 ``loss_transform`` defaults to "median_mad", and TERM
        raises every transformed loss below the round's median to the median:
        a low loss earns no extra weight, so a client that reports 0 or
        -1e300 gets at most a median client's weight (the README's security
        section has each bound).
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
        (``loss_transform``, ``loss_clip``, the defences, ``clients_per_round``,
        ``seed``, ``evaluate_fraction``, ``partition_key``).
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
        self._concentrated_rounds = 0
        self._warned_concentrated = False

    def tilt(self) -> float:
        """t: with t < 0 the "auto" loss transform is "median_mad"."""
        return self.t

    def dp_refusal(self) -> str | None:
        """Tilted weights do not fit a DP wrapper's noise; at t = 0 they are FedAvg's (or 1/m)."""
        return None if self.t == 0.0 else f"tilted weights p_k = a_k exp(t F_k) / sum_j a_j exp(t F_j) with t = {self.t:g}"

    @property
    def running_estimate(self) -> float | None:
        """Rt after the last round (None before the first valid round): the strategy's state."""
        return self.state

    def round_step(self, inputs: RoundInputs, state: float | None) -> tuple[Aggregation, float]:
        """c_k = p_k and g = 1 - sum_k p_k from :func:`term_fl.maths.tilting.term_round` (eta_s applied by FedAvg); the state is Rt."""
        base = inputs.num_examples if self.base_weighting == "num_examples" else None
        values = inputs.tilt_values
        if self.t < 0 and self.loss_transform != "none":  # the robust mode rewards no loss below the median
            values = np.maximum(values, np.median(values))
        result = term_round(values, base, self.t, self.lam, state)
        sums_to_one = self.lam == 1.0 or self.t == 0.0
        return (
            Aggregation(result.weights, global_coefficient=old_model_share(result.weights, sums_to_one)),
            result.running_estimate,
        )

    def aggregate_round(self, server_round: int, replies: Iterable[Message] | CohortReplies) -> TrainOutcome:
        """:meth:`FedAvg.aggregate_round`, then the check that the weights do not sit on one client round after round."""
        outcome = super().aggregate_round(server_round, replies)
        if not outcome.report.failed:
            self._watch_concentration(server_round, outcome.report.weights)
        return outcome

    def _watch_concentration(self, server_round: int, weights: NDArray[np.float64]) -> None:
        """Warn once per run when 1 / sum_k p_k^2 stayed below :data:`CONCENTRATED_CLIENTS` for
        :data:`CONCENTRATED_ROUNDS` rounds in a row."""
        effective = effective_clients(weights)
        self._concentrated_rounds = self._concentrated_rounds + 1 if effective < CONCENTRATED_CLIENTS else 0
        if self._concentrated_rounds >= CONCENTRATED_ROUNDS and not self._warned_concentrated:
            self._warned_concentrated = True
            units, way_out = (("1 / loss", "loss_transform='median_mad' (t per robust standard deviation of the "
                               "round's losses)") if self.loss_transform == "none" else
                              (f"the scores of loss_transform = {self.loss_transform}", "a smaller loss_clip"))
            log(WARNING, "TermFedAvg(t=%g): one client held nearly all of the weight in %d rounds in a row (effective "
                "number of clients 1 / sum p_k^2 = %.3g in round %d, below %g): t is in the units of %s, and "
                "exp(t F_k) puts the round on one client. If that is not meant (early rounds, whose losses "
                "differ most, may do it and pass), choose a smaller |t|, or %s: TermFedAvg's docstring, "
                "'Choosing t'.", self.t, self._concentrated_rounds, effective, server_round, CONCENTRATED_CLIENTS,
                units, way_out)

    def state_diagnostics(self, state: float | None) -> Diagnostics:
        """Rt, as ``running_estimate`` (kept through a round without valid replies)."""
        return {} if state is None else {"running_estimate": state}

    def summary(self) -> None:
        """Log the TERM settings, then the shared ones."""
        log(INFO, "\t├──> TERM settings:")
        log(INFO, "\t│\t├── t: %s (%s)", self.t,
            "fairness" if self.t > 0 else "robustness" if self.t < 0 else "FedAvg weights")
        log(INFO, "\t│\t├── lam: %s | base weighting: %s", self.lam, self.base_weighting)
        log(INFO, "\t│\t└── loss: %s ('%s') | loss_transform: %s", self.loss_reduction, self.train_loss_key,
            self.loss_transform)
        super().summary()
