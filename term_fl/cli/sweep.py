"""``term-fl sweep``: run a scenario's grid resumably and write the comparison.

Each cell of the ``[sweep]`` grid is one run with its own directory under the
sweep's output folder (named by the cell's overrides). A cell whose
directory already holds a finished ``summary.json`` of the same settings is
not run again, so an interrupted sweep resumes where it stopped by running
the same command. At the end, ``comparison.csv`` and ``comparison.json``
hold mean and standard error over seeds per cell, each cell's paired
differences against every baseline cell of the same settings (FedAvg, and
each strategy the registry flags ``baseline``) with the paired t-test,
Holm's correction and the mark (:mod:`term_fl.comparison.table`, the one
source the dashboard and the report read too), FedAvg's convergence (the
change of its validation device mean over the last fifth of the rounds), and
the t / q chosen on the validation split with its test statistics.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from term_fl.comparison.summaries import CLEAN, TAIL, group_cells, select_by_validation
from term_fl.comparison.cells import format_value, short_names
from term_fl.comparison.paired import ALPHA, MIN_SEEDS
from term_fl.comparison.pairing import BASELINES
from term_fl.comparison.table import (CHOSEN, CHOSEN_MARK, PRIMARY, SIGNIFICANCE, SIGNIFICANT_MARK, difference_columns,
                                      significance_notes)
from term_fl.common.jsonable import plain
from term_fl.config import Scenario, baseline_hash, config_hash, executor_of, sweep_cells, with_overrides
from term_fl.comparison.convergence import FLAT, tail_means
from term_fl.cli.console import better, make_console, next_steps
from term_fl.cli.sweep_groups import CellJob, run_jobs, sweep_settings
from term_fl.engines import engine_session
from term_fl.maths.fairness import STATISTICS, fairness_summary, statistic
from term_fl.strategies.registry import STRATEGIES
from term_fl.common.csvcells import csv_cell
from term_fl.common.keys import SUMMARY_NAMES, VAL
from term_fl.common.locks import FolderInUse, FolderLock, holder_of
from term_fl.results import ResultsStore
from term_fl.runs.run import DEFAULT_RUNS_DIR, RUN_FILES, run_id_in, write_summary

MAX_DIRNAME = 200  # bytes of a folder name; most filesystems allow 255

TABLE_COLUMNS = tuple((f"test.{s.key}", s.label) for s in STATISTICS if s.headline)
PAIRED_COLUMNS = tuple((f"test.{key}", statistic(key).label) for key in PRIMARY)
CLEAN_COLUMN = (f"test{CLEAN}.mean", "device mean, clean devices")


def cell_name(overrides: dict[str, Any]) -> str:
    """A cell as a user reads it: ``term t=1 seed=0`` for ``strategy.name=term strategy.t=1.0 run.seed=0``.

    A ``*.name`` key shows its value alone; every other key its last part
    (more parts where two keys would read the same) and its value as written.
    """
    if not overrides:
        return "base"
    names = short_names(list(overrides))
    words = []
    for key, value in overrides.items():
        words.append(format_value(value) if key.split(".")[-1] == "name" else f"{names[key]}={format_value(value)}")
    return " ".join(words)


def cell_dirname(overrides: dict[str, Any]) -> str:
    """The cell's folder: its :func:`cell_name`, filesystem-safe (``term_t=1_seed=0``)."""
    return re.sub(r"[^A-Za-z0-9._=+-]", "-", cell_name(overrides).replace(" ", "_"))


def legacy_cell_dirname(overrides: dict[str, Any]) -> str:
    """The folder name of term-fl before 0.2.0 (``strategy.name=term_strategy.t=1.0_run.seed=0``), for resuming."""
    text = "_".join(f"{k}={v}" for k, v in overrides.items()) or "base"
    name = re.sub(r"[^A-Za-z0-9._=+-]", "-", text)
    if name.startswith("."):
        name = "-" + name[1:]
    if len(name) > MAX_DIRNAME:  # many overrides: keep a readable prefix, made unique by a hash
        name = f"{name[:MAX_DIRNAME - 17]}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"
    return name


