"""``term-fl runs``, ``dashboard`` and ``report``: the commands that read a results store."""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from pathlib import Path

from term_fl.cli.paths import DEFAULT_DB_ENV, MAX_COUNT, PORTS, RUNS_TABLE_LIMIT, store_path
from term_fl.common.errors import ConfigError

__all__ = ["check_listen_address", "cmd_dashboard", "cmd_report", "cmd_runs"]


def cmd_runs(args: argparse.Namespace) -> int:
    """List runs with their final statistics; imports neither Flower nor torch (nor the web app)."""
    from term_fl.dashboard import queries
    from term_fl.results import ResultsStore

    if args.limit is not None and not 0 <= args.limit <= MAX_COUNT:
        raise ConfigError(f"--limit {args.limit}: allowed 0 (all runs) to {MAX_COUNT}")
    limit = args.limit if args.limit is not None else (RUNS_TABLE_LIMIT if args.format == "table" else 0)
    db = store_path(args)
    with ResultsStore.open_readonly(db) as store:
        filters = {"scenario": args.scenario, "status": args.status, "strategy": args.strategy}
        runs = queries.list_runs(store, **filters, limit=limit or None)
        total = store.count_runs(**filters)
    if args.format == "json":
        json.dump(runs, sys.stdout, indent=1, allow_nan=False)
        sys.stdout.write("\n")
    elif args.format == "csv":
        sys.stdout.write(queries.runs_csv(runs))
    else:
        _print_runs_table(runs, total, db)
    return 0


def _print_runs_table(runs: list[dict], total: int, db: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    from term_fl.dashboard.queries import statistics
    from term_fl.strategies.registry import cell_label

    stats = [s for s in statistics() if s["headline"]]
    shown = f"the newest {len(runs)} of {total} runs (--limit 0: all)" if len(runs) < total else f"{total} runs"
    table = Table(title=f"{shown} in {db} (test split, last evaluated round)", title_justify="left")
    table.add_column("run id", no_wrap=True, min_width=max((len(r["run_id"]) for r in runs), default=6))
    for col in ("scenario", "strategy", "seed", "status", "rounds"):
        table.add_column(col)
    for stat in stats:
        table.add_column(stat["label"], justify="right")
    for run in runs:
        test = run["final"]["test"]
        table.add_row(
            run["run_id"], run["scenario"], cell_label({"name": run["strategy"], **run["params"]}), str(run["seed"]), run["status"],
            f"{run['rounds_completed']}/{run['rounds_planned']}",
            *("-" if test.get(s["key"]) is None else f"{test[s['key']]:.3f}" for s in stats),
        )  # fmt: skip
    # A terminal gets its own width (the run id never shrinks); a pipe or file the whole table.
    Console(highlight=False, width=None if sys.stdout.isatty() else 250).print(table)


def cmd_dashboard(args: argparse.Namespace) -> int:
    from term_fl.dashboard import serve
    from term_fl.dashboard.access import TOKEN_ENV, token_for

    db = store_path(args)
    check_listen_address(args.host, args.port)
    if not db.is_file():  # said here, and served anyway: a deployment's dashboard starts before its first run
        print(f"term-fl dashboard: warning: no results store at {db} yet: make one with `term-fl run --db {db}` (or "
              f"`term-fl run` in a folder: it writes runs/results.db there), or name an existing one with --db PATH "
              f"or ${DEFAULT_DB_ENV}; the pages show the runs once a run writes it", file=sys.stderr, flush=True)
    given = os.environ.get(TOKEN_ENV, "").strip() or None
    try:
        token = token_for(args.host, given)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    url = f"http://{args.host}:{args.port}/"
    if token is None:
        access = "no token: this machine only"
    elif given:
        access = f"token from ${TOKEN_ENV}"
    else:
        url += f"?token={token}"
        access = "open this address once (it sets a cookie); scripts send 'Authorization: Bearer TOKEN'"
    print(f"term-fl dashboard: {url}  (store {db}, read-only; {access}; Ctrl-C to stop)", flush=True)
    serve(db, host=args.host, port=args.port, access_log=args.access_log, allowed_hosts=args.allowed_hosts,
          token=token)
    return 0


def check_listen_address(host: str, port: int) -> None:
    """A ConfigError naming --port or --host when the dashboard could not listen there (before it starts; whether
    the address is free is checked by :func:`term_fl.dashboard.serve`)."""
    if port not in PORTS:
        raise ConfigError(f"--port {port}: allowed {PORTS.start}..{PORTS.stop - 1}")
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, socket.gaierror) else str(exc)
        raise ConfigError(f"--host {host}: cannot be resolved ({reason}); give an address of this machine, "
                          "e.g. 127.0.0.1 (the default) or 0.0.0.0 (every interface)") from None


def cmd_report(args: argparse.Namespace) -> int:
    from term_fl.dashboard import write_report

    out = args.out.expanduser().resolve()
    if out.is_dir():
        raise ConfigError(f"--out {out}: is a directory; give the path of the HTML file to write, e.g. {out / 'report.html'}")
    path = write_report(store_path(args), args.run_or_scenario, out)
    print(f"term-fl report: wrote {path}")
    return 0
