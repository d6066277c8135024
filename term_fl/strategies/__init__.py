"""Flower strategies: FedAvg, q-FFL, TERM and AFL on one shared plumbing.

``STRATEGIES`` (:mod:`.registry`) lists them; ``build_strategy(name, **params)``
builds one by name. Modules: :mod:`.fedavg` (the template every strategy
subclasses), :mod:`.qffl`, :mod:`.term`, :mod:`.afl` (one strategy each: its
settings, its round function), :mod:`.settings` (validated parameters), :mod:`.replies` (reading and filtering
replies), :mod:`.arithmetic` (the update rule), :mod:`.sampling` (seeded
sampling by partition-id), :mod:`.reports` (what a round reports).
"""

from __future__ import annotations

from .afl import AFL, afl_round, project_onto_simplex
from .arithmetic import combine_models
from .fedavg import Aggregation, FedAvg, RoundInputs, TrainOutcome
from .qffl import QFFL, qffl_coefficients
from .registry import PARAM_KEYS, STRATEGIES, StrategySpec, build_strategy, cell_label
from .replies import filter_replies, sent_index
from .reports import EvaluationReport, ExcludedReply, TrainReport
from .settings import Settings
from .term import TermFedAvg

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
