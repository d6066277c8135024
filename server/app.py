"""ServerApp for `flwr run .` (Simulation or Deployment Engine).

Thin on purpose: the scenario comes from the run config (`scenario` path and
`overrides`, see [tool.flwr.app.config] in pyproject.toml), the loop is
term_fl.federation.loop.run_federation, shared with `term-fl run`.
"""

from __future__ import annotations

import logging
import os
import shlex
from pathlib import Path

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp
from flwr.supercore.exit import add_exit_handler
from flwr.superlink.grid import InMemoryGrid

from term_fl.config import load_scenario
from term_fl.deployment.replies import ReplyPollingGrid, poll_interval
from term_fl.federation.loop import RoundRecord, run_federation
from term_fl.results import ResultsStore
from term_fl.runs.run import RunRecorder, run_id_for

APP_DIR = Path(__file__).resolve().parent.parent
# Flower's Simulation Engine registers its virtual SuperNodes at once, right
# after the ServerApp starts: a count that stays below the scenario's devices
# this long is a too-small num-supernodes, not slow SuperNodes.
SIMULATION_SETTLE_S = 3.0
log = logging.getLogger("flwr")

app = ServerApp()


def results_root(run_config_value: str) -> Path:
    """Where runs land: the run config's results-dir, else $TERM_FL_HOME, else ~/.term-fl.

    The layout is ``term-fl run``'s: run directories ``ROOT/<run id>`` beside
    the store ``ROOT/results.db``.
    """
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
    simulated = isinstance(grid, InMemoryGrid)
    settle_s = SIMULATION_SETTLE_S if simulated else None
    poll_s = poll_interval()
    if not simulated and poll_s is not None:  # a deployment: replies asked for every poll_s, not every 3 s
        grid = ReplyPollingGrid(grid, poll_s)
    with ResultsStore(root / "results.db") as store:
        recorder = RunRecorder(store, root / run_id, run_id=run_id)
        # Flower's graceful exit (SIGTERM, SIGINT, its SuperExec gone: `docker compose stop`) records the run as
        # interrupted first, before Flower's own exit handlers talk to a SuperLink that may be gone, and before
        # the container ends; LIFO: handlers added last run first.
        add_exit_handler(lambda: recorder.interrupt("the ServerApp was stopped (Flower's graceful exit)"),
                         run_before_force_exit=True)
        run_federation(grid, scenario, recorder, on_round=_log_round, node_settle_s=settle_s)
    log.info("term-fl: run %s written to %s", run_id, root / run_id)
