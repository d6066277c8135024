"""Several runs of one group (:mod:`term_fl.engines.group`) into the results store, as :func:`~.run.run_one` runs one."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from term_fl.config import Scenario
from term_fl.engines.group import run_group
from term_fl.federation.loop import RoundRecord
from term_fl.results import ResultsStore
from term_fl.runs.run import RunRecorder, check_output_dir, run_id_for

__all__ = ["run_many"]


def run_many(
    cells: Sequence[tuple[Scenario, Path]],
    store: ResultsStore,
    *,
    on_round: Callable[[int, RoundRecord, int], None] | None = None,
) -> list[RunRecorder | BaseException]:
    """Run the scenarios of one group side by side, each into ``store`` and its own run directory.

    ``cells`` pairs each scenario with its run directory. Each run is
    recorded as :func:`~.run.run_one` records it (store rows every round,
    heartbeat, summary.json, model.pt). Returns each run's recorder, or the
    exception it stopped with (a KeyboardInterrupt is raised, every run
    recorded as interrupted).
    """
    recorders = []
    for scenario, out_dir in cells:
        run_dir = Path(out_dir).resolve()
        check_output_dir(run_dir)  # before any run starts; RunRecorder.start checks again
        recorders.append(RunRecorder(store, run_dir, run_id=run_id_for(scenario)))
    outcomes = run_group([scenario for scenario, _ in cells], recorders, on_round=on_round)
    return [outcome if isinstance(outcome, BaseException) else recorder
            for recorder, outcome in zip(recorders, outcomes, strict=True)]
