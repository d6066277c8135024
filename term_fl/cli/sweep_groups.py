"""A sweep's unfinished cells in groups that train as one batched computation (``term-fl sweep --group-size N``).

Cells whose runs can share one compiled call per round
(:func:`term_fl.engines.group.group_key`: the in-process engine, the
compiled executor on the CPU, one model, one set of client settings, one
shape of data; strategies, their parameters and seeds may differ) are put
in groups of at most ``N``, in the sweep's order; every other cell runs on
its own, as without the option. A grouped cell records what it records on
its own, bit for bit, in its own run directory and store rows; finished
cells are skipped and interrupted ones resumed the same way.

:func:`run_jobs` runs the groups one after another in this process, or,
with ``--parallel`` / ``--ray-address``, as Ray tasks
(:mod:`term_fl.cli.sweep_ray`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from term_fl.cli.console import RoundProgress
from term_fl.config import ConfigError, Scenario, with_overrides
from term_fl.engines.group import group_key
from term_fl.federation.loop import RoundRecord
from term_fl.results import ResultsStore
from term_fl.runs.grouped import run_many
from term_fl.runs.run import run_one

__all__ = ["CellJob", "plan_groups", "run_cell_group", "run_jobs", "sweep_settings"]


@dataclass(frozen=True)
class CellJob:
    """An unfinished cell: its position in the sweep (from 1), its console label, its scenario and folder."""

    index: int
    label: str
    cell: Scenario
    cell_dir: Path


def plan_groups(jobs: Sequence[CellJob], group_size: int) -> list[list[CellJob]]:
    """The jobs in groups of at most ``group_size`` that share a :func:`group_key`, in order of their first cell.

    A job without a key, and every job when ``group_size`` is 1, is a group of its own.
    """
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    groups: list[list[CellJob]] = []
    open_group: dict[str, list[CellJob]] = {}
    for job in jobs:
        key = group_key(job.cell) if group_size > 1 else None
        if key is None:
            groups.append([job])
            continue
        group = open_group.get(key)
        if group is None or len(group) == group_size:
            group = open_group[key] = []
            groups.append(group)
        group.append(job)
    return groups


def run_cell_group(jobs: Sequence[CellJob], store: ResultsStore, console: Console) -> list[dict[str, Any] | None]:
    """Run the jobs as one group; each job's summary, or None where its run failed (said on the console)."""
    console.print(f"{len(jobs)} cells side by side: " + ", ".join(job.label for job in jobs))

    def said(i: int, record: RoundRecord, rounds: int) -> None:
        if record.server_round == rounds:
            console.print(f"{jobs[i].label}: {rounds} rounds")

    outcomes = run_many([(job.cell, job.cell_dir) for job in jobs], store, on_round=said)
    summaries: list[dict[str, Any] | None] = []
    for job, outcome in zip(jobs, outcomes, strict=True):
        if isinstance(outcome, BaseException):
            console.print(f"{job.label}: [bold red]failed[/]: {type(outcome).__name__}: {outcome}")
            summaries.append(None)
        else:
            summaries.append(outcome.summary or {})
    return summaries


def sweep_settings(scenario: Scenario, *, parallel: int | None, ray_address: str) -> Scenario:
    """The sweep's scenario with its cells' ``run.threads`` (1 unless set) and ``run.ray_address``; bad options refused.

    ``parallel`` must be a positive number of cells; Ray tasks run their
    cells on the in-process engine (``--ray-address`` alone on the Flower
    engine runs each cell's clients on the cluster instead).
    """
    if parallel is not None and parallel < 1:
        raise ConfigError(f"--parallel must be a positive number of cells at a time, got {parallel}")
    if parallel is not None and scenario.run.engine != "inprocess":
        raise ConfigError(
            f"--parallel runs each cell as a Ray task on the in-process engine, but run.engine = "
            f"{scenario.run.engine!r}; use --engine inprocess (the same numbers), or --ray-address without "
            "--parallel to run each cell's clients in Flower's Simulation Engine on a cluster")
    overrides: dict[str, Any] = {}
    if "threads" not in scenario.run.model_fields_set:
        overrides["run.threads"] = 1
    # in-process cells run in Ray tasks and join nothing; Flower-engine cells join the cluster themselves
    address = ray_address if scenario.run.engine == "flower" else ""
    if scenario.run.ray_address != address:
        overrides["run.ray_address"] = address
    return with_overrides(scenario, overrides) if overrides else scenario


def run_jobs(
    jobs: Sequence[CellJob],
    group_size: int,
    store: ResultsStore,
    console: Console,
    *,
    parallel: int | None = None,
    ray_address: str = "",
    set_aside: Any = None,
) -> list[dict[str, Any] | None]:
    """Each job's summary, or None where it failed: in groups of up to ``group_size``, here or as Ray tasks.

    Ray tasks run the groups when ``parallel`` is given, or ``ray_address``
    on the in-process engine (:func:`term_fl.cli.sweep_ray.run_on_ray`;
    ``set_aside`` moves a lost attempt's files away).
    """
    groups = plan_groups(jobs, group_size)
    if jobs and (parallel is not None or (ray_address and jobs[0].cell.run.engine == "inprocess")):
        from term_fl.cli.sweep_ray import run_on_ray

        by_index = run_on_ray(groups, store, console, address=ray_address, parallel=parallel, set_aside=set_aside)
        return [by_index[job.index] for job in jobs]
    summaries: dict[int, dict[str, Any] | None] = {}
    for group in groups:
        outcomes = _run_group(group, store, console) if len(group) > 1 else [_run_cell(group[0], store, console)]
        summaries.update((job.index, summary) for job, summary in zip(group, outcomes, strict=True))
    return [summaries[job.index] for job in jobs]


def _run_group(jobs: Sequence[CellJob], store: ResultsStore, console: Console) -> list[dict[str, Any] | None]:
    """A group of cells side by side; if the group cannot start (a cell's data or folder), its cells one by one."""
    try:
        return run_cell_group(jobs, store, console)
    except Exception as exc:  # noqa: BLE001 - each cell then says what is wrong with it
        console.print(f"the group could not start ({type(exc).__name__}: {exc}); its cells run one by one")
        return [_run_cell(job, store, console) for job in jobs]


def _run_cell(job: CellJob, store: ResultsStore, console: Console) -> dict[str, Any] | None:
    """One cell on its own: its summary, or None when it failed (said on the console)."""
    try:
        # one bar per cell on a terminal; off it, a line after the first and the last round
        with RoundProgress(console, job.cell.run.rounds, job.label, steps=1) as progress:
            recorder = run_one(job.cell, store, out_dir=job.cell_dir, on_round=progress)
    except Exception as exc:  # one failing cell does not lose the others
        console.print(f"{job.label}: [bold red]failed[/]: {type(exc).__name__}: {exc}")
        return None
    return recorder.summary or {}
