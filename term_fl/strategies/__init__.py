"""Flower strategies: FedAvg, q-FFL, TERM and AFL on one shared plumbing.

``STRATEGIES`` (:mod:`.registry`) lists them; ``build_strategy(name, **params)``
builds one by name. Modules: :mod:`.fedavg` (the template every strategy
subclasses), :mod:`.qffl`, :mod:`.term`, :mod:`.afl` (one strategy each: its
settings, its round function), :mod:`.settings` (validated parameters), :mod:`.replies` (reading and filtering
replies), :mod:`.arithmetic` (the update rule), :mod:`.sampling` (seeded
sampling by partition-id), :mod:`.reports` (what a round reports).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .afl import AFL, afl_round, project_onto_simplex
    from .arithmetic import combine_models
    from .fedavg import Aggregation, FedAvg, RoundInputs, TrainOutcome
    from .qffl import QFFL, qffl_coefficients
    from .registry import PARAM_KEYS, STRATEGIES, StrategySpec, build_strategy, cell_label
    from .replies import filter_replies, sent_index
    from .reports import EvaluationReport, ExcludedReply, TrainReport
    from .settings import Settings
    from .term import TermFedAvg

# Where each name lives: imported on first use, so that reading the registry
# (term_fl.strategies.registry: names, labels, parameters) does not import Flower.
_HOMES = {
    "afl": ("AFL", "afl_round", "project_onto_simplex"),
    "arithmetic": ("combine_models",),
    "fedavg": ("Aggregation", "FedAvg", "RoundInputs", "TrainOutcome"),
    "qffl": ("QFFL", "qffl_coefficients"),
    "registry": ("PARAM_KEYS", "STRATEGIES", "StrategySpec", "build_strategy", "cell_label"),
    "replies": ("filter_replies", "sent_index"),
    "reports": ("EvaluationReport", "ExcludedReply", "TrainReport"),
    "settings": ("Settings",),
    "term": ("TermFedAvg",),
}
_HOME = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME})


__all__ = [
    "AFL",
    "PARAM_KEYS",
    "QFFL",
    "STRATEGIES",
    "Aggregation",
    "EvaluationReport",
    "ExcludedReply",
    "FedAvg",
    "RoundInputs",
    "Settings",
    "StrategySpec",
    "TermFedAvg",
    "TrainOutcome",
    "TrainReport",
    "afl_round",
    "build_strategy",
    "cell_label",
    "combine_models",
    "filter_replies",
    "project_onto_simplex",
    "qffl_coefficients",
    "sent_index",
]
