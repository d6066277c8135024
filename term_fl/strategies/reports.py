"""What a strategy reports about a round: the replies it used, the weights it applied, its diagnostics.

A :class:`TrainReport` is returned by :meth:`FedAvg.aggregate_round
<term_fl.strategies.FedAvg.aggregate_round>` (the server loop records it) and
kept as ``strategy.last_round`` for plug-in users of Flower's own loop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from logging import DEBUG, INFO
from typing import NamedTuple

import numpy as np
from flwr.supercore import log
from numpy.typing import NDArray

Diagnostics = dict[str, "float | list[float]"]
"""Strategy-specific numbers of a round, by name: TERM's ``running_estimate`` (Rt), AFL's ``mixture_weights``."""


class ExcludedReply(NamedTuple):
    """A reply left out of aggregation, and why."""

    node_id: int
    partition_id: int | None
    reason: str


@dataclass(frozen=True)
class TrainReport:
    """What one training round aggregated.

    Attributes
    ----------
    server_round : int
        The round.
    partition_ids : list[int]
        Partition id of each valid reply, in the (sorted) order aggregated; -1
        where a reply carried none.
    node_ids : list[int]
        Node id of each valid reply, same order.
    losses : numpy.ndarray
        F_k, the loss of the received global model each reply reported under
        the strategy's ``train_loss_key`` (before ``clip_loss`` and
        ``loss_transform``; NaN where FedAvg, which needs none, got none).
    num_examples : numpy.ndarray
        n_k (metric ``weighted_by_key``), as reported (before ``max_size_ratio``).
    weights : numpy.ndarray
        What each client contributed to the new model, after the server
        learning rate eta_s. For the strategies that choose coefficients, the
        c_k actually applied in ``w_new = g w + sum_k c_k w_k``: n_k / sum n
        for FedAvg, 1/m for FedAvg (uniform), eta_s p_k for TERM,
        L F_k^q / sum_j h_j for q-FFL, AFL's lambda renormalised over the
        sampled devices, Krum's selection (n_k / sum of the selected n_j for a
        selected client, 0 for the others). For the coordinate-wise
        aggregators (median, trimmed mean), the share of client k averaged
        over every coordinate of the model: at each coordinate the values
        that enter the aggregate share it equally (the middle one or two for
        the median, those left after trimming for the trimmed mean; ties go
        to the lower partition id), so a client that is always trimmed gets 0.
    diagnostics : dict
        The strategy's own numbers after the round (TERM: ``running_estimate``
        Rt; AFL: ``mixture_weights``, lambda over every partition); empty for
        FedAvg and q-FFL. A round without valid replies reports the state it
        left unchanged.
    metrics : list[dict]
        The MetricRecord of each valid reply, as a dict, same order.
    excluded : list[ExcludedReply]
        Replies left out, with the reason.
    """

    server_round: int
    partition_ids: list[int]
    node_ids: list[int]
    losses: NDArray[np.float64]
    num_examples: NDArray[np.float64]
    weights: NDArray[np.float64]
    diagnostics: Diagnostics = field(default_factory=dict)
    metrics: list[dict[str, float | int | list[float] | list[int]]] = field(default_factory=list)
    excluded: list[ExcludedReply] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        """True when no reply was valid (the model was left unchanged)."""
        return not self.node_ids


@dataclass(frozen=True)
class EvaluationReport:
    """What one evaluation round aggregated (``FedAvg.last_evaluation``).

    ``metrics[i]`` is the MetricRecord (as a dict) of the reply from
    ``node_ids[i]`` / ``partition_ids[i]``, sorted by partition id.
    """

    server_round: int
    partition_ids: list[int]
    node_ids: list[int]
    metrics: list[dict[str, float | int | list[float] | list[int]]]
    excluded: list[ExcludedReply] = field(default_factory=list)


def reply_name(node_id: int, partition_id: int | None) -> str:
    """How logs name a reply: "node 5 (partition 3)", or "node 5 (no partition-id)" when it carried none."""
    known = partition_id is not None and partition_id >= 0
    return f"node {node_id} ({f'partition {partition_id}' if known else 'no partition-id'})"


def effective_clients(weights: NDArray[np.float64]) -> float:
    """1 / sum_k p_k^2 of the weights normalised to sum 1: m for equal weights, 1 when one client has them all.

    NaN when the weights sum to 0 or less (no client contributes).
    """
    weights = np.asarray(weights, dtype=np.float64)
    total = float(np.sum(weights))
    if not total > 0.0:
        return math.nan
    return 1.0 / float(np.sum(np.square(weights / total)))


def log_train_report(report: TrainReport) -> None:
    """Log one INFO line per round (replies, weights, the effective number of clients, the scalar diagnostics).

    Each reply's F_k and weight go to DEBUG (Flower's loop prints INFO:
    one line per client per round would flood a Flower app's log).
    """
    scalars = {k: v for k, v in report.diagnostics.items() if isinstance(v, float | int)}
    weights = np.asarray(report.weights, dtype=np.float64)
    log(INFO, "aggregate_train: round %d: %d replies aggregated, %d excluded; weights %.3g..%.3g, effective "
        "clients %.3g%s", report.server_round, len(report.node_ids), len(report.excluded), float(np.min(weights)),
        float(np.max(weights)), effective_clients(weights),
        "".join(f", {k} = {v:.6g}" for k, v in scalars.items()))
    for node, partition, loss, weight in zip(report.node_ids, report.partition_ids, report.losses,
                                             report.weights, strict=True):
        if math.isnan(loss):  # a strategy that needs no loss (FedAvg) and a reply that sent none
            log(DEBUG, "\t> %s: weight %.6g", reply_name(node, partition), weight)
        else:
            log(DEBUG, "\t> %s: F_k = %.6g, weight %.6g", reply_name(node, partition), loss, weight)
