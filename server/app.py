"""ServerApp for `flwr run .` (Simulation or Deployment Engine).

Thin on purpose: the scenario comes from the run config (`scenario` path and
`overrides`, see [tool.flwr.app.config] in pyproject.toml), the loop is
term_fl.federation.run_federation, shared with `term-fl run`.
"""

from __future__ import annotations

import logging
import os
import shlex
from pathlib import Path

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from term_fl.config import load_scenario
from term_fl.federation import RoundRecord, run_federation
from term_fl.results import ResultsStore
from term_fl.runs import RunRecorder, run_id_for

APP_DIR = Path(__file__).resolve().parent.parent
log = logging.getLogger("flwr")

app = ServerApp()


def results_root(run_config_value: str) -> Path:
    """Where runs land: the run config's results-dir, else $TERM_FL_HOME, else ~/.term-fl."""
    root = run_config_value or os.environ.get("TERM_FL_HOME") or "~/.term-fl"
    return Path(root).expanduser().resolve()


def _log_round(record: RoundRecord, rounds: int) -> None:
    test = record.stats.get("test") or {}
    log.info(
        "term-fl round %d/%d: average %.4f worst-10%% %.4f (%s)",
        record.server_round, rounds, test.get("pooled_mean", float("nan")),
        test.get("worst_10", float("nan")), record.status,
    )


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    scenario_path = str(cfg.get("scenario", "") or "")
    if scenario_path and not Path(scenario_path).is_absolute():
        scenario_path = str(APP_DIR / scenario_path)
    scenario = load_scenario(scenario_path or None, shlex.split(str(cfg.get("overrides", "") or "")))
    root = results_root(str(cfg.get("results-dir", "") or ""))
    run_id = run_id_for(scenario)
    with ResultsStore(root / "results.db") as store:
        recorder = RunRecorder(store, root / "runs" / run_id, run_id=run_id)
        run_federation(grid, scenario, recorder, on_round=_log_round)
    log.info("term-fl: run %s written to %s", run_id, root / "runs" / run_id)
