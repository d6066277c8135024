"""Flower strategies: FedAvg, FedAvg (uniform), q-FFL, TERM, AFL, median, trimmed mean and Krum on one template.

``STRATEGIES`` (:mod:`.registry`) lists them; ``build_strategy(name, **params)``
builds one by name, and each registered class and settings model is importable
from here by its name. Modules: :mod:`.fedavg` (the template every strategy
subclasses), one module per strategy (its settings, its math, its round
function: :mod:`.fedavg_uniform`, :mod:`.qffl`, :mod:`.term`, :mod:`.afl`,
:mod:`.median`, :mod:`.trimmed_mean`, :mod:`.krum`), :mod:`.aggregation`
(what a round function sees and decides), :mod:`.stacked` (a round's models,
decoded once), :mod:`.replies` (reading and filtering replies),
:mod:`.trust` (one reply per node and partition), :mod:`.defences` (the defences),
:mod:`.arithmetic` (the update rule),
:mod:`.sampling` (seeded sampling by partition-id), :mod:`.reports` (what a
round reports), :mod:`.settings` (validated parameters).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .registry import STRATEGIES as _REGISTERED

if TYPE_CHECKING:
    from .afl import AFL, afl_round, project_onto_simplex
    from .aggregation import Aggregation, RoundInputs, TrainOutcome
    from .arithmetic import combine_models
    from .fedavg import FedAvg
    from .fedavg_uniform import FedAvgUniform
    from .krum import Krum
    from .median import FedMedian
    from .qffl import QFFL, qffl_coefficients
    from .registry import PARAM_KEYS, STRATEGIES, StrategySpec, build_strategy, cell_label
    from .replies import filter_replies, filter_train_replies, sent_index
    from .reports import EvaluationReport, ExcludedReply, TrainReport
    from .settings import Settings
    from .stacked import StackedModels
    from .term import TermFedAvg
    from .trimmed_mean import FedTrimmedAvg

# Where each name lives: imported on first use, so that reading the registry
# (term_fl.strategies.registry: names, labels, parameters) does not import Flower.
_HOMES = {
    "afl": ("afl_round", "project_onto_simplex"),
    "aggregation": ("Aggregation", "RoundInputs", "TrainOutcome"),
    "arithmetic": ("combine_models",),
    "qffl": ("qffl_coefficients",),
    "registry": ("PARAM_KEYS", "STRATEGIES", "StrategySpec", "build_strategy", "cell_label"),
    "replies": ("filter_replies", "filter_train_replies", "sent_index"),
    "reports": ("EvaluationReport", "ExcludedReply", "TrainReport"),
    "settings": ("Settings",),
    "stacked": ("StackedModels",),
}
_HOME = {name: module for module, names in _HOMES.items() for name in names}
# Every registered strategy class and settings model, where the registry says it lives ("module:Name")
_CLASSES = [spec.strategy_ref.split(":") for spec in _REGISTERED.values()]
_SETTINGS = [spec.settings_ref.split(":") for spec in _REGISTERED.values()]
_HOME.update((name, module) for module, name in (*_CLASSES, *_SETTINGS))


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
    "FedAvgUniform",
    "FedMedian",
    "FedTrimmedAvg",
    "Krum",
    "RoundInputs",
    "Settings",
    "StackedModels",
    "StrategySpec",
    "TermFedAvg",
    "TrainOutcome",
    "TrainReport",
    "afl_round",
    "build_strategy",
    "cell_label",
    "combine_models",
    "filter_replies",
    "filter_train_replies",
    "project_onto_simplex",
    "qffl_coefficients",
    "sent_index",
]
__all__ += [name for _, name in _CLASSES if name not in __all__]  # a strategy registered without an edit here
