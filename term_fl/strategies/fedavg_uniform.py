"""FedAvg (uniform): the sampled devices' models averaged with equal weights 1/m.

The baseline that counts each device once, as the reported fairness metrics
(device mean, worst 10%) do: ``w_new = (1/m) sum_k w_k`` over the m valid
replies of a round, whatever their sizes n_k. ``fedavg`` weights by n_k
(McMahan et al., 2017) and optimises the pooled loss; the difference between
TERM and this average is what tilting itself adds. It is TERM with t = 0 and
uniform base weights, bit for bit.
"""

from __future__ import annotations

import numpy as np

from .fedavg import Aggregation, FedAvg, RoundInputs
from .settings import Settings

__all__ = ["FedAvgUniform", "FedAvgUniformSettings"]


class FedAvgUniformSettings(Settings):
    """FedAvg (uniform) has no parameters of its own (the ``[strategy]`` table's defences apply)."""


class FedAvgUniform(FedAvg):
    """FedAvg with equal weights: c_k = 1/m for each of the m valid replies, no global term, no state.

    ``last_round.weights`` holds 1/m per reply. Takes :class:`~term_fl.strategies.FedAvg`'s
    arguments (Flower's, then term-fl's keywords); it needs no loss from the
    clients (it records F_k when sent).
    """

    def round_step(self, inputs: RoundInputs, state: None) -> tuple[Aggregation, None]:
        """c_k = 1/m."""
        m = inputs.num_examples.size
        return Aggregation(np.full(m, 1.0 / m)), state
