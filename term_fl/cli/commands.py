"""``term-fl``: run scenarios, sweeps, and look at their results."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sqlite3
import sys
import traceback
from pathlib import Path

from term_fl.cli.paths import DB_HELP, DEFAULT_DB_ENV, RUNS_TABLE_LIMIT, output_dir, store_path
from term_fl.cli.signals import exit_status, stop_signals_interrupt
from term_fl.cli.views import cmd_dashboard, cmd_report, cmd_runs
from term_fl.data.errors import DataError
from term_fl.common.errors import ConfigError, EngineStartError, Interrupted
from term_fl.common.extras import MissingExtraError, require
from term_fl.results import RUN_STATUSES, StoreError

MAX_SWEEP_CELLS = 10_000  # `term-fl sweep --max-cells`: a grid larger than this is refused before it is expanded


def _add_scenario_args(p: argparse.ArgumentParser, config_required: bool) -> None:
    if config_required:
        p.add_argument("config", help="scenario TOML file (configs/*.toml)")
    else:
        p.add_argument("config", nargs="?", help="scenario TOML file (default: the embedded Synthetic(1, 1) scenario)")
    p.add_argument("--rounds", type=int, help="shortcut for --set run.rounds=N")
    p.add_argument("--seed", type=int, help="shortcut for --set run.seed=S")
    p.add_argument("--engine", choices=["flower", "inprocess"], help="shortcut for --set run.engine=E")
    p.add_argument("--executor", choices=["auto", "sequential", "cohort", "compiled"],
                   help="shortcut for --set run.executor=X (cohort: a round's clients as one batched "
                        "computation; compiled: the same, the linear models' SGD in one compiled kernel; "
                        "in-process engine only; auto, the default: compiled for the linear models in-process)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a scenario value by its dotted key, e.g. --set strategy.t=2 (repeatable)")
    p.add_argument("--ray-address", metavar="HOST:PORT",
                   help="join the Ray cluster whose head is at HOST:PORT (or 'auto': the one started on this machine) "
                        "instead of starting a private Ray; term-fl never stops it. Shortcut for --set "
                        "run.ray_address=ADDRESS. run: Flower's Simulation Engine runs the clients on it; sweep: the cells run "
                        "as Ray tasks on its nodes (on the Flower engine, each cell's clients run on it)")
    p.add_argument("--out", help="output directory (default: a new folder under ./runs/)")
    p.add_argument("--db", type=Path, help=DB_HELP)
    p.add_argument("-v", "--verbose", action="store_true",
                   help="show Flower's and Ray's logs (and the traceback of an error)")


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", help="show the Python traceback of an error")
    parser = argparse.ArgumentParser(prog="term-fl", description=__doc__.replace("``", ""))
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run one scenario (one strategy, one seed; and its reference runs, "
                                     "when the scenario names some)", parents=[common])
    _add_scenario_args(run, config_required=False)
    run.add_argument("--no-reference", action="store_true",
                     help="run the scenario alone, without the reference strategies of run.reference "
                          "(the default scenario's FedAvg run on the same seed)")
    run.add_argument("--resume", metavar="RUN_ID",
                     help="go on with a run that was interrupted, lost or failed, from its last checkpoint "
                          "(run.checkpoint_every), with its own settings, folder and engine; only --db and -v go "
                          "with it")
    sweep = sub.add_parser("sweep", help="run the scenario's [sweep] grid, resumably, and compare the cells",
                           parents=[common])
    _add_scenario_args(sweep, config_required=False)
    sweep.add_argument("--parallel", type=int, metavar="N",
                       help="run up to N cells (or groups of --group-size) at a time as Ray tasks, one CPU each (a GPU "
                            "for a cell with client.device = cuda), on a private Ray with N CPUs or on the cluster of "
                            "--ray-address; the same numbers as one by one (in-process engine)")
    sweep.add_argument("--group-size", type=int, default=1, metavar="N",
                       help="train up to N cells side by side as one batched computation per round: cells on the "
                            "in-process engine with the compiled executor on the CPU that share the model, the client "
                            "settings and the shape of the data (strategies and seeds may differ); the same numbers "
                            "as one by one; the other cells run one by one (default 1: every cell on its own)")
    dash = sub.add_parser("dashboard", help="serve the fairness dashboard over the results store (read-only)",
                          parents=[common])
    dash.add_argument("--db", type=Path, help=DB_HELP)
    dash.add_argument("--host", default="127.0.0.1",
                      help="address to bind (default 127.0.0.1: this machine only, no token); any other address asks "
                           "for an access token, made at start and printed, or taken from $TERM_FL_DASHBOARD_TOKEN")
    dash.add_argument("--port", type=int, default=8050, help="port to listen on, 1..65535 (default 8050)")
    dash.add_argument("--access-log", action="store_true", help="log every HTTP request (off by default)")
    dash.add_argument("--allowed-host", dest="allowed_hosts", action="append", default=[], metavar="NAME",
                      help="also answer requests for this host name (repeatable, or comma-separated); by default only the bound "
                           "address, loopback names and this machine's name (a guard against DNS rebinding)")
    report = sub.add_parser("report", help="write one self-contained HTML report of a run or a scenario",
                            parents=[common])
    report.add_argument("run_or_scenario", help="a run id, or a scenario name (all its finished runs)")
    report.add_argument("--out", type=Path, required=True, help="HTML file to write")
    report.add_argument("--db", type=Path, help=DB_HELP)
    runs = sub.add_parser("runs", help="list the runs in the results store, newest first", parents=[common])
    runs.add_argument("--db", type=Path, help=DB_HELP)
    runs.add_argument("--scenario", help="only runs of this scenario")
    runs.add_argument("--strategy", help="only runs of this strategy (fedavg, qffl, term ...)")
    runs.add_argument("--status", choices=RUN_STATUSES, help="only runs with this status")
    runs.add_argument("--format", choices=("table", "json", "csv"), default="table",
                      help="table (default), json (a list of runs as the dashboard's /api/runs gives them) or csv")
    runs.add_argument("--limit", type=int,
                      help=f"the newest N runs; 0 = all (default: {RUNS_TABLE_LIMIT} for the table, all for json and csv)")
    sweep.add_argument("--max-cells", type=int, default=MAX_SWEEP_CELLS, metavar="N",
                       help=f"refuse a [sweep] grid of more than N cells, counted before any is expanded "
                            f"(default {MAX_SWEEP_CELLS:,})")
    return parser


def resolve_overrides(args: argparse.Namespace) -> dict:
    from term_fl.config import parse_overrides  # the scenario schema (and Flower) for run and sweep only

    overrides = parse_overrides(args.overrides)
    for key, value in (("run.rounds", args.rounds), ("run.seed", args.seed), ("run.engine", args.engine),
                       ("run.executor", args.executor), ("run.ray_address", args.ray_address)):
        if value is not None:
            overrides[key] = value
    if args.engine == "flower" and args.executor is None and "run.executor" not in overrides:
        # Flower's engine runs every client as its own ClientApp: a file's cohort executor (the default
        # scenario's) gives way to the sequential one, which gives the in-process engine's numbers.
        overrides["run.executor"] = "sequential"
    return overrides


def _quiet_environment() -> None:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")


def cmd_run(args: argparse.Namespace) -> int:
    from term_fl.clientapp.app import dataset_for
    from term_fl.config import load_scenario, reference_scenarios, with_overrides
    from term_fl.cli.console import (RoundPrinter, RoundProgress, fairness_table, make_console, next_steps,
                                     reference_table, route_logs, run_header)
    from term_fl.engines import check_machine, engine_session
    from term_fl.federation.loop import FederationError
    from term_fl.results import ResultsStore
    from term_fl.runs.run import run_one
    from term_fl.strategies.registry import STRATEGIES

    if args.resume is not None:
        from term_fl.cli.resume import cmd_resume

        return cmd_resume(args)
    scenario = load_scenario(args.config, resolve_overrides(args))
    if args.no_reference:
        scenario = with_overrides(scenario, {"run.reference": []})
    references = reference_scenarios(scenario)
    console = make_console()
    route_logs(console, args.verbose)
    db, out = store_path(args), output_dir(args)
    console.print(run_header(scenario, dataset_for(scenario).num_devices))
    if references:
        labels = ", ".join(STRATEGIES[r.strategy.name].label for r in references)
        console.print(f"then its {'reference' if len(references) == 1 else 'references'}: {labels}, on the same seed "
                      "and settings (--no-reference: the run alone)")
    runs = [(scenario, out, "")] + [
        (r, _beside(out, f"reference-{r.strategy.name}"), f"reference {r.strategy.name}") for r in references
    ]
    recorders = []
    check_machine(scenario)  # bad settings exit 2 before Ray starts
    # one Ray instance (and one pool of ClientApp actors) for the run and its references
    session = engine_session(scenario) if references else contextlib.nullcontext()
    with ResultsStore(db) as store, session:
        for run, run_out, label in runs:
            try:
                if args.verbose:  # Flower's and Ray's log lines interleave with one line per round
                    recorders.append(run_one(run, store, out_dir=run_out, on_round=RoundPrinter(console, label)))
                else:
                    with RoundProgress(console, run.run.rounds, label) as progress:
                        recorders.append(run_one(run, store, out_dir=run_out, on_round=progress))
            except FederationError as exc:  # the run started and failed: it is recorded as failed
                return run_failed(label or "run", exc, db)
    summaries = [r.summary or {} for r in recorders]
    if references:
        console.print(reference_table(scenario, summaries[0], summaries[1:]))
    else:
        console.print(fairness_table(f"{scenario.name}: {scenario.strategy.name}, last round",
                                     {"test": summaries[0].get("test"), "validation": summaries[0].get("validation")}))
    for recorder, summary in zip(recorders, summaries, strict=True):
        console.print(f"run {summary.get('run_id')} ({summary.get('strategy', {}).get('name')}) "
                      f"{summary.get('status')}: {recorder.run_dir}", soft_wrap=True, markup=False)
    console.print(f"store: {db}", soft_wrap=True, markup=False)
    for line in next_steps(db, scenario.name, None if references else summaries[0].get("run_id")):
        console.print(line, soft_wrap=True, markup=False)
    return 0 if all(s.get("status") == "finished" for s in summaries) else 1


def run_failed(what: str, exc: Exception, db: Path) -> int:
    """One line on stderr for a run that started and failed (recorded as failed); exit status 1."""
    print(f"term-fl: the {what} failed: {exc}; its completed rounds are in {db} (term-fl runs --db {db})",
          file=sys.stderr)
    return 1


def _beside(out: Path | None, suffix: str) -> Path | None:
    """``<out>-<suffix>`` beside the run's --out folder (None: a new folder under ./runs/ as for any run)."""
    return None if out is None else out.with_name(f"{out.name}-{suffix}")


