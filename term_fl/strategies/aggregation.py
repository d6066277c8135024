"""What a round function sees and what it decides: :class:`RoundInputs` in, :class:`Aggregation` out.

A strategy's round function (:meth:`FedAvg.round_step <term_fl.strategies.FedAvg.round_step>`)
reads the round's valid replies (losses, sizes, the clients' models decoded
once and stacked) and returns the new model in one of two forms:

- **linear**: coefficients c_k and g of ``w_new = g w + sum_k c_k w_k``
  (FedAvg, q-FFL, TERM, AFL, Krum's selection);
- **explicit**: the arrays M of the strategy's own aggregate (a
  coordinate-wise median, a trimmed mean), with ``w_new = g w + (1 - g) M``;
  the c_k then record what each client contributed to M.

The template applies the server learning rate to either form
(:meth:`Aggregation.stepped`) and computes w_new (:meth:`Aggregation.new_model`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np
from flwr.app import ArrayRecord, MetricRecord
from numpy.typing import NDArray

from .arithmetic import combine_models, mix_with_global
from .reports import Diagnostics, TrainReport
from .stacked import StackedModels

__all__ = ["Aggregation", "RoundInputs", "TrainOutcome"]


@dataclass(frozen=True)
class RoundInputs:
    """What a round function sees: the valid training replies of one round, sorted by partition id.

    ``models`` holds the clients' models (after the template's defences),
    decoded once per round and shared by every step; ``global_model()`` is
    the model sent this round, decoded on first use and then kept.
    ``losses`` are F_k after ``clip_loss`` and ``loss_transform`` (in the
    loss's units for "none" and "median_mad", ranks for "rank");
    ``scores`` what a tilt multiplies (:attr:`tilt_values`): the same for
    "none" and "rank", the unitless z_k for "median_mad".
    """

    server_round: int
    partition_ids: NDArray[np.int64]  # -1 where a reply carried none
    losses: NDArray[np.float64]  # F_k (metric train_loss_key; NaN where a reply lacks it and the strategy needs none)
    num_examples: NDArray[np.float64]  # n_k (metric weighted_by_key; after max_size_ratio)
    models: StackedModels  # w_k, row k for reply k
    global_model: Callable[[], Mapping[str, NDArray]]  # w
    scores: NDArray[np.float64] | None = None  # the transformed losses a tilt multiplies; None: the losses

    @property
    def tilt_values(self) -> NDArray[np.float64]:
        """What TERM tilts by: :attr:`scores`, or the losses where the template set none."""
        return self.losses if self.scores is None else self.scores


@dataclass(frozen=True)
class Aggregation:
    """What a round function decides: ``w_new = g w + sum_k c_k w_k``, or ``g w + (1 - g) M`` with ``model`` M.

    Attributes
    ----------
    coefficients : numpy.ndarray
        c_k, one per reply. Linear form: the coefficients applied. Explicit
        form: what each client contributed to M (documented by each strategy;
        they sum to 1 - g), recorded in the round's report.
    global_coefficient : float
        g, the share of the old global model w.
    diagnostics : dict
        Numbers of this round worth recording beside the strategy's state
        (:meth:`FedAvg.state_diagnostics`).
    model : mapping, optional
        M, the strategy's own aggregate (arrays with the global model's names
        and shapes); None for the linear form.
    """

    coefficients: NDArray[np.float64]
    global_coefficient: float = 0.0
    diagnostics: Diagnostics = field(default_factory=dict)
    model: Mapping[str, NDArray] | None = None

    def stepped(self, server_learning_rate: float) -> Aggregation:
        """The update taken with a server learning rate eta: ``w + eta (w_new - w)``.

        That is coefficients ``eta c_k`` and global coefficient ``1 - eta (1 - g)``,
        in both forms; eta = 1 returns this aggregation unchanged (bit for bit).
        """
        if server_learning_rate == 1.0:
            return self
        return replace(
            self,
            coefficients=server_learning_rate * np.asarray(self.coefficients, dtype=np.float64),
            global_coefficient=1.0 - server_learning_rate * (1.0 - self.global_coefficient),
        )

    def new_model(
        self, models: StackedModels, global_model: Callable[[], Mapping[str, NDArray]]
    ) -> dict[str, NDArray[np.float64]]:
        """w_new in float64 (``global_model()`` is called only when g != 0)."""
        g = self.global_coefficient
        w = global_model() if g != 0.0 else None
        if self.model is None:
            return combine_models(models, self.coefficients, w, g)
        return mix_with_global(self.model, w, g)


class TrainOutcome(NamedTuple):
    """What :meth:`FedAvg.aggregate_round <term_fl.strategies.FedAvg.aggregate_round>` returns."""

    arrays: ArrayRecord | None  # the new global model; None when no reply was valid
    metrics: MetricRecord | None  # Flower's aggregated training metrics
    report: TrainReport
