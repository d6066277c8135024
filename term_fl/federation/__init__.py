"""Layer 4, the server loop every engine runs: discovery, rounds, the store's rows.

:func:`run_federation` (in :mod:`.loop`) drives a strategy over a Grid: it
learns which node holds which partition (:mod:`.discovery`), then per round
samples, trains, aggregates and evaluates (:mod:`.rounds`), and hands a
:class:`RoundRecord` (:mod:`.records`: the store's rows and the round's
statistics) to a :class:`Recorder`.
"""

from term_fl.federation.discovery import discover_nodes, rejoin_nodes
from term_fl.federation.loop import build_scenario_strategy, initial_arrays, run_federation
from term_fl.federation.records import RISK_ALPHA, FederationError, FederationResult, Recorder, RoundRecord
from term_fl.federation.rounds import evaluates

__all__ = [
    "RISK_ALPHA",
    "FederationError",
    "FederationResult",
    "Recorder",
    "RoundRecord",
    "build_scenario_strategy",
    "discover_nodes",
    "evaluates",
    "initial_arrays",
    "rejoin_nodes",
    "run_federation",
]
