"""Krum and multi-Krum on term-fl's template.

Blanchard, El Mhamdi, Guerraoui, Stainer, "Machine Learning with
Adversaries: Byzantine Tolerant Gradient Descent", NeurIPS 2017. Each of the
m clients' models is scored by the sum of its squared distances to its
m - f - 2 nearest other models (f = ``num_malicious``, the Byzantine
clients to tolerate; at least 1 neighbour), and the ``num_to_keep`` models
with the lowest scores are averaged, weighted by n_k (``num_to_keep = 1``:
Krum, the single best model; more: multi-Krum, as Flower's MultiKrum). The
guarantee needs m > 2 f + 2.

Krum is a selection, so it is linear in the models: the round's weights are
c_k = n_k / sum_{j selected} n_j for a selected client and 0 for the others,
and ``last_round.weights`` records exactly that selection.

Differences from Flower's Krum / MultiKrum: distances are computed in
float64 as ||w_i - w_j||^2 (Flower expands ||w_i||^2 + ||w_j||^2 - 2 w_i.w_j in
the models' dtype, which can round a float32 distance by more than the gap
between two scores); a model's own distance is left out by index (Flower
drops the first entry of each sorted row); ties between scores go to the
lower partition id; the selected models are averaged in partition order, in
float64, and returned in the global model's dtypes; Flower's aggregated
training metrics cover the selected replies only, term-fl's every valid reply.
"""

from __future__ import annotations

from collections.abc import Callable
from logging import INFO, WARNING
from typing import Any

import numpy as np
from flwr.app import MetricRecord, RecordDict
from flwr.supercore import log
from numpy.typing import NDArray
from pydantic import Field

from term_fl.common.keys import ARRAYS, CONFIG, NUM_EXAMPLES

from .fedavg import Aggregation, FedAvg, RoundInputs
from .settings import Settings

__all__ = ["Krum", "KrumSettings", "krum_scores", "krum_selection"]


class KrumSettings(Settings):
    """Krum's parameters (the ``[strategy]`` fields of a scenario with ``name = "krum"``)."""

    num_malicious: int = Field(0, ge=0, le=1_000_000,
                               description="Krum: f, the Byzantine clients per round it tolerates (each model is "
                                           "scored by its distances to its m - f - 2 nearest; needs m > 2 f + 2)")
    num_to_keep: int = Field(1, ge=1, le=1_000_000,
                             description="Krum: how many of the best-scored models are averaged (weighted by n_k); "
                                         "1 is Krum, more is multi-Krum")


def krum_scores(flat_models: NDArray[np.float64], num_malicious: int) -> NDArray[np.float64]:
    """Each model's score: the sum of its squared distances to its max(1, m - f - 2) nearest other models.

    Parameters
    ----------
    flat_models : numpy.ndarray of shape (m, d)
        The models as rows (float64).
    num_malicious : int
        f >= 0.

    Returns
    -------
    numpy.ndarray of shape (m,)
        The scores (0 for a single model: it has no neighbour).
    """
    m = flat_models.shape[0]
    nearest = min(m - 1, max(1, m - num_malicious - 2))
    scores = np.zeros(m)
    for i in range(m):
        distances = np.sum(np.square(flat_models - flat_models[i]), axis=1)
        others = np.delete(distances, i)
        scores[i] = np.sum(np.sort(others)[:nearest])
    return scores


def krum_selection(scores: NDArray[np.float64], num_to_keep: int) -> NDArray[np.int64]:
    """The indices of the ``num_to_keep`` lowest scores (all when fewer), in score order; ties to the lower index."""
    return np.argsort(scores, kind="stable")[:num_to_keep]


class Krum(FedAvg):
    """Krum / multi-Krum: average the ``num_nodes_to_select`` models nearest to their neighbours (Blanchard et al.).

    ``last_round.weights`` holds n_k / sum of the selected n_j for the selected
    clients and 0 for the others. A drop-in for Flower's ``Krum`` (its
    arguments, names, positions and defaults; ``num_nodes_to_select`` as in
    Flower's ``MultiKrum``, a keyword here); term-fl's are keywords.

    Parameters
    ----------
    fraction_train, fraction_evaluate, min_train_nodes, min_evaluate_nodes, min_available_nodes
        Flower's FedAvg arguments (see :class:`~term_fl.strategies.FedAvg`).
    num_malicious_nodes : int (default: 0)
        f, the Byzantine clients per round to tolerate: each model is scored
        by its squared distances to its m - f - 2 nearest (at least 1).
    weighted_by_key, arrayrecord_key, configrecord_key, train_metrics_aggr_fn, evaluate_metrics_aggr_fn
        Flower's FedAvg arguments.
    num_nodes_to_select : int (default: 1)
        How many of the best-scored models are averaged: 1 is Krum, more is
        multi-Krum (all m when it exceeds m).
    **kwargs
        term-fl's keywords of :class:`~term_fl.strategies.FedAvg`.
    """

    dp_weights = "Krum's selection (one or a few clients take the round)"

    # pylint: disable=too-many-arguments
    def __init__(  # noqa: PLR0913
        self,
        fraction_train: float = 1.0,
        fraction_evaluate: float = 1.0,
        min_train_nodes: int = 2,
        min_evaluate_nodes: int = 2,
        min_available_nodes: int = 2,
        num_malicious_nodes: int = 0,
        weighted_by_key: str = NUM_EXAMPLES,
        arrayrecord_key: str = ARRAYS,
        configrecord_key: str = CONFIG,
        train_metrics_aggr_fn: Callable[[list[RecordDict], str], MetricRecord] | None = None,
        evaluate_metrics_aggr_fn: Callable[[list[RecordDict], str], MetricRecord] | None = None,
        *,
        num_nodes_to_select: int = 1,
        **kwargs: Any,
    ) -> None:
        settings = KrumSettings.of(type(self).__name__, num_malicious=num_malicious_nodes,
                                   num_to_keep=num_nodes_to_select)
        super().__init__(fraction_train, fraction_evaluate, min_train_nodes, min_evaluate_nodes,
                         min_available_nodes, weighted_by_key, arrayrecord_key, configrecord_key,
                         train_metrics_aggr_fn, evaluate_metrics_aggr_fn, **kwargs)
        self.settings = settings
        self.num_malicious_nodes = settings.num_malicious
        self.num_nodes_to_select = settings.num_to_keep

    def round_step(self, inputs: RoundInputs, state: None) -> tuple[Aggregation, None]:
        """Score every model, keep the best ``num_nodes_to_select``, weight them by n_k; the others get 0."""
        m, f = len(inputs.models), self.num_malicious_nodes
        if m <= 2 * f + 2:
            log(WARNING, "Krum round %d: %d replies, num_malicious = %d: the guarantee needs more than 2 f + 2 = %d",
                inputs.server_round, m, f, 2 * f + 2)
        selected = krum_selection(krum_scores(inputs.models.flat(), f), self.num_nodes_to_select)
        coefficients = np.zeros(m)
        coefficients[selected] = inputs.num_examples[selected] / np.sum(inputs.num_examples[selected])
        return Aggregation(coefficients), state

    def summary(self) -> None:
        """Log Krum's settings, then the shared ones."""
        log(INFO, "\t├──> Krum settings:")
        log(INFO, "\t│\t└── num_malicious_nodes: %d | num_nodes_to_select: %d", self.num_malicious_nodes,
            self.num_nodes_to_select)
        super().summary()
