"""Run one resolved scenario end to end: run directory, results store, engine."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from term_fl.config import Scenario
from term_fl.engines import run_scenario
from term_fl.federation import RoundRecord
from term_fl.results import ResultsStore
from term_fl.runs import RunRecorder, check_output_dir, new_run_id

DEFAULT_RUNS_DIR = Path("runs")


def run_one(
    scenario: Scenario,
    store: ResultsStore,
    *,
    out_dir: Path | None = None,
    on_round: Callable[[RoundRecord, int], None] | None = None,
) -> RunRecorder:
    """Run ``scenario``, recording into ``store`` and ``out_dir`` (default ./runs/<run id>).

    The recorder is returned in every case that does not raise; a failing
    run is marked failed (or interrupted) in the store, its completed rounds
    stay readable, and the error propagates.
    """
    run_id = new_run_id(scenario)
    run_dir = Path(out_dir) if out_dir is not None else DEFAULT_RUNS_DIR / run_id
    check_output_dir(run_dir.resolve())  # before any engine starts; RunRecorder.start checks again
    recorder = RunRecorder(store, run_dir.resolve(), run_id=run_id)
    run_scenario(scenario, recorder, on_round=on_round)
    return recorder