def finished_summary(cell_dir: Path, scenario: Scenario, store: ResultsStore | None = None) -> dict[str, Any] | None:
    """The summary of a finished run of exactly these settings in ``cell_dir``, else None.

    The store row is written before summary.json: a cell whose summary.json
    is missing (a crash between the two) but whose row in ``store`` finished
    counts as finished, and its summary.json is written again from the row.
    """
    path = cell_dir / "summary.json"
    summary: dict[str, Any] | None = None
    if path.is_file():
        try:
            summary = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            summary = None
    if isinstance(summary, dict):
        same = summary.get("config_hash") == config_hash(scenario) and summary.get("seed") == scenario.run.seed
        return summary if same and summary.get("status") == "finished" else None
    if store is None:
        return None
    for run in store.list_runs(config_hash=config_hash(scenario), status="finished"):
        if run.run_dir == str(cell_dir) and run.seed == scenario.run.seed and run.summary:
            write_summary(cell_dir, run.summary)
            return run.summary
    return None


def set_aside_earlier_attempt(cell_dir: Path, store: ResultsStore | None = None) -> Path | None:
    """Move an unfinished earlier attempt's files out of the way, into ``cell_dir/earlier/<run id>/``.

    Its row in ``store`` is pointed to the new place, so no row points at
    files of another run.
    """
    present = [name for name in RUN_FILES if (cell_dir / name).exists()]
    if not present:
        return None
    holder = holder_of(cell_dir)
    if holder is not None:
        raise FolderInUse(f"the sweep's cell folder {cell_dir} is in use by another term-fl process: "
                          f"{holder.describe()}; wait until it ends")
    owner = str(run_id_in(cell_dir) or "")
    base = cell_dir / "earlier" / (re.sub(r"[^A-Za-z0-9._=+-]", "-", owner) or "unknown")
    dest, n = base, 1
    while dest.exists():
        n += 1
        dest = base.with_name(f"{base.name}-{n}")
    dest.mkdir(parents=True)
    for name in present:
        os.replace(cell_dir / name, dest / name)
    if store is not None:
        store.move_run_dir(cell_dir, dest)
    return dest


def run_sweep(
    scenario: Scenario,
    *,
    db: Path,
    out_dir: Path | None = None,
    engine: str | None = "inprocess",
    console: Console | None = None,
    group_size: int = 1,
    max_cells: int | None = None,
    parallel: int | None = None,
    ray_address: str = "",
) -> int:
    """Run (or resume) every cell, then write and print the comparison. Returns an exit code.

    ``group_size`` > 1 runs up to that many unfinished cells that can share
    one batched computation side by side (:func:`term_fl.cli.sweep_groups.plan_groups`);
    the others, and every cell with 1, run one by one. ``parallel`` (at
    most that many at a time) or ``ray_address`` (a cluster to join) runs
    the cells, or groups, as Ray tasks (:mod:`term_fl.cli.sweep_ray`); with
    ``ray_address`` on the Flower engine, each cell's clients run on the
    cluster instead. Every cell pins torch to ``run.threads`` threads, 1 unless set.
    The output folder is locked while the sweep runs (:class:`FolderInUse`
    names the process that holds it); a grid of more than ``max_cells``
    cells is refused before any is made.
    """
    console = console or make_console()
    if engine is not None:
        scenario = with_overrides(scenario, {"run.engine": engine})
    scenario = sweep_settings(scenario, parallel=parallel, ray_address=ray_address)
    out_dir = (Path(out_dir) if out_dir else DEFAULT_RUNS_DIR / f"sweep-{scenario.name}").resolve()
    cells = sweep_cells(scenario, max_cells=max_cells)
    out_dir.mkdir(parents=True, exist_ok=True)
    with FolderLock(out_dir, f"the sweep folder {out_dir}"):
        return _run_cells(scenario, cells, db=db, out_dir=out_dir, console=console, group_size=group_size,
                          parallel=parallel, ray_address=ray_address)


