"""Flower strategies: FedAvg, q-FFL and TERM on one shared plumbing.

``build_strategy(name, **params)`` is the entry point of the config layer.
"""

from __future__ import annotations

from typing import Any

from .base import (
    Aggregation,
    EvaluationReport,
    ExcludedReply,
    FedAvg,
    RoundReport,
    combine_models,
    filter_replies,
    sent_index,
)
from .qffl import QFFL, qffl_coefficients
from .term import TermFedAvg

__all__ = [
    "STRATEGIES",
    "Aggregation",
    "EvaluationReport",
    "ExcludedReply",
    "FedAvg",
    "QFFL",
    "RoundReport",
    "TermFedAvg",
    "build_strategy",
    "combine_models",
    "filter_replies",
    "qffl_coefficients",
    "sent_index",
]

STRATEGIES: dict[str, type[FedAvg]] = {"fedavg": FedAvg, "qffl": QFFL, "term": TermFedAvg}


def build_strategy(name: str, **params: Any) -> FedAvg:
    """Build the strategy called ``name`` ("fedavg", "qffl" or "term") with ``params``.

    ``params`` are the keyword arguments of the strategy's class (see
    :class:`FedAvg`, :class:`QFFL`, :class:`TermFedAvg`).
    """
    try:
        cls = STRATEGIES[name]
    except KeyError:
        raise ValueError(
            f"Unknown strategy {name!r}; allowed names: {', '.join(sorted(STRATEGIES))}."
        ) from None
    return cls(**params)
