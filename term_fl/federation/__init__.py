"""Layer 4, the server loop every engine runs: discovery, rounds, the store's rows.

:func:`run_federation` (in :mod:`.loop`) drives a strategy over a Grid: it
learns which node holds which partition, then per round samples, trains,
aggregates, evaluates, and hands a :class:`RoundRecord` to a :class:`Recorder`.
"""

from term_fl.federation.loop import (
    RISK_ALPHA,
    FederationError,
    FederationResult,
    Recorder,
    RoundRecord,
    build_scenario_strategy,
    discover_nodes,
    evaluates,
    initial_arrays,
    rejoin_nodes,
    run_federation,
)

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