def cmd_sweep(args: argparse.Namespace) -> int:
    from term_fl.config import load_scenario
    from term_fl.cli.sweep import run_sweep

    overrides = resolve_overrides(args)
    scenario = load_scenario(args.config, overrides)
    _check_sweep_overrides(scenario.sweep, overrides, references=scenario.run.reference)
    if not scenario.sweep:
        raise ConfigError(
            f"scenario {scenario.name!r} has no [sweep] table; add one such as "
            '"strategy.name" = ["fedavg", "qffl", "term"] and "run.seed" = [0, 1, 2]'
        )
    from term_fl.cli.console import make_console, route_logs

    console = make_console()
    route_logs(console, args.verbose)
    db, out = store_path(args), output_dir(args)
    # A sweep runs on the engine the scenario file or the command line names,
    # else on the in-process engine (same numbers, no Ray start per cell).
    explicit_engine = "engine" in scenario.run.model_fields_set
    if args.group_size < 1:
        raise ConfigError(f"--group-size must be a positive number of cells, got {args.group_size}")
    if args.parallel is not None and args.parallel < 1:
        raise ConfigError(f"--parallel must be a positive number of cells at a time, got {args.parallel}")
    return run_sweep(scenario, db=db, out_dir=out, engine=None if explicit_engine else "inprocess", console=console,
                     group_size=args.group_size, max_cells=args.max_cells, parallel=args.parallel,
                     ray_address=scenario.run.ray_address)