def _run_cells(
    scenario: Scenario, cells: list[tuple[dict[str, Any], Scenario]], *, db: Path, out_dir: Path, console: Console,
    group_size: int = 1, parallel: int | None = None, ray_address: str = "",
) -> int:
    """Run the cells that have not finished into ``out_dir``, then write and print the comparison."""
    console.print(
        f"[bold]term-fl sweep[/] {scenario.name}: {len(cells)} cells on engine {scenario.run.engine} "
        f"(executor {executor_of(scenario)}) -> {out_dir}"
    )
    summaries: dict[int, tuple[dict[str, Any], Scenario]] = {}
    jobs: list[CellJob] = []
    failed = 0
    start = time.perf_counter()
    with ResultsStore(db) as store, engine_session(scenario):
        for i, (overrides, cell) in enumerate(cells, start=1):
            cell_dir = out_dir / cell_dirname(overrides)
            legacy = out_dir / legacy_cell_dirname(overrides)
            if not cell_dir.exists() and finished_summary(legacy, cell, store) is not None:
                cell_dir = legacy  # a sweep folder written before 0.2.0: resume it as it is
            label = escape(f"[cell {i}/{len(cells)}] {cell_name(overrides)}")  # text, not rich markup
            if not cell.run.name:
                cell = with_overrides(cell, {"run.name": f"{scenario.name} {cell_name(overrides)}"})
            done = finished_summary(cell_dir, cell, store)
            if done is not None:
                console.print(f"{label}: already finished, skipped")
                summaries[i] = (done, cell)
                continue
            earlier = set_aside_earlier_attempt(cell_dir, store)
            if earlier is not None:
                console.print(f"{label}: an unfinished earlier attempt was moved to {earlier}")
            jobs.append(CellJob(i, label, cell, cell_dir))
        for job, summary in zip(jobs, run_jobs(jobs, group_size, store, console, parallel=parallel,
                                               ray_address=ray_address, set_aside=set_aside_earlier_attempt)):
            if summary is None:
                failed += 1
            else:
                summaries[job.index] = (summary, job.cell)
        summaries_in_order = [summaries[i] for i in sorted(summaries)]
        sel = scenario.selection
        finished = [  # config: what pairing reads; reference_hash: summaries written before it existed
            with_tail_statistics({"reference_hash": baseline_hash(cell), **summary, "config": plain(cell.model_dump())},
                                 store, sel.tail)
            for summary, cell in summaries_in_order
            if summary.get("status") == "finished"
        ]
    wall = time.perf_counter() - start
    # choose on the selection seeds' validation split; report on the report seeds' test split
    selection_seeds, report_seeds = sel.split_seeds([s["seed"] for s in finished])
    selection_rows = group_cells([s for s in finished if s["seed"] in selection_seeds])
    rows = group_cells([s for s in finished if s["seed"] in report_seeds])
    choices = selections(sel, selection_rows, rows)
    chosen = choices[sel.devices]
    seeds = {"selection": selection_seeds, "report": report_seeds, "shared": selection_seeds == report_seeds}
    write_comparison(out_dir, rows, chosen, wall, seeds=seeds, selection_rows=selection_rows, choices=choices)
    console.print(comparison_table(scenario.name, rows, chosen))
    if any(row.get("differences") for row in rows):
        console.print(paired_table(scenario.name, rows))
    for line in convergence_lines(rows):
        console.print(line)
    for line in seed_lines(seeds):
        console.print(line)
    for name, c in chosen.items():
        console.print(f"chosen for {name}: [bold]{c['cell']}[/] ({c['rule']})")
    for devices, other in choices.items():
        if devices != sel.devices:
            for name, c in other.items():
                console.print(f"  with selection.devices = {devices!r} the choice for {name} would be {c['cell']}")
    console.print(f"{len(cells) - failed}/{len(cells)} cells finished in {wall:.1f} s; comparison in {out_dir}",
                  soft_wrap=True, markup=False)
    for line in next_steps(db, scenario.name):
        console.print(line, soft_wrap=True, markup=False)
    return 0 if failed == 0 else 1


