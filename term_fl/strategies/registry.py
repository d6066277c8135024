"""The strategy registry: one entry per strategy, the only list of them.

An entry names the strategy (``strategy.name`` of a scenario), its class, its
settings model (the scenario's ``[strategy]`` fields for it, with defaults,
ranges and descriptions), its label, the parameters a sweep tunes on
validation and names cells by, and the client settings it takes. The
scenario schema, the server loop, the comparison, the results store and the
dashboard all read this list; adding a strategy is one module and one entry.

An entry names its classes by module and name and imports them when first
used: the names, labels and parameters are read without importing Flower
(``term-fl runs``, the dashboard and reports start without it).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .settings import Defences, Settings

if TYPE_CHECKING:
    from .fedavg import FedAvg

__all__ = ["COMMON_SETTINGS", "PARAM_KEYS", "STRATEGIES", "StrategySpec", "build_strategy", "cell_label",
           "strategy_order"]


@dataclass(frozen=True)
class StrategySpec:
    """One strategy as the rest of term-fl sees it.

    Attributes
    ----------
    name : str
        Its value of ``strategy.name`` (and in the store, summaries, tables).
    label : str
        How people call it ("TERM", "q-FFL").
    strategy_ref, settings_ref : str
        Where the Flower strategy class (:attr:`strategy`: its keyword
        arguments are the settings' fields plus ``from_client``'s keys,
        renamed by ``arguments``) and its parameters' model (:attr:`settings`:
        the ``[strategy]`` fields a scenario sets for it) live, as
        ``"module:Name"`` in ``term_fl.strategies``.
    tuned : tuple of str
        Parameters that a sweep varies and picks on validation, and that name
        a cell ("term t=20").
    shown : tuple of str
        Parameters listed beside the name in tables, comparison rows and the
        dashboard (the tuned ones first).
    from_client : mapping
        Parameters taken from the scenario's ``[client]`` table:
        parameter -> client field (q-FFL's L = 1 / client_lr).
    arguments : mapping
        Parameter -> the class's argument, where the class takes Flower's
        name for it (``client_lr`` is Flower's ``client_learning_rate``,
        ``server_lr`` its ``server_learning_rate``); parameters keep the
        scenario's and the store's names.
    baseline : bool
        A baseline of every comparison: each cell is paired with this
        strategy's cell of the same settings (``term_fl.comparison.pairing``),
        and a sweep does not choose among its cells.
    tilt : str or None
        The parameter whose negative value turns the "auto" loss transform on
        (TERM's ``t``: :func:`.settings.resolve_loss_transform`).
    """

    name: str
    label: str
    strategy_ref: str
    settings_ref: str
    tuned: tuple[str, ...] = ()
    shown: tuple[str, ...] = ()
    from_client: Mapping[str, str] = field(default_factory=dict)
    arguments: Mapping[str, str] = field(default_factory=dict)
    baseline: bool = False
    tilt: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "shown", tuple(dict.fromkeys((*self.tuned, *self.shown))))

    @property
    def strategy(self) -> type[FedAvg]:
        """The Flower strategy class (its module, and Flower, imported on first use)."""
        return _resolve(self.strategy_ref)

    @property
    def settings(self) -> type[Settings]:
        """The model of its parameters (its module imported on first use)."""
        return _resolve(self.settings_ref)

    def params(self, strategy_table: Any, client_table: Any) -> dict[str, Any]:
        """The strategy's parameters from a scenario's ``[strategy]`` and ``[client]`` tables (validated models)."""
        values = {key: getattr(strategy_table, key) for key in self.settings.model_fields}
        values.update({key: getattr(client_table, source) for key, source in self.from_client.items()})
        return values

    def build(self, strategy_table: Any, client_table: Any, **options: Any) -> FedAvg:
        """The strategy a scenario's tables describe, with ``options`` (sampling) as further keywords."""
        params = self.params(strategy_table, client_table)
        return self.strategy(**{self.arguments.get(k, k): v for k, v in params.items()}, **options)


def _resolve(ref: str) -> Any:
    """The object a ``"module:Name"`` reference of ``term_fl.strategies`` names."""
    module, name = ref.split(":")
    return getattr(importlib.import_module(f"{__package__}.{module}"), name)


STRATEGIES: dict[str, StrategySpec] = {
    spec.name: spec
    for spec in (
        StrategySpec("fedavg", "FedAvg", "fedavg:FedAvg", "settings:Settings", baseline=True),
        StrategySpec("fedavg_uniform", "FedAvg (uniform)", "fedavg_uniform:FedAvgUniform",
                     "fedavg_uniform:FedAvgUniformSettings", baseline=True),
        StrategySpec("qffl", "q-FFL", "qffl:QFFL", "qffl:QFFLSettings", tuned=("q",), from_client={"client_lr": "lr"},
                     arguments={"client_lr": "client_learning_rate"}),
        StrategySpec("term", "TERM", "term:TermFedAvg", "term:TermSettings", tuned=("t",), shown=("lam",),
                     arguments={"server_lr": "server_learning_rate"}, tilt="t"),
        StrategySpec("afl", "AFL", "afl:AFL", "afl:AFLSettings", tuned=("lambda_lr",)),
        StrategySpec("median", "Median", "median:FedMedian", "median:MedianSettings"),
        StrategySpec("trimmed_mean", "Trimmed mean", "trimmed_mean:FedTrimmedAvg", "trimmed_mean:TrimmedMeanSettings",
                     tuned=("beta",)),
        StrategySpec("krum", "Krum", "krum:Krum", "krum:KrumSettings", tuned=("num_malicious",), shown=("num_to_keep",),
                     arguments={"num_malicious": "num_malicious_nodes", "num_to_keep": "num_nodes_to_select"}),
    )
}

COMMON_SETTINGS: type[Settings] = Defences
"""Settings every strategy takes (the FedAvg template's defences), in the scenario's [strategy] table too."""

PARAM_KEYS: tuple[str, ...] = (*dict.fromkeys(key for spec in STRATEGIES.values() for key in spec.shown), "tau")
"""The parameters tables show beside a strategy's name, in order: every strategy's shown ones, and the client's tau."""


def build_strategy(name: str, **params: Any) -> FedAvg:
    """Build the strategy called ``name`` with ``params`` (its class's keyword arguments)."""
    try:
        spec = STRATEGIES[name]
    except KeyError:
        raise ValueError(f"Unknown strategy {name!r}; allowed names: {', '.join(STRATEGIES)}.") from None
    return spec.strategy(**params)


def cell_label(strategy: Mapping[str, Any]) -> str:
    """'term t=1', 'qffl q=5 sum', 'fedavg': the name and its tuned parameters, 'sum' for summed losses F_k,
    and tau when a client-side tilt is used."""
    name = strategy.get("name", "?")
    parts = [name]
    spec = STRATEGIES.get(name)
    for key in spec.tuned if spec else ():
        parts.append(f"{key}={strategy.get(key):g}")
    if strategy.get("loss_reduction") == "sum":
        parts.append("sum")  # F_k summed over the device's samples ('paper' mode)
    if strategy.get("tau"):
        parts.append(f"tau={strategy.get('tau'):g}")
    return " ".join(parts)


def strategy_order(name: str) -> int:
    """The rank of a strategy in tables (registry order; unknown names last)."""
    names = list(STRATEGIES)
    return names.index(name) if name in names else len(names)