SHORTCUTS = {"run.rounds": "--rounds", "run.seed": "--seed", "run.engine": "--engine", "run.executor": "--executor"}


def _check_sweep_overrides(sweep: dict, overrides: dict, references: list[str]) -> None:
    """Refuse a command-line value a sweep would ignore: a key its grid sets per cell, or references
    (``run.reference`` given and not empty: ``--set run.reference=none`` says what a sweep does anyway)."""
    from term_fl.config.loading import SWEEP_CELLS_KEY

    swept = {key for key in sweep if key != SWEEP_CELLS_KEY}
    swept |= {key for variant in sweep.get(SWEEP_CELLS_KEY, []) for key in variant}
    for key in overrides:
        given = SHORTCUTS.get(key, f"--set {key}")
        if key in swept:
            values = sweep.get(key, "its sweep.cells")
            raise ConfigError(f"{given}: {key} is set per cell by the scenario's [sweep] table ({values}), so the "
                              f"value would be ignored; to sweep other values, edit \"{key}\" in the [sweep] table "
                              "of a copy of the scenario file")
        if key == "run.reference" and references:
            raise ConfigError(f"{given}: a sweep pairs each cell with the baseline cells of its own grid (FedAvg, "
                              "FedAvg (uniform)), not with run.reference; add a baseline to the grid's strategy.name "
                              "list, or use term-fl run for one run beside its references")