def selections(
    sel: Any, selection_rows: list[dict[str, Any]], report_rows: list[dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """The choice on validation by ``selection.devices`` and, where noise was injected, by the other devices too.

    The headline is the scenario's own (``selection.devices``); with noisy
    devices the sweep also says what a selection that does not know which
    devices are clean ("all") or that does ("clean") would have chosen.
    """
    noisy = any(key.startswith(f"{SUMMARY_NAMES[VAL]}{CLEAN}") for row in selection_rows for key in row)
    choices = {}
    for devices in ("all", "clean") if noisy else (sel.devices,):
        split = SUMMARY_NAMES[VAL] + (CLEAN if devices == "clean" else "") + (TAIL if sel.tail > 1 else "")
        choices[devices] = select_by_validation(
            selection_rows, objective=sel.objective, average=sel.average, max_mean_drop=sel.max_mean_drop,
            split=split, reference=sel.reference, report_rows=report_rows)
    return choices


def seed_lines(seeds: dict[str, Any]) -> list[str]:
    """What the tables were computed on: the selection and the report seeds, or a warning when they are the same."""
    if not seeds["report"]:
        return ["no report seed ran here: the tables above are empty (every run.seed is a selection seed; "
                "add seeds of selection.report_seeds, or seeds outside selection.seeds, to report)"]
    if seeds["shared"]:
        return [f"seeds {_seed_range(seeds['report'])}: the parameters were chosen and are reported on the same "
                "seeds (set selection.seeds and selection.report_seeds to keep them apart)"]
    if not seeds["selection"]:
        return [f"no selection seed ran here: the parameters are the file's own; every table and test above is on "
                f"the test split of seeds {_seed_range(seeds['report'])}"]
    return [f"chosen on the validation split of seeds {_seed_range(seeds['selection'])}; every table and test "
            f"above is on the test split of seeds {_seed_range(seeds['report'])}, which took no part in the choice"]


def _seed_range(seeds: list[int]) -> str:
    if seeds and seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 2:
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(map(str, seeds)) or "none"


def with_tail_statistics(summary: dict[str, Any], store: ResultsStore, tail: int) -> dict[str, Any]:
    """``summary`` plus its validation statistics averaged over the run's last ``tail`` evaluated rounds.

    Read from the store: ``validation_tail``, and for a run with noisy
    devices ``validation_clean_tail`` (over the clean devices). Nothing is
    added for ``tail`` = 1 (the last round is ``validation`` itself).
    """
    if tail <= 1:
        return summary
    run_id = summary["run_id"]
    out = dict(summary)
    name = SUMMARY_NAMES[VAL]
    rounds = [{k: v for k, v in r.items() if k != "round"} for r in store.load_round_stats(run_id, VAL)]
    out[f"{name}{TAIL}"] = tail_means(rounds, tail)
    noisy = set(((summary.get("data") or {}).get("noise") or {}).get("devices") or [])
    if noisy:
        metrics = store.load_metrics(run_id, VAL)
        last = sorted(set(metrics["round"].tolist()))[-tail:]
        per_round = []
        for r in last:
            keep = (metrics["round"] == r) & ~np.isin(metrics["partition_id"], sorted(noisy))
            if keep.any():
                per_round.append(fairness_summary(metrics["accuracy"][keep], num_examples=metrics["examples"][keep],
                                                  correct=metrics["correct"][keep]))
        out[f"{name}{CLEAN}{TAIL}"] = tail_means(per_round, tail)
    return out


def convergence_lines(rows: list[dict[str, Any]]) -> list[str]:
    """One line per FedAvg cell: the change of its validation device mean over the last fifth of the rounds."""
    lines = []
    for row in rows:
        if row["strategy"] != "fedavg" or row.get("convergence") is None:
            continue
        change, se = row["convergence"], row.get("convergence.se")
        verdict = "flat: converged" if abs(change) <= FLAT else "not flat: more rounds may change the comparison"
        lines.append(
            f"{row['cell']}: validation device mean changed {change:+.4f}"
            + (f" ± {se:.4f}" if se is not None else "")
            + f" over the last fifth of the rounds (mean over {row['n']} seeds; {verdict}, threshold ±{FLAT})"
        )
    return lines


def write_comparison(
    out_dir: Path,
    rows: list[dict[str, Any]],
    chosen: dict[str, Any],
    wall_s: float,
    *,
    seeds: dict[str, Any] | None = None,
    selection_rows: list[dict[str, Any]] | None = None,
    choices: dict[str, Any] | None = None,
) -> None:
    """comparison.json (the rows, the selection and what the marks mean) and comparison.csv (the rows, flat).

    ``rows`` are the cells over the report seeds; ``selection_rows`` the cells
    over the selection seeds, whose validation split made the choice;
    ``choices`` the choice by each device set where noise was injected.
    """
    pairs = [d["n"] for row in rows for by_split in (row.get("differences") or {}).values()
             for d in (by_split.get("test") or {}).values()]  # fmt: skip
    meta = {
        "baselines": [{"strategy": b, "label": STRATEGIES[b].label} for b in BASELINES],
        "significance": {"rule": SIGNIFICANCE, "notes": significance_notes(pairs)[1:], "alpha": ALPHA,
                         "min_seeds": MIN_SEEDS, "test": "paired t-test, two-sided, n - 1 degrees of freedom",
                         "correction": "Holm, per split: every cell against each of its baselines x the primary "
                                       "statistics", "primary": list(PRIMARY)},  # fmt: skip
        "marks": {SIGNIFICANT_MARK: SIGNIFICANCE, CHOSEN_MARK: CHOSEN},
    }
    (out_dir / "comparison.json").write_text(
        json.dumps(plain({"cells": rows, "selection": chosen, "wall_time_s": round(wall_s, 2), **meta,
                          "seeds": seeds, "selection_cells": selection_rows, "selections": choices}), indent=2) + "\n"
    )
    chosen_hashes = {c["config_hash"] for c in chosen.values()}
    flat = [{**{k: v for k, v in row.items() if k not in ("run_ids", "differences", "baselines")},
             "seeds": " ".join(map(str, row["seeds"])), "chosen": int(row["config_hash"] in chosen_hashes),
             **{f"minus_{b}": key for b, key in (row.get("baselines") or {}).items()},
             **difference_columns(row.get("differences") or {})} for row in rows]  # fmt: skip
    widest_first = sorted(flat, key=len, reverse=True)  # a baseline's row lacks the tuned parameters
    fields = list(dict.fromkeys(k for row in widest_first for k in row)) or ["cell"]
    with (out_dir / "comparison.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows({key: csv_cell(value) for key, value in row.items()} for row in flat)


def _pm(row: dict[str, Any], key: str) -> str:
    se = row.get(f"{key}.se")
    return f"{row[key]:.4f}" + (f" ± {se:.4f}" if se is not None else "")


def comparison_table(title: str, rows: list[dict[str, Any]], chosen: dict[str, Any]) -> Table:
    """Per cell, the headline test statistics: mean ± standard error over seeds; the validation choice marked."""
    table = Table(title=f"{title}: test split, last round, mean ± standard error over seeds")
    table.add_column("cell")
    table.add_column("seeds", justify="right")
    columns = list(TABLE_COLUMNS)
    if any(CLEAN_COLUMN[0] in row for row in rows):
        columns.insert(1, CLEAN_COLUMN)
    for _, label in columns:
        table.add_column(label, justify="right")
    chosen_hashes = {c["config_hash"] for c in chosen.values()}
    for row in rows:
        mark = f" {CHOSEN_MARK}" if row["config_hash"] in chosen_hashes else ""
        table.add_row(row["cell"] + mark, str(row["n"]),
                      *(_pm(row, k) if row.get(k) is not None else "-" for k, _ in columns))
    table.caption = "\n".join([directions(key for key, _ in columns), *([CHOSEN] if chosen else [])])
    return table


def directions(keys: Any) -> str:
    """'higher is better: device mean, pooled ...; lower is better: std' for a table's ``split.statistic`` columns."""
    by_way: dict[str, list[str]] = {"higher": [], "lower": []}
    for key in keys:
        stat = key.split(".")[1]
        by_way[better(stat)].append(statistic(stat).label)
    return "; ".join(f"{way} is better: {', '.join(labels)}" for way, labels in by_way.items() if labels)


def paired_table(title: str, rows: list[dict[str, Any]]) -> Table:
    """Per cell and baseline, the paired difference (cell - baseline, same seed and settings) of the primary
    test statistics: mean ± standard error, marked where significant (:data:`SIGNIFICANCE`)."""
    present = {b for row in rows for b in (row.get("baselines") or {})}
    labels = ", ".join(STRATEGIES[b].label for b in BASELINES if b in present) or "none in this sweep"
    table = Table(title=f"{title}: paired difference, cell minus baseline ({labels}) over the same seeds, "
                        "mean ± standard error")
    table.add_column("cell")
    table.add_column("minus", justify="left")
    table.add_column("pairs", justify="right")
    columns = list(PAIRED_COLUMNS)
    clean = CLEAN_COLUMN[0].partition(".")[0]
    if any(clean in by_split for row in rows for by_split in (row.get("differences") or {}).values()):
        columns.insert(1, CLEAN_COLUMN)
    for _, label in columns:
        table.add_column(f"Δ {label}", justify="right")
    by_hash = {row["config_hash"]: row for row in rows}
    pairs = []
    for row in rows:
        for baseline, reference in (row.get("baselines") or {}).items():
            differences = row["differences"][baseline]
            cells = []
            for key, _ in columns:
                split, _, stat = key.partition(".")
                d = (differences.get(split) or {}).get(stat)
                if d is None or d["mean"] is None:
                    cells.append("-")
                    continue
                se = f" ± {d['se']:.4f}" if d["se"] is not None else ""
                cells.append(f"{d['mean']:+.4f}{se}" + (f" {SIGNIFICANT_MARK}" if d["significant"] else ""))
            n = max((d["n"] for d in (differences.get("test") or {}).values()), default=0)
            pairs.append(n)
            table.add_row(row["cell"], by_hash[reference]["cell"], str(n), *cells)
    table.caption = "\n".join([directions(key for key, _ in columns), *significance_notes(pairs)])
    return table
