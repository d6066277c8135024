"""``term-fl run --resume RUN_ID``: a run that stopped goes on after its last checkpoint (:mod:`term_fl.runs.resume`)."""

from __future__ import annotations

import argparse
import contextlib

from term_fl.cli.commands import DEFAULT_DB_ENV, run_failed, store_path
from term_fl.common.errors import ConfigError

__all__ = ["cmd_resume"]


def cmd_resume(args: argparse.Namespace) -> int:
    """``term-fl run --resume RUN_ID``: the run goes on after its last checkpoint (term_fl.runs.resume)."""
    from term_fl.clientapp.app import dataset_for
    from term_fl.cli.console import RoundPrinter, RoundProgress, fairness_table, make_console, route_logs, run_header
    from term_fl.engines import check_machine
    from term_fl.federation.loop import FederationError
    from term_fl.results import ResultsStore
    from term_fl.runs.resume import resumable, resume_run

    given = [name for name, value in (("CONFIG", args.config), ("--set", args.overrides), ("--rounds", args.rounds),
                                      ("--seed", args.seed), ("--engine", args.engine), ("--executor", args.executor),
                                      ("--out", args.out), ("--no-reference", args.no_reference)) if value]
    if given:
        raise ConfigError(f"--resume {args.resume}: the run goes on with its own settings, folder and engine; "
                          f"leave out {', '.join(given)}")
    db = store_path(args)
    if not db.is_file():
        raise ConfigError(f"--resume {args.resume}: no results database at {db} (--db / ${DEFAULT_DB_ENV})")
    console = make_console()
    route_logs(console, args.verbose)
    with ResultsStore(db) as store:
        ready = resumable(store, args.resume)
        scenario = ready.scenario
        check_machine(scenario)
        after = ready.checkpoint.server_round if ready.checkpoint is not None else 0
        console.print(run_header(scenario, dataset_for(scenario).num_devices))
        console.print(f"resuming run {args.resume} after round {after} of {scenario.run.rounds}" if after else
                      f"resuming run {args.resume}: it has no checkpoint yet, so it starts again from round 1")
        try:
            with (contextlib.nullcontext(RoundPrinter(console, "")) if args.verbose
                  else RoundProgress(console, scenario.run.rounds)) as progress:
                recorder = resume_run(store, args.resume, on_round=progress, ready=ready)
        except FederationError as exc:
            return run_failed("run", exc, db)
    summary = recorder.summary or {}
    console.print(fairness_table(f"{scenario.name}: {scenario.strategy.name}, last round",
                                 {"test": summary.get("test"), "validation": summary.get("validation")}))
    console.print(f"run {args.resume} ({scenario.strategy.name}) {summary.get('status')}: {recorder.run_dir}  "
                  f"(store: {db})")
    return 0 if summary.get("status") == "finished" else 1