COMMANDS = {"run": cmd_run, "sweep": cmd_sweep, "runs": cmd_runs, "dashboard": cmd_dashboard, "report": cmd_report}
# What a command needs beyond `pip install term-fl` (the Flower engine checks for Ray itself).
EXTRAS_NEEDED = {
    "run": ("sim", ("torch",)),
    "sweep": ("sim", ("torch", "scipy")),
    "dashboard": ("dashboard", ("plotly", "jinja2", "scipy")),
    "report": ("dashboard", ("plotly", "jinja2", "scipy")),
}


# Errors that mean "the input cannot be used as given" (a scenario value, a
# data file, a path, a store, a Ray that cannot start here): one message naming the file, key or value, exit
# status 2, no traceback unless --debug / -v. Anything else is a bug and keeps
# its traceback.
USAGE_ERRORS: tuple[type[BaseException], ...] = (ConfigError, DataError, StoreError, LookupError, OSError,
                                                 sqlite3.Error, MissingExtraError, EngineStartError)
USAGE_EXIT = 2


def describe_error(exc: BaseException) -> str:
    """The one-line message of a usage error."""
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        target = f"{exc.filename} -> {exc.filename2}" if exc.filename2 else str(exc.filename)
        return f"{target}: {exc.strerror}"
    if isinstance(exc, sqlite3.Error):
        return f"results database: {exc} (check --db / ${DEFAULT_DB_ENV})"
    return str(exc)


class StderrWarnings(logging.Handler):
    """term-fl's own warnings (a busy results store ...) as ``term-fl: warning: ...`` on the stderr of the moment.

    Every command starts with it; ``run`` and ``sweep`` route their logs
    through their console instead (:func:`term_fl.cli.console.route_logs`).
    """

    def __init__(self) -> None:
        super().__init__(logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:  # noqa: D102
        print(f"term-fl: {record.levelname.lower()}: {record.getMessage()}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.getLogger("term_fl").handlers[:] = [StderrWarnings()]
    if args.command in ("run", "sweep"):
        _quiet_environment()
    try:
        with stop_signals_interrupt():  # SIGTERM and SIGHUP stop a run as Ctrl-C does
            if args.command in EXTRAS_NEEDED:
                extra, modules = EXTRAS_NEEDED[args.command]
                require(extra, *modules, purpose=f"term-fl {args.command}")
            code = COMMANDS[args.command](args)
            sys.stdout.flush()  # here, so that a reader gone away is seen below and not at the interpreter's exit
            return code
    except USAGE_ERRORS as exc:
        if isinstance(exc, BrokenPipeError) and args.command in PIPED_COMMANDS:
            return _reader_gone()
        if args.debug or getattr(args, "verbose", False):
            traceback.print_exc()
        print(f"term-fl: error: {describe_error(exc)}", file=sys.stderr)
        return USAGE_EXIT
    except KeyboardInterrupt as exc:
        by = f" by {signal.Signals(exc.signum).name}" if isinstance(exc, Interrupted) else ""
        print(f"term-fl: interrupted{by}; completed rounds are in the results store", file=sys.stderr)
        return exit_status(exc)


INTERRUPTED_EXIT = 128 + signal.SIGINT  # Ctrl-C
INTERRUPTED_STATUSES = frozenset(128 + s for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP))  # 130, 143, 129
PIPED_COMMANDS = ("runs",)  # their output is read by other programs (`term-fl runs --format csv | head`)
BROKEN_PIPE_EXIT = 141  # 128 + SIGPIPE, what a shell reports for a Unix tool whose reader went away


def _reader_gone() -> int:
    """The reader of stdout went away: stop without a message, as Unix tools do.

    Standard output is pointed at /dev/null first, so that the interpreter's
    own flush at exit does not fail again.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return BROKEN_PIPE_EXIT


def entry() -> None:
    """The ``term-fl`` command: :func:`main`, and after Ctrl-C, SIGTERM or SIGHUP an exit that waits for no thread.

    Flower's Simulation Engine leaves non-daemon worker threads that can
    block in ``ray.get()`` once Ray is shut down; a normal interpreter exit
    would join them and hang. By the time ``main`` returns the run is
    recorded as interrupted (every round is a committed transaction), so the
    process ends at once; a Ray shutdown that did not complete is finished by
    the run's watchdog (:mod:`term_fl.engines.watchdog`).
    """
    code = main()
    if code in INTERRUPTED_STATUSES:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    entry()
